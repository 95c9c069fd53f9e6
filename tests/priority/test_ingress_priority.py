"""The `priority` submission field through the real ingress handler on moto: where each
mail's trigger goes, what the stored mail and its events say, and the refusals."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from mailqueue.core.model import MailRef, Priority

from tests.events.test_ses_schema import errors, read_log, service
from tests.ingress.conftest import Ingress
from tests.priority import depths, drain
from tests.support import events as ev
from tests.support.streams import StreamReader

APP = "arn:aws:sts::123456789012:assumed-role/shop-app/checkout"
CAMPAIGNS = "arn:aws:sts::123456789012:assumed-role/newsletter-sender/run"


def _send(ingress: Ingress, principal: str = APP, **fields: Any) -> tuple[int, dict[str, Any]]:
    status, body, _ = ingress.http(ev.http_send(principal=principal, key=None, **fields))
    return status, body


def _priority_of(ingress: Ingress, mail_id: str) -> set[Priority]:
    _, groups = ingress.aws.storage().get_mail(mail_id)
    return {g.priority for g in groups}


def test_default_is_transactional_on_the_delivery_queue(ingress: Ingress) -> None:
    status, body = _send(ingress)
    assert status == 202, body
    assert _priority_of(ingress, body["mail_id"]) == {Priority.TRANSACTIONAL}
    assert depths(ingress.aws) == {"transactional": len(body["groups"]), "bulk": 0}


@pytest.mark.parametrize("asked", ["bulk", "BULK"])
def test_bulk_goes_to_the_bulk_queue_and_into_every_event(ingress: Ingress, asked: str) -> None:
    reader = StreamReader(ingress.aws)
    status, body = _send(ingress, priority=asked)
    assert status == 202, body
    assert _priority_of(ingress, body["mail_id"]) == {Priority.BULK}
    assert depths(ingress.aws) == {"transactional": 0, "bulk": len(body["groups"])}
    triggers = drain(ingress.aws, ingress.aws.resources.bulk_delivery_queue_url)
    assert {MailRef.from_json(t) for t in triggers} == {
        MailRef(body["mail_id"], g) for g in body["groups"]
    }
    service(ingress.aws).handle(reader.poll())
    _, docs = read_log(ingress.aws)
    assert docs and all(d["mail"]["tags"]["mailqueue:priority"] == ["bulk"] for d in docs)
    assert all(errors(d) == [] for d in docs)


@pytest.mark.parametrize(
    ("value", "error"),
    [("urgent", "invalid_priority"), ("", "invalid_priority"), (1, "invalid_type")],
)
def test_a_bad_priority_is_a_400_before_any_write(ingress: Ingress, value: Any, error: str) -> None:
    before = ingress.trace()
    status, body = _send(ingress, priority=value)
    assert status == 400, body
    assert body["error"] == error and body["field"] == "priority"
    assert ingress.trace().new_since(before) == (set(), set(), 0)
    assert [r["mailqueue"]["reject"]["reason"] for r in ingress.rejects()] == [error]


def test_a_bulk_principal_defaults_to_bulk_and_may_not_ask_for_transactional(
    ingress: Ingress,
) -> None:
    ing = ingress.with_settings(bulk_principals=("arn:aws:sts::*:assumed-role/newsletter-*/*",))
    status, body = _send(ing, principal=CAMPAIGNS)
    assert status == 202, body
    assert _priority_of(ing, body["mail_id"]) == {Priority.BULK}
    status, body = _send(ing, principal=CAMPAIGNS, priority="bulk")
    assert status == 202, body
    before = ing.trace()
    status, body = _send(ing, principal=CAMPAIGNS, priority="transactional")
    assert status == 403 and body["error"] == "priority_not_allowed", body
    assert ing.trace().new_since(before) == (set(), set(), 0)
    # other callers keep the transactional default
    status, body = _send(ing, principal=APP)
    assert status == 202 and _priority_of(ing, body["mail_id"]) == {Priority.TRANSACTIONAL}


@pytest.mark.parametrize("setting", ["transactional", "bulk"])
def test_mail_received_through_ses_takes_ses_priority(ingress: Ingress, setting: str) -> None:
    ing = ingress.with_settings(ses_priority=setting)
    event = ev.load_event("ses_receipt")
    raw = b"From: a@sender.example.org\r\nSubject: hi\r\n\r\nbody\r\n"
    key = f"{ing.settings.ses_prefix}{ev.ses_message_id(event)}"
    ing.aws.clients.s3.put_object(Bucket=ing.settings.inbound_bucket, Key=key, Body=raw)
    assert ing(event) == {"disposition": "CONTINUE"}
    assert depths(ing.aws) == {
        "transactional": int(setting == "transactional"),
        "bulk": int(setting == "bulk"),
    }


def test_the_dsn_for_suppressed_recipients_of_a_bulk_mail_is_bulk(
    ingress_factory: Callable[..., Ingress],
) -> None:
    """SuppressionPolicy=bounce: the DSN ingress queues at once takes the submission's
    path, so a campaign to many suppressed addresses cannot crowd the transactional one."""
    from tests.suppression.test_ingress_bounce import _dsn
    from tests.suppression.test_ingress_refusal import _suppress

    i = ingress_factory(suppression="bounce")
    _suppress(i, "gone@example.net")
    status, body = _send(i, recipients=["other@example.org", "gone@example.net"], priority="bulk")
    assert status == 202 and body["suppressed"], body
    _, groups, content = _dsn(i, body["mail_id"])
    assert content is not None and {g.priority for g in groups} == {Priority.BULK}
    assert depths(i.aws) == {"transactional": 0, "bulk": 2}  # the mail and its DSN
