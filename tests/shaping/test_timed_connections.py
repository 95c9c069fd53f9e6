"""A site of 1-2 connections counts them by time, not by holders (issue 40).

`shaping.timed_connections`: every send at such a site is one connection of one
transaction, opened at or after its GCRA slot, so with the burst cut to b <= C any
half-open span of lane = (C - b + 1) x interval holds at most C slots: while each
connection closes within its lane, at most C are open at once, and the booking's write
is the only request (no slot taken, none given back). MAIL FROM is not started later
than `send_by` after the slot (the late check before MAIL FROM); a transaction that
runs past its lane lets a receiver see C + ceil(overrun / interval) at once, no more.

The limiter's side on the in-process store (its requests counted), with a test clock;
then through the delivery handler against a peer that counts connections.
"""

from __future__ import annotations

import json
import math
import random
import threading
import time
from typing import Any

from mailqueue.backends.inprocess import MemoryShapingStore
from mailqueue.outbound.shaping import (
    BackoffRules,
    Limits,
    Permit,
    Rate,
    Shaper,
    ShapingRules,
    Wait,
    timed_connections,
)

from tests.support import factories as f
from tests.support.aws import AwsEnv
from tests.support.rigs import RigFactory, relay_to
from tests.support.smtp_peers import Behaviour, smtp_sink

SITE = "default"
NO_BACKOFF = json.dumps({"version": 1, "rules": []})


def limits(connections: int | None, messages: int, per: float = 1.0, burst: int = 1) -> Limits:
    return Limits(max_connections=connections, rates=(Rate(messages, per, burst),))


def test_which_sites_count_connections_by_time_and_their_lanes() -> None:
    t = timed_connections(limits(2, 2))  # make bench's 2-connection site: 2/s, burst 1
    assert t is not None
    assert (t.lane, t.send_by) == (1.0, 0.5)
    assert t.limits.max_connections is None
    assert t.limits.rates == (Rate(2, 1.0, 1),)  # same rate, same TAT key
    t = timed_connections(limits(2, 1, burst=5))  # 1/s: burst 2 leaves a lane of 1 s
    assert t is not None and t.limits.rates[0].burst == 2 and t.lane == 1.0
    t = timed_connections(limits(2, 1))  # the Postfix test's site: 1/s, burst 1
    assert t is not None and (t.lane, t.send_by) == (2.0, 1.0)
    t = timed_connections(limits(1, 1, per=2.0, burst=3))
    assert t is not None and t.limits.rates[0].burst == 1 and t.lane == 2.0
    # counted by holders: a lane shorter than the floor would cap the rate (4/s at 2
    # connections: 0.5 s), 3 connections or more (kept slots), no rate, several rates
    assert timed_connections(limits(2, 4, burst=2)) is None
    assert timed_connections(limits(3, 1)) is None
    assert timed_connections(Limits(max_connections=2)) is None
    two = Limits(max_connections=2, rates=(Rate(1, 1.0, 1), Rate(1000, 3600.0, 10)))
    assert timed_connections(two) is None
    assert timed_connections(limits(2, 4, burst=2), floor=0.5) is not None


class Clock:
    def __init__(self) -> None:
        self.t = 1_000_000.0

    def __call__(self) -> float:
        return self.t


def _shapers(n: int, clock: Clock, store: MemoryShapingStore, site: dict[str, Any]) -> list[Shaper]:
    rules = ShapingRules.from_json(json.dumps({"version": 1, "default": site}))
    backoff = BackoffRules.from_json(NO_BACKOFF)
    return [Shaper(rules, backoff, store, clock=clock) for _ in range(n)]


def _most_at_once(starts: list[float], life: float) -> int:
    """Most of the intervals [start, start + life) that overlap at one moment."""
    events = sorted([(s, 1) for s in starts] + [(s + life, -1) for s in starts])
    most = now = 0
    for _, step in events:  # an end sorts before a start at the same time: half-open
        now += step
        most = max(most, now)
    return most


def _book(burst: int, seed: int) -> tuple[list[float], int, float]:
    """Three containers booking 120 sends of a 2-connection site at 2/s with `burst`,
    asking at random moments faster than the rate: (the slots, the store's requests,
    the site's interval)."""
    clock = Clock()
    store = MemoryShapingStore()
    site = {"max_connections": 2, "rates": [{"messages": 2, "per": "1s", "burst": burst}]}
    shapers = _shapers(3, clock, store, site)
    rng = random.Random(seed)
    slots: list[float] = []
    for k in range(120):
        clock.t += rng.uniform(0.0, 0.6)  # asks arrive at ~3.3/s, the site takes 2/s
        s = shapers[rng.randrange(3)]
        got = s.admit(SITE, s.new_holder(), 1, reserve=True, record=f"m{k}")
        if isinstance(got, Permit):
            slots.append(clock.t)
        else:
            assert isinstance(got, Wait) and got.reason == "rate" and got.slot > 0
            slots.append(got.slot)
    # sending on a booked slot asks nothing, and nothing is given back afterwards
    before = store.requests
    for s, slot in zip(shapers, sorted(slots)[-3:], strict=True):
        clock.t = max(clock.t, slot)
        holder = s.new_holder()
        assert isinstance(s.redeem(SITE, holder, slot), Permit)
        assert not s.holds_slot(SITE, holder)
        s.release(SITE, holder, keep=True)
    assert store.requests == before
    return slots, before, 0.5


