"""Operator actions on one mail: the same conditional transitions as delivery."""

from __future__ import annotations

from datetime import timedelta

import pytest
from mailqueue.core.errors import InvalidInput, NotFound
from mailqueue.core.model import GroupState, MailRef, RecipientState, Result, utcnow
from mailqueue.core.storage import ClaimRefused
from mailqueue.services.admin import Action, Busy, OpContext

from tests.admin.conftest import ACTOR, AnyAdmin
from tests.support.factories import content

CTX = OpContext(actor=ACTOR)


def test_hold_makes_delivery_refuse_and_release_makes_it_deliverable(admin: AnyAdmin) -> None:
    q = admin.enqueue("bob@example.net", "carol@example.net")
    ref = MailRef(q.mail_id, "example.net")
    admin.triggers()  # the enqueue trigger

    res = admin.service.act(q.mail_id, Action.HOLD, CTX)
    assert res.recipients == 2
    assert [g.outcome.value for g in res.groups] == ["applied"]
    g = admin.storage.get_group(ref)
    assert g.state == GroupState.HELD
    assert {r.state for r in g.recipients} == {RecipientState.HELD}
    refused = admin.storage.send_start(ref, utcnow(), lease_seconds=60)
    assert isinstance(refused, ClaimRefused) and refused.reason == "held"
    # the operator's action is recorded for the event writer, and no trigger was posted
    op = admin.op(q.mail_id, "example.net")
    assert op is not None and op["action"] == "hold" and op["actor"] == ACTOR
    assert admin.triggers() == []

    again = admin.service.act(q.mail_id, Action.HOLD, CTX)
    assert [g.outcome.value for g in again.groups] == ["unchanged"]

    res = admin.service.act(q.mail_id, Action.RELEASE, CTX)
    assert res.recipients == 2
    assert admin.state(q.mail_id, "example.net") == GroupState.QUEUED
    # release posts a fresh trigger, and delivery can claim at once
    assert admin.triggers() == [
        {"v": 1, "mail_id": q.mail_id, "group": "example.net"}
    ]
    claim = admin.storage.send_start(ref, utcnow(), lease_seconds=60)
    assert not isinstance(claim, ClaimRefused)
    assert {r.rid for r in claim.unresolved()} == {"r0", "r1"}


def test_hold_refused_while_a_delivery_holds_the_lease_and_nothing_changes(admin: AnyAdmin) -> None:
    q = admin.enqueue("bob@example.net", "dave@example.com")
    net = MailRef(q.mail_id, "example.net")
    claim = admin.storage.send_start(net, utcnow(), lease_seconds=300)
    assert not isinstance(claim, ClaimRefused)
    before = admin.storage.get_group(MailRef(q.mail_id, "example.com"))

    with pytest.raises(Busy) as exc:
        admin.service.act(q.mail_id, Action.HOLD, CTX)
    assert exc.value.groups == ("example.net",)
    # all or nothing: the other group was claimed and given back untouched
    com = admin.storage.get_group(MailRef(q.mail_id, "example.com"))
    assert com.state == GroupState.QUEUED
    assert com.next_attempt_at == before.next_attempt_at
    assert admin.op(q.mail_id, "example.com") is None
    # the delivery goes on unharmed and finishes
    t = admin.storage.send_done(claim, ["r0"], Result(250, "2.0.0", "ok"))
    assert t.released
    # once the lease is released the hold goes through (for what is still pending)
    res = admin.service.act(q.mail_id, Action.HOLD, CTX)
    assert {g.group: g.outcome.value for g in res.groups} == {
        "example.net": "finished",
        "example.com": "applied",
    }


def test_expired_delivery_lease_is_taken_over_by_the_operator(admin: AnyAdmin) -> None:
    past = utcnow() - timedelta(minutes=30)
    q = admin.enqueue("bob@example.net", arrival=past - timedelta(minutes=1))
    ref = MailRef(q.mail_id, "example.net")
    crashed = admin.storage.send_start(ref, past, lease_seconds=60)  # lease ended 29 min ago
    assert not isinstance(crashed, ClaimRefused)
    res = admin.service.act(q.mail_id, Action.DELETE, CTX)
    assert res.recipients == 1
    with pytest.raises(NotFound):  # the whole mail was final: cleaned up at once
        admin.storage.get_mail(q.mail_id)


def test_retry_now_makes_a_delayed_group_deliverable(admin: AnyAdmin) -> None:
    later = utcnow() + timedelta(hours=2)
    q = admin.enqueue("bob@example.net", not_before=later)
    ref = MailRef(q.mail_id, "example.net")
    admin.triggers()
    refused = admin.storage.send_start(ref, utcnow(), lease_seconds=60)
    assert isinstance(refused, ClaimRefused) and refused.reason == "not_due"

    res = admin.service.act(q.mail_id, Action.RETRY, CTX)
    assert res.recipients == 1
    assert admin.storage.get_group(ref).next_attempt_at <= utcnow()
    assert admin.triggers() == [
        {"v": 1, "mail_id": q.mail_id, "group": "example.net"}
    ]
    claim = admin.storage.send_start(ref, utcnow(), lease_seconds=60)
    assert not isinstance(claim, ClaimRefused)
    # retry of a held mail leaves it held (release it first)
    h = admin.enqueue("carol@example.net")
    admin.service.act(h.mail_id, Action.HOLD, CTX)
    r = admin.service.act(h.mail_id, Action.RETRY, CTX)
    assert [g.outcome.value for g in r.groups] == ["unchanged"]
    assert admin.state(h.mail_id, "example.net") == GroupState.HELD


