"""POST /v1/messages/batch through the handler, against moto in server mode (issue 18).

A batch is up to `max_batch` mails, each taken by the single route's code: one result
per mail, in order, each the status and body `POST /v1/messages` gives that mail. A
problem of the request as a whole is one 4xx, and nothing is queued.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from mailqueue.backends.aws.clients import make_clients
from mailqueue.core.config import ConfigError
from mailqueue.services.ingress import IngressSettings, ingress_settings_from_env
from mailqueue.services.ingress.settings import MAX_BATCH_BODY

from functions.ingress import app
from tests.ingress.conftest import Ingress
from tests.ingress.test_no_5xx import CASES
from tests.support import events as ev
from tests.support.aws import AwsEnv, session

BULK = "arn:aws:sts::123456789012:assumed-role/campaigns/*"
BULK_CALLER = "arn:aws:sts::123456789012:assumed-role/campaigns/spring"


def mail(i: int, **fields: Any) -> dict[str, Any]:
    """A good mail to one recipient at example.net, its content numbered."""
    content = f"From: orders@shop.example.org\r\nSubject: batch {i}\r\n\r\nmail {i}\r\n"
    fields = {"recipients": [f"c{i}@example.net"], "content": ev.b64(content.encode()), **fields}
    return ev.send_body(**fields)


def batch(ingress: Ingress, messages: list[Any], **kw: Any) -> tuple[int, dict[str, Any]]:
    status, body, _ = ingress.http(ev.http_batch(messages, **kw))
    return status, body


def single(ingress: Ingress, doc: Any, key: str | None = None) -> tuple[int, dict[str, Any]]:
    """What POST /v1/messages answers for `doc` (the idempotency key as its header)."""
    status, body, _ = ingress.http(ev.http_send(body=json.dumps(doc), key=key))
    return status, body


def test_a_mixed_batch_gets_a_result_per_mail_and_only_the_good_ones_are_queued(
    ingress: Ingress,
) -> None:
    bad: list[Any] = [
        mail(1, sender="bad address"),
        42,
        {**mail(2), "x": 1},
        mail(3, priority="urgent"),
        mail(4, recipients=[]),
        {"sender": "orders@shop.example.org", "recipients": ["c5@example.net"]},
    ]
    messages = [mail(10), *bad[:3], mail(11), *bad[3:]]
    before = ingress.trace()
    status, body = batch(ingress, messages)
    assert status == 207
    results = body["results"]
    assert [r["status"] for r in results] == [202, 422, 400, 400, 202, 400, 422, 400]
    assert (body["accepted"], body["refused"], body["failed"]) == (2, 6, 0)
    # the good ones: queued, each its own mail, durable (its items and its trigger)
    ids = [results[i]["body"]["mail_id"] for i in (0, 4)]
    assert len(set(ids)) == 2
    for i, n in ((0, 10), (4, 11)):
        assert results[i]["body"]["recipients"] == [{"id": "r0", "address": f"c{n}@example.net"}]
        assert results[i]["body"]["groups"] == ["example.net"]
    _, ddb, sqs = ingress.trace().new_since(before)
    # each a solo mail (one group, no key, small): its one item (README, "Data model")
    assert ddb == {(f"M#{m}", "G#example.net") for m in ids}
    assert sqs == 2
    for m in ids:
        stored, groups = ingress.aws.storage().get_mail(m)
        assert stored is not None and [g.key for g in groups] == ["example.net"]
    # the bad ones: each refused with what the single route says of that mail (the same
    # code path), and one Reject event each, as the single route emits
    assert len(ingress.rejects()) == len(bad)
    got = [results[i] for i in (1, 2, 3, 5, 6, 7)]
    after_batch = ingress.trace()
    for doc, res in zip(bad, got, strict=True):
        status, answer = single(ingress, doc)
        assert (res["status"], res["body"]["error"], res["body"]["field"]) == (
            status,
            answer["error"],
            answer["field"],
        )
        if isinstance(doc, dict):
            assert res["body"] == answer
    assert ingress.trace().new_since(after_batch) == (set(), set(), 0)


@pytest.mark.parametrize(
    ("name", "body", "settings", "status", "error", "field"),
    [
        ("not JSON", "{not json", {}, 400, "invalid_json", None),
        ("not an object", json.dumps([mail(1)]), {}, 400, "invalid_json", None),
        ("no messages", json.dumps({"mails": [mail(1)]}), {}, 400, "unknown_field", "mails"),
        ("empty object", "{}", {}, 400, "missing_field", "messages"),
        ("messages an object", json.dumps({"messages": mail(1)}), {}, 400, "invalid_type",
         "messages"),
        ("no mails", json.dumps({"messages": []}), {}, 422, "empty_batch", "messages"),
        ("one more than max_batch (all good)",
         json.dumps({"messages": [mail(i) for i in range(4)]}), {"max_batch": 3}, 422,
         "too_many_messages", "messages"),
        ("over max_batch_body",
         json.dumps({"messages": [mail(1)]}) + " " * 2048, {"max_batch_body": 2048}, 413,
         "too_large", None),
        ("a field twice", '{"messages": [], "messages": []}', {}, 400, "duplicate_field",
         "messages"),
        ("nested too deeply", '{"messages": [' + "[" * 100 + "]" * 100 + "]}", {}, 400,
         "json_too_deep", None),
    ],
)  # fmt: skip
def test_a_bad_request_is_one_4xx_and_nothing_is_queued(
    ingress: Ingress,
    name: str,
    body: str,
    settings: dict[str, Any],
    status: int,
    error: str,
    field: str | None,
) -> None:
    target = ingress.with_settings(**settings) if settings else ingress
    before = target.trace()
    got, answer, _ = target.http(ev.http_batch(body=body))
    assert (got, answer.get("error"), answer.get("field")) == (status, error, field), name
    assert set(answer) == {"error", "message", "field"}
    assert target.trace().new_since(before) == (set(), set(), 0)
    assert [r["reject"]["reason"].removeprefix("mailqueue:") for r in target.rejects()] == [error]


def test_a_batch_at_max_batch_is_taken(ingress_factory: Any) -> None:
    small = ingress_factory(max_batch=3)
    status, body = batch(small, [mail(i) for i in range(3)])
    assert (status, body["accepted"]) == (207, 3)


def test_without_a_principal_the_batch_is_refused(ingress: Ingress) -> None:
    before = ingress.trace()
    status, body = batch(ingress, [mail(1)], principal=None)
    assert (status, body["error"]) == (403, "unauthenticated")
    assert ingress.trace().new_since(before) == (set(), set(), 0)


def test_a_base64_encoded_batch_body_is_read(ingress: Ingress) -> None:
    status, body, _ = ingress.http(ev.http_batch([mail(1), mail(2)], base64_body=True))
    assert (status, body["accepted"]) == (207, 2)


def test_each_mail_has_its_own_idempotency_key(ingress: Ingress) -> None:
    messages = [mail(1, idempotency_key="k-1"), mail(2, idempotency_key="k-2"), mail(3)]
    status, first = batch(ingress, messages)
    assert status == 207 and [r["status"] for r in first["results"]] == [202, 202, 202]
    assert all("headers" not in r for r in first["results"])
    after_first = ingress.trace()
    # the same batch again: the keyed mails replay their first answers and store
    # nothing; the unkeyed one is a new mail, as on the single route
    status, again = batch(ingress, messages)
    assert status == 207
    for i in (0, 1):
        assert again["results"][i]["body"] == first["results"][i]["body"]
        assert again["results"][i]["headers"] == {"Idempotent-Replayed": "true"}
    assert again["results"][2]["body"]["mail_id"] != first["results"][2]["body"]["mail_id"]
    _, ddb, _ = ingress.trace().new_since(after_first)
    new_mail = again["results"][2]["body"]["mail_id"]
    assert ddb == {(f"M#{new_mail}", "G#example.net")}  # a solo mail: one item
    # a batch item's key is the single route's Idempotency-Key (same caller, same scope)
    status, answer = single(ingress, mail(1), key="k-1")
    assert (status, answer) == (202, first["results"][0]["body"])
    # the key reused for another mail: that mail's 409, the others go on
    status, body = batch(ingress, [mail(9, idempotency_key="k-2"), mail(4)])
    assert [r["status"] for r in body["results"]] == [409, 202]
    assert body["results"][0]["body"]["error"] == "idempotency_conflict"
    assert body["results"][0]["body"]["field"] == "idempotency_key"
    # a bad key refuses only its mail
    status, body = batch(ingress, [mail(5, idempotency_key="has space"), mail(6)])
    assert [r["status"] for r in body["results"]] == [400, 202]
    assert body["results"][0]["body"]["error"] == "invalid_idempotency_key"
    assert body["results"][0]["body"]["field"] == "idempotency_key"


def test_two_mails_of_one_batch_with_one_key_are_one_mail(ingress: Ingress) -> None:
    before = ingress.trace()
    status, body = batch(ingress, [mail(1, idempotency_key="k"), mail(1, idempotency_key="k")])
    assert [r["status"] for r in body["results"]] == [202, 202]
    assert body["results"][1]["headers"] == {"Idempotent-Replayed": "true"}
    assert body["results"][0]["body"] == body["results"][1]["body"]
    _, ddb, sqs = ingress.trace().new_since(before)
    # one mail; a replay re-posts the trigger of a never-attempted group, as on the
    # single route (test_http: at most once per retry)
    assert len(ddb) == 2 and 1 <= sqs <= 2


def test_priority_rules_apply_per_mail(ingress_factory: Any) -> None:
    ingress = ingress_factory(bulk_principals=(BULK,))
    before = ingress.trace()
    status, body = batch(
        ingress, [mail(1), mail(2, priority="transactional"), mail(3)], principal=BULK_CALLER
    )
    assert [r["status"] for r in body["results"]] == [202, 403, 202]
    assert body["results"][1]["body"]["error"] == "priority_not_allowed"
    # the accepted ones took the bulk path, as from the single route
    bulk_url = ingress.aws.resources.bulk_delivery_queue_url
    attrs = ingress.aws.clients.sqs.get_queue_attributes(
        QueueUrl=bulk_url, AttributeNames=["ApproximateNumberOfMessages"]
    )["Attributes"]
    assert int(attrs["ApproximateNumberOfMessages"]) == 2
    assert ingress.trace().new_since(before)[2] == 2


def test_client_input_gets_the_single_routes_answer_per_mail(ingress: Ingress) -> None:
    """test_no_5xx's cases as mails of one batch: where a case is a mail's problem, its
    result is the single route's 4xx; where it is the JSON text's (nesting, NaN, a key
    twice, a raw surrogate), it refuses the whole batch as it refuses a single body."""
    whole_request = {"json_too_deep", "invalid_json", "duplicate_field"}
    items: list[str] = []
    expected: list[tuple[int, str, str | None]] = []
    for name, event, status, error, field in CASES:
        raw = event["body"]
        if "Idempotency" in name:
            continue  # a header there; the batch item's key has its own test
        if error in whole_request or "field name" in name:
            before = ingress.trace()
            got, body, _ = ingress.http(ev.http_batch(body='{"messages": [' + raw + "]}"))
            assert (got, body["error"]) == (status, error), name
            assert ingress.trace().new_since(before) == (set(), set(), 0)
            continue
        items.append(raw)
        expected.append((status, error, field))
    assert len(items) >= 20
    good = json.dumps(mail(1))
    before = ingress.trace()
    got, body, _ = ingress.http(
        ev.http_batch(body='{"messages": [' + ",".join([*items, good]) + "]}")
    )
    assert got == 207
    results = body["results"]
    assert [(r["status"], r["body"]["error"], r["body"]["field"]) for r in results[:-1]] == expected
    assert results[-1]["status"] == 202
    _, ddb, sqs = ingress.trace().new_since(before)
    assert len(ddb) == 1 and sqs == 1  # only the good one (a solo mail: one item)


def test_a_storage_outage_is_each_mails_503(aws: AwsEnv, ingress: Ingress) -> None:
    dead = make_clients(
        endpoint_url="http://127.0.0.1:9",
        region="us-east-1",
        session=session(),
        max_attempts=1,
        connect_timeout=0.5,
    )
    service = app.build_service(ingress.settings, dead, ingress.events, session())
    resp = app.handle(
        ev.http_batch([mail(1), mail(2, sender="bad address")]), ingress.context, service
    )  # type: ignore[arg-type]
    assert resp["statusCode"] == 207
    body = json.loads(resp["body"])
    # the refusal needs no storage: still the mail's 422; the other is retryable
    assert [r["status"] for r in body["results"]] == [503, 422]
    assert body["results"][0]["body"]["error"] == "unavailable"
    assert body["results"][0]["headers"] == {"Retry-After": "1"}
    assert (body["accepted"], body["refused"], body["failed"]) == (0, 1, 1)


def test_mails_not_started_within_the_time_budget_are_503_not_attempted(
    ingress_factory: Any,
) -> None:
    ingress = ingress_factory(batch_time_budget=5.0)
    ticks = iter([100.0, 100.0, 104.9, 105.0, 200.0])  # start, then before each mail
    before = ingress.trace()
    answer = ingress.service.submit_batch(
        json.dumps({"messages": [mail(i) for i in range(4)]}),
        principal=ev.principal_of(ev.http_send()),
        monotonic=lambda: next(ticks),
    )
    assert answer.status == 207
    results = answer.body["results"]
    assert [r["status"] for r in results] == [202, 202, 503, 503]
    assert results[2]["body"]["error"] == "not_attempted"
    assert results[3]["headers"] == {"Retry-After": "1"}
    _, ddb, sqs = ingress.trace().new_since(before)
    assert len(ddb) == 2 and sqs == 2  # the first two, solo mails: one item each


def test_the_batch_settings_are_validated(aws: AwsEnv) -> None:
    base = IngressSettings(storage=aws.settings, allowed_sender_domains=("example.org",))
    assert (base.max_batch, base.max_batch_body) == (50, MAX_BATCH_BODY)
    for bad in (
        {"max_batch": 0},
        {"max_batch": 501},
        {"max_batch_body": MAX_BATCH_BODY + 1},
        {"max_batch_body": 10},
        {"batch_time_budget": 0.0},
        {"batch_time_budget": 29.0},
    ):
        with pytest.raises(ConfigError):
            IngressSettings(storage=aws.settings, **bad)
    s = ingress_settings_from_env(
        {
            "MQ_MAX_BATCH": "10",
            "MQ_BATCH_TIME_BUDGET": "7.5",
            "MQ_ALLOWED_SENDER_DOMAINS": "a.example",
        },
        storage=aws.settings,
    )
    assert (s.max_batch, s.batch_time_budget) == (10, 7.5)
    # a 4 MiB body fits Lambda's 6 MB event even base64 encoded by API Gateway
    assert MAX_BATCH_BODY * 4 / 3 + 64 * 1024 < 6 * 1024 * 1024


def test_metrics_count_each_mail_as_the_single_route_does(ingress: Ingress) -> None:
    from aws_lambda_powertools import Metrics

    metrics = Metrics(namespace="mailqueue-test", service="ingress")
    metrics.clear_metrics()
    try:
        event = ev.http_batch(
            [
                mail(1, idempotency_key="m"),
                mail(2, sender="bad address"),
                mail(1, idempotency_key="m"),
            ]
        )
        app.handle(event, ingress.context, ingress.service, metrics)  # type: ignore[arg-type]
        doc = metrics.serialize_metric_set()
    finally:
        metrics.clear_metrics()
    count = {
        k: sum(v) if isinstance(v, list) else v
        for k, v in doc.items()
        if k in ("Accepted", "Rejected", "Replayed")
    }
    assert count == {"Accepted": 2, "Rejected": 1, "Replayed": 1}
