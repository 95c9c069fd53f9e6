"""Report tables: pure DataFrame -> DataFrame aggregations over events and outcomes.

Every table has the same grain columns so one reader handles them all:
`grain` (hour | day | domain | overall), `day` (YYYY-MM-DD), `hour` (0-23), `domain`;
the columns a grain does not use are null. Events are bucketed by their own time,
outcomes by the recipient's acceptance time (a cohort: "of what arrived that hour, how
much was delivered, how fast").
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from .consts import (
    ATTEMPTS_CAP,
    BOUNCE_BANDS,
    LAG_EDGES_S,
    PERCENTILE_ACCURACY,
    PERCENTILES,
    QSHAPE_EDGES_MIN,
    bounce_band,
)
from .transforms import normalise_reason_col, ts_lit

GRAIN_COLS = ("grain", "day", "hour", "domain")
# Grouping sets: what each grain groups by. Time keys are integer hour / day indexes since
# the epoch (cheap per row); they become day strings and hours after aggregation.
_SETS: dict[str, tuple[str, ...]] = {
    "hour": ("_h",),
    "day": ("_d",),
    "domain": ("domain",),
    "overall": (),
}
_US_PER_HOUR = 3_600_000_000


def _grain_col() -> Column:
    """Name the grouping set a row came from (see _SETS)."""
    return (
        F.when(F.grouping("domain") == 0, F.lit("domain"))
        .when(F.grouping("_h") == 0, F.lit("hour"))
        .when(F.grouping("_d") == 0, F.lit("day"))
        .otherwise(F.lit("overall"))
    )


def _grouped(
    df: DataFrame, grains: Sequence[str], aggs: Sequence[Column], extra: Sequence[str] = ()
) -> DataFrame:
    """Aggregate `df` (with _h, _d, domain columns) once per grain, in one job."""
    sets = [[F.col(c) for c in (*_SETS[g], *extra)] for g in grains]
    cols = [F.col(c) for c in ("_d", "_h", "domain", *extra)]
    out = df.groupingSets(sets, *cols).agg(*aggs, _grain_col().alias("grain"))
    hour_start = F.timestamp_seconds(F.coalesce(F.col("_h"), F.col("_d") * 24) * 3600)
    out = (
        out.withColumn("day", F.when(F.col("_h").isNotNull() | F.col("_d").isNotNull(),
                                     F.date_format(hour_start, "yyyy-MM-dd")))
        .withColumn("hour", F.when(F.col("_h").isNotNull(), F.pmod(F.col("_h"), 24).cast("int")))
        .withColumn("domain", F.when(F.col("grain") == "domain", F.col("domain")))
    )
    rest = [c for c in out.columns if c not in (*GRAIN_COLS, *extra, "_h", "_d")]
    return out.select(*GRAIN_COLS, *extra, *rest)


def _with_time_keys(df: DataFrame, ts: str) -> DataFrame:
    h = F.floor(F.unix_micros(F.col(ts)) / F.lit(_US_PER_HOUR))
    return df.withColumn("_h", h).withColumn("_d", F.floor(F.col("_h") / 24))


def _ratio(num: str, den: str) -> Column:
    return F.when(F.col(den) > 0, F.col(num) / F.col(den))


def _band_col(rate: Column) -> Column:
    out = F.when(rate.isNull(), F.lit("ok"))
    for limit, name in BOUNCE_BANDS:
        out = out.when(rate >= limit, F.lit(name))
    return out.otherwise(F.lit("ok"))


def volumes(events: DataFrame) -> DataFrame:
    """Events per type at every grain (by event time). Cheap: pre-aggregated per hour and
    domain first, then rolled up, so the grouping sets expand a small table only."""
    base = (
        _with_time_keys(events, "ts")
        .groupBy("_d", "_h", "domain", "event_type")
        .agg(F.count(F.lit(1)).alias("events"), F.sum(F.col("late").cast("long")).alias("late"))
    )
    return _grouped(
        base,
        ("hour", "day", "domain", "overall"),
        [F.sum("events").alias("events"), F.sum("late").alias("late")],
        extra=("event_type",),
    )


def delivery(outcomes: DataFrame, accuracy: int = PERCENTILE_ACCURACY) -> DataFrame:
    """Outcome metrics per acceptance cohort at every grain.

    delivery_rate = delivered / finalised (delivered + bounced + deleted);
    first_attempt_rate = delivered on attempt 1 / recipients with at least one attempt;
    retry_yield = deferred-then-delivered / deferred recipients that are final;
    hard_bounce_rate = hard bounces / accepted recipients (SES's bounce rate basis).
    Time to deliver (accepted -> Delivery, seconds) percentiles use percentile_approx with
    `accuracy`: each value's rank is within n / accuracy of the exact one.
    """
    st = F.col("final_state")
    delivered = st == "delivered"
    deferred = F.col("deferrals") > 0
    ttd = F.when(delivered, F.col("time_to_final_s"))

    def n(cond: Column) -> Column:
        return F.count(F.when(cond, 1))

    aggs = [
        F.count(F.lit(1)).alias("recipients"),
        n(delivered).alias("delivered"),
        n(st == "bounced").alias("bounced"),
        n(F.col("hard_bounce")).alias("hard_bounced"),
        n(st == "deleted").alias("deleted"),
        n(st == "pending").alias("pending"),
        n(F.col("attempts") >= 1).alias("attempted"),
        n(delivered & (F.col("delivered_attempt") == 1)).alias("first_attempt_delivered"),
        n(deferred).alias("deferred"),
        n(deferred & (st != "pending")).alias("deferred_finalised"),
        n(deferred & delivered).alias("deferred_delivered"),
        F.sum("deferrals").alias("deferrals"),
        F.percentile_approx(ttd, list(PERCENTILES), accuracy).alias("ttd_pct"),
        F.max(ttd).alias("ttd_max_s"),
        F.avg(ttd).alias("ttd_mean_s"),
    ]
    g = _grouped(_with_time_keys(outcomes, "accepted_at"), tuple(_SETS), aggs)
    g = g.withColumn("finalised", F.col("delivered") + F.col("bounced") + F.col("deleted"))
    for i, p in enumerate(PERCENTILES):
        g = g.withColumn(f"ttd_p{round(p * 100)}_s", F.col("ttd_pct")[i])
    return (
        g.drop("ttd_pct")
        .withColumn("delivery_rate", _ratio("delivered", "finalised"))
        .withColumn("first_attempt_rate", _ratio("first_attempt_delivered", "attempted"))
        .withColumn("retry_yield", _ratio("deferred_delivered", "deferred_finalised"))
        .withColumn("hard_bounce_rate", _ratio("hard_bounced", "recipients"))
        .withColumn("bounce_band", _band_col(F.col("hard_bounce_rate")))
    )


def attempts_histogram(outcomes: DataFrame) -> DataFrame:
    """Recipients by attempts made (capped at ATTEMPTS_CAP, meaning "CAP or more") and
    final state, per day, domain and overall."""
    df = _with_time_keys(outcomes, "accepted_at").withColumn(
        "attempts_bucket", F.least(F.col("attempts"), F.lit(ATTEMPTS_CAP))
    )
    return _grouped(
        df,
        ("day", "domain", "overall"),
        [F.count(F.lit(1)).alias("recipients")],
        extra=("attempts_bucket", "final_state"),
    )


def reasons(events: DataFrame, top_n: int = 10) -> DataFrame:
    """Top deferral and bounce reasons by (enhanced status, normalised text), counted in
    events, with their share of the kind; the top `top_n` per grain key and kind.

    The text is normalised after a first aggregation on the raw text: most diagnostics
    repeat verbatim ("greylisted, try again in 300 seconds"), so the regular expressions
    run once per distinct text and day and domain rather than once per event.
    """
    kind = F.when(F.col("event_type") == "DeliveryDelay", F.lit("deferral")).otherwise(
        F.lit("bounce")
    )
    raw = (
        _with_time_keys(events.where(F.col("event_type").isin("DeliveryDelay", "Bounce")), "ts")
        .withColumn("kind", kind)
        .groupBy("_d", "domain", "kind", "status", "diag")
        .agg(F.count(F.lit(1)).alias("events"))
    )
    base = (
        raw.withColumn("status", F.coalesce(F.col("status"), F.lit("")))
        .withColumn("reason", F.coalesce(normalise_reason_col(F.col("diag")), F.lit("")))
        .withColumn("_h", F.lit(None).cast("long"))
    )
    g = _grouped(
        base,
        ("day", "domain", "overall"),
        [F.sum("events").alias("events")],
        extra=("kind", "status", "reason"),
    )
    w = Window.partitionBy("grain", "day", "domain", "kind")
    ranked = (
        g.withColumn("rank", F.row_number().over(w.orderBy(F.desc("events"), "status", "reason")))
        .withColumn("share", F.col("events") / F.sum("events").over(w))
    )
    return ranked.where(F.col("rank") <= top_n)


def sched_lag(events: DataFrame, accuracy: int = PERCENTILE_ACCURACY) -> DataFrame:
    """Retry scheduling lag (attempt.startedAt - scheduledAt, seconds): how late the
    scheduler picks up due work. Percentiles plus a fixed-bucket histogram."""
    lag = F.col("sched_lag_s")
    aggs: list[Column] = [
        F.count(F.lit(1)).alias("attempts"),
        F.percentile_approx(lag, [0.5, 0.9, 0.99], accuracy).alias("pct"),
        F.max(lag).alias("max_s"),
        F.avg(lag).alias("mean_s"),
    ]
    lo = float("-inf")
    for i, hi in enumerate((*LAG_EDGES_S, float("inf"))):
        cond = (lag >= lo) if i else F.lit(True)
        if hi != float("inf"):
            cond = cond & (lag < hi)
        aggs.append(F.count(F.when(cond, 1)).alias(f"lag_bucket_{i}"))
        lo = hi
    df = _with_time_keys(events.where(lag.isNotNull()), "ts")
    g = _grouped(df, ("hour", "day", "overall"), aggs)
    return (
        g.withColumn("p50_s", F.col("pct")[0])
        .withColumn("p90_s", F.col("pct")[1])
        .withColumn("p99_s", F.col("pct")[2])
        .drop("pct")
    )


def qshape(outcomes: DataFrame, at: datetime) -> DataFrame:
    """Pending recipients at time `at` by domain x age bucket (age = at - accepted).

    A recipient is pending at `at` if it was accepted by then and had no final event by
    then. Rows: grain "domain" (per domain and bucket) and "overall" (per bucket).
    """
    at_lit = ts_lit(at)
    age_min = (F.unix_micros(at_lit) - F.unix_micros(F.col("accepted_at"))) / F.lit(60e6)
    bucket: Column = F.lit(len(QSHAPE_EDGES_MIN))
    for i in reversed(range(len(QSHAPE_EDGES_MIN))):
        bucket = F.when(age_min < QSHAPE_EDGES_MIN[i], F.lit(i)).otherwise(bucket)
    pending = outcomes.where(
        (F.col("accepted_at") <= at_lit)
        & (F.col("final_at").isNull() | (F.col("final_at") > at_lit))
    ).withColumn("bucket", bucket.cast("int"))
    g = pending.groupingSets(
        [[F.col("domain"), F.col("bucket")], [F.col("bucket")]], "domain", "bucket"
    ).agg(
        F.count(F.lit(1)).alias("recipients"),
        F.when(F.grouping("domain") == 0, F.lit("domain")).otherwise(F.lit("overall")).alias(
            "grain"
        ),
    )
    return g.select("grain", "domain", "bucket", "recipients")


def breaches(delivery_rows: Sequence[dict[str, Any]], min_volume: int) -> list[dict[str, Any]]:
    """Hard-bounce threshold breaches (>= 2 %) at day, domain and overall grain.

    Domains below `min_volume` recipients are skipped: two bounces out of ten mails is
    noise, not a reputation problem. Hours are left out for the same reason.
    """
    out: list[dict[str, Any]] = []
    for r in delivery_rows:
        grain = r["grain"]
        if grain == "hour":
            continue
        rate = r.get("hard_bounce_rate")
        band = bounce_band(rate)
        if band == "ok" or rate is None:
            continue
        if grain == "domain" and r["recipients"] < min_volume:
            continue
        threshold = next(limit for limit, name in BOUNCE_BANDS if name == band)
        out.append(
            {
                "metric": "hard_bounce_rate",
                "grain": grain,
                "key": r.get("day") if grain == "day" else r.get("domain"),
                "value": rate,
                "band": band,
                "threshold": threshold,
                "recipients": r["recipients"],
                "hard_bounced": r["hard_bounced"],
            }
        )
    order = {"overall": 0, "day": 1, "domain": 2}
    out.sort(key=lambda b: (order[b["grain"]], -b["value"], str(b["key"])))
    return out
