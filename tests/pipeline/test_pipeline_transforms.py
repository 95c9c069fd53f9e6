"""Each transform on a handful of rows built with explicit schemas."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from mailqueue.core.events import dumps
from mailqueue.core.model import Result
from mq_pipeline import transforms as T
from mq_pipeline.schema import OUTCOME_SCHEMA
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from tests.pipeline import factory as fx
from tests.pipeline.factory import at


def _by(rows: list[dict[str, Any]], key: str) -> dict[str, dict[str, Any]]:
    return {r[key]: r for r in rows}


def test_time_range_parsing() -> None:
    r = T.TimeRange.day("2026-05-04")
    assert r.start == datetime(2026, 5, 4, tzinfo=UTC)
    assert r.end == datetime(2026, 5, 5, tzinfo=UTC)
    r = T.TimeRange.parse("2026-05-04", "2026-05-05")  # --to date is inclusive
    assert r.end == datetime(2026, 5, 6, tzinfo=UTC)
    r = T.TimeRange.parse("2026-05-04T10:00:00Z", "2026-05-04T12:30")
    assert (r.start, r.end) == (
        datetime(2026, 5, 4, 10, tzinfo=UTC),
        datetime(2026, 5, 4, 12, 30, tzinfo=UTC),
    )
    assert not T.TimeRange.parse(None, None).bounded
    with pytest.raises(ValueError):
        T.TimeRange.parse("2026-05-05", "2026-05-04T00:00")


def test_normalise_flattens_every_event_type(spark: SparkSession) -> None:
    m = fx.mail("M1", "Bob@Example.ORG", at(0))
    a1 = fx.attempt(1, at(0), 2.5, 1.0, 451, "4.7.1", "greylisted, try again in 300 seconds")
    a2 = fx.attempt(2, at(5), 0.5, 1.0, 250, "2.0.0", "Ok: queued as ABC123")
    rj = fx.mail("M2", ["a@x.example", "b@y.example", "c@z.example"], at(1))
    evs = [
        fx.send(m, "Bob@Example.ORG"),
        fx.delay(m, "Bob@Example.ORG", a1, at(5)),
        fx.delivery(m, "Bob@Example.ORG", a2),
        fx.operator(m, "Bob@Example.ORG", at(3), "held"),
        fx.reject(rj, at(1)),
    ]
    docs = [("2026-05-04", "10", dumps(e)) for e in evs]
    rows = [r.asDict() for r in T.normalise(fx.raw_df(spark, docs)).collect()]
    by_type = _by(rows, "event_type")
    assert set(by_type) == {"Send", "DeliveryDelay", "Delivery", "Operator", "Reject"}
    s = by_type["Send"]
    assert s["rcpt"] == "Bob@Example.ORG" and s["domain"] == "example.org"
    assert s["ts"] == s["accepted_at"] == at(0).replace(tzinfo=None)
    d = by_type["DeliveryDelay"]
    assert d["status"] == "4.7.1"
    assert d["diag"] == "smtp; 451 greylisted, try again in 300 seconds"
    assert d["attempt"] == 1 and d["sched_lag_s"] == pytest.approx(2.5)
    assert d["ts"] == a1.finished_at.replace(tzinfo=None)
    dl = by_type["Delivery"]
    assert dl["attempt"] == 2 and dl["sched_lag_s"] == pytest.approx(0.5)
    assert by_type["Operator"]["action"] == "held"
    r = by_type["Reject"]
    assert r["rcpt"] is None and r["n_dest"] == 3 and r["domain"] == "x.example"
    assert r["diag"] == "invalid recipient address"
    assert not any(x["late"] for x in rows)
    # sender and size from the mail, on Send and Reject only; only a Send has a position
    assert (s["sender"], s["size"], s["dest_pos"]) == ("app@sender.example", 1200, 0)
    assert (r["sender"], r["size"], r["dest_pos"]) == ("app@sender.example", 1200, None)
    assert (d["sender"], d["size"], dl["sender"]) == (None, None, None)


def test_normalise_late_status_fallback_and_bad_rows(spark: SparkSession) -> None:
    m = fx.mail("M1", "u@d.example", at(0))
    # Bounce without a status field: the code is taken from the diagnostic text.
    b = fx.bounce(m, "u@d.example", at(1), Result(550, "5.1.1", "5.1.1 user unknown"))
    doc = dumps(b).replace('"status":"5.1.1"', '"status":null')
    docs = [
        ("2026-05-04", "11", doc),  # written an hour after its 10:01 time: late
        ("2026-05-04", "10", '{"eventType":"Send"}'),  # no eventId: dropped
        ("2026-05-04", "10", "not json at all"),  # malformed: dropped
        ("2026-05-04", "10", dumps(fx.send(m, "u@d.example")).replace(
            "2026-05-04T10:00:00.000Z", "garbage")),  # bad timestamp: null, not a failure
    ]
    rows = [r.asDict() for r in T.normalise(fx.raw_df(spark, docs)).collect()]
    assert len(rows) == 2
    by_type = _by(rows, "event_type")
    assert by_type["Bounce"]["status"] == "5.1.1" and by_type["Bounce"]["late"] is True
    assert by_type["Bounce"]["diag"] == "smtp; 550 5.1.1 user unknown"
    assert by_type["Send"]["ts"] is None and by_type["Send"]["accepted_at"] is None


GSMTP_UNKNOWN = "the email account that you tried to reach does not exist. <id> - gsmtp"
REASON_CASES = [
    ("smtp; 550 5.1.1 <Bob.Smith@Example.com>: Recipient address rejected: User unknown",
     "<addr>: recipient address rejected: user unknown"),
    ("smtp; 421 4.7.0 [TSS04] Messages from 203.0.113.7 temporarily deferred, 9f8e7d6c5b",
     "[<id>] messages from <ip> temporarily deferred, <id>"),
    ("smtp; 451 4.7.1 Greylisted, please try again in 300 seconds",
     "greylisted, please try again in # seconds"),
    ("smtp; 0 Connection timed out to mx1.corp00012.example",
     "connection timed out to <id>.<id>.example"),
    ("smtp; 552 5.2.2 Mailbox full (quota exceeded) id=00ab12cd34ef",
     "mailbox full (quota exceeded) id=<id>"),
    # issue 28: an all-digit id is the same reason, not "id=#"
    ("smtp; 552 5.2.2 Mailbox full (quota exceeded) id=0012345678",
     "mailbox full (quota exceeded) id=<id>"),
    ("smtp; 451 4.3.0 Queue ID:98765 busy", "queue id:<id> busy"),
    ("  SMTP;   554   Service unavailable; Client host [198.51.100.3] blocked",
     "service unavailable; client host <ip> blocked"),
    ("rate limit exceeded", "rate limit exceeded"),
    # issue 44: a 12-character hex id is one reason whatever its digits (Gmail's trailer)
    ("smtp; 550 5.1.1 The email account that you tried to reach does not exist. "
     "123456789012 - gsmtp", GSMTP_UNKNOWN),
    ("smtp; 550 5.1.1 The email account that you tried to reach does not exist. "
     "1234567890ab - gsmtp", GSMTP_UNKNOWN),
    ("smtp; 452 4.2.2 size 10485760 over quota", "size # over quota"),
]


def test_reason_normaliser_spark_matches_expectations_and_python(spark: SparkSession) -> None:
    rnd = random.Random(7)
    alphabet = "abcXYZ0123456789 .;:@<>[]-_=" + "smtp"
    extra = ["".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 40))) for _ in range(300)]
    texts = [c for c, _ in REASON_CASES] + extra + [None]
    df = spark.createDataFrame([(i, t) for i, t in enumerate(texts)], "i int, t string")
    got = {
        r["i"]: r["n"]
        for r in df.select("i", T.normalise_reason_col(F.col("t")).alias("n")).collect()
    }
    for i, (_, want) in enumerate(REASON_CASES):
        assert got[i] == want
    for i, t in enumerate(texts):
        assert got[i] == T.normalise_reason_py(t), t


def test_lower_col_answers_as_lower_does(spark: SparkSession) -> None:
    """`lower_col` takes a shortcut for ASCII text (issue 28: Spark 4's ICU `lower` costs
    seconds on its first call); every other text still gets `lower`'s own answer."""
    texts = [
        "Bob@Example.NET", "MAILER-DAEMON", "", "already lower", "550 5.1.1 <A@B.C> UNKNOWN",
        "İstanbul@ÖRNEK.com.tr", "ΟΔΟΣ", "Straße ÜBER", "Ünïcödé x@Y", "tab\tCR\rEND",
        None,
    ]
    df = spark.createDataFrame([(t,) for t in texts], "t string")
    rows = df.select(
        "t", F.lower("t").alias("want"), T.lower_col(F.col("t")).alias("got")
    ).collect()
    assert [(r.t, r.got) for r in rows] == [(r.t, r.want) for r in rows]
    assert rows[0].got == "bob@example.net" and rows[-1].got is None


