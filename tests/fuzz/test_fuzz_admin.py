"""Admin API fuzz over HTTP against the local stack: every route, never a 5xx or a hang.

`make test` runs a short slice (ADMIN_FUZZ_COUNT, default 200, seed ADMIN_FUZZ_SEED,
default 43); `make fuzz` runs 10,000 and writes the figures to ADMIN_FUZZ_REPORT (JSON).
A few real mails are queued first (through ingress) so the one-mail routes act on real
groups as well as on odd ids; each 4xx must carry a machine-readable reason.
"""

from __future__ import annotations

import json
import os
import random
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

from tests.fuzz.admin_gen import ROUTES, admin_cases
from tests.fuzz.check import Outcome, send_all
from tests.fuzz.gen import Case, valid_doc
from tests.local.test_run import Stack


def _queue_mails(stack: Stack, n: int) -> list[str]:
    """`n` valid mails through ingress: their ids, for the one-mail routes."""
    rng = random.Random(43)
    now = datetime.now(UTC)
    docs = [json.dumps(valid_doc(rng, now)).encode() for _ in range(n)]
    seeds = (Case(i, "seed", d) for i, d in enumerate(docs))
    results = send_all(stack.ready["api_url"], stack.ready["token"], seeds)
    return [o.body["mail_id"] for o in results.accepted()]


def test_fuzzed_admin_requests_get_a_reasoned_4xx_or_a_2xx_never_a_5xx(
    quiet_stack: Stack,
) -> None:
    count = int(os.environ.get("ADMIN_FUZZ_COUNT", "200"))
    seed = int(os.environ.get("ADMIN_FUZZ_SEED", "43"))
    ready = quiet_stack.ready
    mail_ids = _queue_mails(quiet_stack, 6)
    assert mail_ids, "no mail was queued to act on"
    results = send_all(ready["api_url"], ready["token"], admin_cases(seed, count, mail_ids))

    routes: Counter[str] = Counter()
    by_route: dict[str, Counter[int]] = {}
    for o in results.outcomes:
        method, template, _ = o.case.kind.split(" ", 2)
        route = f"{method} {template}"
        routes[route] += 1
        by_route.setdefault(route, Counter())[o.status] += 1
    report = {
        "seed": seed,
        "inputs": count,
        "mails_queued": len(mail_ids),
        "routes": len([r for r in routes if r in {f"{m} {t}" for m, t in ROUTES}]),
        "route_inputs": dict(sorted(routes.items())),
        "statuses": {str(k): v for k, v in sorted(results.statuses().items())},
        "statuses_by_route": {
            r: {str(k): v for k, v in sorted(c.items())} for r, c in sorted(by_route.items())
        },
        "errors": dict(results.errors().most_common()),
        "server_errors": len(results.server_errors()),
        "hangs": len(results.hangs()),
        "bad_shapes": len(results.bad_shapes(extra=True)),
        "seconds": round(results.seconds, 1),
        "slowest_seconds": round(max((o.seconds for o in results.outcomes), default=0), 2),
    }
    print("\nadmin fuzz:", json.dumps(report), flush=True)
    if os.environ.get("ADMIN_FUZZ_REPORT"):
        out = Path(os.environ["ADMIN_FUZZ_REPORT"])
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=2) + "\n")

    def show(outs: list[Outcome]) -> str:
        return "\n".join(
            f"#{o.case.index} {o.case.kind} {o.case.path[:120]} -> {o.status} {str(o.body)[:200]}"
            for o in outs[:10]
        )

    assert results.server_errors() == [], "5xx:\n" + show(results.server_errors())
    assert results.hangs() == [], "hangs:\n" + show(results.hangs())
    bad = results.bad_shapes(extra=True)
    assert bad == [], "4xx without a reason:\n" + show(bad)
    # the generator reaches every route, and both sides of each body-reading one
    assert report["routes"] == len(ROUTES), sorted(routes)
    assert {200, 400, 404} <= set(results.statuses())
