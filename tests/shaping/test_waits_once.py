"""A throttled group waits once (issue 25 item 6).

A site limited at 2.5/s, 60 one-recipient mails queued at once (so the limit binds from
the start), three delivery invocations polling the queue at once, each its own container
and limiter cache, all sharing the site's state item on moto. A group refused for the
rate books its own future slot in the same conditional write a grant would be, is
re-armed once for that slot, and sends when it comes back without asking again. So, on
average per mail: at most 1 re-arm, and the rate the peer sees after the burst is the
limit within 5 %, at burst 1, 2 and 5.

Limiter requests: while the limit binds, a booking is one write that cannot conflict
(`Shaper._book_binding`: an atomic addition to the site's TAT), so three containers
booking at once cost one request a mail; what is above one is the start, before the
limit binds, when grants are compare-and-set writes that conflict. Measured 1.05-1.27
requests a mail over the whole run (before the atomic booking: 1.6-2.4).
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest

from tests.support import factories as f
from tests.support.aws import AwsEnv
from tests.support.rigs import RigFactory, relay_to
from tests.support.smtp_peers import smtp_sink

RATE = 2.5
# 60 mails: the steady rate is a least-squares fit over 55-59 intervals (~23 s). On a
# loaded machine the first invocation's records (ten lanes, the harness's moto and peer in
# the same process) send 0.2-1.4 s after their slots and the rest on time; a block of k
# sends late by d at the start of n moves the fit by about 6dk / (n^2 x interval): k = 6,
# d = 1 s reads 5 % over the limit at 40 mails (a fresh-clone `make test` failed on 6 %),
# 2.3 % at 60
MAILS = 60
WORKERS = 3


class _SerialReceive:
    """An SQS client whose ReceiveMessage calls are made one at a time across the pollers.

    moto's ReceiveMessage takes no lock: two polls at the same moment can both be handed
    the same visible message (seen in this test under load, 2026-11-29: a group's trigger
    went to two invocations at once; the second, refused as claimed, deleted its copy after
    the first had re-armed the trigger for its booked slot, and moto deletes on any receipt
    handle a message ever had, so the group was left without a trigger). SQS is
    at-least-once too, but such duplicates are rare there; here they came with most
    concurrent polls. The sweeper's lost-trigger pass is what finds such a group in a
    deployment (after trigger_grace_seconds); this test has no sweeper."""

    def __init__(self, client: Any, lock: threading.Lock) -> None:
        self._client = client
        self._lock = lock

    def receive_message(self, **kw: Any) -> Any:
        with self._lock:
            return self._client.receive_message(**kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


def drive(rigs: list[Any], peer: Any, n: int, seconds: float) -> None:
    """The pollers of WORKERS invocations at once until the peer has n messages."""
    stop = time.monotonic() + seconds
    errors: list[BaseException] = []

    def worker(r: Any) -> None:
        try:
            while time.monotonic() < stop and len(peer.messages) < n:
                if not r.poll().received:
                    time.sleep(0.05)
        except BaseException as e:  # noqa: BLE001 - re-raised in the test's thread
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(r,)) for r in rigs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(seconds + 30)
    if errors:
        raise errors[0]


def paced_rate(times: list[float], burst: int) -> float:
    """The rate the peer saw after the burst: 1 / the least-squares slope of send time
    over mail number, from the burst's last mail on (GCRA sends it at the start, then one
    an interval). It was the count over first-to-last, which one late first send (a cold
    connection on a loaded machine) moved by 5 %."""
    ys = times[burst - 1 :]
    xs = range(len(ys))
    mx, my = (len(ys) - 1) / 2, sum(ys) / len(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mx) ** 2 for x in xs
    )
    return 1 / slope


def test_paced_rate_reads_the_interval_past_a_late_first_send() -> None:
    """Burst 2 at 2.5/s: two sends at 0, then one every 0.4 s; the first one 0.75 s late."""
    on_time = [0.0, 0.0] + [0.4 * k for k in range(1, 39)]
    assert paced_rate(on_time, 2) == pytest.approx(2.5)
    late = [0.75, 0.0, *on_time[2:]]
    assert paced_rate(sorted(late), 2) == pytest.approx(2.5, rel=0.05)
    assert paced_rate([0.5 * k for k in range(40)], 1) == pytest.approx(2.0)  # too slow: seen


@pytest.mark.parametrize(
    ("burst", "connections"),
    [(1, None), (2, None), (5, None), (2, 10)],
    ids=["burst1", "burst2", "burst5", "burst2-10conn"],
)
def test_a_binding_limit_costs_one_request_and_one_rearm_per_mail(
    burst: int, connections: int | None, rig: RigFactory, aws: AwsEnv
) -> None:
    """With a connection limit too (10, not binding: `make bench`'s site), each group
    also needs a connection slot; a container keeps its slot between invocations where
    the site can spare it (`Shaper.release`), so the bound is the same (it was ~3 a
    mail: a take and a give-back per invocation on top of the booking)."""
    site: dict[str, Any] = {"rates": [{"messages": int(RATE * 2), "per": "2s", "burst": burst}]}
    if connections is not None:
        site["max_connections"] = connections
    rules = {"version": 1, "default": site}
    with smtp_sink() as peer:
        settings = dict(
            routes=relay_to(peer.port),
            shaping=True,
            shaping_book_slots=True,
            shaping_rules=json.dumps(rules),
            backoff_rules=json.dumps({"version": 1, "rules": []}),
        )
        rigs = [rig(**settings) for _ in range(WORKERS)]
        receive = threading.Lock()
        for r in rigs:
            r.poller.sqs = _SerialReceive(r.poller.sqs, receive)  # type: ignore[attr-defined]
        st = aws.storage()
        # The site has been written before, as all day while a limit binds: its first
        # write creates its item by compare-and-set, and containers starting at once on a
        # new item refuse each other (3-9 refused writes here, once per busy period)
        st.enqueue(f.envelope("first@peer.example"), f.content())
        drive(rigs[:1], peer, 1, seconds=30)
        assert len(peer.messages) == 1
        warm = sum(r.service.shaper.store.requests for r in rigs if r.service.shaper)
        for i in range(MAILS):
            st.enqueue(f.envelope(f"u{i}@peer.example"), f.content())
        rigs[0].reset_counts()
        drive(rigs, peer, MAILS + 1, seconds=MAILS / RATE + 30)
        assert len(peer.messages) == MAILS + 1, (
            f"{len(peer.messages) - 1} of {MAILS} delivered; triggers visible "
            f"{rigs[0].visible_triggers()}, invisible {rigs[0].invisible_triggers()} "
            "(delayed ones are in neither)"
        )
        rearms = rigs[0].rearms()
    requests = sum(r.service.shaper.store.requests for r in rigs if r.service.shaper) - warm
    times = sorted(peer.accepted_at)[1:]
    steady = paced_rate(times, burst)
    print(
        f"burst {burst}: {requests / MAILS:.2f} limiter requests/mail, "
        f"{rearms / MAILS:.2f} re-arms/mail, {steady:.3f}/s (limit {RATE:g}/s)"
    )
    assert requests / MAILS <= 1.2  # the bound
    assert rearms / MAILS <= 1.0
    assert abs(steady - RATE) <= 0.05 * RATE
