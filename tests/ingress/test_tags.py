"""Message tags (SES's MessageTags): a submission's `tags` reach every event of the mail as
`mail.tags`, with the queue's own `mailqueue:principal`; SES's rules refuse bad ones with a
400 before anything is written. Real handler, storage and event writer on moto."""

from __future__ import annotations

from typing import Any

import pytest
from mailqueue.core.trace import principal_tag

from tests.events.test_ses_schema import errors, read_log, service
from tests.ingress.conftest import Ingress
from tests.support import events as ev
from tests.support.streams import StreamReader

PRINCIPAL = "arn:aws:sts::123456789012:assumed-role/shop-app/checkout"


def _send(ingress: Ingress, **fields: Any) -> tuple[int, dict[str, Any]]:
    status, body, _ = ingress.http(ev.http_send(principal=PRINCIPAL, **fields))
    return status, body


def test_tags_reach_every_event_of_the_mail_in_ses_format(ingress: Ingress) -> None:
    reader = StreamReader(ingress.aws)
    tags = {"campaign": "black-friday", "tenant_id": "t-42"}
    status, body = _send(ingress, tags=tags)
    assert status == 202, body
    service(ingress.aws).handle(reader.poll())
    _, docs = read_log(ingress.aws)
    sends = [d for d in docs if d["eventType"] == "Send"]
    assert len(sends) == 1  # one Send per mail, with every destination
    assert len(sends[0]["mail"]["destination"]) == len(body["recipients"])
    for d in docs:
        assert errors(d) == [], d
        got = d["mail"]["tags"]
        assert got["campaign"] == ["black-friday"] and got["tenant_id"] == ["t-42"]
        # the caller's ARN, or its hash where traces are private (the default)
        who = principal_tag(PRINCIPAL) if ingress.settings.trace_private else PRINCIPAL
        assert got["mailqueue:principal"] == [who]


def test_an_idempotent_retry_must_repeat_the_tags(ingress: Ingress) -> None:
    status, first = _send(ingress, key="k-tags", tags={"a": "1"})
    assert status == 202
    status, again = _send(ingress, key="k-tags", tags={"a": "1"})
    assert status == 202 and again["mail_id"] == first["mail_id"]
    status, other = _send(ingress, key="k-tags", tags={"a": "2"})
    assert status == 409 and other["error"] == "idempotency_conflict"


@pytest.mark.parametrize(
    ("tags", "error"),
    [
        ({"ses:configuration-set": "x"}, "reserved_tag"),
        ({"mailqueue:principal": "me"}, "reserved_tag"),
        ({"has space": "x"}, "invalid_tag"),
        ({"ok": "dots.are.not.ses"}, "invalid_tag"),
        ({"ok": ""}, "invalid_tag"),
        ({"n" * 257: "x"}, "invalid_tag"),
        ({"ok": "v" * 257}, "invalid_tag"),
        ({f"t{i}": "v" for i in range(51)}, "too_many_tags"),
        ({"ok": 7}, "invalid_type"),
        (["campaign", "x"], "invalid_type"),
    ],
)
def test_bad_tags_are_refused_before_any_write(ingress: Ingress, tags: Any, error: str) -> None:
    before = ingress.trace()
    status, body = _send(ingress, tags=tags)
    assert status == (400 if error == "invalid_type" else 422), body
    assert body["error"] == error and body["field"].startswith("tags")
    assert ingress.trace().new_since(before) == (set(), set(), 0)
