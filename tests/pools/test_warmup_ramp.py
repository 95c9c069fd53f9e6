"""The warm-up ramp: one step per UTC day the pool sent on; a day whose bounce rate
crossed the reputation guard's review band holds the next day at the same step."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from mailqueue.backends.inprocess import MemoryBudgetCounters
from mailqueue.outbound.pools import parse_pools
from mailqueue.outbound.warmup import WarmupGate

DAY0 = datetime(2026, 12, 2, 9, 0, tzinfo=UTC).timestamp()
POOLS = json.dumps({
    "version": 1,
    "pools": {"cold": {"addresses": ["192.0.2.1/32"], "ehlo": "cold.example.org",
                       "warmup": {"steps": [{"step": 1, "total": 100, "per_site": 100},
                                            {"step": 2, "total": 200, "per_site": 200},
                                            {"step": 3, "total": 400, "per_site": 400}],
                                  "sites": []}}},
    "routing": {"default": "cold"},
})  # fmt: skip


def _day(gate: WarmupGate, n: int, bounced: int) -> list[bool]:
    pool = gate.config.pools["cold"]
    got = [gate.admit(pool, "google") is None for _ in range(n)]
    gate.bounced(pool, bounced)
    return got


def test_warmup_ramp_advances_daily_and_holds_after_a_bouncy_day() -> None:
    now = [DAY0]
    counters = MemoryBudgetCounters()

    def gate() -> WarmupGate:  # a fresh container each day (no cached step)
        return WarmupGate(parse_pools(POOLS), counters, bounce_band=0.05, clock=lambda: now[0])

    g = gate()
    assert _day(g, 120, bounced=2).count(True) == 100  # step 1: 100, 2 % bounced
    now[0] += 86400
    g = gate()
    p = g.progress(g.config.pools["cold"])
    assert (p.step, p.total, p.held) == (2, 200, False)
    assert _day(g, 200, bounced=20).count(True) == 200  # 10 % bounced: over the band
    now[0] += 86400
    g = gate()
    p = g.progress(g.config.pools["cold"])
    assert (p.step, p.total, p.held) == (2, 200, True)  # held: no ramp on a bad day
    assert _day(g, 150, bounced=0).count(True) == 150
    now[0] += 86400 * 3  # two idle days: the ramp moves one step per day sent on
    g = gate()
    p = g.progress(g.config.pools["cold"])
    assert (p.step, p.total) == (3, 400)
    assert _day(g, 10, bounced=0).count(True) == 10
    now[0] += 86400
    g = gate()
    assert g.progress(g.config.pools["cold"]).total is None  # past the ramp: warm
    assert _day(g, 1000, bounced=0).count(True) == 1000
