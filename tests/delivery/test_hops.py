"""The hop count: a looping mail is bounced 5.4.6 before any connection is made."""

from __future__ import annotations

import json

from mailqueue.core.trace import count_received

from tests.ingress.conftest import make_ingress
from tests.support import events as ev
from tests.support import factories as f
from tests.support.rigs import RigFactory, both_backends, relay_to
from tests.support.smtp_peers import smtp_sink


def _with_hops(n: int) -> bytes:
    trace = b"".join(
        b"Received: from hop%d.example by hop%d.example id x%d;\r\n"
        b" Sat, 21 Nov 2026 06:00:00 +0000\r\n" % (i, i + 1, i)
        for i in range(n)
    )
    return trace + f.content(2048)


@both_backends
def test_51_received_fields_bounce_5_4_6_without_connecting(rig: RigFactory) -> None:
    with smtp_sink() as peer:
        r = rig(routes=relay_to(peer.port))
        q = r.storage().enqueue(f.envelope("a@x.example", "b@x.example"), _with_hops(51))
        res = r.poll()
        assert (res.failed, res.deleted) == (0, 1)
        assert peer.connections == 0 and peer.messages == []
    assert r.states(q.mail_id) == {"a@x.example": "bounced", "b@x.example": "bounced"}
    g = r.group(q.mail_id, "x.example")
    assert {x.last_result.status for x in g.recipients} == {"5.4.6"}
    assert "routing loop" in g.recipients[0].last_result.text
    assert r.bounce_messages() == [{"v": 1, "mail_id": q.mail_id, "group": "x.example"}]


@both_backends
def test_50_received_fields_are_delivered_whole(rig: RigFactory) -> None:
    with smtp_sink() as peer:
        r = rig(routes=relay_to(peer.port))
        body = _with_hops(50)
        q = r.storage().enqueue(f.envelope("a@x.example"), body)
        assert r.poll().failed == 0
        assert len(peer.messages) == 1
        # the octets read to count the hops are sent too: the peer got the whole mail
        assert peer.messages[0].content == body
    assert not r.storage().content_exists(q.mail_id)  # delivered, finished, cleaned up


@both_backends
def test_the_limit_is_a_setting(rig: RigFactory) -> None:
    with smtp_sink() as peer:
        r = rig(routes=relay_to(peer.port), hopcount_limit=3)
        q = r.storage().enqueue(f.envelope("a@x.example"), _with_hops(4))
        r.poll()
        assert peer.connections == 0
    assert r.states(q.mail_id) == {"a@x.example": "bounced"}


def test_a_receiving_domain_routed_back_to_the_queue_is_stopped(rig: RigFactory) -> None:
    """The loop SES would make, with the real ingress and delivery: each pass, the peer
    (standing in for SES's inbound MX, where a receiving domain's MX points) takes the
    mail, adds SES's Received: field, and the ingress receives it again. The hop count
    ends it; without it, it would go round for ever."""
    limit = 8
    with smtp_sink() as peer:
        r = rig(routes=relay_to(peer.port), hopcount_limit=limit)
        route = {"example.com": f"[127.0.0.1]:{peer.port}"}
        ingress = make_ingress(r.aws, routes=json.dumps(route))
        svc, settings = ingress.service, ingress.settings
        first = svc.submit(
            json.dumps(ev.send_body(recipients=[{"address": "support@example.com"}])),
            principal=ev.principal_of(ev.http_send()),
            idempotency_key=None,
        )
        assert first.status == 202
        passes = 0
        while passes <= limit:
            r.poll()
            if len(peer.messages) == passes:  # nothing went out this time: stopped
                break
            passes += 1
            raw = (
                b"Received: from mq.test by inbound-smtp.us-east-1.amazonaws.com"
                b" with SMTP id p%d;\r\n Sat, 21 Nov 2026 06:00:00 +0000\r\n"
                % passes
                + peer.messages[-1].content
            )
            event = ev.ses_receipt(message_id=f"loop-{passes}", recipients=["support@example.com"])
            r.aws.clients.s3.put_object(
                Bucket=settings.inbound_bucket, Key=f"{settings.ses_prefix}loop-{passes}", Body=raw
            )
            assert svc.receive_ses(event).disposition == "CONTINUE"
        assert peer.connections == passes  # the stopping pass made no connection
        last = peer.messages[-1].content
    assert 2 <= passes <= limit
    # every pass adds two fields (SES's and ours): it went round until it had more than limit
    assert count_received(last) <= limit < count_received(last) + 2
    bounced = [r.group(m, "example.com") for m in _mail_ids(r)]
    assert any(
        x.last_result and x.last_result.status == "5.4.6" for g in bounced for x in g.recipients
    )


def _mail_ids(r: object) -> list[str]:
    aws = r.aws  # type: ignore[attr-defined]
    items = aws.clients.dynamodb.scan(TableName=aws.resources.table)["Items"]
    return sorted(
        {
            it["pk"]["S"][2:]
            for it in items
            if it["pk"]["S"].startswith("M#") and it["sk"]["S"].startswith("G#")
        }
    )
