"""Ingress fuzz over HTTP against the local stack: never a 5xx, never a hang, no partial write.

`make test` runs a short slice (FUZZ_COUNT, default 300, seed FUZZ_SEED, default 14);
`make fuzz` runs 10,000 and writes the figures to FUZZ_REPORT (JSON). The stack runs as
`make run` starts it, with --strict-limits, and with the delivery function kept from
starting (its event source mapping is left disabled: `--disable-trigger delivery`) and
the sweeper idle, so what the queue holds afterwards is exactly what ingress wrote: every
content object, mail and group item and delivery trigger must belong to a 202 answer,
and every 202 answer must be stored whole.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from pathlib import Path

from tests.fuzz.check import Outcome, account, send_all, stored_state
from tests.fuzz.gen import cases
from tests.local.test_run import Stack


def test_fuzzed_submissions_get_4xx_or_202_and_202_only_when_stored_whole(
    quiet_stack: Stack,
) -> None:
    count = int(os.environ.get("FUZZ_COUNT", "300"))
    seed = int(os.environ.get("FUZZ_SEED", "14"))
    ready = quiet_stack.ready
    results = send_all(ready["api_url"], ready["token"], cases(seed, count))
    time.sleep(1)  # nothing should move; a second for any straggling write to show
    acc = account(results, stored_state(ready))

    kinds: Counter[str] = Counter()
    for o in results.outcomes:
        kinds[
            o.case.kind.split(":")[0] + (":replay" if o.case.kind.endswith("replay") else "")
        ] += 1
    report = {
        "seed": seed,
        "inputs": count,
        "kinds": dict(sorted(kinds.items())),
        "statuses": {str(k): v for k, v in sorted(results.statuses().items())},
        "errors": dict(results.errors().most_common()),
        "server_errors": len(results.server_errors()),
        "hangs": len(results.hangs()),
        "bad_shapes": len(results.bad_shapes()),
        "accepted": len(results.accepted()),
        "replayed": sum(o.replayed for o in results.accepted()),
        "triggers": [acc.triggers_min, acc.triggers, acc.triggers_max],
        "partial_writes": acc.partial_writes,
        "seconds": round(results.seconds, 1),
        "slowest_seconds": round(max((o.seconds for o in results.outcomes), default=0), 2),
    }
    print("\nfuzz:", json.dumps(report), flush=True)  # first: a bad report path loses nothing
    if os.environ.get("FUZZ_REPORT"):
        out = Path(os.environ["FUZZ_REPORT"])
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=2) + "\n")

    def show(outs: list[Outcome]) -> str:
        return "\n".join(
            f"#{o.case.index} {o.case.kind} -> {o.status} {str(o.body)[:200]}" for o in outs[:10]
        )

    assert results.server_errors() == [], "5xx:\n" + show(results.server_errors())
    assert results.hangs() == [], "hangs:\n" + show(results.hangs())
    assert results.bad_shapes() == [], "4xx without a reason:\n" + show(results.bad_shapes())
    assert acc.partial_writes == 0, acc
    # the generator reaches both sides: mails accepted, and every kind of refusal
    assert len(results.accepted()) > count // 10
    assert {400, 422} <= set(results.statuses())
