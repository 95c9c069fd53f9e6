"""Deadline hand-back, relay credentials from Secrets Manager, delay warnings end to end."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from mailqueue.compose.aws import delivery_service
from mailqueue.core.model import GroupState, MailRef
from mailqueue.outbound.secrets import powertools_credentials
from mailqueue.services.bounce import BounceService, BounceSettings
from mailqueue.services.delivery import DeliverySettings
from mailqueue_local.runtime import LocalContext, SqsPoller

from functions.delivery import app as delivery_app
from tests.crash.harness import FakeClock
from tests.support import factories as f
from tests.support.aws import AwsEnv
from tests.support.rigs import RigFactory, both_backends, relay_to
from tests.support.smtp_peers import Behaviour, smtp_sink


@both_backends
def test_a_group_that_cannot_finish_before_the_deadline_is_handed_back(rig: RigFactory) -> None:
    with smtp_sink() as peer:
        r = rig(routes=relay_to(peer.port), min_time_left_seconds=30)
        q = r.storage().enqueue(f.envelope("a@x.example"), f.content())
        r.poller.timeout_seconds = 20  # less than the 30 s the service wants left
        res = r.poll()
        assert res.failed == 1 and peer.messages == []
    g = r.group(q.mail_id, "x.example")
    assert g.state == GroupState.QUEUED and g.recipients[0].attempts == 0
    assert r.visible_triggers() == 1  # handed back: visible again at once


def test_relay_credentials_come_from_secrets_manager(
    aws: AwsEnv, monkeypatch: pytest.MonkeyPatch
) -> None:  # AWS only: the credentials are in Secrets Manager
    monkeypatch.setenv("AWS_ENDPOINT_URL", aws.endpoint)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    from tests.support.aws import session

    session().client("secretsmanager", endpoint_url=aws.endpoint).create_secret(
        Name="mailqueue/relay", SecretString=json.dumps({"username": "mq", "password": "s3cret"})
    )
    behaviour = Behaviour(auth_users={"mq": "s3cret"}, auth_require_tls=False)
    with smtp_sink(behaviour) as peer:
        routes = {
            "default": {
                "next_hop": f"[127.0.0.1]:{peer.port}",
                "tls": "opportunistic",
                "credentials": "secretsmanager:mailqueue/relay",
                "allow_plaintext_auth": True,
            }
        }
        svc = delivery_service(
            DeliverySettings(hostname="mq.test", routes=json.dumps(routes)),
            aws.storage(),
            credentials=powertools_credentials,
        )
        st = aws.storage()
        q = st.enqueue(f.envelope("a@x.example"), f.content())
        poller = SqsPoller(
            aws.clients.sqs,
            aws.resources.delivery_queue_url,
            lambda e, c: delivery_app.handle(e, c, svc),
            function_name="delivery",
        )
        assert poller.poll_once().failed == 0
        assert [m.auth_login for m in peer.messages] == ["mq"]
    assert not st.content_exists(q.mail_id)


@both_backends
def test_one_delay_warning_after_four_hours(rig: RigFactory) -> None:
    clock = FakeClock()
    later = "451 4.2.0 mailbox busy"
    with smtp_sink(Behaviour(rcpt_replies={"slow@x.example": later})) as peer:
        r = rig(routes=relay_to(peer.port), clock=clock)
        st = r.storage()
        bsvc = BounceService(BounceSettings(hostname="mq.test"), st, clock=clock)
        deliver = r.poller
        bounce = r.bounce_poller(bsvc)
        q = st.enqueue(f.envelope("slow@x.example"), f.content())
        ref = MailRef(q.mail_id, "x.example")
        for hours in (0, 3, 2, 2):  # attempts at 0 h, 3 h, 5 h, 7 h
            clock.advance(timedelta(hours=hours))
            if hours:
                r.repost([ref])  # the trigger comes back (visibility elapsed)
            deliver.poll_once()
            bounce.poll_once()
            deliver.poll_once()
        dsns = [m for m in peer.messages if m.mail_from in ("", "<>")]
        assert len(dsns) == 1  # exactly one warning, not one per attempt
        text = dsns[0].content.decode()
        assert "Action: delayed" in text and "Will-Retry-Until:" in text
        assert "Status: 4.2.0" in text
    g = st.get_group(ref)
    assert g.recipients[0].delay_warned and g.recipients[0].state.value == "queued"
    assert g.recipients[0].attempts == 4
    assert LocalContext("x").get_remaining_time_in_millis() > 0


def test_the_invocations_metrics_are_the_counts_that_happened(rig: RigFactory) -> None:
    """One EMF document per invocation, with GroupsAttempted and the non-zero counts
    only: a zero adds nothing to a Sum, and eight declarations were most of the
    delivery log's bytes."""
    with smtp_sink(Behaviour(rcpt_replies={"no@x.example": "550 5.1.1 no such user"})) as peer:
        r = rig(routes=relay_to(peer.port))
        st = r.storage()
        st.enqueue(f.envelope("a@x.example"), f.content())
        st.enqueue(f.envelope("no@x.example"), f.content())
        delivery_app.metrics.clear_metrics()
        assert r.poll().received == 2
        doc = delivery_app.metrics.serialize_metric_set()
        delivery_app.metrics.clear_metrics()
    names = [m["Name"] for m in doc["_aws"]["CloudWatchMetrics"][0]["Metrics"]]
    assert sorted(names) == [
        "GroupsAttempted", "RecipientsBounced", "RecipientsDelivered", "Suppressed"
    ]  # fmt: skip
    assert doc["GroupsAttempted"] == [2.0]
    assert doc["RecipientsDelivered"] == doc["RecipientsBounced"] == doc["Suppressed"] == [1.0]
    # an invocation where nothing was attempted (an unreadable trigger) still publishes
    unreadable = {
        "messageId": "m1",
        "receiptHandle": "h1",
        "body": "not json",
        "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:us-east-1:1:q",
    }
    delivery_app.handle({"Records": [unreadable]}, LocalContext("delivery"), r.service)
    doc = delivery_app.metrics.serialize_metric_set()
    delivery_app.metrics.clear_metrics()
    assert doc["GroupsAttempted"] == [0.0] and "RecipientsDelivered" not in doc
