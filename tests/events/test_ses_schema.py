"""The event log against SES's documented format: every record the producer writes (real
storage on moto, the real admin service, the real ingress outbox) and every record the
synthetic generator writes validates against tests/events/ses_event_schema.json, and the
vocabulary the pipeline keeps is the producer's."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator, FormatChecker
from mailqueue.backends.aws.eventlog import batch_id
from mailqueue.backends.aws.outbox import TableOutboxEmitter
from mailqueue.backends.aws.suppression_store import DynamoSuppressionStore
from mailqueue.compose.events import event_writer
from mailqueue.core import events as ev
from mailqueue.core.events import MailInfo, QueueEvent
from mailqueue.core.model import Claim, MailRef, Result, from_iso, utcnow
from mailqueue.core.trace import principal_tag
from mailqueue.outbound.reputation import Thresholds
from mailqueue.services.admin.service import Action, OpContext
from mailqueue.services.eventlog import (
    EventWriterService,
    EventWriterSettings,
    iter_jsonl,
    parse_header_block,
)
from mq_pipeline import consts, synth

from tests.admin.conftest import make_admin
from tests.support import factories as f
from tests.support.aws import AwsEnv
from tests.support.streams import StreamReader

SCHEMA = json.loads((Path(__file__).parents[1] / "events" / "ses_event_schema.json").read_text())
VALIDATOR = Draft202012Validator(SCHEMA, format_checker=FormatChecker())
ACTOR = "arn:aws:sts::123456789012:assumed-role/mailqueue-ops/alice"

OK = Result(250, "2.0.0", "2.0.0 Ok: queued as 1", "127.0.0.1")
TEMP = Result(451, "4.3.0", "4.3.0 try later", "mx.x.example")
FULL = Result(552, "5.2.2", "5.2.2 mailbox full", "192.0.2.7")
PERM = Result(550, "5.1.1", "5.1.1 user unknown", "192.0.2.7")


def errors(doc: dict[str, Any]) -> list[str]:
    return [f"{'/'.join(map(str, e.path))}: {e.message}" for e in VALIDATOR.iter_errors(doc)]


def read_log(aws: AwsEnv) -> tuple[list[str], list[dict[str, Any]]]:
    s3 = aws.clients.s3
    listing = s3.list_objects_v2(Bucket=aws.resources.bucket, Prefix="events/")
    keys = [o["Key"] for o in listing.get("Contents", [])]
    docs: list[dict[str, Any]] = []
    for k in keys:
        docs.extend(iter_jsonl(s3.get_object(Bucket=aws.resources.bucket, Key=k)["Body"].read()))
    return keys, docs


def service(aws: AwsEnv) -> EventWriterService:
    return event_writer(
        EventWriterSettings(
            bucket=aws.resources.bucket, hostname="mq.test", account_id="123456789012",
            max_queue_lifetime_seconds=3600,
        ),
        aws.clients.s3,
        aws.clients.dynamodb,
        aws.resources.table,
    )


def drive_everything(aws: AwsEnv) -> dict[str, str]:
    """One of each thing the queue records; returns mail ids by scenario."""
    st = aws.storage()
    admin = make_admin(aws)
    ctx = OpContext(actor=ACTOR)
    ids: dict[str, str] = {}
    q = st.enqueue(
        f.envelope("ok@x.example", "bad@x.example", "slow@x.example", "full@x.example",
                   "c@y.example"),
        f.content(),
    )
    ids["mixed"] = q.mail_id
    c = st.send_start(MailRef(q.mail_id, "x.example"), utcnow(), lease_seconds=60)
    assert isinstance(c, Claim)
    st.send_done(c, ["r0"], OK, tls=True)
    st.drop(c, {"r1": PERM, "r3": FULL})
    st.reschedule(c, {"r2": TEMP}, utcnow() + timedelta(minutes=5))
    # lifetime expiry: a verdict of our own, no reply (code 0)
    e = st.enqueue(f.envelope("old@z.example"), f.content())
    ids["expired"] = e.mail_id
    ce = st.send_start(MailRef(e.mail_id, "z.example"), utcnow(), lease_seconds=60)
    assert isinstance(ce, Claim)
    st.drop(ce, {"r0": Result(0, "4.4.7", "message expired after 3 attempts")})
    # every operator action
    for name, acts in {
        "held": [Action.HOLD],
        "released": [Action.HOLD, Action.RELEASE],
        "retried": [Action.RETRY],
        "deleted": [Action.DELETE],
        "bounced": [Action.BOUNCE],
    }.items():
        m = admin.enqueue(f"{name}@ops.example")
        ids[name] = m.mail_id
        for a in acts:
            admin.service.act(m.mail_id, a, ctx)
    # a Reject through the ingress outbox
    emitter = TableOutboxEmitter(aws.resources.table, aws.clients.dynamodb)
    emitter.emit([
        QueueEvent(
            "Reject",
            MailInfo("rejected-1", "a@example.org", utcnow(), ("b@example.net",), 10),
            None, utcnow(), "invalid_recipient",
            extra={"reason": "invalid_recipient", "field": "destination"},
        )
    ])
    # a Complaint and a late Bounce through the feedback service (services/feedback), about
    # a mail delivered and gone: its `mail` from the origin delivery left (reputation.py)
    from mailqueue.backends.aws.reputation_store import (
        DynamoReputationStore,
        OutboxReputationEvents,
    )
    from mailqueue.backends.aws.suspension_store import DynamoSuspensionStore
    from mailqueue.core.verp import KeyRing, encode
    from mailqueue.outbound import unsubscribe as unsub
    from mailqueue.outbound.reputation import Origin, ReputationGuard, counts_of
    from mailqueue.services.feedback.service import FeedbackService, FeedbackSettings
    from mailqueue.services.unsubscribe import UnsubscribeService, UnsubscribeSettings

    from tests.feedback.messages import arf, dsn
    from tests.feedback.test_verp import ring_json

    ddb, table = aws.clients.dynamodb, aws.resources.table
    th = Thresholds(min_sends=1, window_sends=10, evaluate_seconds=0)
    guard = ReputationGuard(
        DynamoReputationStore(ddb, table), DynamoSuspensionStore(ddb, table), th,
        events=OutboxReputationEvents(ddb, table), remember=True,
    )
    ring = KeyRing.parse(ring_json())
    fb = FeedbackService(
        FeedbackSettings(frozenset({"b.example.org"})), lambda: ring, st, emitter,
        reputation=guard,
    )
    # submitted by a principal (its tag as ingress writes it when traces are private)
    tagged = f.envelope("late@x.example")
    tagged = replace(tagged, tags=(("mailqueue:principal", principal_tag(ACTOR)),))
    late = st.enqueue(tagged, f.content())
    cl = st.send_start(MailRef(late.mail_id, "x.example"), utcnow(), lease_seconds=60)
    assert isinstance(cl, Claim)
    st.send_done(cl, ["r0"], OK, tls=True)  # delivered: the mail leaves the queue
    # what delivery notes for it (services/delivery.py): its send and its origin
    guard.note(
        cl.group.principal, cl.group.sender, counts_of({"r0": OK}),
        origin=Origin(late.mail_id, cl.group.principal, cl.group.sender,
                      cl.group.arrival.timestamp()),
    )
    guard.flush()
    to = encode(ring, late.mail_id, "0", "b.example.org")
    fb.receive([to], dsn(to, "late@x.example", "5.1.1", "550 5.1.1 no such user"), "r1")
    fb.receive([to], arf(to, "late@x.example"), "r2")  # 1 complaint in 1 send: a pause
    ids["feedback"] = late.mail_id
    # a one-click unsubscribe through the endpoint (services/unsubscribe.py), its token
    # made as delivery makes the link's
    keys = json.dumps({"k1": "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="})
    us = UnsubscribeService(
        UnsubscribeSettings(list_unsubscribe_keys=keys, list_unsubscribe_kid="k1"),
        DynamoSuppressionStore(ddb, table), emitter, reputation=guard,
    )
    token = unsub.make_token(us.keys, unsub.Unsubscription(
        late.mail_id, "late@x.example", "sender_domain", "example.org",
        int(time.time() // 86400), "k1",
    ))
    page = us.handle("POST", token, source_ip="192.0.2.1", body=b"List-Unsubscribe=One-Click",
                     content_type="application/x-www-form-urlencoded")
    assert page.status == 200, page.body
    return ids


def test_every_record_the_producer_writes_is_in_ses_format(aws: AwsEnv) -> None:
    reader = StreamReader(aws)
    ids = drive_everything(aws)
    service(aws).handle(reader.poll())
    keys, docs = read_log(aws)
    bad = {d["mailqueue"]["eventId"]: errors(d) for d in docs if errors(d)}
    assert bad == {}
    assert {d["eventType"] for d in docs} == set(ev.EVENT_TYPES)
    assert all(set(k) <= set("abcdefghijklmnopqrstuvwxyz0123456789-_./=") for k in keys), keys
    by_mail: dict[str, list[dict[str, Any]]] = {}
    for d in docs:
        if "mail" in d:  # a reputation event is about a sender
            by_mail.setdefault(d["mail"]["messageId"], []).append(d)

    mixed = by_mail[ids["mixed"]]
    (send,) = [d for d in mixed if d["eventType"] == "Send"]  # one Send, every destination
    assert sorted(send["mail"]["destination"]) == sorted(
        ["ok@x.example", "bad@x.example", "slow@x.example", "full@x.example", "c@y.example"]
    )
    assert send["mail"]["commonHeaders"]["subject"] == "hello"
    assert send["mail"]["commonHeaders"]["from"] == ["Alice <alice@example.org>"]
    assert {"name": "Message-ID", "value": "<orig-1@example.org>"} in send["mail"]["headers"]
    assert send["mail"]["sendingAccountId"] == "123456789012"
    one = {(d["eventType"], _rcpt(d)): d for d in mixed}
    dl = one["Delivery", "ok@x.example"]["delivery"]
    assert dl["smtpResponse"] == "250 2.0.0 Ok: queued as 1"  # as received, once
    assert dl["remoteMtaIp"] == "127.0.0.1"
    b = one["Bounce", "bad@x.example"]["bounce"]
    assert (b["bounceType"], b["bounceSubType"]) == ("Permanent", "NoEmail")
    assert b["bouncedRecipients"][0]["diagnosticCode"] == "smtp; 550 5.1.1 user unknown"
    assert b["feedbackId"] and b["reportingMTA"] == "dns; mq.test"
    full = one["Bounce", "full@x.example"]["bounce"]
    assert (full["bounceType"], full["bounceSubType"]) == ("Transient", "MailboxFull")
    dd = one["DeliveryDelay", "slow@x.example"]
    assert dd["deliveryDelay"]["delayType"] == "RecipientServerError"
    assert from_iso(dd["deliveryDelay"]["expirationTime"]) == from_iso(
        send["mail"]["timestamp"]
    ) + timedelta(seconds=3600)
    assert "remoteMtaIp" not in one["DeliveryDelay", "slow@x.example"]["deliveryDelay"]
    assert dd["mailqueue"]["remoteMta"] == "mx.x.example"  # the host name: ours, namespaced

    (exp,) = [d for d in by_mail[ids["expired"]] if d["eventType"] == "Bounce"]
    assert (exp["bounce"]["bounceType"], exp["bounce"]["bounceSubType"]) == (
        "Transient", "General",
    )
    diag = exp["bounce"]["bouncedRecipients"][0]["diagnosticCode"]
    assert diag == "x-mailqueue; 4.4.7 message expired after 3 attempts"

    for name in ("held", "released", "retried", "deleted", "bounced"):
        ops = [d["mailqueue"]["operator"]["action"] for d in by_mail[ids[name]]
               if d["eventType"] == "mailqueue:Operator"]
        assert ops[-1] == name, (name, ops)
    (rej,) = by_mail["rejected-1"]
    assert rej["reject"] == {"reason": "mailqueue:invalid_recipient"}

    # late feedback and the unsubscribe are about the delivered mail: its sender and
    # arrival (the Send's), not the null sender and the report's time
    fb = {d["eventType"]: d for d in by_mail[ids["feedback"]]}
    sent = fb["Send"]["mail"]
    for kind in ("Complaint", "Subscription"):
        assert fb[kind]["mail"]["source"] == sent["source"] == "alice@example.org", kind
        assert from_iso(fb[kind]["mail"]["timestamp"]) == from_iso(sent["timestamp"]), kind
    late_bounce = next(
        d for d in by_mail[ids["feedback"]]
        if d["eventType"] == "Bounce" and d["mailqueue"].get("feedback")
    )
    assert late_bounce["mail"]["source"] == "alice@example.org"
    # the late bounce's fields from the DSN as sent: its Diagnostic-Code (the code once),
    # its Reporting-MTA (the receiver's, not our hostname), the principal of the mail
    lb = late_bounce["bounce"]
    assert (lb["bounceType"], lb["bounceSubType"]) == ("Permanent", "NoEmail")
    assert lb["bouncedRecipients"][0]["diagnosticCode"] == "smtp; 550 5.1.1 no such user"
    assert lb["reportingMTA"] == "dns; mx.receiver.example"
    assert late_bounce["mail"]["tags"]["mailqueue:principal"] == [sent_principal(fb["Send"])]
    assert fb["Subscription"]["mail"]["tags"]["mailqueue:principal"] == [
        sent_principal(fb["Send"])
    ]
    # the ARF report's Arrival-Date (Thu, 8 Mar 2005 14:00:00 EDT) in ISO 8601, UTC
    assert fb["Complaint"]["complaint"]["arrivalDate"] == "2005-03-08T18:00:00.000Z"
    assert fb["Complaint"]["complaint"]["complaintSubType"] is None
    # and the guard heard them: the late hard bounce (1 in 1 send) paused the principal
    # and the sender domain, real pause events (the complaint then found them paused)
    paused = [d["mailqueue"]["reputation"] for d in docs if d["eventType"] == ev.REPUTATION_EVENT]
    assert sorted((r["action"], r["scope"], r["target"]) for r in paused) == [
        ("paused", "principal", principal_tag(ACTOR)),
        ("paused", "sender_domain", "example.org"),
    ]
    assert {(r["sends"], r["bounces"], r["complaints"]) for r in paused} == {(1, 1, 0)}


def sent_principal(send: dict[str, Any]) -> str:
    tag: list[str] = send["mail"]["tags"]["mailqueue:principal"]
    return tag[0]


def _rcpt(d: dict[str, Any]) -> str | None:
    for path in (("delivery", "recipients"), ("bounce", "bouncedRecipients"),
                 ("deliveryDelay", "delayedRecipients")):
        obj = d.get(path[0])
        if obj:
            r = obj[path[1]][0]
            return r if isinstance(r, str) else r["emailAddress"]
    return None


def test_a_retried_batch_overwrites_and_keys_have_no_colons(aws: AwsEnv) -> None:
    st = aws.storage()
    reader = StreamReader(aws)
    st.enqueue(f.envelope("a@x.example", "b@y.example"), f.content())
    records = reader.poll()
    records = [{**r, "eventSourceARN": r["eventSourceARN"] + "/stream/2026-11-24T05:23:08.806"}
               for r in records]
    assert ":" in records[0]["eventSourceARN"]
    svc = service(aws)
    first, second = svc.handle(records), svc.handle(records)
    assert first["objects"] == second["objects"]
    assert all(":" not in k for k in first["objects"])
    assert batch_id(records) == batch_id(list(records))
    _, docs = read_log(aws)
    assert len(docs) == 1 and docs[0]["eventType"] == "Send"


@pytest.mark.parametrize(
    "result",
    [
        None,
        Result(550, "5.1.1", "no"), Result(552, "5.2.2", "full"), Result(452, "4.2.2", "full"),
        Result(552, "5.3.4", "big"), Result(0, "4.4.7", "expired"), Result(554, "5.7.1", "no"),
        Result(451, "4.7.1", "spam suspected"), Result(0, "4.4.1", "refused"),
        Result(0, "4.4.3", "dns"), Result(0, "4.3.0", "content"), Result(421, "4.3.2", "bye"),
        Result(450, "4.1.8", "sender domain"), Result(250, "2.0.0", "odd"),
    ],
)
def test_the_pipeline_copy_of_the_rules_is_the_producers(result: Result | None) -> None:
    status = result.status if result else None
    assert consts.ses_bounce_class(status) == ev.bounce_class(result)
    btype, sub = ev.bounce_class(result)
    assert sub in ev.SES_BOUNCE_TYPES[btype]
    if result is not None:
        assert consts.ses_delay_type(result.code, result.status, result.text) == ev.delay_type(
            result
        )
        assert ev.delay_type(result) in ev.SES_DELAY_TYPES


def test_one_vocabulary_for_producer_pipeline_and_schema() -> None:
    assert consts.WIRE_EVENT_TYPES == ev.EVENT_TYPES
    assert consts.OPERATOR_EVENT == ev.OPERATOR_EVENT
    assert consts.OPERATOR_COMMANDS == dict(ev.OPERATOR_ACTIONS)
    assert sorted(consts.OPERATOR_ACTIONS) == sorted(ev.OPERATOR_ACTIONS.values())
    assert {a.value for a in Action} == set(ev.OPERATOR_ACTIONS)  # every admin command
    assert consts.SES_BOUNCE_TYPES == dict(ev.SES_BOUNCE_TYPES)
    assert consts.SES_DELAY_TYPES == ev.SES_DELAY_TYPES
    props = SCHEMA["properties"]
    assert props["eventType"]["enum"] == list(ev.EVENT_TYPES)
    ours = SCHEMA["$defs"]["mailqueue"]["properties"]
    assert sorted(ours["operator"]["properties"]["action"]["enum"]) == sorted(
        ev.OPERATOR_ACTIONS.values()
    )
    assert SCHEMA["$defs"]["deliveryDelay"]["properties"]["delayType"]["enum"] == list(
        ev.SES_DELAY_TYPES
    )
    pairs = {
        o["properties"]["bounceType"]["const"]: tuple(o["properties"]["bounceSubType"]["enum"])
        for o in SCHEMA["$defs"]["bounce"]["oneOf"]
    }
    assert pairs == dict(ev.SES_BOUNCE_TYPES)


def test_every_record_the_generator_writes_is_in_ses_format(tmp_path: Path) -> None:
    cfg = synth.SynthConfig(events=4000, shards=1, seed=5, operator_rate=0.05, complaint_rate=0.003)
    synth.generate(cfg, tmp_path, processes=1)
    seen: dict[str, int] = {}
    bad: list[str] = []
    import gzip

    for path in sorted((tmp_path / "events").rglob("*.json.gz")):
        for line in gzip.open(path, "rt"):
            d = json.loads(line)
            seen[d["eventType"]] = seen.get(d["eventType"], 0) + 1
            bad += errors(d)[:1]
            if d["eventType"] == "Bounce" and d["bounce"]["bouncedRecipients"][0].get(
                "status"
            ) == "4.4.7":
                assert d["bounce"]["bounceType"] == "Transient"  # as the producer writes it
    assert bad == []
    # the generator simulates mails for the report; the report does not count unsubscribes
    # or reputation events yet (transforms.normalise drops them), so it writes neither
    assert set(seen) == set(ev.EVENT_TYPES) - {ev.REPUTATION_EVENT, ev.SUBSCRIPTION_EVENT}, seen


def test_headers_are_cut_at_ses_limit() -> None:
    big = b"From: a@example.org\r\n" + b"".join(
        b"X-Filler-%d: %s\r\n" % (i, b"y" * 200) for i in range(80)
    ) + b"\r\nbody"
    headers, truncated = parse_header_block(big)
    assert truncated and headers[0] == ("From", "a@example.org")
    assert sum(len(n) + len(v) for n, v in headers) <= ev.HEADERS_MAX
    small, cut = parse_header_block(f.content())
    assert not cut and ("Subject", "hello") in small


def test_schema_rejects_what_the_issue_found() -> None:
    """The schema is not a rubber stamp: the old records' defects fail it."""
    good = QueueEvent(
        "Delivery", MailInfo("m1", "a@example.org", utcnow(), ("b@example.net",)),
        "b@example.net", utcnow(), "1", OK,
    )
    from mailqueue.core.model import Attempt

    att = Attempt(1, utcnow(), utcnow(), utcnow(), OK, True)
    doc = {**good.to_json()}
    doc["mailqueue"] = {**doc["mailqueue"], "attempt": QueueEvent(
        "Delivery", good.mail, "b@example.net", utcnow(), "1", OK, att).to_json()[
        "mailqueue"]["attempt"]}
    assert errors(doc) == []
    mutations: list[Callable[[dict[str, Any]], None]] = [
        lambda d: d["delivery"].update(smtpResponse="250 2.0.0 2.0.0 Ok"),
        lambda d: d["delivery"].update(remoteMtaIp="mx.example.net"),
        lambda d: d.update(eventType="Operator"),
        lambda d: d["mail"].pop("commonHeaders"),
        lambda d: d.update(attempt={"number": 1}),
    ]
    for mutate in mutations:
        bad = json.loads(json.dumps(doc))
        mutate(bad)
        assert errors(bad), bad
    bounce = QueueEvent(
        "Bounce", good.mail, "b@example.net", utcnow(), "b", PERM
    ).to_json()
    assert errors(bounce) == []
    bounce["bounce"]["bounceSubType"] = "MailboxFull"  # Permanent + MailboxFull: not SES's
    assert errors(bounce)
    bounce["bounce"].update(bounceType="Transient")
    bounce["bounce"]["bouncedRecipients"][0]["diagnosticCode"] = "smtp; 0 expired"
    assert errors(bounce)
    bounce["bounce"].update(bounceSubType="General")
    for diag, ok in (
        ("smtp; 550 550 5.1.1 no such user", False),  # the code twice (issue 42)
        ("smtp; 550-550 5.1.1 no such user", False),
        ("smtp; 550 5.1.1 no such user", True),
        ("smtp; 550 5505 is not a code", True),
    ):
        bounce["bounce"]["bouncedRecipients"][0]["diagnosticCode"] = diag
        assert (errors(bounce) == []) is ok, diag
    # what issue 42 found: a Complaint's arrivalDate as the report wrote it (RFC 5322),
    # a Subscription from the null sender, an unknown complaint type or subtype
    complaint = QueueEvent(
        "Complaint", good.mail, "b@example.net", utcnow(), "feedback:r",
        extra={"feedback_type": "abuse", "arrival_date": "2005-03-08T18:00:00.000Z"},
    ).to_json()
    assert errors(complaint) == []
    for key, value in (
        ("arrivalDate", "Thu, 8 Mar 2005 14:00:00 EDT"),
        ("complaintFeedbackType", "opt-out"),
        ("complaintSubType", "Whatever"),
    ):
        bad = json.loads(json.dumps(complaint))
        bad["complaint"][key] = value
        assert errors(bad), key
    from mailqueue.outbound.unsubscribe import Unsubscription
    from mailqueue.services.unsubscribe import subscription_event

    u = Unsubscription("m1", "b@example.net", "sender_domain", "example.org", 20000, "k")
    sub = subscription_event(u, time.time(), method="one-click").to_json()
    assert sub["mail"]["source"] == "" and errors(sub)  # no origin: not what SES writes


def test_replies_are_shown_once_by_the_log_and_the_cli() -> None:
    """`mailqueue list/show` and `delivery.smtpResponse` print a reply's status once."""
    from mailqueue.cli.main import _result

    assert _result(OK.to_json()) == "(250 2.0.0 Ok: queued as 1)"
    assert _result(Result(550, "5.0.0", "no such user").to_json()) == "(550 5.0.0 no such user)"
    assert _result(Result(0, "4.4.1", "connection refused").to_json()) == (
        "(4.4.1 connection refused)"
    )
    assert ev.smtp_response(OK) == "250 2.0.0 Ok: queued as 1"
