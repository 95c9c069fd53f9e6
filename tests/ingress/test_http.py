"""POST /v1/messages through the handler, against moto in server mode."""

from __future__ import annotations

import base64
import json
from datetime import timedelta
from typing import Any

import pytest
from mailqueue.backends.aws.clients import make_clients
from mailqueue.core.model import utcnow

from functions.ingress import app
from tests.ingress.conftest import DSN_PRINCIPAL, Ingress, deliver_all, stored_once
from tests.support import events as ev
from tests.support import factories as f
from tests.support.aws import AwsEnv, session


def _content_of(event: dict[str, Any]) -> bytes:
    return base64.b64decode(json.loads(event["body"])["content"])


def test_sample_request_is_queued_durably(ingress: Ingress) -> None:
    event = ev.load_event("http_send")
    before = ingress.trace()
    status, body, _ = ingress.http(event)
    assert status == 202
    assert set(body) == {"mail_id", "recipients", "groups"}
    assert body["recipients"] == [
        {"id": "r0", "address": "customer@example.net"},
        {"id": "r1", "address": "archive@example.com"},
    ]
    assert body["groups"] == ["example.net", "example.com"]
    s3, ddb, sqs = ingress.trace().new_since(before)
    mail_id = body["mail_id"]
    stored = stored_once(ingress.aws, mail_id, s3)
    assert ddb == {
        (f"M#{mail_id}", "M"),
        (f"M#{mail_id}", "G#example.net"),
        (f"M#{mail_id}", "G#example.com"),
    }
    assert sqs == 2
    sent = _content_of(event)  # behind the one Received: field ingress prepends
    assert stored.endswith(sent) and stored[: -len(sent)].startswith(b"Received: from http-api ")
    mail, groups = ingress.aws.storage().get_mail(mail_id)
    assert mail is not None
    assert mail["sender"] == "orders@shop.example.org"
    assert mail["ret"] == "HDRS" and mail["envid"] == "order-4711"
    archive = next(g for g in groups if g.key == "example.com").recipients[0]
    assert [n.value for n in archive.notify] == ["FAILURE", "DELAY"]
    assert archive.orcpt == "rfc822;archive@example.com"
    assert ingress.rejects() == []


def test_retry_with_the_same_key_stores_one_mail(ingress: Ingress) -> None:
    event = ev.http_send(key="retry-1")
    before = ingress.trace()
    s1, first, h1 = ingress.http(event)
    after_first = ingress.trace()
    with ingress.aws.counter.measure() as calls:
        s2, second, h2 = ingress.http(ev.http_send(key="retry-1"))
    assert (s1, s2) == (202, 202)
    assert second == first
    assert "Idempotent-Replayed" not in h1 and h2["Idempotent-Replayed"] == "true"
    s3, ddb, _ = ingress.trace().new_since(before)
    stored_once(ingress.aws, first["mail_id"], s3)  # one copy of the content
    assert len(ddb) == 3  # one set of items: mail + two groups
    # the retry writes no state and no content (the conditional put refuses); triggers
    # are re-posted by the core only for never-attempted groups, at most once per retry
    assert calls.calls["dynamodb:BatchWriteItem"] == 0
    assert calls.calls["sqs:SendMessageBatch"] <= 1
    _, _, retry_sqs = ingress.trace().new_since(after_first)
    assert retry_sqs <= len(first["groups"])


def test_a_retry_after_the_mail_was_delivered_is_still_the_first_answer(
    ingress: Ingress,
) -> None:
    status, first, _ = ingress.http(ev.http_send(key="late"))
    assert status == 202
    deliver_all(ingress.aws, first["mail_id"])
    before = ingress.trace()
    status, again, headers = ingress.http(ev.http_send(key="late"))
    assert (status, again, headers["Idempotent-Replayed"]) == (202, first, "true")
    assert ingress.trace().new_since(before) == (set(), set(), 0)
    status, body, _ = ingress.http(ev.http_send(key="late", recipients=["x@other.example"]))
    assert (status, body["error"]) == (409, "idempotency_conflict")


def test_a_key_reused_with_other_content_is_a_conflict(ingress: Ingress) -> None:
    assert ingress.http(ev.http_send(key="k1"))[0] == 202
    before = ingress.trace()
    status, body, _ = ingress.http(ev.http_send(key="k1", content=ev.b64(f.content(300))))
    assert status == 409
    assert body["error"] == "idempotency_conflict"
    assert body["field"] == "Idempotency-Key"
    assert ingress.trace().new_since(before) == (set(), set(), 0)
    assert [r["mailqueue"]["reject"]["reason"] for r in ingress.rejects()] == [
        "idempotency_conflict"
    ]


def test_a_key_reused_for_another_recipient_of_the_same_domain_is_a_conflict(
    ingress: Ingress,
) -> None:
    assert ingress.http(ev.http_send(key="k2"))[0] == 202
    other = ["someone-else@example.net", "archive@example.com"]
    status, body, _ = ingress.http(ev.http_send(key="k2", recipients=other))
    assert (status, body["error"]) == (409, "idempotency_conflict")


