"""Egress pools at 10,000 mails/s: addresses, NAT gateways, cost per pool, warm-up days.

    python -m bench.pools [--rate 50]     # writes "## Egress pools (issue 41)" to docs/benchmarks.md

Pure arithmetic over the price list (bench/aws-prices.json, a copy of
/work/shared/aws-prices.json) and stated assumptions; nothing here can be measured on
this machine (no receiver's per-address limit, no NAT gateway). What the model rests on:

* **Per-address rate.** No big receiver publishes how much one IP may send; an address
  sending 3,000-5,000 mails/s is far beyond what any accepts, and shaping.json's site
  limits (20-50/s per site and container) are of the same order as the rate assumed
  here: `--rate` mails/s per warm address, summed over every receiver (default 50, i.e.
  4.3 M a day); the table shows 25 and 100 too.
* **The mix** (bench/mix.py): 60 % 2 KB notifications, 25 % 10 KB prose, 10 % 30 KB
  newsletters, 5 % 120 KB attachments. Routed by class: transactional = notifications
  and attachments (65 %, pool `default`), bulk = prose and newsletters (35 %, pool
  `bulk`); 12.7 KB a mail on average.
* **NAT gateways.** One per AZ per pool (a pool's addresses are its NAT gateways'
  Elastic IPs: template.yaml), 2 AZs. A public NAT gateway holds 2 Elastic IPs by
  default, more by a quota increase ("By default, you can associate up to 2 Elastic IP
  addresses per public NAT gateway": EC2 API Reference, AssociateNatGatewayAddress;
  docs.aws.amazon.com/AWSEC2/latest/APIReference/API_AssociateNatGatewayAddress.html);
  the model uses 8 per gateway (a raised quota) and adds gateways past that. With several
  addresses a gateway chooses the address per connection (port address translation,
  "Attach multiple IPs to a NAT Gateway to scale your egress traffic pattern", AWS
  Networking blog): the pool's addresses share its traffic, so its warm-up schedule is
  per address times their number (outbound/warmup.py). Each address takes 55,000
  concurrent connections to one destination (same post): not binding here.
* **Data.** Every byte crosses the pool's NAT gateway once (NAT processing, both
  directions, bench/model/egress.py's SMTP overhead per mail) and leaves to the internet
  (data transfer out at the first-10-TB rate: an upper bound above it).
* **Warm-up.** The packaged ramp (data/pools.json "ses-dedicated-45d": 200 mails on day
  1 to 50,000 a day per address at step 45, the end point of SES's automatic warm-up)
  and, past it, the daily volume doubling every `DOUBLING_DAYS` days until the address
  carries `--rate` (an assumption: SES's plan stops at 50,000 a day; a receiver raises
  a good address further as its reputation grows). A pool that bounces holds its step
  (warmup.py), so these are the fewest days.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from bench.model.egress import API_BYTES_PER_MAIL, SMTP_OVERHEAD_IN, SMTP_OVERHEAD_OUT

SECTION = "## Egress pools (issue 41)"
HOURS_PER_MONTH = 730
SECONDS_PER_MONTH = HOURS_PER_MONTH * 3600
GB = 1024**3
TARGET = 10_000  # mails/s
AZS = 2
ADDRESSES_PER_NAT = 8  # with a raised quota (2 by default)
DOUBLING_DAYS = 3
MIX = {  # bench/mix.py's mix: (share, size in bytes, pool)
    "notification 2 KB": (0.60, 2 * 1024, "default"),
    "prose 10 KB": (0.25, 10 * 1024, "bulk"),
    "newsletter 30 KB (HTML)": (0.10, 30 * 1024, "bulk"),
    "attachment 120 KB": (0.05, 120 * 1024, "default"),
}


@dataclass(frozen=True)
class PoolCost:
    name: str
    rate: float  # mails/s it carries
    mean_size: float  # bytes
    addresses: int
    nat_gateways: int
    items: Mapping[str, float]  # USD a month

    @property
    def total(self) -> float:
        return sum(self.items.values())

    @property
    def per_million(self) -> float:
        return self.total / (self.rate * SECONDS_PER_MONTH / 1e6)


def load_prices(path: str | Path | None = None) -> dict[str, Any]:
    p = Path(path) if path else Path(__file__).with_name("aws-prices.json")
    prices: dict[str, Any] = json.loads(p.read_text())
    return prices


def classes(mix: Mapping[str, tuple[float, int, str]] = MIX) -> dict[str, tuple[float, float]]:
    """Pool -> (share of the mails, mean size in bytes)."""
    out: dict[str, tuple[float, float]] = {}
    for share, size, pool in mix.values():
        s, b = out.get(pool, (0.0, 0.0))
        out[pool] = (s + share, b + share * size)
    return {p: (s, b / s) for p, (s, b) in out.items()}


def pool_cost(
    name: str, rate: float, mean_size: float, per_address: float, prices: Mapping[str, Any]
) -> PoolCost:
    """One pool carrying `rate` mails/s of `mean_size` bytes, `per_address` a warm address."""
    v = prices["vpc_egress"]
    addresses = max(AZS, math.ceil(rate / per_address))  # at least one per AZ
    nats = AZS * math.ceil(addresses / (AZS * ADDRESSES_PER_NAT))
    mails = rate * SECONDS_PER_MONTH
    out_bytes = mails * (mean_size + SMTP_OVERHEAD_OUT + API_BYTES_PER_MAIL)
    in_bytes = mails * SMTP_OVERHEAD_IN
    items = {
        "NAT gateways (hours)": nats * HOURS_PER_MONTH * v["nat_gateway_per_hour"],
        "Elastic IPs (public IPv4 hours)": addresses
        * HOURS_PER_MONTH
        * v["elastic_ip_public_ipv4_per_hour"],
        "NAT processing (GB)": (out_bytes + in_bytes) / GB * v["nat_gateway_per_gb_processed"],
        "data transfer out (GB)": out_bytes / GB * v["data_transfer_out_per_gb_first_10tb"],
    }
    return PoolCost(name, rate, mean_size, addresses, nats, items)


def packaged_ramp() -> list[tuple[int, int]]:
    """(step, mails a day per address) of data/pools.json's packaged ramp."""
    doc = json.loads(resources.files("mailqueue").joinpath("data", "pools.json").read_text())
    return [(s["step"], s["total"]) for s in doc["ramps"]["ses-dedicated-45d"]["steps"]]


