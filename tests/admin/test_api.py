"""The admin Lambda: HTTP API v2 events through the real handler, and job invocations."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from mailqueue.compose.admin import LambdaLauncher
from mailqueue.core.model import GroupState, MailRef, utcnow
from mailqueue.core.storage import ClaimRefused
from mailqueue.services.admin.api import AdminApi

from functions.admin import app
from tests.admin.conftest import ACTOR, Admin
from tests.admin.http import answer, context, v2_event
from tests.support.aws import REGION, session
from tests.support.faults import short_circuit


@pytest.fixture()
def admin(aws_admin: Admin) -> Admin:
    """These bodies read DynamoDB items or SQS queues themselves: AWS only."""
    return aws_admin


def call(
    admin: Admin, method: str, path: str, query: dict[str, str] | None = None, body: Any = None
) -> tuple[int, dict[str, Any], dict[str, str]]:
    return answer(app.handle(v2_event(method, path, query, body), context(), admin.api))


def test_browse_inspect_and_act_through_the_handler(admin: Admin) -> None:
    q = admin.enqueue("bob@example.net", "carol@example.com")
    status, body, _ = call(admin, "GET", "/v1/queue/mails", {"domain": "example.net"})
    assert status == 200 and body["cursor"] is None
    assert [(i["mail_id"], i["group"], i["state"]) for i in body["items"]] == [
        (q.mail_id, "example.net", "queued")
    ]
    status, body, _ = call(
        admin, "POST", f"/v1/queue/mails/{q.mail_id}/hold", {"group": "example.net"}
    )
    assert status == 200 and body["recipients"] == 1
    assert admin.item(q.mail_id, "example.net")["op"]["M"]["actor"]["S"] == ACTOR
    status, body, _ = call(admin, "GET", f"/v1/queue/mails/{q.mail_id}", {"body": "true"})
    assert status == 200
    assert {g["group"]: g["state"] for g in body["groups"]} == {
        "example.net": "held",
        "example.com": "queued",
    }
    assert ["Subject", "hello"] in body["headers"] and "body" in body
    status, body, _ = call(admin, "DELETE", f"/v1/queue/mails/{q.mail_id}")
    assert status == 200 and body["recipients"] == 2
    status, body, _ = call(admin, "GET", f"/v1/queue/mails/{q.mail_id}")
    assert status == 404 and body["error"] == "not_found"


def test_refusals_carry_code_message_field_and_change_nothing(admin: Admin) -> None:
    q = admin.enqueue("bob@example.net")
    cases = [
        ("GET", "/v1/queue/mails", {"state": "delivered"}, None, 400, "invalid_state", "state"),
        (
            "GET",
            "/v1/queue/mails",
            {"age_min": "2h", "age_max": "1h"},
            None,
            400,
            "contradictory_filter",
            "age_min",
        ),
        ("GET", "/v1/queue/mails", {"limit": "0"}, None, 400, "out_of_range", "limit"),
        ("GET", "/v1/queue/mails", {"sort": "size"}, None, 400, "invalid_sort", "sort"),
        ("GET", "/v1/queue/mails/nope", None, None, 400, "invalid_mail_id", "mail_id"),
        (
            "GET",
            f"/v1/queue/mails/{q.mail_id}",
            {"body": "maybe"},
            None,
            400,
            "invalid_value",
            "body",
        ),
        (
            "POST",
            f"/v1/queue/mails/{q.mail_id}/freeze",
            None,
            None,
            400,
            "invalid_action",
            "action",
        ),
        (
            "POST",
            f"/v1/queue/mails/{q.mail_id}/hold",
            {"grup": "x"},
            None,
            400,
            "unknown_parameter",
            "grup",
        ),
        (
            "POST",
            "/v1/queue/mails/01KAAAAAAAAAAAAAAAAAAAAAAA/hold",
            None,
            None,
            404,
            "not_found",
            None,
        ),
        ("POST", "/v1/queue/jobs", None, {"action": "delete"}, 400, "filter_required", "filter"),
        (
            "POST",
            "/v1/queue/jobs",
            None,
            {"action": "delete", "filter": {"domian": "x"}},
            400,
            "unknown_parameter",
            "domian",
        ),
        (
            "POST",
            "/v1/queue/jobs",
            None,
            {"action": "hold", "filter": {"attempts_min": True}},
            400,
            "invalid_type",
            "attempts_min",
        ),
        ("POST", "/v1/queue/jobs", None, "not json", 400, "invalid_json", None),
        ("GET", "/v1/queue/jobs/01KAAAAAAAAAAAAAAAAAAAAAAA", None, None, 404, "not_found", None),
        ("GET", "/v1/queue/nothing", None, None, 404, "not_found", None),
    ]
    for method, path, query, body, status, code, field in cases:
        got, doc, _ = call(admin, method, path, query, body)
        assert (got, doc["error"], doc["field"]) == (status, code, field), (path, query, body)
        assert doc["message"]
    assert admin.state(q.mail_id, "example.net") == GroupState.QUEUED
    assert "op" not in admin.item(q.mail_id, "example.net")


def test_busy_is_409_and_nothing_changes(admin: Admin) -> None:
    q = admin.enqueue("bob@example.net")
    claim = admin.storage.send_start(MailRef(q.mail_id, "example.net"), utcnow(), lease_seconds=300)
    assert not isinstance(claim, ClaimRefused)
    status, body, _ = call(admin, "DELETE", f"/v1/queue/mails/{q.mail_id}")
    assert status == 409 and body["error"] == "busy" and body["groups"] == ["example.net"]
    assert admin.state(q.mail_id, "example.net") == GroupState.INFLIGHT


def test_bulk_job_answers_202_and_reports_progress(admin: Admin) -> None:
    for i in range(3):
        admin.enqueue(f"u{i}@a.example", f"v{i}@b.example")
    status, job, headers = call(
        admin, "POST", "/v1/queue/jobs", body={"action": "hold", "filter": {"domain": "a.example"}}
    )
    assert status == 202 and headers["Location"] == f"/v1/queue/jobs/{job['job_id']}"
    assert job["action"] == "hold" and job["actor"] == ACTOR
    assert job["estimate"] == 6  # queued + inflight groups: Select=COUNT on the index
    status, got, _ = call(admin, "GET", f"/v1/queue/jobs/{job['job_id']}")
    assert status == 200 and got["state"] == "done"  # the inline runner ran it
    assert got["counts"]["applied"] == 3 and got["counts"]["recipients"] == 3
    status, size, _ = call(admin, "GET", "/v1/queue/size")
    assert status == 200 and size["source"] == "index"
    assert size["recipients"] == {"held": 3, "queued": 3} and size["groups"] == {
        "held": 3,
        "queued": 3,
    }
    status, shape, _ = call(admin, "GET", "/v1/queue/shape", {"state": "held", "top": "1"})
    assert status == 200 and shape["total"]["total"] == 3 and len(shape["rows"]) == 1
    status, purge, _ = call(admin, "POST", "/v1/queue/jobs", body={"action": "delete", "all": True})
    assert status == 202
    status, got, _ = call(admin, "GET", f"/v1/queue/jobs/{purge['job_id']}")
    assert got["state"] == "done" and got["counts"]["recipients"] == 6


def test_jobs_run_in_asynchronous_self_invocations(admin: Admin) -> None:
    """Deployed: the API launches the job by invoking its own function (Event)."""
    for i in range(4):
        admin.enqueue(f"u{i}@a.example")
    client = session().client("lambda", region_name=REGION, endpoint_url=admin.aws.endpoint)
    invoked: list[dict[str, Any]] = []

    def capture(params: dict[str, Any]) -> dict[str, Any]:
        invoked.append(params)
        return {"StatusCode": 202}

    fn = "arn:aws:lambda:us-east-1:123456789012:function:mailqueue-admin"
    api = AdminApi(admin.service, LambdaLauncher(client, fn))
    with short_circuit(client, "Invoke", capture):
        resp = app.handle(
            v2_event("POST", "/v1/queue/jobs", body={"action": "delete", "all": True}),
            context(),
            api,
        )
        status, job, _ = answer(resp)
        assert status == 202 and job["state"] == "running" and job["counts"]["applied"] == 0
        assert invoked == [{"mailqueue": "run_job", "job_id": job["job_id"]}]
        # a poll while nobody holds the job's lease launches it again (duplicates are harmless)
        answer(app.handle(v2_event("GET", f"/v1/queue/jobs/{job['job_id']}"), context(), api))
        assert len(invoked) == 2
        # the invocation runs a slice within its remaining time, and finishes here
        out = app.handle(dict(invoked[0]), context(remaining_ms=40_000), api)
        assert out["state"] == "done" and out["counts"]["applied"] == 4
        assert len(invoked) == 2  # done: no further launch
        # a second, duplicate invocation finds the job finished and does nothing
        again = app.handle(dict(invoked[1]), context(remaining_ms=40_000), api)
        assert again["state"] == "done" and again["counts"] == out["counts"]


def test_make_api_picks_the_runner(admin: Admin) -> None:
    fn = "arn:aws:lambda:us-east-1:123456789012:function:x"
    inline = app.make_api(admin.service, admin.settings, fn)
    assert type(inline.launcher).__name__ == "InlineLauncher"
    deployed = app.make_api(admin.service, replace(admin.settings, job_runner="lambda"), fn)
    assert isinstance(deployed.launcher, LambdaLauncher)
    assert deployed.launcher.function_arn == fn
