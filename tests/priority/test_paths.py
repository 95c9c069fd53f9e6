"""Every path that posts or re-arms a trigger uses the group's own queue: enqueue, the
delivery handler's re-arms (a receipt handle is valid only on the queue it came from),
the sweeper's lost-trigger and lease recovery, an operator's retry, and the DSN of a
bulk mail. Real handlers on moto, a real aiosmtpd peer."""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import timedelta

from mailqueue.backends.aws.backend import AwsStorage
from mailqueue.compose.aws import sweeper as aws_sweeper
from mailqueue.core.model import PRIORITY_TAG, Claim, Envelope, MailRef, Priority, utcnow
from mailqueue.services.bounce import BounceService, BounceSettings
from mailqueue.services.sweeper import SweeperSettings
from mailqueue_local.runtime import SqsPoller

from functions.delivery import app as delivery_app
from tests.crash.harness import FakeClock
from tests.priority import depths, drain
from tests.support import factories as f
from tests.support.aws import AwsEnv
from tests.support.rigs import DeliveryRig, RigFactory, relay_to
from tests.support.smtp_peers import Behaviour, smtp_sink


def bulk(env: Envelope) -> Envelope:
    """The envelope as ingress tags a bulk submission."""
    return replace(env, tags=((PRIORITY_TAG, Priority.BULK.value),))


def bulk_poller(r: DeliveryRig) -> SqsPoller:
    """The bulk queue's event source: the same handler, its own poller."""
    return SqsPoller(
        r.aws.clients.sqs,
        r.aws.resources.bulk_delivery_queue_url,
        lambda event, ctx: delivery_app.handle(event, ctx, r.service),
        function_name="delivery",
        timeout_seconds=60,
    )


def test_bulk_mail_is_delivered_from_the_bulk_queue_only(rig: RigFactory) -> None:
    with smtp_sink() as peer:
        r = rig(routes=relay_to(peer.port))
        st = r.aws.storage()
        q = st.enqueue(bulk(f.envelope("b@x.example")), f.content())
        assert depths(r.aws) == {"transactional": 0, "bulk": 1}
        assert r.poll().received == 0  # the transactional path never sees it
        got = bulk_poller(r).poll_once()
        assert (got.received, got.failed, got.error) == (1, 0, None)
        assert [m.rcpt_tos for m in peer.messages] == [["b@x.example"]]
        assert st.list_queue().items == ()
        assert not st.content_exists(q.mail_id)
    assert depths(r.aws) == {"transactional": 0, "bulk": 0}


def test_a_deferred_bulk_mail_is_re_armed_on_the_bulk_queue(rig: RigFactory) -> None:
    """The re-arm changes the visibility of the received message (on the bulk queue): one
    trigger stays. A re-arm against the other queue fails and posts a second one."""
    with smtp_sink(Behaviour(rcpt_replies={"b@x.example": "451 4.3.0 later"})) as peer:
        r = rig(routes=relay_to(peer.port))
        q = r.aws.storage().enqueue(bulk(f.envelope("b@x.example")), f.content())
        got = bulk_poller(r).poll_once()
        assert (got.received, got.failed) == (1, 1)  # kept on the queue: re-armed
        assert r.states(q.mail_id) == {"b@x.example": "queued"}
        assert r.service.storage.s.bulk_delivery_queue_url
        assert depths(r.aws) == {"transactional": 0, "bulk": 1}


def test_an_early_bulk_receipt_waits_on_its_own_queue(rig: RigFactory) -> None:
    """A trigger that arrives before the group is due is made invisible for the wait on
    the queue it came from, then comes back and is delivered."""
    with smtp_sink() as peer:
        r = rig(routes=relay_to(peer.port))
        st = r.aws.storage(max_delay_seconds=0)  # the trigger is visible at once
        st.enqueue(
            bulk(f.envelope("b@x.example")), f.content(), not_before=utcnow() + timedelta(seconds=2)
        )
        poller = bulk_poller(r)
        first = poller.poll_once()
        assert (first.received, first.failed, first.error) == (1, 1, None)  # not due: kept
        assert peer.messages == []
        deadline = time.monotonic() + 20
        while not peer.messages and time.monotonic() < deadline:
            poller.poll_once()
            time.sleep(0.2)
        assert [m.rcpt_tos for m in peer.messages] == [["b@x.example"]]
    assert depths(r.aws) == {"transactional": 0, "bulk": 0}


def test_the_sweeper_reposts_lost_triggers_and_recovered_leases_to_their_queues(
    aws: AwsEnv,
) -> None:
    clock = FakeClock()
    st = AwsStorage(aws.settings, aws.clients, clock=clock)
    sweeper = aws_sweeper(SweeperSettings(), st, clock=clock)
    tx = st.enqueue(f.envelope("t@x.example"), f.content())
    bk = st.enqueue(bulk(f.envelope("b@x.example")), f.content())
    held = st.enqueue(bulk(f.envelope("c@y.example")), f.content())
    drain(aws, aws.resources.delivery_queue_url)  # every trigger lost
    drain(aws, aws.resources.bulk_delivery_queue_url)
    claim = st.send_start(MailRef(held.mail_id, "y.example"), clock(), lease_seconds=60)
    assert isinstance(claim, Claim)  # ... and its holder dies
    clock.advance(timedelta(seconds=1200))  # past the 15 min grace
    stats = sweeper.run()
    # the recovered group is overdue too, so the lost-trigger pass may post it again
    # (a duplicate trigger is harmless: claims are conditional)
    assert stats.leases_recovered == 1 and stats.triggers_reposted >= 2
    assert drain(aws, aws.resources.delivery_queue_url) == [
        {"v": 1, "mail_id": tx.mail_id, "group": "x.example"}
    ]
    assert {m["mail_id"] for m in drain(aws, aws.resources.bulk_delivery_queue_url)} == {
        bk.mail_id,
        held.mail_id,
    }


def test_an_operator_retry_posts_to_the_group_queue(aws: AwsEnv) -> None:
    st = aws.storage()
    q = st.enqueue(bulk(f.envelope("b@x.example")), f.content())
    drain(aws, aws.resources.bulk_delivery_queue_url)
    claim = st.admin_claim(MailRef(q.mail_id, "x.example"), utcnow())
    assert isinstance(claim, Claim) and claim.group.priority == Priority.BULK
    st.mark(claim, {r.rid: r for r in claim.unresolved()}, next_attempt_at=utcnow())
    assert depths(aws) == {"transactional": 0, "bulk": 1}


def test_the_dsn_of_a_bulk_mail_takes_the_bulk_path(rig: RigFactory) -> None:
    """A campaign's bounces must not crowd the transactional queue either."""
    with smtp_sink(Behaviour(rcpt_replies={"b@x.example": "550 5.1.1 no such user"})) as peer:
        r = rig(routes=relay_to(peer.port))
        st = r.aws.storage()
        st.enqueue(bulk(f.envelope("b@x.example")), f.content())
        assert bulk_poller(r).poll_once().failed == 0  # bounced
        bsvc = BounceService(BounceSettings(hostname="mq.test"), st)
        assert r.bounce_poller(bsvc).poll_once().failed == 0  # the DSN is queued
        assert depths(r.aws) == {"transactional": 0, "bulk": 1}
        assert r.poll().received == 0
        assert bulk_poller(r).poll_once().failed == 0
        dsns = [m for m in peer.messages if m.mail_from in ("", "<>")]
        assert [m.rcpt_tos for m in dsns] == [["alice@example.org"]]
