"""Solo mails (issue 18, third round): a one-group mail as one item, priced from runs.

    python -m bench.solo [MAILS]

Two runs of `cost.measure` on this revision, the same code and template: with solo mails
off (MQ_SOLO_ITEM_MAX_BYTES=0: the content in a mail item of its own, as in the second
round) and with the default. The bench's 10 KB body compresses to ~160 B, so each mail
qualifies; which real mails do is a matter of their compressed size (docs/benchmarks.md).
"""

from __future__ import annotations

import pickle
import sys
from pathlib import Path

from bench import cost
from bench.content import _env, lines, row


def main() -> None:
    mails = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    runs: dict[str, cost.Run] = {}
    with _env("MQ_SOLO_ITEM_MAX_BYTES", "0"):
        runs["a mail item and a group item (MQ_SOLO_ITEM_MAX_BYTES=0)"] = cost.measure(mails)
    runs["solo: one item (default)"] = cost.measure(mails)
    Path("var").mkdir(exist_ok=True)
    Path("var/cost-solo.pkl").write_bytes(pickle.dumps(runs))
    tpl = cost.Template.load()
    print("| run | $/M at 1 M/month | at 10 M | at 100 M | requests per mail |")
    print("|---|---:|---:|---:|---:|")
    for name, run in runs.items():
        print(row(name, run, tpl))
    for name, run in runs.items():
        print(f"\n{name} (100 M/month, $ per million):")
        print("\n".join(lines(run, tpl)))
        reqs = cost.path_requests(run, tpl, cost.VOLUMES[-1])
        print("  requests: " + ", ".join(f"{k} {n:.2f}" for k, n in reqs.items()))


if __name__ == "__main__":
    main()
