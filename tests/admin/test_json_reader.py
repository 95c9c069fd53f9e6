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
