"""Each report aggregation on small outcome/event DataFrames with known answers."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from mq_pipeline import report
from mq_pipeline.consts import (
    LAG_MIN_S,
    LAG_REL_ERROR,
    bounce_band,
    lag_bucket_labels,
    qshape_labels,
)
from mq_pipeline.schema import OUTCOME_SCHEMA
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from tests.pipeline import factory as fx

T = datetime(2026, 5, 4, 10, 0, tzinfo=UTC)


def outcome(rcpt: str, state: str, minutes: float | None, attempts: int = 1, deferrals: int = 0,
            delivered_attempt: int | None = None, hard: bool = False,
            accepted: datetime = T, dsn: bool = False, size: int = 1000,
            first: bool = True) -> tuple[Any, ...]:
    final_at = None if minutes is None else accepted + timedelta(minutes=minutes)
    return (
        "M-" + rcpt, rcpt, rcpt.rsplit("@", 1)[1], accepted, state, final_at, attempts,
        deferrals, delivered_attempt if state == "delivered" else None, hard,
        None if minutes is None else minutes * 60.0, dsn, size, first,
    )


def outcomes_df(spark: SparkSession, rows: list[tuple[Any, ...]]) -> DataFrame:
    return spark.createDataFrame(rows, OUTCOME_SCHEMA)


def rows_of(df: DataFrame) -> list[dict[str, Any]]:
    return [r.asDict(recursive=True) for r in df.collect()]


def one(rows: list[dict[str, Any]], **match: Any) -> dict[str, Any]:
    hits = [r for r in rows if all(r.get(k) == v for k, v in match.items())]
    assert len(hits) == 1, (match, hits)
    return hits[0]


def test_delivery_rates_percentiles_and_bands(spark: SparkSession) -> None:
    rows = [
        outcome(f"d{i}@a.example", "delivered", float(i), delivered_attempt=1) for i in range(1, 9)
    ] + [
        outcome("r1@a.example", "delivered", 30.0, attempts=3, deferrals=2, delivered_attempt=3),
        outcome("r2@b.example", "bounced", 40.0, attempts=2, deferrals=1, hard=True),
        outcome("r3@b.example", "deleted", 5.0, attempts=1, deferrals=1),
        outcome("r4@b.example", "pending", None, attempts=1, deferrals=1),
        outcome("r5@b.example", "pending", None, attempts=0,
                accepted=T + timedelta(hours=1)),
    ]
    got = rows_of(report.delivery(outcomes_df(spark, rows)))
    o = one(got, grain="overall")
    assert (o["recipients"], o["delivered"], o["bounced"], o["deleted"], o["pending"]) == (
        13, 9, 1, 1, 2)
    assert o["finalised"] == 11
    assert o["delivery_rate"] == pytest.approx(9 / 11)
    assert o["attempted"] == 12 and o["first_attempt_delivered"] == 8
    assert o["first_attempt_rate"] == pytest.approx(8 / 12)
    # deferred: r1 (delivered), r2 (bounced), r3 (deleted), r4 (pending) -> 1 of 3 final
    assert (o["deferred"], o["deferred_finalised"], o["deferred_delivered"]) == (4, 3, 1)
    assert o["retry_yield"] == pytest.approx(1 / 3)
    assert o["hard_bounce_rate"] == pytest.approx(1 / 13) and o["bounce_band"] == "review"
    # time to deliver over the 9 delivered: 1..8 minutes and 30 minutes
    assert o["ttd_max_s"] == 1800.0
    assert o["ttd_p50_s"] == 300.0
    assert o["ttd_p99_s"] == 1800.0
    b = one(got, grain="domain", domain="b.example")
    assert (b["recipients"], b["delivered"], b["delivery_rate"]) == (4, 0, 0.0)
    assert b["ttd_p50_s"] is None and b["bounce_band"] == "pause"
    h10 = one(got, grain="hour", day="2026-05-04", hour=10)
    h11 = one(got, grain="hour", day="2026-05-04", hour=11)
    assert (h10["recipients"], h11["recipients"]) == (12, 1)
    assert h11["delivery_rate"] is None  # nothing final yet: no rate, not 0
    assert one(got, grain="day", day="2026-05-04")["recipients"] == 13


def test_delivery_one_day_copies_the_day_sketch_as_overall(spark: SparkSession) -> None:
    rows = [
        outcome(f"d{i}@{'ab'[i % 2]}.example", "delivered", float(i * 7 % 23), delivered_attempt=1)
        for i in range(1, 40)
    ] + [outcome("p@a.example", "pending", None, attempts=1, deferrals=1)]
    df = outcomes_df(spark, rows)
    key = ("grain", "day", "hour", "domain")
    full = {tuple(r[k] for k in key): r for r in rows_of(report.delivery(df))}
    fast = {tuple(r[k] for k in key): r for r in rows_of(report.delivery(df, one_day=True))}
    assert full == fast and ("overall", None, None, None) in fast
    assert fast[("overall", None, None, None)]["ttd_p90_s"] is not None


def test_bounce_band_edges() -> None:
    assert [bounce_band(x) for x in (None, 0.0, 0.0199, 0.02, 0.05, 0.0999, 0.1, 0.5)] == [
        "ok", "ok", "ok", "elevated", "review", "review", "pause", "pause"]


def test_breaches_respect_grain_and_min_volume() -> None:
    rows = [
        {"grain": "overall", "day": None, "domain": None, "recipients": 1000,
         "hard_bounced": 25, "hard_bounce_rate": 0.025},
        {"grain": "hour", "day": "2026-05-04", "domain": None, "recipients": 10,
         "hard_bounced": 5, "hard_bounce_rate": 0.5},
        {"grain": "domain", "day": None, "domain": "small.example", "recipients": 20,
         "hard_bounced": 10, "hard_bounce_rate": 0.5},
        {"grain": "domain", "day": None, "domain": "big.example", "recipients": 500,
         "hard_bounced": 60, "hard_bounce_rate": 0.12},
        {"grain": "day", "day": "2026-05-04", "domain": None, "recipients": 1000,
         "hard_bounced": 10, "hard_bounce_rate": 0.01},
    ]
    got = report.breaches(rows, min_volume=100)
    assert [(b["grain"], b["key"], b["band"], b["threshold"]) for b in got] == [
        ("overall", None, "elevated", 0.02),
        ("domain", "big.example", "pause", 0.10),
    ]


def test_attempts_histogram_caps_and_splits_by_state(spark: SparkSession) -> None:
    rows = [
        outcome("a@x.example", "delivered", 1.0, attempts=1, delivered_attempt=1),
        outcome("b@x.example", "delivered", 1.0, attempts=1, delivered_attempt=1),
        outcome("c@x.example", "delivered", 9.0, attempts=2, delivered_attempt=2),
        outcome("d@y.example", "bounced", 99.0, attempts=14),
        outcome("e@y.example", "pending", None, attempts=10),
        outcome("f@y.example", "pending", None, attempts=0),
    ]
    got = rows_of(report.attempts_histogram(outcomes_df(spark, rows)))
    overall = {(r["attempts_bucket"], r["final_state"]): r["recipients"]
               for r in got if r["grain"] == "overall"}
    assert overall == {(1, "delivered"): 2, (2, "delivered"): 1, (10, "bounced"): 1,
                       (10, "pending"): 1, (0, "pending"): 1}
    y = {(r["attempts_bucket"], r["final_state"]) for r in got
         if r["grain"] == "domain" and r["domain"] == "y.example"}
    assert y == {(10, "bounced"), (10, "pending"), (0, "pending")}


def test_qshape_buckets_by_age_at_a_time(spark: SparkSession) -> None:
    at = T + timedelta(hours=3)

    def acc(minutes_before: float) -> datetime:
        return at - timedelta(minutes=minutes_before)

    rows = [
        outcome("a@x.example", "pending", None, accepted=acc(1)),  # 0-5
        outcome("b@x.example", "pending", None, accepted=acc(5)),  # 5-10 (edge goes up)
        outcome("c@x.example", "pending", None, accepted=acc(39.9)),  # 20-40
        outcome("d@y.example", "pending", None, accepted=acc(2000)),  # 1280+
        # delivered after `at`: still pending at `at`
        outcome("e@y.example", "delivered", 200.0, accepted=acc(100), delivered_attempt=1),
        # delivered before `at`: not pending
        outcome("f@y.example", "delivered", 10.0, accepted=acc(100), delivered_attempt=1),
        # accepted after `at`: not there yet
        outcome("g@y.example", "pending", None, accepted=at + timedelta(minutes=1)),
    ]
    got = rows_of(report.qshape(outcomes_df(spark, rows), at))
    labels = qshape_labels()
    cells = {(r["domain"], labels[r["bucket"]]): r["recipients"] for r in got
             if r["grain"] == "domain"}
    assert cells == {("x.example", "0-5"): 1, ("x.example", "5-10"): 1,
                     ("x.example", "20-40"): 1, ("y.example", "1280+"): 1,
                     ("y.example", "80-160"): 1}
    total = {labels[r["bucket"]]: r["recipients"] for r in got if r["grain"] == "overall"}
    assert total == {"0-5": 1, "5-10": 1, "20-40": 1, "80-160": 1, "1280+": 1}
    assert labels[:4] == ["0-5", "5-10", "10-20", "20-40"] and labels[-1] == "1280+"


def _events(spark: SparkSession, specs: list[dict[str, Any]]) -> DataFrame:
    return fx.norm_df(spark, [fx.norm_row(**s) for s in specs])


def test_volumes_count_by_event_time_and_grain(spark: SparkSession) -> None:
    specs: list[dict[str, Any]] = [
        dict(event_id="1", event_type="Send", rcpt="a@x.example", ts=T),
        dict(event_id="2", event_type="Send", rcpt="b@y.example", ts=T + timedelta(minutes=70),
             late=True),
        dict(event_id="3", event_type="Delivery", rcpt="a@x.example", ts=T + timedelta(minutes=1)),
        dict(event_id="4", event_type="Reject", rcpt=None, domain="x.example", ts=T),
    ]
    got = rows_of(report.volumes(report.event_base(_events(spark, specs))))
    assert one(got, grain="overall", event_type="Send")["events"] == 2
    assert one(got, grain="overall", event_type="Send")["late"] == 1
    assert one(got, grain="hour", hour=11, event_type="Send")["events"] == 1
    assert one(got, grain="domain", domain="x.example", event_type="Reject")["events"] == 1
    assert one(got, grain="day", day="2026-05-04", event_type="Delivery")["events"] == 1
    assert not [r for r in got if r["grain"] == "hour" and r["hour"] == 11
                and r["event_type"] == "Delivery"]


def test_reasons_top_n_and_share(spark: SparkSession) -> None:
    specs = []
    for i, (status, diag, n) in enumerate(
        [("4.7.1", "smtp; 451 4.7.1 Greylisted for {} seconds", 5),
         ("4.2.2", "smtp; 452 Mailbox full", 3), ("4.3.2", "smtp; 421 busy", 1)]
    ):
        # texts that differ only in digits normalise to one reason
        specs += [dict(event_id=f"d{i}-{j}", event_type="DeliveryDelay", rcpt="u@x.example",
                       ts=T, status=status, diag=diag.format(60 * j)) for j in range(n)]
    specs += [dict(event_id="b1", event_type="Bounce", rcpt="u@x.example", ts=T,
                   status="5.1.1", diag="smtp; 550 <u@x.example> user unknown")]
    got = rows_of(report.reasons(report.event_base(_events(spark, specs)), top_n=2))
    ov = sorted((r["kind"], r["rank"], r["status"], r["reason"], r["events"]) for r in got
                if r["grain"] == "overall")
    assert ov == [("bounce", 1, "5.1.1", "<addr> user unknown", 1),
                  ("deferral", 1, "4.7.1", "greylisted for # seconds", 5),
                  ("deferral", 2, "4.2.2", "mailbox full", 3)]
    top = one(got, grain="overall", kind="deferral", rank=1)
    assert top["share"] == pytest.approx(5 / 9)  # share of all deferrals, not of the top 2


def test_sched_lag_percentiles_and_buckets(spark: SparkSession) -> None:
    lags = [0.1, 0.5, 2.0, 10.0, 45.0, 120.0, 600.0, 2000.0]
    specs = [dict(event_id=str(i), event_type="Delivery", rcpt="u@x.example", attempt=1,
                  ts=T, sched_lag_s=x) for i, x in enumerate(lags)]
    specs.append(dict(event_id="send", event_type="Send", rcpt="u@x.example", ts=T))
    ev = _events(spark, specs)
    got = rows_of(report.sched_lag(report.event_base(ev), report.lag_histogram(ev)))
    o = one(got, grain="overall")
    assert o["attempts"] == len(lags) and o["max_s"] == 2000.0
    assert o["mean_s"] == pytest.approx(sum(lags) / len(lags))
    assert [o[f"lag_bucket_{i}"] for i in range(7)] == [2, 1, 1, 1, 1, 1, 1]
    # nearest rank: p50 -> 4th of 8 (10 s), p90 -> 8th (2000 s), within the sketch's error
    assert o["p50_s"] == pytest.approx(10.0, rel=LAG_REL_ERROR)
    assert o["p90_s"] == pytest.approx(2000.0, rel=LAG_REL_ERROR)
    assert o["p99_s"] == pytest.approx(2000.0, rel=LAG_REL_ERROR)
    assert one(got, grain="hour", hour=10)["attempts"] == len(lags)
    assert len(lag_bucket_labels()) == 7


def test_lag_bins_bound_the_relative_error(spark: SparkSession) -> None:
    values = [0.0, 0.0004, 0.001, 0.0011, 0.37, 1.0, 59.99, 60.0, 3601.5, 86400.0]
    df = spark.createDataFrame([(v,) for v in values], "v double")
    got = df.select("v", report.lag_bin_value(report.lag_bin_col(F.col("v"))).alias("r"))
    for row in got.collect():
        v, r = row["v"], row["r"]
        assert abs(r - v) <= max(LAG_REL_ERROR * v, LAG_MIN_S) + 1e-12, (v, r)


def test_dsns_are_counted_apart_and_rates_say_their_divisor(spark: SparkSession) -> None:
    rows = [
        outcome("a@x.example", "delivered", 1.0, delivered_attempt=1, size=1000),
        outcome("b@x.example", "delivered", 2.0, delivered_attempt=1, size=3000),
        outcome("c@x.example", "bounced", 3.0, hard=True, size=500),
        outcome("d@x.example", "pending", None, size=700),
        # a second recipient of b's mail: its size is not received twice
        outcome("e@x.example", "delivered", 2.0, delivered_attempt=1, size=3000, first=False),
        # DSNs: two delivered, one pending, none of them in the mail numbers
        outcome("s1@x.example", "delivered", 0.5, delivered_attempt=1, dsn=True, size=2000),
        outcome("s2@x.example", "delivered", 9.0, delivered_attempt=1, dsn=True, size=2000),
        outcome("s3@x.example", "pending", None, deferrals=1, dsn=True, size=2000),
    ]
    o = one(rows_of(report.delivery(outcomes_df(spark, rows))), grain="overall")
    assert (o["recipients"], o["delivered"], o["bounced"], o["pending"]) == (5, 3, 1, 1)
    assert o["delivered_of_sent"] == pytest.approx(3 / 5)  # pending included
    assert o["delivery_rate"] == pytest.approx(3 / 4)  # of finalised only
    assert o["hard_bounce_rate"] == pytest.approx(1 / 5)
    assert o["deferred"] == 0 and o["deferrals"] == 0  # s3's deferral is a DSN's
    assert o["ttd_max_s"] == 120.0  # s2's 9 minutes are not in the mail's delays
    assert (o["mails"], o["bytes_received"], o["bytes_delivered"]) == (4, 5200, 7000)
    assert (o["dsn_recipients"], o["dsn_delivered"], o["dsn_pending"]) == (3, 2, 1)
    assert o["dsn_bytes"] == 6000
    att = rows_of(report.attempts_histogram(outcomes_df(spark, rows)))
    assert sum(r["recipients"] for r in att if r["grain"] == "overall") == 5


def test_top_senders_rejects_and_timeline(spark: SparkSession) -> None:
    def send(i: int, sender: str, rcpts: list[str], size: int, minute: int) -> list[dict[str, Any]]:
        return [
            dict(event_id=f"s{i}/{r}", event_type="Send", message_id=f"M{i}", rcpt=r,
                 ts=T + timedelta(minutes=minute), sender=sender, size=size, dest_pos=p)
            for p, r in enumerate(rcpts)
        ]

    specs = [
        *send(1, "app@a.example", ["x@d.example", "y@d.example"], 1000, 0),
        *send(2, "app@a.example", ["z@e.example"], 500, 1),
        *send(3, "", ["app@a.example"], 2000, 2),  # a DSN: the null sender
        *send(4, "news@b.example", ["w@d.example"], 100, 59),
        dict(event_id="r1", event_type="Reject", message_id="R1", rcpt=None, domain="d.example",
             ts=T, sender="news@b.example", diag="invalid_recipient", size=5000),
        dict(event_id="r2", event_type="Reject", message_id="R2", rcpt=None, domain="d.example",
             ts=T, sender="news@b.example", diag="invalid_recipient"),
        dict(event_id="r3", event_type="Reject", message_id="R3", rcpt=None, domain="d.example",
             ts=T, sender="bad@c.example", diag="too_large"),
        dict(event_id="d1", event_type="Delivery", message_id="M1", rcpt="x@d.example",
             ts=T + timedelta(minutes=3)),
    ]
    events = _events(spark, specs)
    base = report.event_base(events)
    snd = {r["sender"]: r for r in rows_of(report.senders(base, top_n=3))}
    assert set(snd) == {"app@a.example", "", "news@b.example"}  # top 3 of 4
    a = snd["app@a.example"]
    assert (a["rank"], a["mails"], a["recipients"], a["bytes"], a["rejected"]) == (1, 2, 3, 1500, 0)
    n = snd["news@b.example"]
    assert (n["mails"], n["rejected"], n["bytes"]) == (1, 2, 100)
    assert (snd[""]["mails"], snd[""]["bytes"]) == (1, 2000)
    rej = sorted((r["rank"], r["reason"], r["events"]) for r in rows_of(report.rejects(base)))
    assert rej == [(1, "invalid_recipient", 2), (2, "too_large", 1)]

    # an hour of data: one bucket per minute, from the events
    assert report.timeline_bucket(T, T + timedelta(minutes=59)) == 60
    tl = rows_of(report.timeline(base, events, 60))
    sends = {(r["bucket_start"], r["events"]) for r in tl if r["event_type"] == "Send"}
    assert sends == {("2026-05-04T10:00:00Z", 2), ("2026-05-04T10:01:00Z", 1),
                     ("2026-05-04T10:02:00Z", 1), ("2026-05-04T10:59:00Z", 1)}
    # a month: one bucket per day, rolled up from the hourly base
    assert report.timeline_bucket(T, T + timedelta(days=30)) == 86400
    day = rows_of(report.timeline(base, events, 86400))
    assert {(r["event_type"], r["events"]) for r in day} == {
        ("Send", 5), ("Reject", 3), ("Delivery", 1)}
    assert {r["bucket_start"] for r in day} == {"2026-05-04T00:00:00Z"}
