"""Each sweeper action on its own, through the real handler, with a movable clock."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from mailqueue.backends.aws.backend import AwsStorage
from mailqueue.compose.aws import sweeper
from mailqueue.core.model import Claim, GroupState, MailRef, RecipientState, Result, utcnow
from mailqueue.services.sweeper import Sweeper, SweeperSettings

from functions.sweeper import app as sweeper_app
from tests.crash.harness import FakeClock
from tests.support import factories as f
from tests.support.aws import AwsEnv
from tests.support.lambda_context import LambdaContext


def make(aws: AwsEnv, clock: FakeClock) -> tuple[AwsStorage, Sweeper]:
    st = AwsStorage(aws.settings, aws.clients, clock=clock)
    return st, sweeper(SweeperSettings(), st, clock=clock)


def drain(aws: AwsEnv, url: str) -> list[dict[str, Any]]:
    out = []
    while True:
        msgs = aws.clients.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get(
            "Messages", []
        )
        if not msgs:
            return out
        for m in msgs:
            out.append(json.loads(m["Body"]))
            aws.clients.sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])


def sweep(sw: Sweeper, **event: Any) -> dict[str, Any]:
    return sweeper_app.handle(event, LambdaContext(), sw)


def test_expired_lease_is_handed_back_and_rearmed(aws: AwsEnv) -> None:
    clock = FakeClock()
    st, sw = make(aws, clock)
    q = st.enqueue(f.envelope(), f.content())
    drain(aws, aws.resources.delivery_queue_url)
    c = st.send_start(MailRef(q.mail_id, q.groups[0]), clock(), lease_seconds=60)
    assert isinstance(c, Claim)  # ... and the holder dies
    assert sweep(sw)["stats"]["LeasesRecovered"] == 0  # lease still live
    clock.advance(timedelta(seconds=61))
    assert sweep(sw)["stats"]["LeasesRecovered"] == 1
    assert st.get_group(c.ref).state == GroupState.QUEUED
    assert drain(aws, aws.resources.delivery_queue_url) == [{"v": 1, **c.ref.to_json()}]
    assert sweep(sw)["stats"]["LeasesRecovered"] == 0  # idempotent


def test_lost_trigger_is_reposted_after_the_grace(aws: AwsEnv) -> None:
    clock = FakeClock()
    st, sw = make(aws, clock)
    q = st.enqueue(f.envelope(), f.content())
    drain(aws, aws.resources.delivery_queue_url)  # the trigger is lost
    clock.advance(timedelta(seconds=600))
    assert sweep(sw)["stats"]["TriggersReposted"] == 0  # within the 15 min grace
    clock.advance(timedelta(seconds=600))
    assert sweep(sw)["stats"]["TriggersReposted"] == 1
    assert [m["mail_id"] for m in drain(aws, aws.resources.delivery_queue_url)] == [q.mail_id]


def test_past_lifetime_is_bounced_with_447(aws: AwsEnv) -> None:
    clock = FakeClock()
    st, sw = make(aws, clock)
    q = st.enqueue(f.envelope(), f.content())
    drain(aws, aws.resources.delivery_queue_url)
    clock.advance(timedelta(days=6))
    out = sweep(sw)
    assert out["stats"]["GroupsExpired"] == 1
    g = st.get_group(MailRef(q.mail_id, q.groups[0]))
    assert g.recipients[0].state == RecipientState.BOUNCED
    assert g.recipients[0].last_result.status == "4.4.7"
    assert drain(aws, aws.resources.bounce_queue_url) == [
        {"v": 1, "mail_id": q.mail_id, "group": q.groups[0]}
    ]


def test_held_mail_is_untouched(aws: AwsEnv) -> None:
    clock = FakeClock()
    st, sw = make(aws, clock)
    q = st.enqueue(f.envelope(), f.content())
    drain(aws, aws.resources.delivery_queue_url)
    c = st.admin_claim(MailRef(q.mail_id, q.groups[0]), clock())
    assert isinstance(c, Claim)
    st.mark(
        c,
        {r.rid: r.with_(state=RecipientState.HELD) for r in c.unresolved()},
        op={"action": "held"},
    )
    clock.advance(timedelta(days=6))
    stats = sweep(sw, orphans=True)["stats"]
    assert stats == {k: 0 for k in stats}
    assert st.get_group(c.ref).state == GroupState.HELD
    assert drain(aws, aws.resources.delivery_queue_url) == []


@pytest.mark.parametrize("content", ["small", "incompressible"])
def test_finished_mail_whose_cleanup_died_is_cleaned(aws: AwsEnv, content: str) -> None:
    from tests.support.faults import InjectedCrash, short_circuit

    clock = FakeClock()
    st = AwsStorage(replace(aws.settings, solo_item_max_bytes=0), aws.clients, clock=clock)
    sw = sweeper(SweeperSettings(), st, clock=clock)
    # small: the content is in the mail item (a solo mail, one item, is expired by TTL
    # instead: tests/test_solo.py); incompressible: in S3
    body = f.content() if content == "small" else f.incompressible()
    q = st.enqueue(f.envelope(), body)
    c = st.send_start(MailRef(q.mail_id, q.groups[0]), clock(), lease_seconds=60)
    assert isinstance(c, Claim)

    def die(_: dict[str, Any]) -> None:
        raise InjectedCrash("died")

    try:
        with (  # the cleanup's first request, whichever it is
            short_circuit(aws.clients.s3, "DeleteObject", die),
            short_circuit(aws.clients.dynamodb, "BatchWriteItem", die),
        ):
            st.send_done(c, ["r0"], Result(250, "2.0.0", "ok"))
    except InjectedCrash:
        pass
    assert st.content_exists(q.mail_id)
    clock.advance(timedelta(minutes=10))
    assert sweep(sw)["stats"]["MailsCleaned"] == 1
    assert not st.content_exists(q.mail_id)


def test_orphan_content_is_removed_only_after_36_hours(aws: AwsEnv) -> None:
    clock = FakeClock()
    st, sw = make(aws, clock)
    # an enqueue that died after storing the content
    aws.clients.s3.put_object(Bucket=aws.resources.bucket, Key="content/ORPHAN1", Body=b"x")
    q = st.enqueue(f.envelope(), f.content())  # a live mail must not be touched
    clock.advance(timedelta(hours=35))
    assert sweep(sw, orphans=True)["stats"]["OrphansRemoved"] == 0
    clock.advance(timedelta(hours=2))
    # (the live mail is past the trigger grace too, but still has state)
    stats = sweep(sw, orphans=True)["stats"]
    assert stats["OrphansRemoved"] == 1
    assert not st.content_exists("ORPHAN1")
    assert st.content_exists(q.mail_id)


def test_dsn_lost_between_drop_and_bounce_queue_is_reposted(aws: AwsEnv) -> None:
    clock = FakeClock()
    st, sw = make(aws, clock)
    q = st.enqueue(f.envelope(), f.content())
    c = st.send_start(MailRef(q.mail_id, q.groups[0]), clock(), lease_seconds=60)
    assert isinstance(c, Claim)
    st.drop(c, {"r0": Result(550, "5.1.1", "no")})
    drain(aws, aws.resources.bounce_queue_url)  # lost
    clock.advance(timedelta(minutes=20))
    assert sweep(sw)["stats"]["DsnReposted"] == 1
    assert [m["mail_id"] for m in drain(aws, aws.resources.bounce_queue_url)] == [q.mail_id]


def test_stops_early_when_time_runs_out(aws: AwsEnv) -> None:
    clock = FakeClock()
    st, sw = make(aws, clock)
    st.enqueue(f.envelope(), f.content())
    stats = sw.run(lambda: 1.0)
    assert stats.stopped_early and stats.triggers_reposted == 0
    assert utcnow() >= clock() - timedelta(seconds=5)
