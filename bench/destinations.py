"""Cost per million events to each destination kind (issue 42, item 4), from the project's
price file (bench/aws-prices.json: the list we were handed plus, with their sources, the
EventBridge and SNS prices it lacked).

What one event costs on its way to one destination: the outbox's SQS requests
(SendMessageBatch by the event writer, ReceiveMessage and DeleteMessageBatch by the event
source; each 64 KB chunk of a request's payload billed as a request), the destinations
function's invocations and GB-seconds (a batch of 10 sends one by one), and the
destination's own charge: a webhook's bytes out to the internet; EventBridge PutEvents
and SNS Publish, each billed per 64 KB chunk, at the price the file gives, and reported
as not priced when it gives none (it is not guessed here).

`python -m bench.destinations` prints the table and writes its docs/benchmarks.md section.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.sections import write_section

ROOT = Path(__file__).resolve().parents[1]
#: the project's price file, as every model reads it: the list we were handed plus the
#: entries it lacked, each with its source (EventBridge's and SNS's among them)
PRICE_FILES = (ROOT / "bench" / "aws-prices.json",)
SECTION = "## Event destinations: cost per million events"
KINDS = ("webhook", "eventbridge", "sns")
CHUNK = 64 * 1024  # SQS, EventBridge and SNS each bill a 64 KB chunk as one request/event
MEMORY_GB = 256 / 1024  # the template's DestinationsFunction MemorySize
BATCH = 10  # DestinationsEventSource BatchSize; the writer's SendMessageBatch takes 10


def load_prices(paths: tuple[Path, ...] = PRICE_FILES) -> tuple[dict[str, Any], Path]:
    for p in paths:
        if p.exists():
            return json.loads(p.read_text()), p
    raise FileNotFoundError("no aws-prices.json")


@dataclass(frozen=True)
class Row:
    kind: str
    outbox_sqs: float  # $ per million events
    lambda_usd: float
    destination: float | None  # None: the price file has no price for it
    note: str

    @property
    def total(self) -> float | None:
        if self.destination is None:
            return None
        return self.outbox_sqs + self.lambda_usd + self.destination


def _chunks(n_bytes: float) -> int:
    return max(1, math.ceil(n_bytes / CHUNK))


def _price(prices: dict[str, Any], *path: str) -> float | None:
    node: Any = prices
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return float(node)


def cost_rows(prices: dict[str, Any], event_bytes: int, send_ms: float) -> list[Row]:
    """$ per million events per destination kind, for events of `event_bytes` and a send
    taking `send_ms` of the function's time (waiting on the receiver or AWS)."""
    sqs = prices["sqs_standard"]["per_million_requests"]
    batch_chunks = _chunks(BATCH * (event_bytes + 200))  # + the envelope's fields
    # per 10 events: one SendMessageBatch, one ReceiveMessage (returns them), one
    # DeleteMessageBatch (receipt handles only: one chunk); each per 64 KB chunk
    outbox = (2 * batch_chunks + 1) / BATCH * sqs
    lam = prices["lambda"]
    gb_s = MEMORY_GB * BATCH * send_ms / 1000  # a batch's sends, one by one
    lambda_usd = (lam["per_million_requests"] + 1e6 * gb_s * lam["per_gb_second_arm64"]) / BATCH
    out_gb = (event_bytes + 700) / 1e9  # the body and the request line and headers
    egress = prices["vpc_egress"]["data_transfer_out_per_gb_first_10tb"]
    chunk = _chunks(event_bytes)
    eb = _price(prices, "eventbridge", "custom_events_per_million")
    sns = _price(prices, "sns_standard", "publish_per_million")
    return [
        Row("webhook", outbox, lambda_usd, 1e6 * out_gb * egress,
            f"data out {event_bytes + 700} B/event at ${egress}/GB"),
        Row("eventbridge", outbox, lambda_usd, None if eb is None else chunk * eb,
            f"PutEvents {chunk} chunk(s)/event" + ("" if eb else ": not in the price file")),
        Row("sns", outbox, lambda_usd, None if sns is None else chunk * sns,
            f"Publish {chunk} chunk(s)/event" + ("" if sns else ": not in the price file")),
    ]


def _usd(v: float | None) -> str:
    return "not priced" if v is None else f"{v:.3f}"


def _shown(path: Path) -> str:
    """The price file as the repository names it (not this machine's absolute path)."""
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return str(path)


def section(rows_by_size: dict[int, list[Row]], source: Path, send_ms: float) -> list[str]:
    lines = [
        SECTION,
        "",
        f"`python -m bench.destinations` (prices: `{_shown(source)}`, us-east-1 list prices, "
        f"free tiers ignored). Per destination an event takes: the outbox's SQS requests, "
        f"the destinations function (256 MB arm64, batches of {BATCH}, each send assumed to "
        f"hold it {send_ms:g} ms), and the destination's own charge: a webhook's bytes out, "
        "EventBridge's custom events and SNS's publishes each per 64 KB chunk (their prices "
        "from AWS's price pages, named in the price file; a price the file lacks is shown "
        "*not priced*, never guessed). The S3 event log's cost is unchanged (it is written "
        "first, as before).",
        "",
        "| event size | destination | outbox SQS $/M | Lambda $/M | destination $/M | total $/M | note |",
        "|---:|---|---:|---:|---:|---:|---|",
    ]
    for size, rows in rows_by_size.items():
        for r in rows:
            lines.append(
                f"| {size:,} B | {r.kind} | {r.outbox_sqs:.3f} | {r.lambda_usd:.3f} | "
                f"{_usd(r.destination)} | {_usd(r.total)} | {r.note} |"
            )
    return lines


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    numbers = [a for a in args if not a.startswith("--")]
    send_ms = float(numbers[0]) if numbers else 20.0
    prices, source = load_prices()
    # a typical Delivery/Bounce event (~2 KB), a Send with 10 KB of headers, the largest
    rows = {n: cost_rows(prices, n, send_ms) for n in (2_000, 12_000, 255 * 1024)}
    lines = section(rows, source, send_ms)
    print("\n".join(lines))
    if "--no-write" not in args:
        write_section(lines, SECTION)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
