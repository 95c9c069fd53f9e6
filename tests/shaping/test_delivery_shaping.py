"""Shaping through the real delivery handler (SQS poller → handler → moto → aiosmtpd).

A peer that enforces limits as a provider does (421 over N messages/s or M connections):
configured at or below its limits, the queue gets no 421 and delivers everything. Out of
budget is not an attempt; backoff rules act on the peer's replies; events still validate.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from mailqueue.core.errors import NotFound
from mailqueue.core.model import GroupState, MailRef, RecipientState

from bench.shaping import max_in_window
from functions.delivery import app as delivery_app
from tests.events.test_ses_schema import errors, read_log, service
from tests.support import factories as f
from tests.support.aws import AwsEnv
from tests.support.rigs import RigFactory, relay_to
from tests.support.smtp_peers import Behaviour, smtp_sink
from tests.support.streams import StreamReader

GMAIL_421 = Behaviour().throttle_reply
NO_BACKOFF = json.dumps({"version": 1, "rules": []})


def shaping(**limits: Any) -> str:
    return json.dumps({"version": 1, "default": limits})


def metric(name: str) -> float:
    """What the handler published (Powertools' metric set, before the flush)."""
    entry = delivery_app.metrics.metric_set.get(name)
    return sum(entry["Value"]) if entry else 0


PEER = Behaviour(rate_limit=(8, 1.0), max_connections=2)


def run_workers(rigs: list[Any], peer: Any, n: int, seconds: float = 40) -> None:
    """Three delivery invocations at once (threads), each its own container, as Lambda
    runs them, until the peer has n messages or time is up."""
    stop = time.monotonic() + seconds

    def worker(r: Any) -> None:
        idle = 0
        while time.monotonic() < stop and len(peer.messages) < n and idle < 10:
            got = r.poll().received
            idle = 0 if got else idle + 1
            if not got:
                time.sleep(0.2)

    threads = [threading.Thread(target=worker, args=(r,)) for r in rigs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(seconds + 20)


def test_within_the_peers_limits_no_421_and_everything_delivered(
    rig: RigFactory, aws: AwsEnv
) -> None:
    """Peer: 421 above 8 messages in any second or above 2 connections. Queue: 2
    connections, 4/s with a burst of 2 (at most burst + rate + one block = 7 in a second),
    three delivery invocations at once."""
    n = 16
    reader = StreamReader(aws)
    with smtp_sink(PEER) as peer:
        settings = dict(
            routes=relay_to(peer.port),
            shaping=True,
            shaping_rules=shaping(
                max_connections=2,
                connection_wait="200ms",
                rates=[{"messages": 4, "per": "1s", "burst": 2}],
                block=1,
            ),
            backoff_rules=NO_BACKOFF,  # nothing to back off from: the limiter alone
        )
        # one record at a time per invocation: the request bound below is the limiter's
        # with one holder per invocation; lanes at once under a 2-connection limit ask
        # more (measured 88 requests for these 16 mails, 50 with one lane; issue 25 report)
        rigs = [rig(**settings, batch_concurrency=1) for _ in range(3)]
        st = aws.storage()
        for i in range(n):
            st.enqueue(f.envelope(f"u{i}@peer.example"), f.content())
        run_workers(rigs, peer, n)
        assert peer.throttled == 0, (
            f"{peer.throttled} x 421 ({peer.throttled_connections} for connections, peak "
            f"{peer.peak_connections}); most MAIL FROMs in a second "
            f"{max_in_window(peer.accepted_at, 1.0)}"
        )
        assert len(peer.messages) == n
        assert peer.peak_connections <= 2
        assert max_in_window(peer.accepted_at, 1.0) <= 7
        requests = sum(r.service.shaper.store.requests for r in rigs if r.service.shaper)
        print(f"shaping: {requests} DynamoDB requests for {n} mails (block 1)")
        # a token write per mail (block 1), slot take/release per invocation, and the
        # conflicts of three workers on one item
        assert requests <= 4 * n
    # from the event log: one attempt each (waiting for budget is no attempt), the site
    service(aws).handle(reader.poll())
    _, docs = read_log(aws)
    assert [e for d in docs for e in errors(d)] == []
    deliveries = [d for d in docs if d["eventType"] == "Delivery"]
    assert len(deliveries) == n
    assert {d["mailqueue"]["attempt"]["number"] for d in deliveries} == {1}
    assert {d["mailqueue"]["attempt"]["site"] for d in deliveries} == {"mx:127.0.0.1"}
    assert not [d for d in docs if d["eventType"] in ("DeliveryDelay", "Bounce")]


def test_the_same_load_without_shaping_is_throttled_by_the_peer(
    rig: RigFactory, aws: AwsEnv
) -> None:
    """The control: on this load the peer really does answer 421."""
    n = 16
    with smtp_sink(PEER) as peer:
        rigs = [rig(routes=relay_to(peer.port)) for _ in range(3)]
        st = aws.storage()
        for i in range(n):
            st.enqueue(f.envelope(f"u{i}@peer.example"), f.content())
        run_workers(rigs, peer, n, seconds=5)
        assert peer.throttled > 0


def test_a_421_suspends_the_site_and_later_mail_is_not_attempted(
    rig: RigFactory, aws: AwsEnv
) -> None:
    backoff = json.dumps(
        {
            "version": 1,
            "rules": [
                {
                    "id": "rate-limited",
                    "code": 421,
                    "status": "4\\.7\\.28",
                    "action": {"suspend": "10m", "slowdown": 0.5},
                }
            ],
        }
    )
    reader = StreamReader(aws)
    with smtp_sink(final_reply=GMAIL_421) as peer:
        r = rig(
            routes=relay_to(peer.port),
            shaping=True,
            backoff_rules=backoff,
            shaping_rules=shaping(max_connections=5),
        )
        st = aws.storage()
        first = st.enqueue(f.envelope("a@peer.example"), f.content())
        delivery_app.metrics.clear_metrics()
        res = r.poll()
        assert metric("Backoff_suspend") == metric("Backoff_slowdown") == 1
        assert res.failed == 1  # deferred: kept on the queue
        g = st.get_group(MailRef(first.mail_id, "peer.example"))
        last = g.recipients[0].last_result
        assert g.recipients[0].attempts == 1 and last is not None and last.code == 421
        assert g.history[-1].shaping == "rate-limited:suspend+slowdown"
        assert g.history[-1].site == "mx:127.0.0.1"
        connections = peer.connections

        later = st.enqueue(f.envelope("b@peer.example"), f.content())
        delivery_app.metrics.clear_metrics()
        res = r.poll()
        assert metric("GroupsThrottled") == metric("Throttled_suspended") == 1
        assert metric("GroupsAttempted") == 0
        assert res.failed == 1  # re-armed, not deleted
        assert peer.connections == connections  # no SMTP connection at all
        g2 = st.get_group(MailRef(later.mail_id, "peer.example"))
        assert g2.state == GroupState.QUEUED and g2.recipients[0].attempts == 0
        assert g2.history == ()
        wait = (g2.next_attempt_at - g2.arrival).total_seconds()
        assert 590 <= wait <= 610  # what the limiter said: the rest of the 10 minutes
        assert r.visible_triggers() == 0 and r.invisible_triggers() == 2
    # the event log: a DeliveryDelay for the 421 (with site and action), nothing for b
    service(aws).handle(reader.poll())
    _, docs = read_log(aws)
    assert [e for d in docs for e in errors(d)] == []
    delays = [d for d in docs if d["eventType"] == "DeliveryDelay"]
    assert len(delays) == 1
    assert delays[0]["mailqueue"]["attempt"]["site"] == "mx:127.0.0.1"
    assert delays[0]["mailqueue"]["attempt"]["shaping"] == "rate-limited:suspend+slowdown"
    b_events = [d["eventType"] for d in docs if d["mail"]["messageId"] == later.mail_id]
    assert b_events == ["Send"]


def test_a_5xx_known_to_be_temporary_is_deferred_not_bounced(rig: RigFactory, aws: AwsEnv) -> None:
    reply = (
        "550 5.7.1 Our system has detected an unusual rate of unsolicited mail "
        "originating from your IP address."
    )
    with smtp_sink(final_reply=reply) as peer:
        # the packaged rules: this reply is reclassified at Google; the peer plays Google
        rules = json.dumps(
            {
                "version": 1,
                "providers": [{"site": "google", "mx": ["127.0.0.*"]}],
                "default": {"max_connections": 5},
            }
        )
        r = rig(routes=relay_to(peer.port), shaping=True, shaping_rules=rules)
        st = aws.storage()
        q = st.enqueue(f.envelope("a@peer.example"), f.content())
        r.poll()
        g = st.get_group(MailRef(q.mail_id, "peer.example"))
        rc, last = g.recipients[0], g.recipients[0].last_result
        assert rc.state == RecipientState.QUEUED and last is not None and last.status == "4.7.1"
        assert last.code == 550 and "unusual rate" in last.text
        assert g.history[-1].site == "google"
        assert g.history[-1].shaping == "gmail-550-unusual-rate:suspend+slowdown+reclassify"
        assert r.bounce_messages() == []


def test_a_slot_missed_while_connecting_is_booked_again_not_sent_late(
    rig: RigFactory, aws: AwsEnv
) -> None:
    """Issue 40: the lateness of a shaped send is judged just before MAIL FROM, after the
    connection (here a 1.5 s greet pause, past the 1 s tolerance), not only when the
    limiter granted it. The first try sends nothing, is not an attempt and carries its
    miss back (a booking at 0); the next try is not judged again (else a site that always
    greets slowly would never be sent to) and delivers, once."""
    with smtp_sink(Behaviour(greeting_delay=1.5)) as peer:
        r = rig(
            routes=relay_to(peer.port),
            shaping=True,
            backoff_rules=NO_BACKOFF,
            shaping_rules=shaping(rates=[{"messages": 10, "per": "1s"}]),
        )
        assert r.service.settings.shaping_late_tolerance_seconds == 1.0  # the default
        st = aws.storage()
        queued = st.enqueue(f.envelope("a@peer.example"), f.content())
        ref = MailRef(queued.mail_id, "peer.example")
        delivery_app.metrics.clear_metrics()
        res = r.poll()
        assert res.failed == 1  # re-armed, not deleted
        assert metric("Throttled_late") == 1 and metric("GroupsAttempted") == 0
        assert peer.connections == 1 and "MAIL" not in peer.verbs() and peer.messages == []
        g = st.get_group(ref)
        assert g.state == GroupState.QUEUED and g.recipients[0].attempts == 0
        assert g.history == ()
        assert g.reservation is not None and g.reservation.startswith("0.000|0|")
        stop = time.monotonic() + 20
        while not peer.messages and time.monotonic() < stop:
            if not r.poll().received:
                time.sleep(0.2)
        assert len(peer.messages) == 1
        assert peer.verbs().count("MAIL") == 1
        try:
            done: Any = st.get_group(ref)
        except NotFound:  # a delivered solo mail is cleaned up
            done = None
        assert done is None or done.recipients[0].attempts == 1
