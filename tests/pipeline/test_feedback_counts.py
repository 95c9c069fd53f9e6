"""Complaints and late bounces (services/feedback) in the Spark report: counted per
recipient domain and per envelope sender, beside the mails' outcomes, which a late
report does not change."""

from __future__ import annotations

from dataclasses import replace

from mailqueue.core.events import MailInfo, QueueEvent, dumps
from mailqueue.core.model import Result
from mq_pipeline import report as R
from mq_pipeline import transforms as T
from pyspark.sql import SparkSession

from tests.pipeline import factory as fx
from tests.pipeline.factory import at

LATE = {"report": "ses-1", "late": True}


def complaint(m: MailInfo, rcpt: str, minutes: float) -> QueueEvent:
    return QueueEvent(
        "Complaint",
        m,
        rcpt,
        at(minutes),
        "feedback:c-" + rcpt,
        extra={"feedback_type": "abuse", "user_agent": "FBL/1", "feedback": LATE},
    )


def late_bounce(m: MailInfo, rcpt: str, minutes: float, hard: bool) -> QueueEvent:
    r = Result(550, "5.1.1", "5.1.1 user unknown") if hard else Result(552, "5.2.2", "full")
    cls = ("Permanent", "NoEmail") if hard else ("Transient", "MailboxFull")
    return QueueEvent(
        "Bounce",
        m,
        rcpt,
        at(minutes),
        "feedback:b-" + rcpt,
        result=r,
        extra={"bounce_class": cls, "feedback": LATE},
    )


def test_feedback_counts_per_domain_and_sender(spark: SparkSession) -> None:
    a = fx.mail("A", ["u1@x.example", "u2@y.example"], at(0))  # from alice@example.org
    b = replace(fx.mail("B", "u3@x.example", at(1)), source="bob@other.example")
    ok = fx.attempt(1, at(0), 0.5, 1.0, 250, "2.0.0", "ok")
    evs = [
        fx.send(a),
        fx.send(b),
        fx.delivery(a, "u1@x.example", ok),
        fx.delivery(a, "u2@y.example", ok),
        fx.delivery(b, "u3@x.example", ok),
        complaint(a, "u1@x.example", 60),
        complaint(b, "u3@x.example", 61),
        late_bounce(a, "u2@y.example", 62, hard=True),
        late_bounce(b, "u3@x.example", 63, hard=False),
    ]
    docs = [("2026-05-04", "10", dumps(e)) for e in evs]
    events = T.dedupe(T.normalise(fx.raw_df(spark, docs)), 2)
    rows = {
        (r["grain"], r["domain"] or r["sender"]): r.asDict() for r in R.feedback(events).collect()
    }
    counts = {
        k: (v["complaints"], v["late_bounces"], v["late_hard_bounces"]) for k, v in rows.items()
    }
    assert counts == {
        ("domain", "x.example"): (2, 1, 0),
        ("domain", "y.example"): (0, 1, 1),
        ("sender", a.source): (1, 1, 1),
        ("sender", "bob@other.example"): (1, 1, 0),
    }
    # the mails stay delivered: a late report is counted beside the outcome
    out = {
        (r["message_id"], r["rcpt"]): r["final_state"]
        for r in T.outcomes(events, T.TimeRange.parse(None, None)).collect()
    }
    assert out == {
        ("A", "u1@x.example"): "delivered",
        ("A", "u2@y.example"): "delivered",
        ("B", "u3@x.example"): "delivered",
    }
