"""Permanent failure → bounce function → DSN delivered to the sender's sink → cleanup."""

from __future__ import annotations

import email
import email.policy
import json

import pytest
from mailqueue.core.model import Notify
from mailqueue.services.bounce import BounceService, BounceSettings

from tests.support import factories as f
from tests.support.rigs import BACKENDS, RigFactory, relay_to
from tests.support.smtp_peers import Behaviour, smtp_sink

# the same bodies on AwsStorage + SQS (the real bounce handler) and on FsStorage with the
# in-process queues
pytestmark = pytest.mark.parametrize("rig", BACKENDS, indirect=True)


def test_permanent_failure_reaches_the_sender_as_a_dsn_and_is_cleaned(rig: RigFactory) -> None:
    behaviour = Behaviour(
        rcpt_replies={"bad@x.example": "550 5.1.1 no such user", "worse@x.example": "550 5.1.1 no"}
    )
    with smtp_sink(behaviour) as peer:
        r = rig(routes=relay_to(peer.port))
        st = r.storage()
        q = st.enqueue(f.envelope("bad@x.example", "worse@x.example", "ok@x.example"), f.content())
        r.poll()  # delivery: ok delivered, two bounced
        bsvc = BounceService(BounceSettings(hostname="mq.test"), st)
        b = r.bounce_poller(bsvc).poll_once()
        assert (b.received, b.failed) == (1, 0)
        assert st.content_exists(q.mail_id) is False  # released after the DSN was queued
        r.poll()  # delivery of the DSN itself
        dsns = [m for m in peer.messages if m.mail_from in ("", "<>")]
        assert len(dsns) == 1  # one DSN for both failed recipients
        dsn = dsns[0]
        assert dsn.rcpt_tos == ["alice@example.org"]
        msg = email.message_from_bytes(dsn.content, policy=email.policy.default)
        assert msg.get_content_type() == "multipart/report"
        assert msg.get_param("report-type") == "delivery-status"
        assert msg["Auto-Submitted"] == "auto-replied"
        assert msg["In-Reply-To"] == "<orig-1@example.org>"
        status = dsn.content.decode()
        assert "Final-Recipient: rfc822; bad@x.example" in status
        assert "Final-Recipient: rfc822; worse@x.example" in status
        assert (
            "ok@x.example"
            not in status.split("message/delivery-status", 1)[1].split("text/rfc822-headers")[0]
        )
        assert "Status: 5.1.1" in status and "Action: failed" in status
    # nothing left anywhere: original and DSN both finished and cleaned
    assert st.list_queue().items == ()
    assert r.stored_contents() == 0


def test_retried_bounce_batch_sends_one_dsn(rig: RigFactory) -> None:
    with smtp_sink(Behaviour(rcpt_replies={"bad@x.example": "550 5.1.1 no"})) as peer:
        r = rig(routes=relay_to(peer.port))
        st = r.storage()
        q = st.enqueue(f.envelope("bad@x.example", "later@y.example"), f.content())
        r.poll()
        bsvc = BounceService(BounceSettings(hostname="mq.test"), st)
        # the same mail handled twice (a redelivered bounce message)
        bsvc.handle_mail(q.mail_id)
        bsvc.handle_mail(q.mail_id)
        r.poll()
        r.poll()
        assert len([m for m in peer.messages if m.mail_from in ("", "<>")]) == 1


def test_null_sender_and_notify_never_get_no_dsn(rig: RigFactory) -> None:
    with smtp_sink(Behaviour(rcpt_replies={"bad@x.example": "550 5.1.1 no"})) as peer:
        r = rig(routes=relay_to(peer.port))
        st = r.storage()
        q1 = st.enqueue(f.envelope("bad@x.example", sender=""), f.content())
        q2 = st.enqueue(f.envelope("bad@x.example", notify=(Notify.NEVER,)), f.content())
        r.poll()
        assert r.bounce_messages() == []
        assert not st.content_exists(q1.mail_id) and not st.content_exists(q2.mail_id)
        assert [m for m in peer.messages if m.mail_from in ("", "<>")] == []


def test_success_notice_for_notify_success(rig: RigFactory) -> None:
    with smtp_sink() as peer:
        r = rig(routes=relay_to(peer.port))
        st = r.storage()
        q = st.enqueue(f.envelope("a@x.example", notify=(Notify.SUCCESS,)), f.content())
        r.poll()
        assert st.content_exists(q.mail_id)  # the success DSN still needs the headers
        bsvc = BounceService(BounceSettings(hostname="mq.test"), st)
        r.bounce_poller(bsvc).poll_once()
        r.poll()
        dsns = [m for m in peer.messages if m.mail_from in ("", "<>")]
        assert len(dsns) == 1 and "Action: delivered" in dsns[0].content.decode()
        assert not st.content_exists(q.mail_id)
        body = json.dumps([m.rcpt_tos for m in peer.messages])
        assert "a@x.example" in body