def test_bounce_now_expires_with_a_failure_dsn_and_no_attempt(admin: AnyAdmin) -> None:
    q = admin.enqueue("bob@example.net", "carol@example.net")
    admin.service.act(q.mail_id, Action.HOLD, CTX)  # held mail can be bounced too
    res = admin.service.act(q.mail_id, Action.BOUNCE, CTX)
    assert res.recipients == 2
    g = admin.storage.get_group(MailRef(q.mail_id, "example.net"))
    assert g.state == GroupState.DSN
    for r in g.recipients:
        assert r.state == RecipientState.BOUNCED
        assert r.dsn_pending == "failed"
        assert r.last_result == Result(0, "4.4.7", "message expired by operator")
        assert r.attempts == 0  # an operator's verdict is not a delivery attempt
    assert g.history == ()
    assert admin.bounce_handoffs() == [{"v": 1, "mail_id": q.mail_id, "group": "example.net"}]
    op = admin.op(q.mail_id, "example.net")
    assert op is not None and op["action"] == "bounce"


def test_bounce_of_null_sender_mail_requests_no_dsn(admin: AnyAdmin) -> None:
    q = admin.enqueue("bob@example.net", sender="")
    admin.service.act(q.mail_id, Action.BOUNCE, CTX)
    with pytest.raises(NotFound):  # final, no DSN due: cleaned at once
        admin.storage.get_mail(q.mail_id)
    assert admin.bounce_handoffs() == []


def test_delete_keeps_final_recipients_and_cleans_up_when_all_final(admin: AnyAdmin) -> None:
    q = admin.enqueue("bob@example.net", "dave@example.com")
    net = MailRef(q.mail_id, "example.net")
    claim = admin.storage.send_start(net, utcnow(), lease_seconds=60)
    assert not isinstance(claim, ClaimRefused)
    admin.storage.send_done(claim, ["r0"], Result(250, "2.0.0", "ok"))

    res = admin.service.act(q.mail_id, Action.DELETE, CTX, group="example.com")
    assert {g.group: g.outcome.value for g in res.groups} == {"example.com": "applied"}
    with pytest.raises(NotFound):
        admin.storage.get_mail(q.mail_id)
    assert not admin.storage.content_exists(q.mail_id)


def test_delete_leaves_pending_dsn_alone(admin: AnyAdmin) -> None:
    q = admin.enqueue("bob@example.net", "dave@example.com")
    admin.service.act(q.mail_id, Action.BOUNCE, CTX, group="example.net")
    admin.service.act(q.mail_id, Action.DELETE, CTX)
    _, groups = admin.storage.get_mail(q.mail_id)
    by_key = {g.key: g for g in groups}
    assert by_key["example.net"].state == GroupState.DSN  # its DSN is still owed
    assert by_key["example.net"].recipients[0].state == RecipientState.BOUNCED
    assert by_key["example.com"].recipients[0].state == RecipientState.DELETED


def test_unknown_and_malformed_ids(admin: AnyAdmin) -> None:
    with pytest.raises(NotFound):
        admin.service.act("01KAAAAAAAAAAAAAAAAAAAAAAA", Action.HOLD, CTX)
    with pytest.raises(InvalidInput) as exc:
        admin.service.act("not-an-id", Action.HOLD, CTX)
    assert exc.value.field == "mail_id"
    q = admin.enqueue("bob@example.net")
    with pytest.raises(NotFound):
        admin.service.act(q.mail_id, Action.HOLD, CTX, group="example.org")
    assert admin.state(q.mail_id, "example.net") == GroupState.QUEUED


def test_inspect_shows_envelope_state_history_and_headers_body_on_request(admin: AnyAdmin) -> None:
    q = admin.enqueue("bob@example.net", body=content(600, subject="Quarterly report"))
    ref = MailRef(q.mail_id, "example.net")
    claim = admin.storage.send_start(ref, utcnow(), lease_seconds=60)
    assert not isinstance(claim, ClaimRefused)
    admin.storage.reschedule(
        claim, {"r0": Result(451, "4.7.1", "greylisted")}, utcnow() + timedelta(minutes=5)
    )
    doc = admin.service.inspect(q.mail_id)
    assert doc["sender"] == "alice@example.org"
    assert doc["recipient_count"] == 1
    (g,) = doc["groups"]
    assert g["state"] == "queued"
    assert g["recipients"][0]["attempts"] == 1
    assert g["recipients"][0]["last_result"]["status"] == "4.7.1"
    assert g["history"][0]["result"]["text"] == "greylisted"
    assert ["Subject", "Quarterly report"] in doc["headers"]
    assert "body" not in doc
    full = admin.service.inspect(q.mail_id, body=True)
    assert full["body"].startswith("The quick brown fox")
    assert full["body_truncated"] is False
    small = admin.with_settings(body_max_bytes=20).service.inspect(q.mail_id, body=True)
    assert small["body"] == "The quick brown fox "
    assert small["body_truncated"] is True
