"""Reputation guards end to end on moto: a principal whose mail bounces is paused
automatically (its queued mail waits, not refused, not lost), an operator sees it and
resumes it with the `mailqueue` CLI over the admin API (signed HTTP on 127.0.0.1), and the
waiting mail is delivered. The review / pause / resume events are in the outbox and
validate against the event schema."""

from __future__ import annotations

import io
import json
import time
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from mailqueue.cli import main as cli
from mailqueue.core.model import Envelope, Recipient
from mailqueue.outbound.reputation import (
    Counts,
    MemoryReputationStore,
    ReputationGuard,
    Thresholds,
    judge,
    record_feedback,
)
from mailqueue.services.admin import AdminApi

from functions.admin import app as admin_app
from tests.admin.conftest import Admin, make_admin
from tests.admin.http import serve
from tests.admin.test_cli import local_env
from tests.events.test_ses_schema import SCHEMA
from tests.support import factories as f
from tests.support.rigs import RigFactory, relay_to
from tests.support.smtp_peers import Behaviour, smtp_sink

P = "arn:aws:sts::123456789012:assumed-role/newsletter/app"
OTHER = "arn:aws:sts::123456789012:assumed-role/billing/app"
TH = json.dumps({"min_sends": 4, "window_sends": 10, "evaluate_seconds": 0, "bucket_seconds": 60})
VALIDATOR = Draft202012Validator(SCHEMA)


