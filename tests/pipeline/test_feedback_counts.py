"""Complaints and late bounces (services/feedback) and one-click unsubscribes
(services/unsubscribe) in the Spark report: counted per recipient domain and per envelope
sender, beside the mails' outcomes, which a late report does not change."""

from __future__ import annotations

import json
from dataclasses import replace

from mailqueue.core.events import MailInfo, QueueEvent, dumps
from mailqueue.core.model import Result
from mailqueue.outbound.unsubscribe import Unsubscription
from mailqueue.services.unsubscribe import subscription_event
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


def unsubscribe(mail_id: str, rcpt: str, minutes: float) -> QueueEvent:
    """The event services/unsubscribe writes for a one-click POST (scoped to the domain)."""
    u = Unsubscription(mail_id, rcpt, "sender_domain", "example.org", 1, "k1")
    return subscription_event(u, at(minutes).timestamp(), method="one-click")


def topic_change(mail_id: str, rcpt: str, status: str, source: str) -> str:
    """A Subscription as SES writes it for a topic preference change (mail.source set)."""
    prefs = {"unsubscribeAll": False, "topicSubscriptionStatus": [
        {"topicName": "news", "subscriptionStatus": status}]}
    old = {"unsubscribeAll": False, "topicSubscriptionStatus": []}
    return json.dumps({
        "eventType": "Subscription",
        "mail": {"messageId": mail_id, "timestamp": "2026-05-04T12:00:00.000Z",
                 "source": source, "destination": [rcpt]},
        "subscription": {"contactList": "list-1", "timestamp": "2026-05-04T12:00:01.000Z",
                         "source": "UnsubscribeHeader", "newTopicPreferences": prefs,
                         "oldTopicPreferences": old},
        "mailqueue": {"eventId": f"ses-{mail_id}-{status}"},
    })


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
    # one-click unsubscribes: their events name no sender (our token has none), so the
    # report takes it from the mail's Send; twice the same POST is one event (one id)
    evs += [
        unsubscribe("A", "u2@y.example", 64),
        unsubscribe("A", "u2@y.example", 64),
        unsubscribe("B", "u3@x.example", 65),
        unsubscribe("GONE", "v@z.example", 66),  # its Send is not in the data read
    ]
    docs = [("2026-05-04", "10", dumps(e)) for e in evs]
    # SES's topic form: an OptOut counts (sender from its own mail.source), an OptIn not
    docs += [
        ("2026-05-04", "12", topic_change("C", "w@y.example", "OptOut", "carol@c.example")),
        ("2026-05-04", "12", topic_change("D", "w@y.example", "OptIn", "carol@c.example")),
    ]
    events = T.dedupe(T.normalise(fx.raw_df(spark, docs)), 2)
    rows = {
        (r["grain"], r["domain"] or r["sender"]): r.asDict() for r in R.feedback(events).collect()
    }
    counts = {
        k: (v["complaints"], v["unsubscribes"], v["late_bounces"], v["late_hard_bounces"])
        for k, v in rows.items()
    }
    assert counts == {
        ("domain", "x.example"): (2, 1, 1, 0),
        ("domain", "y.example"): (0, 2, 1, 1),
        ("domain", "z.example"): (0, 1, 0, 0),
        ("sender", a.source): (1, 1, 1, 1),
        ("sender", "bob@other.example"): (1, 1, 1, 0),
        ("sender", "carol@c.example"): (0, 1, 0, 0),
        ("sender", None): (0, 1, 0, 0),
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