def warmup_days(per_address: float, ramp: Sequence[tuple[int, int]] | None = None) -> int:
    """Days of sending until one address may carry `per_address` mails/s all day: the
    ramp's steps (one a day sent on), then doubling every DOUBLING_DAYS days."""
    steps = list(ramp or packaged_ramp())
    want = per_address * 86400
    for step, total in steps:
        if total >= want:
            return step
    day, total = steps[-1]
    while total < want:
        day += DOUBLING_DAYS
        total *= 2
    return day


def model(per_address: float, prices: Mapping[str, Any], target: float = TARGET) -> list[PoolCost]:
    return [
        pool_cost(name, target * share, size, per_address, prices)
        for name, (share, size) in sorted(classes().items())
    ]


def markdown_section(prices: Mapping[str, Any], per_address: float = 50.0) -> list[str]:
    pools = model(per_address, prices)
    total = sum(p.total for p in pools)
    addresses = sum(p.addresses for p in pools)
    lines = [
        SECTION,
        "",
        "_bench/pools.py: arithmetic over bench/aws-prices.json and the assumptions in its "
        "docstring (nothing measured: no receiver publishes a per-address limit, moto has no "
        "NAT gateway). `python -m bench.pools` writes this section._",
        "",
        f"**{TARGET:,} mails/s of bench/mix.py's mix**, {per_address:g} mails/s per warm "
        f"address, {AZS} AZs, up to {ADDRESSES_PER_NAT} Elastic IPs a NAT gateway:",
        "",
        "| pool | share | mails/s | mean size | addresses | NAT gateways | NAT hours | EIPs "
        "| NAT GB | transfer out | $ / month | $ / million |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for p in pools:
        it = list(p.items.values())
        lines.append(
            f"| {p.name} | {p.rate / TARGET:.0%} | {p.rate:,.0f} | {p.mean_size / 1024:.1f} KB "
            f"| {p.addresses} | {p.nat_gateways} | ${it[0]:,.0f} | ${it[1]:,.0f} | "
            f"${it[2]:,.0f} | ${it[3]:,.0f} | ${p.total:,.0f} | ${p.per_million:.3f} |"
        )
    lines += [
        f"| **both** | 100% | {TARGET:,} | | **{addresses}** | "
        f"{sum(p.nat_gateways for p in pools)} | | | | | **${total:,.0f}** | "
        f"${total / (TARGET * SECONDS_PER_MONTH / 1e6):.3f} |",
        "",
        "Addresses needed and warm-up by the per-address rate (the ramp: data/pools.json, "
        f"then doubling every {DOUBLING_DAYS} days):",
        "",
        "| mails/s per address | a day per address | addresses for 10,000/s | "
        "warm-up days | $ / month (both pools) |",
        "|---|---|---|---|---|",
    ]
    for r in sorted({25.0, per_address, 100.0}):
        ps = model(r, prices)
        lines.append(
            f"| {r:g} | {r * 86400 / 1e6:.2f} M | {sum(p.addresses for p in ps)} | "
            f"{warmup_days(r)} | ${sum(p.total for p in ps):,.0f} |"
        )
    end = packaged_ramp()[-1][1]
    fixed = sum(
        p.items["NAT gateways (hours)"] + p.items["Elastic IPs (public IPv4 hours)"] for p in pools
    )
    lines += [
        "",
        f"At the packaged ramp's end ({end:,} a day per address, SES's warm-up plan) the mix "
        f"would need {math.ceil(TARGET * 86400 / end):,} addresses: SES's plan is for "
        "senders of a few hundred thousand mails a day; a pool for this volume keeps "
        "ramping past it (the doubling above) and moves traffic onto new addresses as each "
        "step allows (docs/deploy.md, Egress pools). Most of the cost is data (NAT "
        "processing and transfer out scale with bytes); the addresses and gateways are "
        f"${fixed:,.0f} a month of it.",
    ]
    return lines


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--rate", type=float, default=50.0, help="mails/s per warm address")
    ap.add_argument("--no-write", action="store_true", help="print only")
    ns = ap.parse_args(argv)
    lines = markdown_section(load_prices(), ns.rate)
    if not ns.no_write:
        from bench.sections import write_section

        write_section(lines, SECTION)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
