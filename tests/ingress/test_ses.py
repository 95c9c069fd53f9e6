"""SES receipt: the raw mail from S3, the envelope from the receipt, no open relay."""

from __future__ import annotations

from typing import Any

import pytest
from mailqueue.core.errors import NotFound
from mailqueue.core.model import mail_id_for_key

from tests.ingress.conftest import Ingress, deliver_all, stored_once
from tests.support import events as ev
from tests.support import factories as f

RAW = (
    b"Return-Path: <alice@sender.example.org>\r\n"
    b"From: Alice <alice@sender.example.org>\r\n"
    b"To: Support <support@example.com>\r\n"
    b"Cc: Sales <sales@example.com>\r\n"
    b"Subject: Question about order 4711\r\n"
    b"Message-ID: <q-4711@sender.example.org>\r\n\r\n"
    b"Where is my parcel?\r\n"
)


def _store_raw(ingress: Ingress, event: dict[str, Any], raw: bytes = RAW) -> str:
    key = f"{ingress.settings.ses_prefix}{ev.ses_message_id(event)}"
    ingress.aws.clients.s3.put_object(Bucket=ingress.settings.inbound_bucket, Key=key, Body=raw)
    return key


def _mail_id(ingress: Ingress, event: dict[str, Any]) -> str:
    key = f"ses\x1f{ev.ses_message_id(event)}"
    return str(mail_id_for_key(ingress.settings.storage.idempotency_scope, key))


def _raw_keys(ingress: Ingress) -> set[str]:
    return {k for k in ingress.trace().s3 if k.startswith(ingress.settings.ses_prefix)}


def test_sample_receipt_is_queued_from_the_stored_raw_mail(ingress: Ingress) -> None:
    event = ev.load_event("ses_receipt")
    _store_raw(ingress, event)
    before = ingress.trace()
    assert ingress(event) == {"disposition": "CONTINUE"}
    mail_id = _mail_id(ingress, event)
    s3, ddb, sqs = ingress.trace().new_since(before)
    content = stored_once(ingress.aws, mail_id, s3)
    assert ddb == {(f"M#{mail_id}", "M"), (f"M#{mail_id}", "G#example.com")}
    assert sqs == 1
    mail, groups = ingress.aws.storage().get_mail(mail_id)
    assert mail is not None and mail["sender"] == "alice@sender.example.org"
    assert [r.address for r in groups[0].recipients] == ["support@example.com"]
    assert content.endswith(RAW) and content[: -len(RAW)].startswith(b"Received: from ")
    assert _raw_keys(ingress) == set()  # stored once: the raw object is gone
    assert ingress.rejects() == []


def test_the_envelope_comes_from_the_receipt_not_the_headers(ingress: Ingress) -> None:
    # the Cc header names sales@, but this rule matched only orders@ (bcc-like)
    event = ev.ses_receipt(recipients=["orders@example.com"], source="")
    _store_raw(ingress, event)
    assert ingress(event)["disposition"] == "CONTINUE"
    mail, groups = ingress.aws.storage().get_mail(_mail_id(ingress, event))
    assert mail is not None and mail["sender"] == ""  # a bounce arriving: null sender kept
    assert [r.address for g in groups for r in g.recipients] == ["orders@example.com"]


def test_recipients_outside_the_receiving_domains_are_dropped(ingress: Ingress) -> None:
    event = ev.ses_receipt(
        recipients=["Support@EXAMPLE.com", "victim@elsewhere.example", "x@sub.example.com"]
    )
    _store_raw(ingress, event)
    assert ingress(event)["disposition"] == "CONTINUE"
    _, groups = ingress.aws.storage().get_mail(_mail_id(ingress, event))
    assert [r.address for g in groups for r in g.recipients] == ["Support@EXAMPLE.com"]
    rejects = ingress.rejects()
    # as SES: `mail.destination` is every envelope recipient; the refused one is ours
    assert [
        (r["mailqueue"]["reject"]["recipient"], r["mailqueue"]["reject"]["reason"]) for r in rejects
    ] == [
        ("victim@elsewhere.example", "relay_denied"),
        ("x@sub.example.com", "relay_denied"),
    ]


def test_no_receiving_domain_left_means_nothing_is_queued(ingress: Ingress) -> None:
    event = ev.ses_receipt(recipients=["a@relay.example", "b@relay.example"])
    _store_raw(ingress, event)
    before = ingress.trace()
    assert ingress(event) == {"disposition": "STOP_RULE"}
    s3, ddb, sqs = ingress.trace().new_since(before)
    assert (s3, ddb, sqs) == (set(), set(), 0)
    assert _raw_keys(ingress) == set()
    assert [r["mailqueue"]["reject"]["reason"] for r in ingress.rejects()] == ["relay_denied"] * 2


def test_without_receiving_domains_nothing_is_accepted(ingress_factory: Any) -> None:
    closed: Ingress = ingress_factory(receiving_domains=())
    event = ev.load_event("ses_receipt")
    _store_raw(closed, event)
    assert closed(event) == {"disposition": "STOP_RULE"}


