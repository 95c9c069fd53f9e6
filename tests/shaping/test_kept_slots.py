"""A container keeps a connection slot between invocations where the site can spare it.

`Shaper.release(keep=True)` and `Shaper.reuse_kept` (issue 25 item 6: a binding rate
re-arms every group to come back alone, so a slot taken and given back per invocation
was two limiter requests a mail on top of the booking). On the in-process store, whose
requests and slots the tests read; the same store protocol as DynamoDB's (test_store.py).
"""

from __future__ import annotations

import json

from mailqueue.backends.inprocess import MemoryShapingStore
from mailqueue.outbound.shaping import BackoffRules, Permit, Shaper, ShapingRules

SITE = "default"


class Clock:
    def __init__(self) -> None:
        self.t = 1_000_000.0

    def __call__(self) -> float:
        return self.t


def shaper(connections: int, clock: Clock, store: MemoryShapingStore) -> Shaper:
    rules = ShapingRules.from_json(
        json.dumps({"version": 1, "default": {"max_connections": connections}})
    )
    backoff = BackoffRules.from_json(json.dumps({"version": 1, "rules": []}))
    return Shaper(rules, backoff, store, clock=clock, slot_lease=360.0)


def take(s: Shaper, holder: str) -> None:
    assert isinstance(s.admit(SITE, holder, 1), Permit)
    assert s.holds_slot(SITE, holder)


def live_slots(store: MemoryShapingStore, clock: Clock) -> set[str]:
    state = store.load(SITE)
    store.requests -= 1  # the test's own read
    return {h for h, t in state.slots.items() if t > clock()}


def test_a_slot_kept_is_reused_by_the_next_invocation_without_a_request() -> None:
    clock, store = Clock(), MemoryShapingStore()
    s = shaper(10, clock, store)
    take(s, "h1")
    before = store.requests
    s.release(SITE, "h1", keep=True)
    assert store.requests == before  # no give-back
    assert live_slots(store, clock) == {"h1"}  # a real slot still: it counts for everyone
    clock.t += 30
    assert s.reuse_kept(SITE, min_lease=55) == "h1"
    assert store.requests == before
    assert isinstance(s.redeem(SITE, "h1", clock()), Permit)  # its slot: no request
    assert store.requests == before
    assert s.reuse_kept(SITE, min_lease=55) is None  # handed out once


def test_a_slot_is_given_back_where_the_site_cannot_spare_it() -> None:
    # a site of 2 connections: never kept
    clock, store = Clock(), MemoryShapingStore()
    s = shaper(2, clock, store)
    take(s, "h1")
    s.release(SITE, "h1", keep=True)
    assert live_slots(store, clock) == set()
    assert s.reuse_kept(SITE, min_lease=55) is None
    # a site of 10 with 9 held: given back (2 must stay free)
    clock, store = Clock(), MemoryShapingStore()
    s = shaper(10, clock, store)
    for i in range(9):
        take(s, f"h{i}")
    s.release(SITE, "h0", keep=True)
    assert "h0" not in live_slots(store, clock)
    # and a caller that was refused a slot asks for no keeping at all
    s.release(SITE, "h1", keep=False)
    assert "h1" not in live_slots(store, clock)


def test_a_kept_slot_with_too_little_lease_is_renewed_once_or_forgotten() -> None:
    clock, store = Clock(), MemoryShapingStore()
    s = shaper(10, clock, store)
    take(s, "h1")
    s.release(SITE, "h1", keep=True)
    clock.t += 250  # 110 s of its 360 s lease left; the invocation may run 295
    before = store.requests
    assert s.reuse_kept(SITE, min_lease=295) == "h1"
    assert store.requests == before + 1  # one atomic take renews it
    state = store.load(SITE)
    assert state.slots["h1"] >= clock() + 359
    # a kept slot whose lease has ended is forgotten: no request, nothing to give back
    s.release(SITE, "h1", keep=True)
    clock.t += 400
    before = store.requests
    assert s.reuse_kept(SITE, min_lease=55) is None
    assert store.requests == before


def test_kept_slots_never_let_more_connections_than_the_limit() -> None:
    clock, store = Clock(), MemoryShapingStore()
    a, b = shaper(4, clock, store), shaper(4, clock, MemoryShapingStore())
    b.store = store  # two containers, one site item
    take(a, "a1")
    a.release(SITE, "a1", keep=True)  # 4 - 1 held = 3 free >= 2: kept
    assert live_slots(store, clock) == {"a1"}
    for h in ("b1", "b2", "b3"):
        take(b, h)
    assert not isinstance(b.admit(SITE, "b4", 1), Permit)  # the kept slot counts
    assert a.reuse_kept(SITE, min_lease=55) == "a1"
    assert len(live_slots(store, clock)) == 4