def test_a_time_counted_site_costs_one_request_a_send_and_never_more_than_its_connections() -> None:
    for burst, seed in ((1, 1), (2, 2), (5, 3)):
        slots, requests, interval = _book(burst, seed)
        t = timed_connections(limits(2, 2, burst=burst))
        assert t is not None and t.lane == 1.0
        # a write a send; each container's first look at the site is a read, and a
        # container that last saw the site idle when it is not pays a refused write
        assert requests <= 1.1 * len(slots), (burst, requests)
        # every connection closed within its lane: at most 2 open at once (reached)
        assert _most_at_once(slots, t.lane) == 2, burst
        # a transaction running past its lane by up to `overrun`: C + ceil(overrun / i)
        for overrun in (0.2, 0.5, 1.0, 1.7):
            seen = _most_at_once(slots, t.lane + overrun)
            assert seen <= 2 + math.ceil(overrun / interval - 1e-9), (burst, overrun, seen)


def _drive(rigs: list[Any], peer: Any, n: int, seconds: float) -> None:
    stop = time.monotonic() + seconds

    def worker(r: Any) -> None:
        while time.monotonic() < stop and len(peer.messages) < n:
            if not r.poll().received:
                time.sleep(0.1)

    threads = [threading.Thread(target=worker, args=(r,)) for r in rigs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(seconds + 30)


def _site_rules() -> str:
    return json.dumps(
        {
            "version": 1,
            "default": {
                "max_connections": 2,
                "rates": [{"messages": 2, "per": "1s", "burst": 1}],
            },
        }
    )


def _three_rigs_with_mail(rig: RigFactory, aws: AwsEnv, port: int, n: int) -> list[Any]:
    """Three delivery invocations shaping against the 2-connection site relayed to the
    peer on `port`, and `n` one-recipient mails queued for it."""
    rigs = [
        rig(
            routes=relay_to(port),
            shaping=True,
            shaping_rules=_site_rules(),
            backoff_rules=NO_BACKOFF,
        )
        for _ in range(3)
    ]
    st = aws.storage()
    for i in range(n):
        st.enqueue(f.envelope(f"u{i}@peer.example"), f.content())
    return rigs


def test_delivered_with_a_booking_a_mail_and_at_most_the_sites_connections(
    rig: RigFactory, aws: AwsEnv
) -> None:
    """Three delivery invocations at once against a 2-connection site at 2/s (`make
    bench`'s 2-connection case): every mail delivered, never more than 2 connections
    open at the peer, and no connection slot taken or given back (no request but the
    bookings, the site's first writes and the bookings of slots missed)."""
    n = 16
    with smtp_sink(Behaviour()) as peer:
        rigs = _three_rigs_with_mail(rig, aws, peer.port, n)
        _drive(rigs, peer, n, n / 2 + 40)
        requests = sum(r.service.shaper.store.requests for r in rigs if r.service.shaper)
        print(
            f"\n[timed, 2 conn] {len(peer.messages)}/{n} delivered, peak "
            f"{peer.peak_connections} connections, {requests / n:.2f} limiter requests a mail"
        )
        assert len(peer.messages) == n
        assert peer.peak_connections <= 2
        assert requests / n <= 1.5


def test_transactions_that_outlast_their_lane_see_the_bound(rig: RigFactory, aws: AwsEnv) -> None:
    """The peer takes 1.2 s before its reply to the final dot: every transaction outlasts
    its connection's lane (1 s at 2/s and 2 connections, MAIL FROM by 0.5 s after the
    slot). The receiver then sees at most C + ceil(overrun / interval) connections at
    once, overrun <= send_by + the transaction - lane (the transaction: the data delay
    and 0.5 s for the rest, on a loaded machine), and every mail is delivered."""
    n = 10
    delay = 1.2
    with smtp_sink(Behaviour(data_delay=delay)) as peer:
        rigs = _three_rigs_with_mail(rig, aws, peer.port, n)
        _drive(rigs, peer, n, n / 2 + 60)
        t = timed_connections(limits(2, 2))
        assert t is not None
        overrun = t.send_by + delay + 0.5 - t.lane
        bound = 2 + math.ceil(overrun / 0.5)
        print(
            f"\n[timed, 2 conn, {delay} s transactions] {len(peer.messages)}/{n} delivered, "
            f"peak {peer.peak_connections} connections (bound {bound})"
        )
        assert len(peer.messages) == n
        assert peer.peak_connections <= bound