@pytest.mark.parametrize(
    ("verdict", "setting"), [("spam", "spam_verdict"), ("virus", "virus_verdict")]
)
def test_failed_verdicts_are_rejected_by_default(
    ingress_factory: Any, verdict: str, setting: str
) -> None:
    strict: Ingress = ingress_factory()
    event = ev.ses_receipt(spam="FAIL") if verdict == "spam" else ev.ses_receipt(virus="FAIL")
    _store_raw(strict, event)
    before = strict.trace()
    assert strict(event) == {"disposition": "STOP_RULE"}
    assert strict.trace().new_since(before) == (set(), set(), 0)
    assert [r["mailqueue"]["reject"]["reason"] for r in strict.rejects()] == [verdict]
    # SES's own value where SES has one: "Bad content" is its Reject reason for a virus
    ses_reason = "Bad content" if verdict == "virus" else "mailqueue:spam"
    assert [r["reject"]["reason"] for r in strict.rejects()] == [ses_reason]
    assert _raw_keys(strict) == set()
    lenient = strict.with_settings(**{setting: "accept"})
    _store_raw(lenient, event)
    assert lenient(event) == {"disposition": "CONTINUE"}


def test_gray_verdicts_are_accepted(ingress: Ingress) -> None:
    event = ev.ses_receipt(spam="GRAY", virus="PROCESSING_FAILED")
    _store_raw(ingress, event)
    assert ingress(event) == {"disposition": "CONTINUE"}


def test_an_ses_retry_stores_nothing_twice(ingress_factory: Any) -> None:
    for delete_raw in (True, False):
        ing: Ingress = ingress_factory(ses_delete_raw=delete_raw)
        event = ev.ses_receipt(message_id=f"retry-{delete_raw}")
        _store_raw(ing, event)
        before = ing.trace()
        assert ing(event) == {"disposition": "CONTINUE"}
        after_first = ing.trace()
        with ing.aws.counter.measure() as calls:
            assert ing(event) == {"disposition": "CONTINUE"}
        s3, ddb, _ = ing.trace().new_since(before)
        mail_id = _mail_id(ing, event)
        stored_once(ing.aws, mail_id, s3)
        assert len(ddb) == 2
        assert "dynamodb:BatchWriteItem" not in calls.calls
        assert ing.trace().new_since(after_first)[:2] == (set(), set())
        assert bool(_raw_keys(ing)) is not delete_raw


def test_an_ses_retry_after_delivery_is_recognised(ingress: Ingress) -> None:
    event = ev.load_event("ses_receipt")
    _store_raw(ingress, event)
    assert ingress(event) == {"disposition": "CONTINUE"}
    deliver_all(ingress.aws, _mail_id(ingress, event))
    before = ingress.trace()
    assert ingress(event) == {"disposition": "CONTINUE"}  # raw gone, tombstone found
    assert ingress.trace().new_since(before) == (set(), set(), 0)


def test_a_missing_raw_mail_that_was_never_queued_raises(ingress: Ingress) -> None:
    """An infrastructure fault, not bad input: Lambda retries, then its DLQ keeps it."""
    with pytest.raises(NotFound):
        ingress(ev.ses_receipt(message_id="never-stored"))


def test_request_response_invocations_get_the_disposition(ingress: Ingress) -> None:
    ok = ev.ses_receipt(message_id="rr-ok", invocation_type="RequestResponse")
    _store_raw(ingress, ok)
    assert ingress(ok) == {"disposition": "CONTINUE"}
    spam = ev.ses_receipt(message_id="rr-spam", spam="FAIL", invocation_type="RequestResponse")
    _store_raw(ingress, spam)
    assert ingress(spam) == {"disposition": "STOP_RULE"}


def test_oversized_raw_mail_is_refused(ingress_factory: Any) -> None:
    small: Ingress = ingress_factory(max_size=2000)
    event = ev.load_event("ses_receipt")
    _store_raw(small, event, f.content(2001))
    before = small.trace()
    assert small(event) == {"disposition": "STOP_RULE"}
    assert small.trace().new_since(before) == (set(), set(), 0)
    assert [r["mailqueue"]["reject"]["reason"] for r in small.rejects()] == ["too_large"]


def test_raw_mail_failing_rfc5322_checks_is_refused(ingress: Ingress) -> None:
    event = ev.load_event("ses_receipt")
    _store_raw(ingress, event, b"Subject: x\r\n\r\n" + b"y" * 1200 + b"\r\n")
    before = ingress.trace()
    assert ingress(event) == {"disposition": "STOP_RULE"}
    assert ingress.trace().new_since(before) == (set(), set(), 0)
    assert [r["mailqueue"]["reject"]["reason"] for r in ingress.rejects()] == ["line_too_long"]


def test_invalid_envelope_sender_is_refused(ingress: Ingress) -> None:
    event = ev.ses_receipt(source="not an address")
    _store_raw(ingress, event)
    assert ingress(event) == {"disposition": "STOP_RULE"}
    assert [r["mailqueue"]["reject"]["reason"] for r in ingress.rejects()] == ["invalid_address"]


def test_a_malformed_record_stores_nothing(ingress: Ingress) -> None:
    event = ev.load_event("ses_receipt", Records__0__ses__mail__messageId="../content/x")
    before = ingress.trace()
    assert ingress(event) == {"disposition": "STOP_RULE"}
    assert ingress.trace().new_since(before) == (set(), set(), 0)
