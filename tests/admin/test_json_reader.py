"""Issue 28, item 11: the admin routes read JSON as ingress does (deep nesting is a 400)."""

from __future__ import annotations

import pytest

from functions.admin import app
from tests.admin.conftest import Admin
from tests.admin.http import answer, context, v2_event

DEEP = "[" * 50_000 + "]" * 50_000
DEEP_IN_FIELD = '{"entries": ' + DEEP + "}"


@pytest.mark.parametrize(
    "path", ["/v1/queue/suppressions", "/v1/queue/suspensions", "/v1/queue/jobs"]
)
@pytest.mark.parametrize("body", [DEEP, DEEP_IN_FIELD])
def test_deeply_nested_json_is_a_400(admin: Admin, path: str, body: str) -> None:
    status, doc, _ = answer(app.handle(v2_event("POST", path, None, body), context(), admin.api))
    assert (status, doc["error"]) == (400, "json_too_deep")


def test_duplicate_keys_refused_as_at_ingress(admin: Admin) -> None:
    body = '{"address": "a@example.net", "address": "b@example.net"}'
    status, doc, _ = answer(
        app.handle(v2_event("POST", "/v1/queue/suppressions", None, body), context(), admin.api)
    )
    assert (status, doc["error"], doc["field"]) == (400, "duplicate_field", "address")


@pytest.mark.parametrize(
    "path", ["/v1/queue/suppressions", "/v1/queue/suspensions", "/v1/queue/jobs"]
)
@pytest.mark.parametrize(
    "raw", [b"\xff{}", b'{"address": "a\xc3@example.net"}', b"\xed\xa0\x80", b"not base64!"]
)
def test_a_body_that_is_not_utf8_is_a_400_invalid_json(
    admin: Admin, path: str, raw: bytes
) -> None:
    """Issue 43 item 11: API Gateway hands a body that is not text as base64; Powertools'
    decoded_body decoded it as UTF-8 and the route answered 500."""
    import base64

    event = v2_event("POST", path, None, "x")
    if raw == b"not base64!":
        event["body"] = raw.decode()  # claimed base64, is not
    else:
        event["body"] = base64.b64encode(raw).decode()
    event["isBase64Encoded"] = True
    status, doc, _ = answer(app.handle(event, context(), admin.api))
    assert (status, doc["error"]) == (400, "invalid_json"), doc


def test_a_lone_surrogate_in_a_text_body_is_a_400(admin: Admin) -> None:
    event = v2_event("POST", "/v1/queue/suppressions", None, '{"address": "\ud800@x.net"}')
    status, doc, _ = answer(app.handle(event, context(), admin.api))
    assert (status, doc["error"]) == (400, "invalid_json"), doc
