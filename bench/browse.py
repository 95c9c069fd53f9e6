"""`make bench` (admin browse): how long `list`, `size` and `shape` take on the local stack.

    .venv/bin/python -m bench.browse [--groups 5,100] [--repeat 5] [--no-write]

The local stack (`mailqueue_local.stack`: the real admin handler behind the local API
gateway, moto in its own process, the template's 64 state-index shards) with delivery's
trigger disabled, so what is queued stays queued: ``--groups`` one-recipient mails
(each a group, recipients at 5 domains) are enqueued, then each browse is asked over HTTP
``--repeat`` times (GET /v1/queue/mails, /v1/queue/size, /v1/queue/shape). Measured: the
median and worst time of each (the client's, on loopback: the server's time plus well
under a millisecond), and the DynamoDB requests each made (botocore hooks on every
session while the bench runs; nothing else in the stack reads the table meanwhile).
Read units: a Query costs at least one 4 KB unit, halved when eventually consistent
(the index is read so; "Read consumption for Query", DynamoDB Developer Guide), and each
group read back by BatchGetItem, strongly consistent, one unit per item up to 4 KB.
The section "## Admin browse" of docs/benchmarks.md is rewritten unless --no-write.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.sections import write_section as _write_section

ROOT = Path(__file__).resolve().parent.parent
SECTION = "## Admin browse"
FLOOR_SECONDS = 0.5  # issue 43 item 15: list, size and shape within this on <= 100 groups
ROUTES = {
    "list": "/v1/queue/mails?limit=50",
    "size": "/v1/queue/size",
    "shape": "/v1/queue/shape",
}


class _Counter:
    """DynamoDB requests by operation, from every botocore session made while installed."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ops: Counter[str] = Counter()
        self.batch_keys = 0

    def before(self, model: Any, params: Any, **_: Any) -> None:
        if model.service_model.service_name != "dynamodb":
            return
        with self.lock:
            self.ops[model.name] += 1
            if model.name == "BatchGetItem":
                self.batch_keys += sum(
                    len(v.get("Keys", [])) for v in params.get("RequestItems", {}).values()
                )

    @contextmanager
    def installed(self) -> Iterator[None]:
        from botocore import handlers as builtin

        spec = ("before-parameter-build.dynamodb.*", self.before)
        builtin.BUILTIN_HANDLERS.append(spec)
        try:
            yield
        finally:
            builtin.BUILTIN_HANDLERS.remove(spec)

    def take(self) -> tuple[Counter[str], int]:
        with self.lock:
            ops, keys = self.ops, self.batch_keys
            self.ops, self.batch_keys = Counter(), 0
        return ops, keys


def _get(url: str, token: str) -> tuple[int, float]:
    req = urllib.request.Request(url, headers={"authorization": f"Bearer {token}"})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=120) as resp:
        resp.read()
        status = resp.status
    return status, time.perf_counter() - t0


