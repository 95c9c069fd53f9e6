"""Content in the mail item vs S3 (issue 18), priced by the cost model from measured runs.

    python -m bench.content [MAILS]

Three runs of `cost.measure` on this revision, the same code and template: every content
in S3 (MQ_INLINE_CONTENT_MAX_BYTES=0), the default (small mails' content, zlib, in the
mail item), and the default with an incompressible 10 KB body (random octets in 76-octet
lines, which zlib cannot shrink: it stays in S3). The bench's own 10 KB body is a header
and 76 × "x" lines, which zlib shrinks to about 1/60 — a realistic text or HTML body
compresses ~3-5×, base64 attachments ~1.3×; see the threshold in StorageSettings.
"""

from __future__ import annotations

import os
import pickle
import sys
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from bench import cost
from bench.model.bill import model, path_requests
from bench.model.prices import VOLUMES
from bench.model.run import Run
from bench.model.template import Template


@contextmanager
def _env(name: str, value: str | None) -> Iterator[None]:
    old = os.environ.get(name)
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


def incompressible(i: int, size: int) -> bytes:
    head = (
        f"From: bench@example.org\r\nTo: r@example.net\r\nSubject: cost {i}\r\n"
        f"Message-ID: <cost-{i}-{os.getpid()}@example.org>\r\n\r\n"
    ).encode()
    raw = bytes(b for b in os.urandom(size * 2) if b not in (0, 10, 13))
    lines = b"".join(raw[j : j + 76] + b"\r\n" for j in range(0, len(raw), 76))
    return head + lines[: max(0, size - len(head))]


def prose(i: int, size: int) -> bytes:
    """Realistic text: the first `size` octets of docs/operations.md (English prose and
    tables) as a mail body; zlib shrinks 10 KB of it to ~4.6 KB."""
    head = (
        f"From: bench@example.org\r\nTo: r@example.net\r\nSubject: cost {i}\r\n"
        f"Message-ID: <cost-{i}-{os.getpid()}@example.org>\r\n\r\n"
    ).encode()
    text = (Path(__file__).resolve().parents[1] / "docs" / "operations.md").read_bytes()
    body = b"\r\n".join(line[:900] for line in text.splitlines())
    return head + body[: max(0, size - len(head))]


def _measure(mails: int, inline: str | None, body: Callable[[int, int], bytes] | None) -> Run:
    saved = cost._content
    if body is not None:
        cost._content = body  # type: ignore[assignment]
    try:
        with _env("MQ_INLINE_CONTENT_MAX_BYTES", inline):
            return cost.measure(mails)
    finally:
        cost._content = saved  # type: ignore[assignment]


def row(name: str, run: Run, tpl: Template) -> str:
    vals = [sum(x.per_month for x in model(run, v, tpl)) / v * 1e6 for v in VOLUMES]
    req = sum(path_requests(run, tpl, VOLUMES[-1]).values())
    return f"| {name} | " + " | ".join(f"{v:.2f}" for v in vals) + f" | {req:.2f} |"


def lines(run: Run, tpl: Template) -> list[str]:
    v = VOLUMES[-1]
    return [
        f"  {x.service} / {x.item}: {x.per_month / v * 1e6:.3f}"
        for x in model(run, v, tpl)
        if x.service in ("S3", "DynamoDB", "Lambda") and x.per_month
    ]


def main() -> None:
    mails = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    sample = cost._content(0, 10 * 1024)
    noise = incompressible(0, 10 * 1024)
    text = prose(0, 10 * 1024)
    print(
        f"bench body: {len(sample)} B -> zlib {len(zlib.compress(sample, 6))} B; "
        f"incompressible body: {len(noise)} B -> zlib {len(zlib.compress(noise, 6))} B; "
        f"prose: {len(text)} B -> zlib {len(zlib.compress(text, 6))} B"
    )
    runs = {
        "content in S3 (MQ_INLINE_CONTENT_MAX_BYTES=0)": _measure(mails, "0", None),
        "content in the mail item (default)": _measure(mails, None, None),
        "default, incompressible 10 KB body (stays in S3)": _measure(mails, None, incompressible),
        "default, 10 KB of English prose (zlib ~4.6 KB: stays in S3)": _measure(mails, None, prose),
    }
    save_and_print(runs, "var/cost-content.pkl")


def save_and_print(runs: dict[str, Run], path: str) -> None:
    """Keep the runs (for bench.compare) and print them priced: totals, then line by line."""
    Path(path).parent.mkdir(exist_ok=True)
    Path(path).write_bytes(pickle.dumps(runs))
    tpl = Template.load()
    print("| run | $/M at 1 M/month | at 10 M | at 100 M | requests per mail |")
    print("|---|---:|---:|---:|---:|")
    for name, run in runs.items():
        print(row(name, run, tpl))
    for name, run in runs.items():
        print(f"\n{name} (100 M/month, $ per million):")
        print("\n".join(lines(run, tpl)))
        reqs = path_requests(run, tpl, VOLUMES[-1])
        print("  requests: " + ", ".join(f"{k} {n:.2f}" for k, n in reqs.items()))


if __name__ == "__main__":
    main()
