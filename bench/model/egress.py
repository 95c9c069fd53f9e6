"""NAT and data transfer: the monthly egress cost of each EgressMode: direct (NAT gateways) against relay through SES.

Pure arithmetic over the price list (bench/aws-prices.json, a copy of the list we were
handed); `make bench` prints `markdown_section()` (bench.run; `python -m bench.egress_cost` for one
size) and docs/benchmarks.md keeps it; the cost model's Egress line is `lines()`.

* direct: each NAT gateway's hourly charge and its Elastic IP's public-IPv4 charge (one per
  AZ with a NAT gateway, 730 h a month), the NAT's per-GB processing of every byte it
  carries (both directions), and data transfer out to the internet for what leaves. S3
  and DynamoDB go through the free gateway endpoints, so mail content fetched from S3 does
  not cross the NAT; the few SQS / Secrets Manager calls per mail do, unless interface
  endpoints are deployed (then they pay the endpoints' hourly and per-GB charges).
* relay through SES: SES's price per recipient plus its per-GB charge. The function is
  outside any VPC and SES's SMTP endpoint is in-region, so there is no NAT or transfer
  charge. Only the SES fees for the mails: the queue's own cost is the same in both modes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.model.prices import Line

HOURS_PER_MONTH = 730
GB = 1024**3
#: SES's charge per GB of attachments sent (the SES pricing page). It is not in the price
#: list we were handed; `prices["ses_for_comparison"]["outbound_per_gb"]` overrides it.
#: Charged here on the whole message size, so the relay figure is an upper bound for
#: mails that are mostly text.
SES_PER_GB_DEFAULT = 0.12
#: Bytes per mail besides the message itself, one SMTP connection per mail (no reuse, so
#: an upper bound): out = client hello, key exchange, EHLO/MAIL/RCPT/DATA/QUIT and TLS
#: record overhead; in = the server's certificate chain (~3–5 KB) and its replies.
SMTP_OVERHEAD_OUT = 1_500
SMTP_OVERHEAD_IN = 6_000
#: AWS API traffic per mail that crosses the NAT without interface endpoints (SQS
#: visibility/DSN triggers and a rare Secrets Manager fetch; S3/DynamoDB use gateways).
API_BYTES_PER_MAIL = 2_000
VOLUMES = (1_000_000, 10_000_000, 100_000_000)


@dataclass(frozen=True)
class EgressCost:
    """One mode at one volume: the monthly total and its items (USD)."""

    mode: str
    mails: int
    mail_bytes: int
    items: Mapping[str, float]

    @property
    def total(self) -> float:
        return sum(self.items.values())


def load_prices(path: str | Path | None = None) -> dict[str, Any]:
    p = Path(path) if path else Path(__file__).resolve().parent.parent / "aws-prices.json"
    prices: dict[str, Any] = json.loads(p.read_text())
    return prices


def direct_cost(
    mails: int,
    mail_bytes: int,
    prices: Mapping[str, Any],
    *,
    nat_gateways: int = 2,
    interface_endpoints: bool = False,
    recipients_per_mail: float = 1.0,
) -> EgressCost:
    """EgressMode direct: NAT gateways with Elastic IPs, per-GB processing, data out.

    Each recipient domain is one SMTP transaction, so bytes scale with
    ``recipients_per_mail`` (an upper bound: recipients at one domain share a transaction).
    """
    if not 1 <= nat_gateways <= 3:
        raise ValueError("nat_gateways must be 1..3")
    if mails < 0 or mail_bytes < 0 or recipients_per_mail <= 0:
        raise ValueError("mails, mail_bytes and recipients_per_mail must be positive")
    v = prices["vpc_egress"]
    sends = mails * recipients_per_mail
    out_gb = sends * (mail_bytes + SMTP_OVERHEAD_OUT) / GB
    in_gb = sends * SMTP_OVERHEAD_IN / GB
    api_gb = mails * API_BYTES_PER_MAIL / GB
    items = {
        "NAT gateway hours": nat_gateways * HOURS_PER_MONTH * v["nat_gateway_per_hour"],
        "Elastic IPs (public IPv4)": nat_gateways
        * HOURS_PER_MONTH
        * v["elastic_ip_public_ipv4_per_hour"],
        "NAT processing": (out_gb + in_gb) * v["nat_gateway_per_gb_processed"],
        "data transfer out": out_gb * v["data_transfer_out_per_gb_first_10tb"],
    }
    if interface_endpoints:
        azs = max(2, nat_gateways)  # the template's private subnets: 2 AZs, 3 with 3 NATs
        items["interface endpoints (SQS, Secrets Manager)"] = (
            2 * azs * HOURS_PER_MONTH * v["interface_endpoint_per_hour_per_az"]
            + api_gb * v["interface_endpoint_per_gb"]
        )
    else:
        items["NAT processing"] += api_gb * v["nat_gateway_per_gb_processed"]
    return EgressCost("direct", mails, mail_bytes, items)


def ses_relay_cost(
    mails: int,
    mail_bytes: int,
    prices: Mapping[str, Any],
    *,
    recipients_per_mail: float = 1.0,
) -> EgressCost:
    """EgressMode relay through SES: per recipient and per GB, nothing fixed."""
    if mails < 0 or mail_bytes < 0 or recipients_per_mail <= 0:
        raise ValueError("mails, mail_bytes and recipients_per_mail must be positive")
    ses = prices["ses_for_comparison"]
    per_gb = float(ses.get("outbound_per_gb", SES_PER_GB_DEFAULT))
    sends = mails * recipients_per_mail
    items = {
        "SES per recipient": sends / 1000 * ses["outbound_per_1000_recipients_a_la_carte"],
        "SES per GB": sends * mail_bytes / GB * per_gb,
    }
    return EgressCost("relay (SES)", mails, mail_bytes, items)


def break_even_mails(mail_bytes: int, prices: Mapping[str, Any], *, nat_gateways: int = 2) -> int:
    """Mails a month above which direct costs less than relaying through SES."""
    fixed = direct_cost(0, mail_bytes, prices, nat_gateways=nat_gateways).total
    per_direct = direct_cost(1_000_000, mail_bytes, prices, nat_gateways=nat_gateways).total - fixed
    per_ses = ses_relay_cost(1_000_000, mail_bytes, prices).total
    if per_ses <= per_direct:
        raise ValueError("direct never costs less at this size")
    return int(fixed / ((per_ses - per_direct) / 1_000_000)) + 1


def egress_table(
    mail_bytes: int,
    prices: Mapping[str, Any],
    volumes: Sequence[int] = VOLUMES,
    *,
    nat_gateways: int = 2,
) -> list[tuple[int, EgressCost, EgressCost, EgressCost]]:
    """Per volume: direct, direct with interface endpoints, relay through SES."""
    return [
        (
            n,
            direct_cost(n, mail_bytes, prices, nat_gateways=nat_gateways),
            direct_cost(n, mail_bytes, prices, nat_gateways=nat_gateways, interface_endpoints=True),
            ses_relay_cost(n, mail_bytes, prices),
        )
        for n in volumes
    ]


def markdown_section(
    prices: Mapping[str, Any], sizes: Sequence[int] = (10 * 1024, 100 * 1024), nat_gateways: int = 2
) -> list[str]:
    """The lines `make bench` writes to docs/benchmarks.md."""
    lines = [
        f"### Egress per month: direct ({nat_gateways} NAT gateway{'s' if nat_gateways > 1 else ''})"
        " vs relay through SES "
        "(bench/model/egress.py)",
        "",
        "| mail size | mails / month | direct | direct + interface endpoints | relay via SES |",
        "|---|---|---|---|---|",
    ]
    for size in sizes:
        for n, d, de, s in egress_table(size, prices, nat_gateways=nat_gateways):
            lines.append(
                f"| {size // 1024} KB | {n / 1e6:g} M | ${d.total:,.0f} | ${de.total:,.0f} "
                f"| ${s.total:,.0f} |"
            )
    fixed = direct_cost(0, sizes[0], prices, nat_gateways=nat_gateways).total
    lines += [
        "",
        f"Direct has a fixed ${fixed:,.0f} a month ({nat_gateways} NAT gateway(s) and "
        "Elastic IP(s), 730 h), then NAT processing "
        f"(${prices['vpc_egress']['nat_gateway_per_gb_processed']}/GB, both directions) and "
        f"data transfer out (${prices['vpc_egress']['data_transfer_out_per_gb_first_10tb']}/GB, "
        "the first-10-TB rate throughout: an upper bound above 10 TB). Relay via SES is "
        f"${prices['ses_for_comparison']['outbound_per_1000_recipients_a_la_carte'] * 1000:.0f} "
        "per million recipients plus "
        f"${float(prices['ses_for_comparison'].get('outbound_per_gb', SES_PER_GB_DEFAULT))}/GB "
        "(SES's attachment rate, not in the price list we were handed, applied to the whole "
        "message). Direct costs less above "
        + ", ".join(
            f"{break_even_mails(s, prices, nat_gateways=nat_gateways):,} mails/month at "
            f"{s // 1024} KB"
            for s in sizes
        )
        + ". One recipient per mail, one SMTP connection per mail "
        f"({SMTP_OVERHEAD_OUT} B out, {SMTP_OVERHEAD_IN} B in besides the message); the queue's "
        "own AWS cost (above) is the same in both modes.",
        "",
    ]
    return lines


def egress_monthly(mode: str, volume: int, mail_bytes: int = 10 * 1024) -> float:
    """The queue's egress in $ a month, as the cost model's Egress line prices it.

    Relay mode: the delivery function talks to the relay from outside any VPC, so the queue
    itself pays no NAT or transfer; the relay's own price (SES's per-recipient fee) is
    what the floors leave out. Direct mode: its NAT gateways, IPs, processing and transfer.
    """
    if mode == "relay":
        return 0.0
    return float(direct_cost(volume, mail_bytes, load_prices()).total)


def lines(egress: str | None, volume: int) -> list[Line]:
    """The bill's Egress line (`egress` None: left out)."""
    lines: list[Line] = []

    def add(service: str, item: str, usd: float) -> None:
        lines.append(Line(service, item, usd))

    eg = egress_monthly(egress, volume) if egress else None
    if eg is not None:
        add("Egress", f"{egress} mode (bench/model/egress.py; the relay's own price excluded)", eg)
    else:
        add("Egress", "not included (priced without egress)", 0.0)
    return lines
