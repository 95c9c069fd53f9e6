"""Bulk actions as resumable jobs: purge with progress, filters, busy groups, crashes."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from mailqueue.compose.admin import build_admin
from mailqueue.core.errors import InvalidInput, NotFound
from mailqueue.core.model import GroupState, MailRef, RecipientState, Result, utcnow
from mailqueue.core.storage import ClaimRefused
from mailqueue.services.admin import Action, Job, parse_filter

from tests.admin.conftest import ACTOR, Admin
from tests.support.faults import InjectedCrash, crash_after


@pytest.fixture()
def admin(aws_admin: Admin) -> Admin:
    """These bodies read DynamoDB items or SQS queues themselves: AWS only."""
    return aws_admin


def run(admin: Admin, action: Action, *, everything: bool = False, **flt: str) -> Job:
    job = admin.service.start_job(action, parse_filter(flt), actor=ACTOR, everything=everything)
    return admin.service.run_job(job.job_id, budget_seconds=60)


def pending_groups(admin: Admin) -> list[Any]:
    out: list[Any] = []
    for st in (GroupState.QUEUED, GroupState.INFLIGHT, GroupState.HELD):
        out.extend(admin.storage.list_queue(state=st, limit=1000).items)
    return out


@pytest.mark.slow  # ~1/3 of this suite: moto validates each recipient's update clauses
def test_purge_of_2000_recipients_reports_progress(admin_factory: Any) -> None:
    admin: Admin = admin_factory(job_page_size=10)
    ids = [
        admin.enqueue(*(f"user{m}x{i}@example.net" for i in range(50))).mail_id for m in range(40)
    ]
    job = admin.service.start_job(Action.DELETE, parse_filter({}), actor=ACTOR, everything=True)
    assert job.state == "running" and job.counts["applied"] == 0
    seen: list[dict[str, Any]] = []
    done = admin.service.run_job(
        job.job_id, budget_seconds=120, progress=lambda j: seen.append(j.to_json())
    )
    assert done.state == "done"
    assert done.counts["applied"] == 40
    assert done.counts["recipients"] == 2000
    examined = [p["counts"]["examined"] for p in seen]
    assert len(seen) >= 4 and examined == sorted(examined) and examined[0] == 10
    assert pending_groups(admin) == []
    for mid in ids[:3]:  # every mail final: state and content cleaned up
        try:
            _, groups = admin.storage.get_mail(mid)
        except NotFound:
            groups = []
        # a one-group mail (a content item's, issue 40) is left to DynamoDB's TTL, shown
        # finished until then: every recipient deleted
        deleted = {RecipientState.DELETED}
        assert all(
            g.state == GroupState.DONE and {r.state for r in g.recipients} == deleted
            for g in groups
        ), groups
        assert not admin.storage.content_exists(mid)
        assert admin.aws.mail_items(mid).get("C") is None  # the purge deleted the content
    stored = admin.service.get_job(job.job_id).to_json()
    assert stored["state"] == "done" and stored["counts"]["recipients"] == 2000


def test_hold_and_release_by_filter(admin: Admin) -> None:
    a = admin.enqueue("x@a.example", "y@b.example")
    b = admin.enqueue("z@a.example", sender="news@lists.example")
    job = run(admin, Action.HOLD, domain="a.example")
    assert (job.counts["applied"], job.counts["recipients"]) == (2, 2)
    assert admin.state(a.mail_id, "a.example") == GroupState.HELD
    assert admin.state(b.mail_id, "a.example") == GroupState.HELD
    assert admin.state(a.mail_id, "b.example") == GroupState.QUEUED
    op = admin.item(b.mail_id, "a.example")["op"]["M"]
    assert op["job"]["S"] == job.job_id and op["actor"]["S"] == ACTOR

    rel = run(admin, Action.RELEASE, sender="news@lists.example")
    assert rel.counts["applied"] == 1
    assert admin.state(b.mail_id, "a.example") == GroupState.QUEUED
    assert admin.state(a.mail_id, "a.example") == GroupState.HELD


def test_retry_by_domain_and_everything(admin: Admin) -> None:
    later = utcnow() + timedelta(hours=1)
    a = admin.enqueue("x@a.example", not_before=later)
    b = admin.enqueue("y@b.example", not_before=later)
    due = admin.enqueue("z@a.example")  # already due: a fresh trigger, and no chase
    job = run(admin, Action.RETRY, domain="a.example")
    assert job.state == "done"
    assert job.counts["applied"] == 2  # both a.example groups, each exactly once
    ok = admin.storage.send_start(MailRef(a.mail_id, "a.example"), utcnow(), lease_seconds=60)
    assert not isinstance(ok, ClaimRefused)
    still = admin.storage.send_start(MailRef(b.mail_id, "b.example"), utcnow(), lease_seconds=60)
    assert isinstance(still, ClaimRefused) and still.reason == "not_due"
    everything = run(admin, Action.RETRY, everything=True)
    # b and `due` (queued); a is being delivered (inflight): retry leaves attempts alone
    assert everything.counts["applied"] == 2
    assert admin.storage.get_group(MailRef(due.mail_id, "a.example")).state == GroupState.QUEUED
    ok_b = admin.storage.send_start(MailRef(b.mail_id, "b.example"), utcnow(), lease_seconds=60)
    assert not isinstance(ok_b, ClaimRefused)


def test_bounce_by_filter(admin: Admin) -> None:
    old = admin.enqueue("x@a.example", arrival=utcnow() - timedelta(days=3))
    new = admin.enqueue("y@a.example")
    job = run(admin, Action.BOUNCE, age_min="2d")
    assert job.counts["recipients"] == 1
    g = admin.storage.get_group(MailRef(old.mail_id, "a.example"))
    assert g.state == GroupState.DSN and g.recipients[0].last_result is not None
    assert g.recipients[0].last_result.status == "4.4.7"
    assert admin.state(new.mail_id, "a.example") == GroupState.QUEUED


def test_busy_groups_are_retried_until_the_delivery_lets_go(admin_factory: Any) -> None:
    admin: Admin = admin_factory(busy_give_up_seconds=3600)
    a = admin.enqueue("x@a.example")
    b = admin.enqueue("y@a.example")
    ref = MailRef(a.mail_id, "a.example")
    claim = admin.storage.send_start(ref, utcnow(), lease_seconds=300)
    assert not isinstance(claim, ClaimRefused)
    job = admin.service.start_job(Action.HOLD, parse_filter({"domain": "a.example"}), actor=ACTOR)
    first = admin.service.run_job(job.job_id, budget_seconds=1.5)
    assert first.state == "running" and first.phase == "busy" and len(first.busy) == 1
    assert first.counts["applied"] == 1  # b
    assert admin.state(b.mail_id, "a.example") == GroupState.HELD
    assert admin.state(a.mail_id, "a.example") == GroupState.INFLIGHT  # never raced
    # the attempt defers; the job's next slice holds the group
    admin.storage.reschedule(
        claim, {"r0": Result(451, "4.3.0", "try later")}, utcnow() + timedelta(minutes=5)
    )
    second = admin.service.run_job(job.job_id, budget_seconds=5)
    assert second.state == "done" and second.counts["applied"] == 2
    assert admin.state(a.mail_id, "a.example") == GroupState.HELD


def test_busy_group_given_up_after_the_wait(admin_factory: Any) -> None:
    admin: Admin = admin_factory(busy_give_up_seconds=0)
    a = admin.enqueue("x@a.example")
    claim = admin.storage.send_start(MailRef(a.mail_id, "a.example"), utcnow(), lease_seconds=300)
    assert not isinstance(claim, ClaimRefused)
    job = run(admin, Action.DELETE, domain="a.example")
    assert job.state == "done" and job.counts["given_up"] == 1 and job.counts["applied"] == 0
    assert admin.state(a.mail_id, "a.example") == GroupState.INFLIGHT


def test_interrupted_job_resumes_from_its_cursor(admin_factory: Any) -> None:
    admin: Admin = admin_factory(job_page_size=3)
    for m in range(8):
        admin.enqueue(f"u{m}@a.example", f"v{m}@b.example")
    job = admin.service.start_job(Action.HOLD, parse_filter({}), actor=ACTOR, everything=True)
    with pytest.raises(InjectedCrash), crash_after(admin.aws.clients.all(), 30):
        admin.service.run_job(job.job_id, budget_seconds=60)
    crashed = admin.service.get_job(job.job_id)
    assert crashed.state == "running" and 0 < crashed.counts["examined"] < 16
    # a live lease: a second runner does not barge in
    same = admin.service.run_job(job.job_id, budget_seconds=60)
    assert same.counts == crashed.counts
    # once the dead runner's lease ran out, the next one resumes from the checkpoint
    later = build_admin(
        admin.settings, admin.aws.clients, clock=lambda: utcnow() + timedelta(minutes=5)
    )
    done = later.run_job(job.job_id, budget_seconds=60)
    assert done.state == "done"
    assert done.counts["examined"] < 16 + 3  # at most one page read twice
    held = admin.storage.list_queue(state=GroupState.HELD, limit=100).items
    assert len(held) == 16 and pending_groups(admin) == list(held)


def test_cancelled_job_stops(admin: Admin) -> None:
    admin.enqueue("x@a.example")
    job = admin.service.start_job(Action.DELETE, parse_filter({}), actor=ACTOR, everything=True)
    assert admin.service.cancel_job(job.job_id).state == "cancelled"
    out = admin.service.run_job(job.job_id, budget_seconds=5)
    assert out.state == "cancelled" and out.counts["applied"] == 0
    assert len(pending_groups(admin)) == 1
    assert admin.service.cancel_job(job.job_id).state == "cancelled"  # idempotent


BAD_JOBS = [
    (Action.DELETE, {}, False, "filter_required", "filter"),
    (Action.DELETE, {"domain": "a.example"}, True, "contradictory_filter", "all"),
    (Action.RELEASE, {"state": "queued"}, False, "contradictory_filter", "state"),
    (Action.RETRY, {"state": "held,inflight"}, False, "contradictory_filter", "state"),
]


def test_bad_jobs_are_refused_and_store_nothing(admin: Admin) -> None:
    for action, flt, everything, code, field in BAD_JOBS:
        with pytest.raises(InvalidInput) as exc:
            admin.service.start_job(action, parse_filter(flt), actor=ACTOR, everything=everything)
        assert (exc.value.code, exc.value.field) == (code, field)
    items = admin.aws.clients.dynamodb.scan(TableName=admin.aws.resources.table)["Items"]
    assert [it for it in items if it["pk"]["S"].startswith("J#")] == []
    with pytest.raises(InvalidInput):
        admin.service.get_job("../etc")
    with pytest.raises(NotFound):
        admin.service.get_job("01KAAAAAAAAAAAAAAAAAAAAAAA")