def test_the_jobs_jvm_case_mapping_answers_as_icu_and_python_do(spark: SparkSession) -> None:
    """The job lower-cases with the JVM's case mapping (`job.JOB_CONF`: no ICU table to
    build, issue 28); on addresses, domains and replies in many scripts it gives ICU's
    answers, and Python's (the reference reports and the tests' expectations)."""
    from mq_pipeline import job

    texts = [
        "Bob@Example.NET", "İstanbul@ÖRNEK.com.tr", "ΟΔΟΣ ΣΟΦΟΣ", "Straße ÜBER", "ǅemal",
        "ПОЧТА@ПРИМЕР.РФ", "ĲSSEL", "Ünïcödé x@Y", "550 5.1.1 <Ω@Δ.GR> UNKNOWN", "ＡＢＣ",
    ]
    df = spark.createDataFrame([(t,) for t in texts], "t string")
    icu = [r.l for r in df.select(F.lower("t").alias("l")).collect()]
    with job.session_conf(spark, job.JOB_CONF):
        jvm = [r.l for r in df.select(F.lower("t").alias("l")).collect()]
    assert jvm == icu == [t.lower() for t in texts]


def test_partition_filter_prunes_by_write_hour_with_lateness(spark: SparkSession) -> None:
    parts = [("2026-05-03", "23"), ("2026-05-04", "00"), ("2026-05-04", "23"),
             ("2026-05-05", "00"), ("2026-05-05", "01"), ("2026-05-05", "02")]
    m = fx.mail("M", "u@d.example", at(0))
    docs = [(dt, hr, dumps(fx.send(m, "u@d.example"))) for dt, hr in parts]
    raw = fx.raw_df(spark, docs)
    got = sorted(
        (r["dt"], r["hr"])
        for r in T.partition_filter(raw, T.TimeRange.day("2026-05-04"), 2).collect()
    )
    assert got == parts[1:5]  # 05-03 23h is before; 05-05 02h is past the 2 h of lateness
    unbounded = T.partition_filter(raw, T.TimeRange(None, None), 2).count()
    assert unbounded == len(parts)


