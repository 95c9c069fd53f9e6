"""Solo mails (issue 18, third round): a one-group mail as one item, priced from runs.

    python -m bench.solo [MAILS]

Two runs of `cost.measure` on this revision, the same code and template: with solo mails
off (MQ_SOLO_ITEM_MAX_BYTES=0: the content in a mail item of its own, as in the second
round) and with the default. The bench's 10 KB body compresses to ~160 B, so each mail
qualifies; which real mails do is a matter of their compressed size (docs/benchmarks.md).
"""

from __future__ import annotations

import sys

from bench import cost
from bench.content import _env, save_and_print
from bench.model.run import Run


def main() -> None:
    mails = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    runs: dict[str, Run] = {}
    with _env("MQ_SOLO_ITEM_MAX_BYTES", "0"):
        runs["a mail item and a group item (MQ_SOLO_ITEM_MAX_BYTES=0)"] = cost.measure(mails)
    runs["solo: one item (default)"] = cost.measure(mails)
    save_and_print(runs, "var/cost-solo.pkl")


if __name__ == "__main__":
    main()
