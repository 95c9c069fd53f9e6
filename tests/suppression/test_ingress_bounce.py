"""SuppressionPolicy=bounce, through the real ingress handler on moto: the others are
queued, each suppressed recipient bounces at once (as with Amazon SES: a Bounce event
with subtype OnAccountSuppressionList) and the sender gets one RFC 3464 DSN, which
GNU Mailman's parser (flufl.bounce) reads as a permanent failure of exactly them."""

from __future__ import annotations

import email
import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from flufl.bounce import all_failures
from mailqueue.core.config import ConfigError
from mailqueue.core.errors import NotFound
from mailqueue.core.model import mail_id_for_key

from tests.ingress.conftest import Ingress
from tests.support import events as ev
from tests.suppression.test_ingress_refusal import _suppress

SCHEMA = json.loads((Path(__file__).parents[1] / "events" / "ses_event_schema.json").read_text())
SENDER = "orders@shop.example.org"  # the sample request's sender


def _dsn(i: Ingress, mail_id: str) -> tuple[dict[str, Any] | None, list[Any], bytes | None]:
    """The DSN queued for `mail_id`'s suppressed recipients (its id is derived)."""
    dsn_id = mail_id_for_key(i.aws.settings.idempotency_scope, f"dsn:{mail_id}:suppressed")
    st = i.aws.storage()
    try:
        mail, groups = st.get_mail(dsn_id)
    except NotFound:  # no DSN was queued
        return None, [], None
    return mail, groups, st.read_content(dsn_id).read()


def _bounces(i: Ingress) -> list[dict[str, Any]]:
    out = [e.to_json() for e in i.events.of_type("Bounce")]
    for doc in out:
        jsonschema.validate(doc, SCHEMA)
    return out


def test_the_others_are_queued_and_the_suppressed_one_bounces_at_once(
    ingress_factory: Callable[..., Ingress],
) -> None:
    i = ingress_factory(suppression="bounce")
    _suppress(i, "customer@example.net")
    status, body, _ = i.http(ev.http_send(recipients=["other@example.org", "Customer@Example.NET"]))
    assert status == 202, body
    assert [r["address"] for r in body["recipients"]] == ["other@example.org"]
    [notice] = body["suppressed"]
    assert (notice["address"], notice["status"]) == ("Customer@Example.NET", "5.1.1")
    _, groups = i.aws.storage().get_mail(body["mail_id"])
    assert [r.address for g in groups for r in g.recipients] == ["other@example.org"]

    [bounce] = _bounces(i)
    assert bounce["mail"]["messageId"] == body["mail_id"]
    b = bounce["bounce"]
    assert (b["bounceType"], b["bounceSubType"]) == ("Permanent", "OnAccountSuppressionList")
    assert [r["emailAddress"] for r in b["bouncedRecipients"]] == ["Customer@Example.NET"]
    assert bounce["mailqueue"]["suppressedAt"] == notice["since"]

    mail, dsn_groups, content = _dsn(i, body["mail_id"])
    assert mail is not None and content is not None
    assert mail["sender"] == ""  # from the null sender: never bounced itself
    assert [r.address for g in dsn_groups for r in g.recipients] == [SENDER]
    temporary, permanent = all_failures(email.message_from_bytes(content))
    assert (temporary, permanent) == (set(), {b"Customer@Example.NET"})


def test_all_suppressed_queues_only_the_dsn_and_a_keyed_retry_adds_nothing(
    ingress_factory: Callable[..., Ingress],
) -> None:
    i = ingress_factory(suppression="bounce")
    _suppress(i, "customer@example.net")
    _suppress(i, "archive@example.com")
    first = i.http(ev.http_send(key="k-all"))  # the sample's two recipients
    assert first[0] == 202, first[1]
    assert first[1]["recipients"] == [] and len(first[1]["suppressed"]) == 2
    mail_id = first[1]["mail_id"]
    before = i.trace()
    again = i.http(ev.http_send(key="k-all"))
    assert again[0] == 202 and again[1]["mail_id"] == mail_id
    # no second DSN and no mail (a retry may post the queued DSN's trigger again: harmless,
    # claims are conditional; that is how a trigger lost by the first try is recovered)
    assert i.trace().new_since(before)[:2] == (set(), set())
    _, groups, content = _dsn(i, mail_id)
    assert content is not None and len(groups) == 1
    ids = [e["mailqueue"]["eventId"] for e in _bounces(i)]
    assert len(ids) == 4 and len(set(ids)) == 2  # the retry's events repeat the same ids
    with pytest.raises(NotFound):
        i.aws.storage().get_mail(mail_id)  # nothing was queued under the mail's own id


def test_notify_never_bounces_without_a_dsn(ingress_factory: Callable[..., Ingress]) -> None:
    i = ingress_factory(suppression="bounce")
    _suppress(i, "customer@example.net")
    rcpts: list[Any] = [{"address": "customer@example.net", "notify": ["NEVER"]}, "x@example.org"]
    status, body, _ = i.http(ev.http_send(recipients=rcpts))
    assert status == 202, body
    assert len(_bounces(i)) == 1
    assert _dsn(i, body["mail_id"])[0] is None


def test_the_policy_is_validated(ingress_factory: Callable[..., Ingress]) -> None:
    settings = ingress_factory().settings
    with pytest.raises(ConfigError, match="suppression must be one of refuse, bounce, off"):
        replace(settings, suppression="drop")