def test_in_range_uses_event_time(spark: SparkSession) -> None:
    day = T.TimeRange.day("2026-05-04")
    rows = [
        fx.norm_row(event_id="a", event_type="Send", ts=datetime(2026, 5, 3, 23, 59, tzinfo=UTC)),
        fx.norm_row(event_id="b", event_type="Send", ts=datetime(2026, 5, 4, 0, 0, tzinfo=UTC)),
        fx.norm_row(event_id="c", event_type="Send", ts=datetime(2026, 5, 4, 23, 59, tzinfo=UTC)),
        fx.norm_row(event_id="d", event_type="Send", ts=datetime(2026, 5, 5, 0, 0, tzinfo=UTC)),
    ]
    kept = T.in_range(fx.norm_df(spark, rows, copies=False), day).collect()
    got = sorted(r["event_id"] for r in kept)
    assert got == ["b", "c"]


def test_in_range_on_raw_times_in_every_form(spark: SparkSession) -> None:
    """The string comparison of the canonical form agrees with the time comparison at the
    boundaries; other ISO forms are parsed; a canonical-looking non-time is dropped."""
    t0 = "2026-05-04T10:00:00.000Z"
    cases = {
        "2026-05-03T23:59:59.999Z": False,
        "2026-05-04T00:00:00.000Z": True,
        "2026-05-04T23:59:59.999Z": True,
        "2026-05-05T00:00:00.000Z": False,
        "2026-05-04T01:30:00+02:00": False,  # 2026-05-03T23:30Z
        "2026-05-04T22:30:00-02:00": False,  # 2026-05-05T00:30Z
        "2026-05-03T23:30:00-01:00": True,  # 2026-05-04T00:30Z
        "2026-05-04T12:00:00Z": True,
        "2026-05-04 12:00:00.123456Z": True,
        "2026-05-04T25:00:00.000Z": None,  # shaped like a time, is none: null ts
        "garbage": False,
    }
    docs = []
    for i, stamp in enumerate(cases):
        m = fx.mail(f"M{i}", "u@d.example", at(0))
        docs.append(("2026-05-04", "10", dumps(fx.send(m, "u@d.example")).replace(t0, stamp)))
    day = T.TimeRange.day("2026-05-04")
    rows = T.in_range(T.normalise(fx.raw_df(spark, docs)), day).collect()
    assert "ts_raw" not in rows[0].asDict()
    got = {r["message_id"]: r["ts"] for r in rows}
    stamps = list(cases)
    kept = {stamps[int(mid[1:])] for mid in got}
    assert kept == {s for s, ok in cases.items() if ok is not False}
    assert got["M9"] is None  # prepare() drops it after de-duplication
    # A bound that is not a whole millisecond: the string shortcut is not used.
    odd = T.TimeRange(day.start + timedelta(microseconds=500), day.end)
    rows = T.in_range(T.normalise(fx.raw_df(spark, docs)), odd).collect()
    assert "2026-05-04T00:00:00.000Z" not in {stamps[int(r["message_id"][1:])] for r in rows}


