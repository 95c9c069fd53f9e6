"""The warm-up ramp: one step per UTC day the pool sent on; while the pool's standing in
the reputation guard's counters (scope pool: delivery's bounces, late feedback's
bounces and complaints) is over the guard's review band, the ramp holds at its step."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from mailqueue.backends.inprocess import MemoryBudgetCounters, MemorySuspensionStore
from mailqueue.outbound.pools import parse_pools
from mailqueue.outbound.reputation import (
    Counts,
    MemoryReputationStore,
    ReputationGuard,
    Thresholds,
    record_feedback,
)
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


THRESHOLDS = Thresholds(min_sends=50, window_sends=1000, evaluate_seconds=0)


def _guard(store: MemoryReputationStore, now: list[float]) -> ReputationGuard:
    """What delivery keeps for a warming pool with the guards off: the pool's counts."""
    return ReputationGuard(store, MemorySuspensionStore(), THRESHOLDS, clock=lambda: now[0],
                           scopes=("pool",))  # fmt: skip


def _day(gate: WarmupGate, guard: ReputationGuard, n: int, bounced: int) -> list[bool]:
    """One day of a delivery container: n mails asked for, the sent ones counted in the
    guard as delivery does (Counts of the final results, with the sending pool)."""
    pool = gate.config.pools["cold"]
    got = [gate.admit(pool, "google") is None for _ in range(n)]
    guard.note("app", "a@example.org", Counts(sends=got.count(True), bounces=bounced), "cold")
    guard.flush()
    return got


def test_warmup_ramp_advances_daily_and_holds_after_a_bouncy_day() -> None:
    now = [DAY0]
    counters = MemoryBudgetCounters()
    store = MemoryReputationStore()

    def gate() -> tuple[WarmupGate, ReputationGuard]:  # a fresh container each day
        guard = _guard(store, now)
        return WarmupGate(parse_pools(POOLS), counters, clock=lambda: now[0],
                          standing=lambda name: guard.standing("pool", name)), guard  # fmt: skip

    g, rg = gate()
    assert _day(g, rg, 120, bounced=2).count(True) == 100  # step 1: 100, 2 % bounced
    now[0] += 86400
    g, rg = gate()
    p = g.progress(g.config.pools["cold"])
    assert (p.step, p.total, p.held) == (2, 200, False)
    assert _day(g, rg, 200, bounced=20).count(True) == 200  # 22/300 = 7.3 %: over 5 %
    now[0] += 86400
    g, rg = gate()
    p = g.progress(g.config.pools["cold"])
    assert (p.step, p.total, p.held) == (2, 200, True)  # held: no ramp out of the band
    assert p.standing is not None and p.standing.verdict == "review"
    assert _day(g, rg, 150, bounced=0).count(True) == 150  # 22/450 = 4.9 %: back inside
    now[0] += 86400 * 3  # two idle days: the ramp moves one step per day sent on
    g, rg = gate()
    p = g.progress(g.config.pools["cold"])
    assert (p.step, p.total) == (3, 400)
    assert _day(g, rg, 10, bounced=0).count(True) == 10
    now[0] += 86400
    g, rg = gate()
    assert g.progress(g.config.pools["cold"]).total is None  # past the ramp: warm
    assert _day(g, rg, 1000, bounced=0).count(True) == 1000


def test_warmup_ramp_holds_on_complaints_counted_with_the_pool() -> None:
    """Complaints (late feedback) counted with the mail's pool hold its ramp: 1 in 100
    sends is 1 %, over the guard's 0.5 % complaint pause band; the pool scope is judged
    but never suspended (its senders' own scopes are)."""
    now = [DAY0]
    counters = MemoryBudgetCounters()
    store = MemoryReputationStore()
    guard = _guard(store, now)
    g = WarmupGate(parse_pools(POOLS), counters, clock=lambda: now[0],
                   standing=lambda name: guard.standing("pool", name))  # fmt: skip
    assert _day(g, guard, 100, bounced=0).count(True) == 100
    judged = record_feedback(guard, "app", "example.org", "complaint", pool="cold")
    assert [(s.scope, s.target, s.verdict) for s in judged] == [("pool", "cold", "pause")]
    assert guard.suspensions.all() == []
    now[0] += 86400
    g = WarmupGate(parse_pools(POOLS), counters, clock=lambda: now[0],
                   standing=lambda name: guard.standing("pool", name))  # fmt: skip
    p = g.progress(g.config.pools["cold"])
    assert (p.step, p.held) == (1, True)
    # without the pool in the feedback (an old caller) the ramp would have moved on
    other = [DAY0]
    store2 = MemoryReputationStore()
    guard2 = _guard(store2, other)
    g2 = WarmupGate(parse_pools(POOLS), MemoryBudgetCounters(), clock=lambda: other[0],
                    standing=lambda name: guard2.standing("pool", name))  # fmt: skip
    _day(g2, guard2, 100, bounced=0)
    record_feedback(guard2, "app", "example.org", "complaint")
    other[0] += 86400
    g2 = WarmupGate(parse_pools(POOLS), g2.counters, clock=lambda: other[0],
                    standing=lambda name: guard2.standing("pool", name))  # fmt: skip
    assert g2.progress(g2.config.pools["cold"]).step == 2