def measure(groups_list: list[int], repeat: int) -> list[dict[str, Any]]:
    from mailqueue.backends.aws.backend import AwsStorage
    from mailqueue.backends.aws.clients import make_clients
    from mailqueue.core.config import StorageSettings, settings_from_env
    from mailqueue.core.model import Envelope, Recipient
    from mailqueue_local.stack import LocalStack, StackOptions

    counter = _Counter()
    rows: list[dict[str, Any]] = []
    for n in groups_list:
        with tempfile.TemporaryDirectory(prefix="mq-browse-") as tmp, counter.installed():
            options = StackOptions(
                var_dir=Path(tmp),
                api_port=0,
                deploy="direct",
                sweep_interval=86400.0,
                disabled_triggers=frozenset({"delivery"}),
                smtpd=False,
                settings={"MQ_DKIM_DOMAINS": "{}"},
            )
            with LocalStack(options) as stack:
                ss = settings_from_env(StorageSettings)
                storage = AwsStorage(
                    ss, make_clients(region=ss.region, endpoint_url=ss.endpoint_url)
                )
                content = b"From: bench@example.org\r\nSubject: browse\r\n\r\nhello\r\n"
                for i in range(n):
                    rcpt = Recipient("r0", f"u{i}@d{i % 5}.example")
                    storage.enqueue(Envelope("bench@example.org", (rcpt,)), content)
                assert stack.gateway is not None
                base, token = stack.gateway.url, stack.token
                _get(base + ROUTES["size"], token)  # the admin container's cold start
                for name, path in ROUTES.items():
                    times: list[float] = []
                    counter.take()
                    for _ in range(repeat):
                        status, seconds = _get(base + path, token)
                        assert status == 200, (name, status)
                        times.append(seconds)
                    ops, keys = counter.take()
                    queries = ops.get("Query", 0) / repeat
                    rows.append(
                        {
                            "groups": n,
                            "browse": name,
                            "median_s": statistics.median(times),
                            "max_s": max(times),
                            "queries": queries,
                            "batch_gets": ops.get("BatchGetItem", 0) / repeat,
                            "items_read": keys / repeat,
                            # Query: >= 0.5 unit each (eventually consistent, one 4 KB
                            # unit); BatchGetItem: 1 unit per group (strong, < 4 KB)
                            "read_units": queries * 0.5 + keys / repeat,
                        }
                    )
    return rows


def section(rows: list[dict[str, Any]], repeat: int) -> list[str]:
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    load = Path("/proc/loadavg").read_text().split()[0] if Path("/proc/loadavg").exists() else "?"
    out = [
        SECTION,
        "",
        f"Written by `python -m bench.browse` ({now}, {platform.machine()}, load average "
        f"{load} at the end, median and worst of {repeat} requests each, after a cold start).",
        "The local stack as `make run` runs it (64 state-index shards, moto in its own process),",
        "delivery's trigger disabled so the queued groups stay queued; timed over HTTP on",
        "loopback through the local API gateway. Floor (issue 43 item 15): each within "
        f"{FLOOR_SECONDS} s with ≤ 100 groups.",
        "",
        "| groups | browse | median s | worst s | Queries | BatchGetItem | groups read | read units |",
        "|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        ok = "" if r["median_s"] <= FLOOR_SECONDS else " (over the floor)"
        out.append(
            f"| {r['groups']} | {r['browse']} | {r['median_s']:.3f}{ok} | {r['max_s']:.3f} | "
            f"{r['queries']:.0f} | {r['batch_gets']:.0f} | {r['items_read']:.0f} | "
            f"{r['read_units']:.1f} |"
        )
    out += [
        "",
        "Read units as DynamoDB bills them: each Query at least one 4 KB unit, halved for the",
        "eventually consistent index (an empty shard costs that minimum, 0.5), each group read",
        "back whole by BatchGetItem (strongly consistent, under 4 KB: 1 unit). A small index",
        "(≤ 500 entries) is read whole by one Scan per request (not counted above: keys only,",
        "a few units at most), so no shard is queried; each group is read back once per",
        "request (one read scope: `size`'s inflight walk no longer reads the queued groups",
        "again). Where the time went before (profiled): moto serializing item answers and",
        "deep-copying whole items for a keys-only index Scan (`mailqueue_local.motopatch`).",
        "",
    ]
    return out


def write_section(lines: list[str], section: str = SECTION) -> None:
    _write_section(lines, section)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--groups", default="5,100")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--no-write", action="store_true")
    a = p.parse_args(argv)
    rows = measure([int(x) for x in a.groups.split(",")], a.repeat)
    lines = section(rows, a.repeat)
    print("\n".join(lines))
    print(json.dumps(rows))
    if not a.no_write:
        write_section(lines)
    over = [r for r in rows if r["groups"] <= 100 and r["median_s"] > FLOOR_SECONDS]
    return 1 if over else 0


if __name__ == "__main__":
    raise SystemExit(main())