def test_keys_are_scoped_per_principal(ingress: Ingress) -> None:
    s1, a, _ = ingress.http(ev.http_send(key="same"))
    s2, b, _ = ingress.http(
        ev.http_send(key="same", principal="arn:aws:iam::123456789012:user/other")
    )
    assert (s1, s2) == (202, 202)
    assert a["mail_id"] != b["mail_id"]


def test_without_a_key_every_request_is_a_new_mail(ingress: Ingress) -> None:
    a = ingress.http(ev.http_send(key=None))[1]
    b = ingress.http(ev.http_send(key=None))[1]
    assert a["mail_id"] != b["mail_id"]


def test_not_before_delays_the_first_attempt(ingress: Ingress) -> None:
    when = (utcnow() + timedelta(hours=2)).replace(microsecond=0)
    status, body, _ = ingress.http(ev.http_send(not_before=when.isoformat()))
    assert status == 202
    _, groups = ingress.aws.storage().get_mail(body["mail_id"])
    assert {g.next_attempt_at for g in groups} == {when}


def test_a_base64_encoded_request_body_is_accepted(ingress: Ingress) -> None:
    assert ingress.http(ev.http_send(base64_body=True))[0] == 202


def test_smtputf8_allows_internationalised_addresses(ingress: Ingress) -> None:
    status, body, _ = ingress.http(ev.http_send(recipients=["jörg@bücher.example"], smtputf8=True))
    assert status == 202
    mail, _ = ingress.aws.storage().get_mail(body["mail_id"])
    assert mail is not None and mail["smtputf8"] is True


def test_null_sender_only_for_allowed_principals(ingress: Ingress) -> None:
    before = ingress.trace()
    status, body, _ = ingress.http(ev.http_send(sender=""))
    assert (status, body["error"], body["field"]) == (403, "null_sender_forbidden", "sender")
    assert ingress.trace().new_since(before) == (set(), set(), 0)
    status, body, _ = ingress.http(ev.http_send(sender="", principal=DSN_PRINCIPAL))
    assert status == 202
    mail, _ = ingress.aws.storage().get_mail(body["mail_id"])
    assert mail is not None and mail["sender"] == ""


def test_sender_domains_are_restricted_when_configured(ingress: Ingress) -> None:
    limited = ingress.with_settings(allowed_sender_domains=("shop.example.org",), sender_policy="")
    assert limited.http(ev.http_send())[0] == 202
    status, body, _ = limited.http(ev.http_send(sender="orders@elsewhere.example"))
    assert (status, body["error"], body["field"]) == (403, "sender_not_allowed", "sender")
    # the null sender has no domain: its own rule applies
    assert limited.http(ev.http_send(sender="", principal=DSN_PRINCIPAL))[0] == 202


def test_unknown_route_is_a_json_404(ingress: Ingress) -> None:
    status, body, _ = ingress.http(ev.http_request("GET", "/v1/messages"))
    assert (status, body["error"]) == (404, "not_found")


def test_storage_outage_is_503_not_a_refusal(aws: AwsEnv, ingress: Ingress) -> None:
    dead = make_clients(
        endpoint_url="http://127.0.0.1:9",
        region="us-east-1",
        session=session(),
        max_attempts=1,
        connect_timeout=0.5,
    )
    service = app.build_service(ingress.settings, dead, ingress.events, session())
    resp = app.handle(ev.http_send(), ingress.context, service)  # type: ignore[arg-type]
    assert resp["statusCode"] == 503
    assert json.loads(resp["body"])["error"] == "unavailable"
    assert resp["headers"]["Retry-After"] == "1"
    assert ingress.rejects() == []


def test_handler_builds_its_service_from_the_environment(
    aws: AwsEnv, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    r = aws.resources
    for name, value in {
        "MQ_TABLE": r.table,
        "MQ_BUCKET": r.bucket,
        "MQ_DELIVERY_QUEUE_URL": r.delivery_queue_url,
        "MQ_BOUNCE_QUEUE_URL": r.bounce_queue_url,
        "MQ_REGION": "us-east-1",
        "MQ_ENDPOINT_URL": aws.endpoint,
        "MQ_RECEIVING_DOMAINS": "example.com, example.org",
        "MQ_ROUTES": '{"example.com": "[192.0.2.25]", ".example.org": "[192.0.2.25]",'
        ' "example.org": "[192.0.2.25]"}',
        "MQ_SENDER_POLICY": '[{"principal": "arn:aws:sts::*", "domains": ["shop.example.org"]}]',
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    app.default_service.cache_clear()
    try:
        from tests.support.lambda_context import LambdaContext

        resp = app.handler(ev.http_send(), LambdaContext())
        assert resp["statusCode"] == 202
        assert app.default_service().s.receiving_domains == ("example.com", "example.org")
        # a refusal through the real outbox emitter: an E# item in the state table
        resp = app.handler(ev.http_send(sender="bad address"), LambdaContext())
        assert resp["statusCode"] == 422
        items = aws.clients.dynamodb.scan(TableName=r.table)["Items"]
        outbox = [it for it in items if it["pk"]["S"].startswith("E#")]
        assert len(outbox) == 1
        assert (
            json.loads(outbox[0]["event"]["S"])["mailqueue"]["reject"]["reason"]
            == "invalid_address"
        )
    finally:
        app.default_service.cache_clear()
    out = capsys.readouterr().out
    assert '"Accepted"' in out  # the EMF metrics document was flushed