def test_dedupe_keeps_one_row_per_event_id(spark: SparkSession) -> None:
    t = datetime(2026, 5, 4, 10, tzinfo=UTC)
    base = dict(event_type="Delivery", message_id="M1", rcpt="u@d.example", ts=t,
                accepted_at=t, attempt=1)
    rows = [
        fx.norm_row(event_id="e1", late=False, **base),
        fx.norm_row(event_id="e1", late=True, **base),  # a late duplicate
        fx.norm_row(event_id="e2", late=True, **{**base, "message_id": "M2"}),
        fx.norm_row(event_id="e2", late=True, **{**base, "message_id": "M2"}),
        fx.norm_row(event_id="e2", late=True, **{**base, "message_id": "M2"}),
        fx.norm_row(event_id="e3", **{**base, "message_id": "M2", "event_type": "Send"}),
    ]
    out = {r["event_id"]: r for r in T.dedupe(fx.norm_df(spark, rows, copies=False), 2).collect()}
    assert set(out) == {"e1", "e2", "e3"}
    assert (out["e1"]["copies"], out["e1"]["late"]) == (2, False)  # late only if every copy is
    assert (out["e2"]["copies"], out["e2"]["late"]) == (3, True)
    assert out["e3"]["copies"] == 1


def _outcome_rows(
    spark: SparkSession, rows: list[dict[str, Any]], rng: T.TimeRange | None = None
) -> dict[str, dict[str, Any]]:
    df = T.outcomes(fx.norm_df(spark, rows), rng or T.TimeRange(None, None))
    assert [f.name for f in df.schema.fields] == [f.name for f in OUTCOME_SCHEMA.fields]
    return {r["rcpt"]: r.asDict() for r in df.collect()}


