"""Records of one invocation that wait to ask for the same site are booked in one write.

Delivery serialises the records of a site within an invocation (one asks the limiter at a
time, the others wait for a connection holder), so a booking's `extra` saw no other
record and each mail paid its own booking write (issue 25 item 6: 1.4-1.5 limiter
requests a mail in `make bench`). A record now announces itself before it waits
(`Shaper.announce`), and the record that asks first books a slot for each announced one;
they then take theirs with no request. On the in-process store, the same protocol as
DynamoDB's (test_store.py).
"""

from __future__ import annotations

import json

import pytest
from mailqueue.backends.inprocess import MemoryShapingStore
from mailqueue.outbound.shaping import BackoffRules, Shaper, ShapingRules, Wait

SITE = "default"
RATE = 2.0  # messages a second, burst 1: 0.5 s between slots


class Clock:
    def __init__(self) -> None:
        self.t = 1_000_000.0

    def __call__(self) -> float:
        return self.t


def shaper(clock: Clock, store: MemoryShapingStore) -> Shaper:
    rules = ShapingRules.from_json(
        json.dumps({"version": 1, "default": {"rates": [{"messages": 2, "per": "1s", "burst": 1}]}})
    )
    backoff = BackoffRules.from_json(json.dumps({"version": 1, "rules": []}))
    return Shaper(rules, backoff, store, clock=clock)


def binding(s: Shaper) -> None:
    """The site known and its rate binding: a first booking this container made."""
    s.admit(SITE, "h0", 1, reserve=True)
    s.admit(SITE, "h0", 1, reserve=True)


@pytest.mark.parametrize("waiting", [0, 3, 9])
def test_announced_records_are_booked_by_the_first_asker_in_one_write(waiting: int) -> None:
    clock, store = Clock(), MemoryShapingStore()
    s = shaper(clock, store)
    binding(s)
    for _ in range(waiting + 1):
        s.announce(SITE)
    before = store.requests
    slots = []
    for i in range(waiting + 1):
        got = s.admit(SITE, f"h{i + 1}", 1, reserve=True, announced=True)
        assert isinstance(got, Wait) and got.reason == "rate", got
        slots.append(got.slot)
    assert store.requests == before + 1  # one booking for all of them
    # distinct slots, one interval apart: the rate holds
    assert slots == sorted(slots)
    assert all(b - a == pytest.approx(1 / RATE) for a, b in zip(slots, slots[1:], strict=False))


def test_a_withdrawn_record_is_not_booked_for() -> None:
    clock, store = Clock(), MemoryShapingStore()
    s = shaper(clock, store)
    binding(s)
    s.announce(SITE)
    s.announce(SITE)
    s.withdraw(SITE)  # e.g. its wait for a holder failed
    before = store.requests
    first = s.admit(SITE, "h1", 1, reserve=True, announced=True)
    assert isinstance(first, Wait)
    assert store.requests == before + 1
    # nothing was booked for the withdrawn one: the next asker writes again
    second = s.admit(SITE, "h2", 1, reserve=True)
    assert isinstance(second, Wait) and second.slot > first.slot
    assert store.requests == before + 2


def test_without_announcing_each_record_books_its_own_slot() -> None:
    """The control: the same records asking one after another, unannounced."""
    clock, store = Clock(), MemoryShapingStore()
    s = shaper(clock, store)
    binding(s)
    before = store.requests
    for i in range(4):
        assert isinstance(s.admit(SITE, f"h{i}", 1, reserve=True), Wait)
    assert store.requests == before + 4
