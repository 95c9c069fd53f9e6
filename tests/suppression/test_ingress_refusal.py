"""A submission to a suppressed recipient is refused (422 recipient_suppressed, Reject
event) through the real ingress handler on moto; expired entries and "off" let it by."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import jsonschema
from mailqueue.backends.aws.suppression_store import DynamoSuppressionStore
from mailqueue.outbound.suppression import Entry

from tests.ingress.conftest import Ingress
from tests.support import events as ev

SCHEMA = json.loads((Path(__file__).parents[1] / "events" / "ses_event_schema.json").read_text())


def _store(i: Ingress) -> DynamoSuppressionStore:
    return DynamoSuppressionStore(i.aws.clients.dynamodb, i.aws.resources.table)


def _suppress(i: Ingress, address: str, *, expires_in: float = 3600) -> Entry:
    now = time.time() - 60
    e = Entry(address, "550 5.1.1 no such user", now, now + 60 + expires_in, "01SRC", "5.1.1")
    _store(i).put_many([e])
    return e


def test_a_suppressed_recipient_refuses_the_submission(
    ingress_factory: Callable[..., Ingress],
) -> None:
    i = ingress_factory()
    _suppress(i, "customer@example.net")
    before = i.trace()
    i.aws.counter.reset()
    status, body, _ = i.http(ev.http_send(recipients=["other@example.org", "Customer@Example.NET"]))
    assert (status, body["error"], body["field"]) == (
        422,
        "recipient_suppressed",
        "recipients[1].address",
    )
    assert i.trace().new_since(before) == (set(), set(), 0)  # nothing stored
    assert i.aws.counter.calls["dynamodb:BatchGetItem"] == 1  # one read for the envelope
    [reject] = i.rejects()
    jsonschema.validate(reject, SCHEMA)
    assert reject["reject"]["reason"] == "mailqueue:recipient_suppressed"
    ours = reject["mailqueue"]["reject"]
    assert ours["recipient"] == "Customer@Example.NET"
    assert ours["suppressedAt"].endswith("Z")


def test_one_batch_get_per_100_distinct_recipients(
    ingress_factory: Callable[..., Ingress],
) -> None:
    i = ingress_factory()
    _suppress(i, "r149@example.net")
    rcpts = [f"r{n}@example.net" for n in range(150)]
    i.aws.counter.reset()
    status, body, _ = i.http(ev.http_send(recipients=rcpts))
    assert (status, body["field"]) == (422, "recipients[149].address")
    assert i.aws.counter.calls["dynamodb:BatchGetItem"] == 2  # 100 + 50 keys (the limit)


def test_expired_entries_and_policy_off_let_the_mail_in(
    ingress_factory: Callable[..., Ingress],
) -> None:
    i = ingress_factory()
    _suppress(i, "customer@example.net", expires_in=-30)  # TTL has not deleted it yet
    status, _, _ = i.http(ev.http_send(key="a"))
    assert status == 202
    _suppress(i, "customer@example.net")
    assert i.http(ev.http_send(key="b"))[0] == 422
    off = ingress_factory(suppression="off")
    off.aws.counter.reset()
    assert off.http(ev.http_send(key="c"))[0] == 202
    assert off.aws.counter.calls["dynamodb:BatchGetItem"] == 0


def test_null_sender_dsns_are_never_refused(ingress_factory: Callable[..., Ingress]) -> None:
    from tests.ingress.conftest import DSN_PRINCIPAL

    i = ingress_factory()
    _suppress(i, "customer@example.net")
    status, body, _ = i.http(
        ev.http_send(sender="", recipients=["customer@example.net"], principal=DSN_PRINCIPAL)
    )
    assert status == 202, body