def test_outcomes_final_states_attempts_and_deferrals(spark: SparkSession) -> None:
    t = datetime(2026, 5, 4, 10, tzinfo=UTC)

    def ev(i: str, typ: str, rcpt: str, minutes: float, **kw: object) -> dict[str, Any]:
        return fx.norm_row(event_id=i, event_type=typ, message_id="M", rcpt=rcpt,
                           accepted_at=t, ts=t + timedelta(minutes=minutes), **kw)

    rows = [
        # delivered on attempt 3 after two deferrals
        ev("1", "Send", "a@x.example", 0),
        ev("2", "DeliveryDelay", "a@x.example", 1, attempt=1, status="4.7.1"),
        ev("3", "DeliveryDelay", "a@x.example", 6, attempt=2, status="4.7.1"),
        ev("4", "Delivery", "a@x.example", 16, attempt=3),
        # hard bounce on attempt 1
        ev("5", "Send", "b@x.example", 0),
        ev("6", "Bounce", "b@x.example", 0.5, attempt=1, status="5.1.1", bounce_type="Permanent"),
        # lifetime expiry: a bounce, not a hard one
        ev("7", "DeliveryDelay", "c@y.example", 1, attempt=1, status="4.4.1"),
        ev("8", "Bounce", "c@y.example", 60, status="4.4.7", bounce_type="Permanent"),
        # held then deleted by an operator; a later delivery does not change the final state
        ev("9", "DeliveryDelay", "d@y.example", 1, attempt=1),
        ev("10", "Operator", "d@y.example", 2, action="held"),
        ev("11", "Operator", "d@y.example", 3, action="deleted"),
        ev("12", "Delivery", "d@y.example", 4, attempt=2),
        # bounced by an operator
        ev("13", "Operator", "e@y.example", 2, action="bounced"),
        # still pending
        ev("14", "Send", "f@z.example", 0),
        ev("15", "DeliveryDelay", "f@z.example", 1, attempt=1),
        # a Reject never makes an outcome row
        fx.norm_row(event_id="16", event_type="Reject", message_id="R", rcpt=None,
                    domain="z.example", accepted_at=t, ts=t),
    ]
    o = _outcome_rows(spark, rows)
    assert set(o) == {"a@x.example", "b@x.example", "c@y.example", "d@y.example",
                      "e@y.example", "f@z.example"}
    a = o["a@x.example"]
    assert (a["final_state"], a["attempts"], a["deferrals"], a["delivered_attempt"]) == (
        "delivered", 3, 2, 3)
    assert a["time_to_final_s"] == pytest.approx(16 * 60)
    assert (o["b@x.example"]["final_state"], o["b@x.example"]["hard_bounce"]) == ("bounced", True)
    c = o["c@y.example"]
    assert (c["final_state"], c["hard_bounce"], c["attempts"]) == ("bounced", False, 1)
    d = o["d@y.example"]
    assert (d["final_state"], d["time_to_final_s"]) == ("deleted", pytest.approx(180))
    assert (o["e@y.example"]["final_state"], o["e@y.example"]["hard_bounce"]) == ("bounced", False)
    f = o["f@z.example"]
    assert (f["final_state"], f["final_at"], f["time_to_final_s"]) == ("pending", None, None)
    assert (f["attempts"], f["deferrals"]) == (1, 1)


def test_outcomes_keep_only_recipients_accepted_in_range(spark: SparkSession) -> None:
    day = T.TimeRange.day("2026-05-04")
    before = datetime(2026, 5, 3, 23, 50, tzinfo=UTC)
    inside = datetime(2026, 5, 4, 23, 50, tzinfo=UTC)
    rows = [
        fx.norm_row(event_id="1", event_type="Delivery", message_id="A", rcpt="a@x.example",
                    accepted_at=before, ts=before + timedelta(minutes=20), attempt=1),
        fx.norm_row(event_id="2", event_type="Send", message_id="B", rcpt="b@x.example",
                    accepted_at=inside, ts=inside),
    ]
    o = _outcome_rows(spark, rows, day)
    assert list(o) == ["b@x.example"]
    assert o["b@x.example"]["final_state"] == "pending"


def test_normalise_keeps_unsubscribes_and_leaves_out_reputation_events(
    spark: SparkSession,
) -> None:
    """A Subscription (one-click unsubscribe) is its recipient's feedback row, counted by
    report.feedback, with no sender of its own (not the null sender); a reputation pause
    (no mail at all) makes no row."""
    import json
    import time

    from mailqueue.outbound.reputation import reputation_event
    from mailqueue.outbound.unsubscribe import Unsubscription
    from mailqueue.services.unsubscribe import subscription_event

    m = fx.mail("M1", "bob@example.org", at(0))
    u = Unsubscription("M1", "bob@example.org", "sender_domain", "example.org", 1, "k")
    docs = [
        ("2026-05-04", "10", dumps(fx.send(m, "bob@example.org"))),
        ("2026-05-04", "11", dumps(subscription_event(u, time.time(), method="one-click"))),
        ("2026-05-04", "11", json.dumps(reputation_event("paused", "principal", "p", time.time()))),
    ]
    rows = {r["event_type"]: r.asDict() for r in T.normalise(fx.raw_df(spark, docs)).collect()}
    assert sorted(rows) == ["Send", "Subscription"]
    sub = rows["Subscription"]
    assert (sub["message_id"], sub["rcpt"], sub["domain"]) == ("M1", "bob@example.org",
                                                                "example.org")
    assert (sub["action"], sub["feedback"], sub["sender"]) == ("unsubscribed", True, None)
    assert sub["ts"] is not None
    # an unsubscribe is no delivery outcome: the mail stays pending, one row
    out = T.outcomes(T.normalise(fx.raw_df(spark, docs)), T.TimeRange.parse(None, None))
    assert [(r["rcpt"], r["final_state"]) for r in out.collect()] == [
        ("bob@example.org", "pending")
    ]