def env(principal: str, *to: str, sender: str = "news@shop.example") -> Envelope:
    e = f.envelope(*to, sender=sender)
    return Envelope(
        sender=e.sender,
        recipients=tuple(Recipient(rid="", address=a) for a in to),
        tags=(("mailqueue:principal", principal),),
    )


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(list(argv), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def outbox(admin: Admin) -> list[dict[str, Any]]:
    ddb, table = admin.aws.clients.dynamodb, admin.aws.resources.table
    items = ddb.scan(
        TableName=table,
        FilterExpression="begins_with(pk, :e)",
        ExpressionAttributeValues={":e": {"S": "E#"}},
    )["Items"]
    return [json.loads(i["event"]["S"]) for i in items]


@pytest.mark.parametrize("rig", ["aws"], indirect=True)
def test_bouncing_principal_is_paused_and_resumed_by_an_operator(
    rig: RigFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    bad = {f"gone{n}@list.example": "550 5.1.1 no such user" for n in range(3)}
    with smtp_sink(Behaviour(rcpt_replies=bad)) as peer:
        r = rig(
            routes=relay_to(peer.port),
            reputation=True,
            reputation_thresholds=TH,
            suspension_refresh_seconds=0,
            suspension_recheck_seconds=1,
        )
        admin = make_admin(r.aws, reputation_thresholds=TH)
        st = r.storage()
        # 3 of 5 sends bounce: 60 % >= 10 % (min_sends 4): the principal is paused
        for n in range(3):
            st.enqueue(env(P, f"gone{n}@list.example"), f.content())
        for n in range(2):
            st.enqueue(env(P, f"ok{n}@list.example"), f.content())
        while r.poll().received:
            pass
        assert len(peer.messages) == 2
        # its next mail waits in the queue, even from a sender domain with no bounces (the
        # principal is paused; shop.example too); another principal is not held
        waiting = st.enqueue(env(P, "late@list.example", sender="hi@fresh.example"), f.content())
        other = st.enqueue(env(OTHER, "x@list.example", sender="bills@bank.example"), f.content())
        for _ in range(3):
            r.poll()
        assert [m.rcpt_tos for m in peer.messages[2:]] == [["x@list.example"]]
        assert r.states(waiting.mail_id) == {"late@list.example": "queued"}
        assert not st.content_exists(other.mail_id)  # delivered and cleaned up
        assert st.content_exists(waiting.mail_id)  # waiting, not lost

        for k, v in local_env(admin).items():
            monkeypatch.setenv(k, v)
        api = AdminApi(admin.service, admin.api.launcher)
        with serve({"/v1/queue": lambda ev, ctx: admin_app.handle(ev, ctx, api)}) as url:
            code, out, err = run("reputation", "show", "--principal", P, "--api", url)
            assert code == 0, err
            assert "PAUSED" in out and "bounce rate 60.00%" in out
            code, out, err = run("reputation", "resume", "--principal", P, "--api", url)
            assert code == 0 and out.startswith("resumed principal"), err
            code, out, _ = run("reputation", "resume", "--principal", P, "--api", url)
            assert code != 0  # nothing left to resume
            code, out, err = run(
                "reputation", "resume", "--sender-domain", "shop.example", "--api", url
            )
            assert code == 0, err
        time.sleep(1.2)  # the held group's re-arm (suspension_recheck_seconds)
        for _ in range(5):
            r.poll()
            if r.states(waiting.mail_id) != {"late@list.example": "queued"}:
                break
            time.sleep(0.5)
        assert ["late@list.example"] in [m.rcpt_tos for m in peer.messages]
    events = [e for e in outbox(admin) if e["eventType"] == "mailqueue:Reputation"]
    actions = sorted(
        (e["mailqueue"]["reputation"]["action"], e["mailqueue"]["reputation"]["scope"])
        for e in events
    )
    assert ("paused", "principal") in actions and ("resumed", "principal") in actions
    assert ("paused", "sender_domain") in actions
    for e in events:
        errors = sorted(VALIDATOR.iter_errors(e), key=str)
        assert not errors, errors[0].message


def test_verdicts_follow_ses_defaults() -> None:
    t = Thresholds()
    assert judge("principal", P, Counts(1000, 49, 0), t).verdict == "ok"
    assert judge("principal", P, Counts(1000, 50, 0), t).verdict == "review"
    assert judge("principal", P, Counts(1000, 100, 0), t).verdict == "pause"
    assert judge("principal", P, Counts(1000, 0, 1), t).verdict == "review"
    assert judge("principal", P, Counts(1000, 0, 5), t).verdict == "pause"
    assert judge("principal", P, Counts(199, 199, 0), t).verdict == "too_few"


@pytest.mark.parametrize(
    "bad",
    [
        '{"bounce_review": 0.2, "bounce_pause": 0.1}',
        '{"complaint_pause": 1.5}',
        '{"min_sends": 10, "window_sends": 5}',
        '{"shards": 0}',
        '{"nope": 1}',
        "[1]",
    ],
)
def test_thresholds_are_validated(bad: str) -> None:
    from mailqueue.core.config import ConfigError

    with pytest.raises(ConfigError):
        Thresholds.parse(bad)


def test_late_feedback_counts_and_pauses() -> None:
    """record_feedback: complaints that arrive later (the other helper's ARF path) count
    against the principal and the sender domain."""
    from mailqueue.backends.inprocess import InProcess

    ip = InProcess.new()
    t = Thresholds(min_sends=100, window_sends=1000, evaluate_seconds=0)
    events: list[dict[str, Any]] = []
    g = ReputationGuard(MemoryReputationStore(), ip.suspensions, t, events=events.append)
    g.note(P, "news@shop.example", Counts(sends=400))
    g.flush()
    out = record_feedback(g, P, "shop.example", "complaint")
    assert {s.verdict for s in out} == {"review"}  # 1 / 400 = 0.25 % >= 0.1 %
    for _ in range(2):
        out = record_feedback(g, P, "shop.example", "complaint")
    assert {s.verdict for s in out} == {"pause"}  # 3 / 400 = 0.75 % >= 0.5 %
    held = {(s.scope, s.target) for s in ip.suspensions.all()}
    assert held == {("principal", P), ("sender_domain", "shop.example")}
    assert [e["mailqueue"]["reputation"]["action"] for e in events].count("paused") == 2


def test_late_feedback_on_the_state_table(aws: Any) -> None:
    """The composition other code uses for late bounces and complaints, on moto: counts
    in sharded bucket items, a pause as a suspension, its event in the outbox."""
    from mailqueue.backends.aws.suspension_store import DynamoSuspensionStore
    from mailqueue.compose.aws import reputation_guard

    ddb, table = aws.clients.dynamodb, aws.resources.table
    th = json.dumps({"min_sends": 5, "window_sends": 100, "evaluate_seconds": 0})
    guard = reputation_guard(ddb, table, th)
    for _ in range(5):  # five invocations' worth of sends, each one write per key
        guard.note(P, "news@shop.example", Counts(sends=4))
        guard.flush()
    late = record_feedback(guard, P, "shop.example", "bounce")  # 1 / 20 = 5 %: review
    assert {s.verdict for s in late} == {"review"}
    out = record_feedback(guard, P, "shop.example", "complaint")  # 1 / 20 = 5 % >= 0.5 %
    assert {s.verdict for s in out} == {"pause"}
    held = {(s.scope, s.target) for s in DynamoSuspensionStore(ddb, table).all()}
    assert held == {("principal", P), ("sender_domain", "shop.example")}
    items = ddb.scan(
        TableName=table,
        FilterExpression="begins_with(pk, :r)",
        ExpressionAttributeValues={":r": {"S": "REP#principal#"}},
    )["Items"]
    shards = {i["pk"]["S"] for i in items}
    assert 1 <= len(shards) <= 4 and sum(int(i["s"]["N"]) for i in items) == 20
    paused = [e for e in outbox_of(ddb, table) if e["eventType"] == "mailqueue:Reputation"]
    assert {e["mailqueue"]["reputation"]["action"] for e in paused} == {"review", "paused"}


def outbox_of(ddb: Any, table: str) -> list[dict[str, Any]]:
    items = ddb.scan(
        TableName=table,
        FilterExpression="begins_with(pk, :e)",
        ExpressionAttributeValues={":e": {"S": "E#"}},
    )["Items"]
    return [json.loads(i["event"]["S"]) for i in items]


@pytest.mark.parametrize("tagged", ["arn", "digest"])  # trace_private off / on
@pytest.mark.parametrize("named", ["arn", "digest"])  # what the operator types
def test_reputation_feedback_principal_named_by_arn_or_digest(tagged: str, named: str) -> None:
    """The admin routes' principal: the ARN and its sha256 digest are one principal,
    whichever the mail's tag holds (issue 42: `--principal ARN` answered "0 sends" when
    traces were private). Counted, shown, held and resumed under either name."""
    from datetime import UTC, datetime

    from mailqueue.backends.inprocess import InProcess
    from mailqueue.core.trace import principal_tag
    from mailqueue.outbound.suspensions import matching
    from mailqueue.services.admin.reputation import ReputationApi

    ip = InProcess.new()
    store = MemoryReputationStore()
    t = Thresholds(min_sends=20, window_sends=100, evaluate_seconds=0)
    tag = P if tagged == "arn" else principal_tag(P)
    name = P if named == "arn" else principal_tag(P)
    guard = ReputationGuard(store, ip.suspensions, t)
    guard.note(tag, "news@shop.example", Counts(sends=20))
    guard.flush()
    out = record_feedback(guard, tag, "shop.example", "complaint")  # 1 / 20 = 5 %: pause
    assert {s.verdict for s in out} == {"pause"}
    api = ReputationApi(store, ip.suspensions, t, clock=lambda: datetime.now(UTC))
    doc = api.show("principal", name)
    assert (doc["sends"], doc["complaints"], doc["verdict"]) == (20, 1, "pause"), doc
    assert doc["target"] == name and doc["key"] == principal_tag(P)
    assert doc["paused"] is not None and doc["paused"]["target"] == tag
    # another principal is someone else under either of its names
    assert api.show("principal", OTHER)["sends"] == 0
    assert api.show("principal", principal_tag(OTHER))["paused"] is None
    now = time.time()
    held = matching(ip.suspensions.all(), now, domain="x.example", sender_domain="a.example",
                    site=None, principal=tag)
    assert held is not None and held.scope == "principal"
    resumed = api.resume("principal", name, "operator")["resumed"]
    assert resumed is not None and resumed["target"] == tag
    assert api.show("principal", name)["paused"] is None
    assert matching(ip.suspensions.all(), now, domain="x.example", sender_domain="a.example",
                    site=None, principal=tag) is None


def test_an_operator_suspension_of_the_arn_holds_digest_tagged_mail() -> None:
    """`mailqueue suspend` naming a principal's ARN holds its mail when the tag holds
    the digest (trace_private on, the default), and the reverse."""
    from mailqueue.core.trace import principal_tag
    from mailqueue.outbound.suspensions import Suspension, matching

    now = time.time()
    for target, tag in ((P, principal_tag(P)), (principal_tag(P), P)):
        s = [Suspension("principal", target, now + 60, "ops", "operator", now)]
        kw = {"domain": "x.example", "sender_domain": "a.example", "site": None}
        assert matching(s, now, principal=tag, **kw) is s[0]
        assert matching(s, now, principal=OTHER, **kw) is None
        assert matching(s, now, principal=principal_tag(OTHER), **kw) is None
