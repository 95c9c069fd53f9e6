"""Administration is separate from submission: a submitter's principal is refused on every
admin route by the admin function itself (the second lock behind the template's
route-scoped IAM policies); an operator's gets through."""

from __future__ import annotations

import re

import pytest
from mailqueue.core.config import ConfigError
from mailqueue.services.admin.api import _ROUTES

from functions.admin import app
from tests.admin.conftest import ACTOR, Admin, make_admin
from tests.admin.http import answer, context, v2_event
from tests.support.aws import AwsEnv


@pytest.fixture()
def admin(aws_admin: Admin) -> Admin:
    """These bodies read DynamoDB items or SQS queues themselves: AWS only."""
    return aws_admin

SUBMITTER = "arn:aws:sts::123456789012:assumed-role/shop-app/i-0abc"
SAMPLE = {
    "scope": "domain",
    "target": "example.net",
    "mail_id": "01JZZZZZZZZZZZZZZZZZZZZZZZ",
    "action": "hold",
    "job_id": "J1",
    "address": "bob@example.net",
    "pool": "default",
}


def _routes() -> list[tuple[str, str]]:
    """Every admin route, from the API's own route table, with sample path parameters."""
    out = []
    for verb, pattern, _ in _ROUTES:
        path = re.sub(r"\(\?P<(\w+)>[^)]*\)", lambda m: SAMPLE[m.group(1)], pattern.pattern)
        out.append((verb, path))
    return out


ROUTES = _routes()


def test_the_route_table_is_enumerated() -> None:
    assert len(ROUTES) >= 9 and all(p.startswith("/v1/queue/") for _, p in ROUTES)
    assert {v for v, _ in ROUTES} >= {"GET", "POST", "DELETE"}


@pytest.mark.parametrize(("verb", "path"), ROUTES, ids=[f"{v} {p}" for v, p in ROUTES])
def test_a_submitter_is_refused_on_every_admin_route(admin: Admin, verb: str, path: str) -> None:
    enqueued = admin.enqueue()
    before = admin.state(enqueued.mail_id, enqueued.groups[0])
    resp = app.handle(v2_event(verb, path, principal=SUBMITTER), context(), admin.api)
    status, body, _ = answer(resp)
    assert (status, body["error"]) == (403, "not_an_operator")
    assert admin.state(enqueued.mail_id, enqueued.groups[0]) == before


@pytest.mark.parametrize(("verb", "path"), ROUTES, ids=[f"{v} {p}" for v, p in ROUTES])
def test_an_operator_gets_through_on_every_admin_route(admin: Admin, verb: str, path: str) -> None:
    resp = app.handle(v2_event(verb, path, principal=ACTOR), context(), admin.api)
    status, body, _ = answer(resp)
    assert status != 403 and body.get("error") != "not_an_operator", (status, body)


def test_an_empty_allow_list_refuses_everyone(aws: AwsEnv) -> None:
    nobody = make_admin(aws, admin_principals="")
    status, body, _ = answer(
        app.handle(v2_event("GET", "/v1/queue/size", principal=ACTOR), context(), nobody.api)
    )
    assert (status, body["error"]) == (403, "not_an_operator")


def test_an_unauthenticated_event_is_refused(admin: Admin) -> None:
    event = v2_event("GET", "/v1/queue/size")
    event["requestContext"].pop("authorizer", None)
    assert answer(app.handle(event, context(), admin.api))[0] == 403


@pytest.mark.parametrize("bad", ["root", "arn", " ", "arn:aws:iam::1:user/a b"])
def test_a_bad_operator_pattern_is_refused_at_start(aws: AwsEnv, bad: str) -> None:
    if not bad.strip():
        make_admin(aws, admin_principals=bad)  # blank: simply nobody
        return
    with pytest.raises(ConfigError, match="admin_principals"):
        make_admin(aws, admin_principals=bad)
