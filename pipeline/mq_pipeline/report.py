"""Report tables: pure DataFrame -> DataFrame aggregations over events and outcomes.

Every table has the same grain columns so one reader handles them all:
`grain` (hour | day | domain | overall), `day` (YYYY-MM-DD), `hour` (0-23), `domain`;
the columns a grain does not use are null. Events are bucketed by their own time,
outcomes by the recipient's acceptance time (a cohort: "of what arrived that hour, how
much was delivered, how fast").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from .consts import (
    ATTEMPTS_CAP,
    BOUNCE_BANDS,
    LAG_EDGES_S,
    LAG_GAMMA,
    LAG_MIN_S,
    LAG_PERCENTILES,
    PERCENTILE_ACCURACY,
    PERCENTILES,
    QSHAPE_EDGES_MIN,
    REPUTATION_BOUNCE_BANDS,
    REPUTATION_COMPLAINT_BANDS,
    REPUTATION_MIN_SENDS,
    bounce_band,
)
from .schema import REPUTATION_SCHEMA
from .transforms import UNSUBSCRIBED, normalise_reason_col, ts_lit

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
    keys = {
        "grain": F.col("grain"),
        "day": F.when(F.col("_h").isNotNull() | F.col("_d").isNotNull(),
                      F.date_format(hour_start, "yyyy-MM-dd")),
        "hour": F.when(F.col("_h").isNotNull(), F.pmod(F.col("_h"), 24).cast("int")),
        "domain": F.when(F.col("grain") == "domain", F.col("domain")),
    }
    rest = [c for c in out.columns if c not in (*GRAIN_COLS, *extra, "_h", "_d")]
    # one select, not a withColumn per column: each DataFrame call analyses the whole
    # plan again, which is most of a small report's time (docs/benchmarks.md)
    return out.select(*[keys[c].alias(c) for c in GRAIN_COLS], *extra, *rest)


def _with_time_keys(df: DataFrame, ts: str) -> DataFrame:
    h = F.floor(F.unix_micros(F.col(ts)) / F.lit(_US_PER_HOUR))
    return df.withColumns({"_h": h, "_d": F.floor(h / 24)})


def _ratio(num: str, den: str) -> Column:
    return F.when(F.col(den) > 0, F.col(num) / F.col(den))


def _band_col(rate: Column) -> Column:
    out = F.when(rate.isNull(), F.lit("ok"))
    for limit, name in BOUNCE_BANDS:
        out = out.when(rate >= limit, F.lit(name))
    return out.otherwise(F.lit("ok"))


def _lag_bucket_aggs(lag: Column) -> list[Column]:
    """Counts per LAG_EDGES_S bucket: lag_bucket_0 is below the first edge, the last is
    at or above the last edge."""
    aggs: list[Column] = []
    lows: list[float | None] = [None, *LAG_EDGES_S]
    highs: list[float | None] = [*LAG_EDGES_S, None]
    for i, (lo, hi) in enumerate(zip(lows, highs)):  # noqa: B905 - same length by design
        cond: Column = lag.isNotNull()
        if lo is not None:
            cond = cond & (lag >= lo)
        if hi is not None:
            cond = cond & (lag < hi)
        aggs.append(F.count(F.when(cond, 1)).alias(f"lag_bucket_{i}"))
    return aggs


_REASON_TYPES = ("DeliveryDelay", "Bounce")


def event_base(events: DataFrame) -> DataFrame:
    """One pass over the events: per hour x domain x type (and, for deferrals and bounces,
    x status x raw diagnostic text) the events, rows read, late ones, first and last time,
    and the scheduling lag's count, sum, max and fixed buckets. The volumes, reasons,
    scheduling lag, senders, rejects and the run's input statistics all roll up from this
    table, so the events are scanned and hashed once for all of them. `sender` is set on
    Send and Reject rows only, so it adds rows per sender for those two types alone."""
    lag = F.col("sched_lag_s")
    for_reasons = F.col("event_type").isin(*_REASON_TYPES)
    return (
        _with_time_keys(events, "ts")
        .withColumns({
            "status": F.when(for_reasons, F.col("status")),
            # a Reject's diag is its reason code (the rejects table)
            "diag": F.when(for_reasons | (F.col("event_type") == "Reject"), F.col("diag")),
        })
        .groupBy("_d", "_h", "domain", "event_type", "status", "diag", "sender")
        .agg(
            F.count(F.lit(1)).alias("events"),
            # per mail (a Send row per destination: its first one counts the mail)
            F.count(F.when(F.col("dest_pos") == 0, 1)).alias("mails"),
            F.sum(F.when(F.col("dest_pos") == 0, F.col("size"))).alias("bytes"),
            F.sum("copies").alias("rows"),
            F.count(F.when(F.col("late"), 1)).alias("late"),
            F.min(F.unix_micros("ts")).alias("first_us"),
            F.max(F.unix_micros("ts")).alias("last_us"),
            F.count(lag).alias("lag_n"),
            F.sum(lag).alias("lag_sum"),
            F.max(lag).alias("lag_max"),
            *_lag_bucket_aggs(lag),
        )
    )


def input_stats() -> list[Column]:
    """Aggregates of `event_base` for the run's input statistics: events, rows read
    (duplicates included), late events, first and last event time in epoch micros (micros,
    not timestamps: collected timestamps would be converted to the driver's local zone).
    Columns, not a DataFrame: the job observes them while it checkpoints the base
    (`DataFrame.observe`), so they cost no Spark job of their own."""
    return [
        F.coalesce(F.sum("events"), F.lit(0)).alias("events"),
        F.coalesce(F.sum("rows"), F.lit(0)).alias("rows"),
        F.coalesce(F.sum("late"), F.lit(0)).alias("late"),
        F.min("first_us").alias("first"),
        F.max("last_us").alias("last"),
    ]


def volumes(base: DataFrame) -> DataFrame:
    """Events per type at every grain, by event time (from `event_base`)."""
    return _grouped(
        base,
        ("hour", "day", "domain", "overall"),
        [F.sum("events").alias("events"), F.sum("late").alias("late")],
        extra=("event_type",),
    )


def delivery(
    outcomes: DataFrame, accuracy: int = PERCENTILE_ACCURACY, one_day: bool = False
) -> DataFrame:
    """Outcome metrics per acceptance cohort at every grain.

    Mail sent with the null sender (DSNs, `dsn`) is not in these counts: it has its own
    `dsn_*` columns, so bounce notices do not inflate volumes or hide in the rates.
    delivery_rate = delivered / finalised (delivered + bounced + deleted);
    delivered_of_sent = delivered / recipients accepted (pending ones included);
    first_attempt_rate = delivered on attempt 1 / recipients with at least one attempt;
    retry_yield = deferred-then-delivered / deferred recipients that are final;
    hard_bounce_rate = hard bounces / accepted recipients (SES's bounce rate basis).
    Time to deliver (accepted -> Delivery, seconds) percentiles use percentile_approx with
    `accuracy`: each value's rank is within n / accuracy of the exact one.

    The counts roll up from a per hour x domain table (a cheap hash aggregate); only the
    percentile sketches see every delivered recipient once per grain. `one_day` says every
    outcome was accepted on one UTC day (the daily job): the overall sketch would then be
    the day's, so it is copied instead of built (a quarter of the sketch work).
    """
    dsn = F.col("dsn")
    mail = ~dsn
    st = F.col("final_state")
    delivered = mail & (st == "delivered")
    deferred = mail & (F.col("deferrals") > 0)

    def n(cond: Column) -> Column:
        return F.count(F.when(cond, 1))

    counts = {
        "recipients": n(mail),
        "delivered": n(delivered),
        "bounced": n(mail & (st == "bounced")),
        "hard_bounced": n(mail & F.col("hard_bounce")),
        "deleted": n(mail & (st == "deleted")),
        "pending": n(mail & (st == "pending")),
        "attempted": n(mail & (F.col("attempts") >= 1)),
        "first_attempt_delivered": n(delivered & (F.col("delivered_attempt") == 1)),
        "deferred": n(deferred),
        "deferred_finalised": n(deferred & (st != "pending")),
        "deferred_delivered": n(deferred & delivered),
        "deferrals": F.coalesce(F.sum(F.when(mail, F.col("deferrals"))), F.lit(0)),
        "ttd_sum": F.sum(F.when(delivered, F.col("time_to_final_s"))),
        "mails": n(mail & F.col("first_rcpt")),
        "bytes_received": F.sum(F.when(mail & F.col("first_rcpt"), F.col("size"))),
        "bytes_delivered": F.sum(F.when(delivered, F.col("size"))),
        # delivery status notifications (null sender), counted apart from the mail above
        "dsn_recipients": n(dsn),
        "dsn_delivered": n(dsn & (st == "delivered")),
        "dsn_bounced": n(dsn & (st == "bounced")),
        "dsn_deleted": n(dsn & (st == "deleted")),
        "dsn_pending": n(dsn & (st == "pending")),
        "dsn_bytes": F.sum(F.when(dsn & F.col("first_rcpt"), F.col("size"))),
    }
    keyed = _with_time_keys(outcomes, "accepted_at")
    base = keyed.groupBy("_d", "_h", "domain").agg(*[c.alias(k) for k, c in counts.items()])
    g = _grouped(base, tuple(_SETS), [F.sum(k).alias(k) for k in counts])
    ttd = _grouped(
        keyed.where(delivered),
        ("hour", "day", "domain") if one_day else tuple(_SETS),
        [
            F.percentile_approx("time_to_final_s", list(PERCENTILES), accuracy).alias("pct"),
            F.max("time_to_final_s").alias("ttd_max_s"),
        ],
    )
    pcts = [F.col("pct")[i].alias(f"ttd_p{round(p * 100)}_s") for i, p in enumerate(PERCENTILES)]
    keys = _right_keys()
    if one_day:
        # the day's row also stands for the overall one: a second (grain, day) key for it
        key = F.struct(F.col("grain").alias("_r_grain"), F.col("day").alias("_r_day"))
        overall = F.struct(F.lit("overall").alias("_r_grain"),
                           F.lit(None).cast("string").alias("_r_day"))
        both = F.when(F.col("grain") == "day", F.array(key, overall)).otherwise(F.array(key))
        keys = [F.inline(both), *keys[2:]]
    # one select for the right side and one for the result (each DataFrame call analyses
    # the plan again: see _grouped)
    g = _grain_join(g, ttd.select(*keys, "ttd_max_s", *pcts))
    finalised = F.col("delivered") + F.col("bounced") + F.col("deleted")
    hard_rate = _ratio("hard_bounced", "recipients")
    return g.select(
        *[c for c in (*GRAIN_COLS, *counts) if c != "ttd_sum"],
        "ttd_max_s",
        *[f"ttd_p{round(p * 100)}_s" for p in PERCENTILES],
        finalised.alias("finalised"),
        _ratio("ttd_sum", "delivered").alias("ttd_mean_s"),
        F.when(finalised > 0, F.col("delivered") / finalised).alias("delivery_rate"),
        _ratio("delivered", "recipients").alias("delivered_of_sent"),
        _ratio("first_attempt_delivered", "attempted").alias("first_attempt_rate"),
        _ratio("deferred_delivered", "deferred_finalised").alias("retry_yield"),
        hard_rate.alias("hard_bounce_rate"),
        _band_col(hard_rate).alias("bounce_band"),
    )


def attempts_histogram(outcomes: DataFrame) -> DataFrame:
    """Recipients by attempts made (capped at ATTEMPTS_CAP, meaning "CAP or more") and
    final state, per day, domain and overall; DSNs (null sender) left out."""
    df = _with_time_keys(outcomes.where(~F.col("dsn")), "accepted_at").withColumn(
        "attempts_bucket", F.least(F.col("attempts"), F.lit(ATTEMPTS_CAP))
    )
    return _grouped(
        df,
        ("day", "domain", "overall"),
        [F.count(F.lit(1)).alias("recipients")],
        extra=("attempts_bucket", "final_state"),
    )


def reasons(base: DataFrame, top_n: int = 10, ascii_lower: bool = False) -> DataFrame:
    """Top deferral and bounce reasons by (enhanced status, normalised text), counted in
    events, with their share of the kind; the top `top_n` per grain key and kind.

    From `event_base`, which aggregated the raw texts: most diagnostics repeat verbatim
    ("greylisted, try again in 300 seconds"), so the regular expressions run once per
    distinct text, hour and domain rather than once per event. `ascii_lower`: see
    `transforms.lower_col` (same answers).
    """
    kind = F.when(F.col("event_type") == "DeliveryDelay", F.lit("deferral")).otherwise(
        F.lit("bounce")
    )
    raw = (
        base.where(F.col("event_type").isin(*_REASON_TYPES))
        .withColumn("kind", kind)
        .groupBy("_d", "domain", "kind", "status", "diag")
        .agg(F.sum("events").alias("events"))
    )
    base = (
        raw.withColumns({
            "status": F.coalesce(F.col("status"), F.lit("")),
            "reason": F.coalesce(normalise_reason_col(F.col("diag"), ascii_lower), F.lit("")),
            "_h": F.lit(None).cast("long"),
        })
    )
    g = _grouped(
        base,
        ("day", "domain", "overall"),
        [F.sum("events").alias("events")],
        extra=("kind", "status", "reason"),
    )
    w = Window.partitionBy("grain", "day", "domain", "kind")
    ranked = (
        g.withColumns({
            "rank": F.row_number().over(w.orderBy(F.desc("events"), "status", "reason")),
            "share": F.col("events") / F.sum("events").over(w),
        })
    )
    return ranked.where(F.col("rank") <= top_n)


def lag_bin_col(lag: Column) -> Column:
    """Log-spaced bin of a lag in seconds: bin 0 holds <= LAG_MIN_S, bin b > 0 holds
    (LAG_MIN_S * GAMMA^(b-1), LAG_MIN_S * GAMMA^b]."""
    ratio = F.log(lag / F.lit(LAG_MIN_S)) / F.lit(math.log(LAG_GAMMA))
    return F.when(lag <= LAG_MIN_S, F.lit(0)).otherwise(F.ceil(ratio)).cast("int")


def lag_bin_value(b: Column) -> Column:
    """A bin's representative: within LAG_REL_ERROR of every value in the bin."""
    mid = F.lit(LAG_MIN_S) * F.pow(F.lit(LAG_GAMMA), b) * F.lit(2 / (1 + LAG_GAMMA))
    return F.when(b == 0, F.lit(LAG_MIN_S)).otherwise(mid)


def lag_histogram(events: DataFrame) -> DataFrame:
    """Attempts per hour and log-spaced lag bin: a mergeable sketch of the lag's
    distribution (like DDSketch) that `sched_lag` turns into quantiles."""
    lag = F.col("sched_lag_s")
    return (
        _with_time_keys(events.where(lag.isNotNull()), "ts")
        .groupBy("_d", "_h", lag_bin_col(lag).alias("bin"))
        .agg(F.count(F.lit(1)).alias("n"))
    )


def _right_keys() -> list[Column]:
    """The grain columns of a table about to be `_grain_join`ed, renamed out of the way."""
    return [F.col(c).alias(f"_r_{c}") for c in GRAIN_COLS]


def _grain_join(left: DataFrame, right: DataFrame) -> DataFrame:
    """Left-join two per-grain tables on (grain, day, hour, domain), nulls matching.

    `right` has its grain columns renamed by `_right_keys` (in the caller's select, so no
    DataFrame call of its own); the caller's next select leaves the `_r_` columns out."""
    cond = None
    for c in GRAIN_COLS:
        e = F.col(c).eqNullSafe(F.col(f"_r_{c}"))
        cond = e if cond is None else cond & e
    return left.join(right, cond, "left")


def sched_lag(base: DataFrame, histogram: DataFrame) -> DataFrame:
    """Retry scheduling lag (attempt.startedAt - scheduledAt, seconds): how late the
    scheduler picks up due work, per hour, day and overall.

    Count, mean, max and the fixed buckets are exact (from `event_base`); p50/p90/p99 come
    from the log-spaced histogram: the value at rank ceil(p * n), within LAG_REL_ERROR
    (about 1 %) relative, or LAG_MIN_S absolute below that.
    """
    grains = ("hour", "day", "overall")
    buckets = [c for c in base.columns if c.startswith("lag_bucket_")]
    exact = _grouped(
        base.where(F.col("lag_n") > 0),
        grains,
        [
            F.sum("lag_n").alias("attempts"),
            (F.sum("lag_sum") / F.sum("lag_n")).alias("mean_s"),
            F.max("lag_max").alias("max_s"),
            *[F.sum(c).alias(c) for c in buckets],
        ],
    )
    per_bin = _grouped(
        histogram.withColumn("domain", F.lit(None).cast("string")),
        grains,
        [F.sum("n").alias("n")],
        extra=("bin",),
    )
    key = [F.col(c) for c in GRAIN_COLS]
    cum = F.sum("n").over(
        Window.partitionBy(*key).orderBy("bin").rowsBetween(Window.unboundedPreceding, 0)
    )
    total = F.sum("n").over(Window.partitionBy(*key))
    ranked = per_bin.withColumns({"cum": cum, "total": total})
    picks = []
    for p in LAG_PERCENTILES:
        rank = F.greatest(F.lit(1), F.ceil(F.lit(p) * F.col("total")))
        picks.append(F.min(F.when(F.col("cum") >= rank, F.col("bin"))).alias(_pname(p)))
    q = ranked.groupBy(*key).agg(*picks).select(
        *_right_keys(), *[lag_bin_value(F.col(_pname(p))).alias(_pname(p)) for p in LAG_PERCENTILES]
    )
    out = _grain_join(exact, q)
    return out.select(*exact.columns, *[_pname(p) for p in LAG_PERCENTILES])


def _pname(p: float) -> str:
    return f"p{round(p * 100)}_s"


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


def senders(base: DataFrame, top_n: int = 10) -> DataFrame:
    """Top envelope senders (pflogsumm's "senders by message count"): mails accepted,
    recipients, octets received, and requests refused (Reject events) per sender; the
    null sender ("", DSNs) is one row like any other. Ranked by mails, then refusals."""
    per = (
        base.where(F.col("event_type").isin("Send", "Reject") & F.col("sender").isNotNull())
        .groupBy("sender")
        .agg(
            F.sum("mails").alias("mails"),
            F.sum(F.when(F.col("event_type") == "Send", F.col("events"))).alias("recipients"),
            F.coalesce(F.sum("bytes"), F.lit(0)).alias("bytes"),
            F.sum(F.when(F.col("event_type") == "Reject", F.col("events"))).alias("rejected"),
        )
        .fillna(0, ["recipients", "rejected"])
    )
    # a few hundred aggregated rows: one window partition on purpose
    w = Window.orderBy(F.desc("mails"), F.desc("rejected"), "sender")
    return per.withColumn("rank", F.row_number().over(w)).where(F.col("rank") <= top_n)


# the feedback table's counts, in its column order (job.py writes them so)
FEEDBACK_COUNTS = ("complaints", "unsubscribes", "late_bounces", "late_hard_bounces")


def feedback(events: DataFrame, broadcast: bool = True) -> DataFrame:
    """What receivers and recipients reported after accepting mail: complaints (ARF
    feedback loops), late bounces and the hard ones among them (services/feedback), and
    one-click unsubscribes (Subscription events that opt out: services/unsubscribe), per
    recipient domain and per envelope sender (`grain` says which; the other key is null).
    A mail's own outcome is not changed by a late report: these are counted beside it.

    An unsubscribe's event does not name the sender (the link's token carries the mail id,
    not the address; SES's would), so it is counted under the sender of its mail's Send
    when the events read hold that Send, and under a null sender otherwise. The lookup
    joins the few report rows' mail ids (broadcast, unless `broadcast` is False: for a
    small log, where a broadcast is a Spark job of its own) to the Send rows."""
    et = F.col("event_type")
    fb = events.where(F.col("feedback"))
    unsub = (et == "Subscription") & (F.col("action") == UNSUBSCRIBED)
    ids = (
        fb.where((et == "Subscription") & F.col("sender").isNull()).select("message_id").distinct()
    )
    send_sender = (
        events.where((et == "Send") & F.col("sender").isNotNull())
        .join(F.broadcast(ids) if broadcast else ids, "message_id", "left_semi")
        .groupBy("message_id")
        .agg(F.min("sender").alias("_send_sender"))
    )
    fb = (
        fb.join(send_sender, "message_id", "left")
        .withColumn("sender", F.coalesce(F.col("sender"), F.col("_send_sender")))
    )
    counts = [
        F.count(F.when(et == "Complaint", 1)).alias("complaints"),
        F.count(F.when(unsub, 1)).alias("unsubscribes"),
        F.count(F.when(et == "Bounce", 1)).alias("late_bounces"),
        F.count(F.when((et == "Bounce") & (F.col("bounce_type") == "Permanent"), 1)).alias(
            "late_hard_bounces"
        ),
    ]
    by_domain = fb.groupBy("domain").agg(*counts).select(
        F.lit("domain").alias("grain"), "domain", F.lit(None).cast("string").alias("sender"),
        *FEEDBACK_COUNTS,
    )
    by_sender = fb.groupBy("sender").agg(*counts).select(
        F.lit("sender").alias("grain"), F.lit(None).cast("string").alias("domain"), "sender",
        *FEEDBACK_COUNTS,
    )
    return by_domain.unionByName(by_sender)


def _rep_band(rate: Column, bands: Sequence[tuple[float, str]]) -> Column:
    out = F.when(rate.isNull(), F.lit("ok"))
    for limit, name in bands:
        out = out.when(rate >= F.lit(limit), F.lit(name))
    return out.otherwise(F.lit("ok"))


def reputation(events: DataFrame, min_sends: int = REPUTATION_MIN_SENDS) -> DataFrame:
    """What the reputation guards count (outbound/reputation.py), per principal and per
    sender domain, against SES's review / pause bands (consts.REPUTATION_*_BANDS):

    * sends: delivery's final results (Delivery, and a permanent Bounce of an attempt:
      not a late one, not a refusal by the suppression list or an operator's, which have
      none; not a 4.x.x expiry, which the guard does not count either);
    * hard bounces: Permanent ones, from a remote 5xx reply or reported late; soft
      (Transient) ones apart, as SES's bounce rate counts hard bounces only;
    * complaints; unsubscribes (apart, no rate).

    Over the report's range, not the guard's rolling window; under `min_sends` the
    verdict is "too_few", as the guard's. Keys as the guard's: the mail's
    `mailqueue:principal` tag and its sender's domain."""
    et = F.col("event_type")
    late = F.coalesce(F.col("feedback"), F.lit(False))
    # a final result is a send when delivered or permanent (5.x.x), as counts_of: a
    # 4.x.x final failure (lifetime expiry) is a Bounce but no send
    permanent = F.coalesce(F.col("status").startswith("5"), F.lit(False))
    attempted = (et == "Delivery") | (
        (et == "Bounce") & ~late & F.col("attempt").isNotNull() & permanent
    )
    remote_5xx = F.coalesce(F.col("diag").startswith("smtp; 5"), F.lit(False))
    bounced = (et == "Bounce") & ((~late & attempted & remote_5xx) | late)
    hard = bounced & (F.col("bounce_type") == "Permanent")
    soft = bounced & (F.col("bounce_type") == "Transient")
    keyed = events.where(
        F.col("principal").isNotNull() | F.col("sender_domain").isNotNull()
    ).select(
        F.explode(
            F.array(
                F.struct(F.lit("principal").alias("scope"), F.col("principal").alias("target")),
                F.struct(
                    F.lit("sender_domain").alias("scope"), F.col("sender_domain").alias("target")
                ),
            )
        ).alias("k"),
        attempted.alias("_send"),
        hard.alias("_hard"),
        soft.alias("_soft"),
        (et == "Complaint").alias("_complaint"),
        ((et == "Subscription") & (F.col("action") == UNSUBSCRIBED)).alias("_unsub"),
    )
    counted = keyed.where(F.col("k.target").isNotNull() & (F.col("k.target") != "")).groupBy(
        F.col("k.scope").alias("scope"), F.col("k.target").alias("target")
    ).agg(
        F.count(F.when(F.col("_send"), 1)).alias("sends"),
        F.count(F.when(F.col("_hard"), 1)).alias("hard_bounces"),
        F.count(F.when(F.col("_soft"), 1)).alias("soft_bounces"),
        F.count(F.when(F.col("_complaint"), 1)).alias("complaints"),
        F.count(F.when(F.col("_unsub"), 1)).alias("unsubscribes"),
    )
    br = F.when(F.col("sends") > 0, F.col("hard_bounces") / F.col("sends"))
    cr = F.when(F.col("sends") > 0, F.col("complaints") / F.col("sends"))
    bb = _rep_band(br, REPUTATION_BOUNCE_BANDS)
    cb = _rep_band(cr, REPUTATION_COMPLAINT_BANDS)
    worst = (
        F.when((bb == "pause") | (cb == "pause"), F.lit("pause"))
        .when((bb == "review") | (cb == "review"), F.lit("review"))
        .otherwise(F.lit("ok"))
    )
    verdict = F.when(F.col("sends") < F.lit(min_sends), F.lit("too_few")).otherwise(worst)
    cols = {
        "bounce_rate": br, "complaint_rate": cr, "bounce_band": bb, "complaint_band": cb,
        "verdict": verdict,
    }
    out = counted.select(
        *[
            (cols[f.name] if f.name in cols else F.col(f.name)).cast(f.dataType).alias(f.name)
            for f in REPUTATION_SCHEMA.fields
        ]
    )
    return out


def rejects(base: DataFrame, top_n: int = 10) -> DataFrame:
    """Top reasons requests were refused at ingress (Reject events), with their share."""
    per = (
        base.where(F.col("event_type") == "Reject")
        .withColumn("reason", F.coalesce(F.col("diag"), F.lit("")))
        .groupBy("reason")
        .agg(F.sum("events").alias("events"))
    )
    w = Window.orderBy(F.desc("events"), "reason")
    ranked = per.withColumns({
        "rank": F.row_number().over(w),
        "share": F.col("events") / F.sum("events").over(Window.partitionBy()),
    })
    return ranked.where(F.col("rank") <= top_n)


# Timeline bucket widths (seconds) to choose from, and how many buckets a chart may have:
# an hour of data is shown per minute, a day per hour, a month per day.
TIMELINE_BUCKETS_S = (60, 300, 900, 3600, 21600, 86400)
TIMELINE_MAX_BUCKETS = 60


def timeline_bucket(first: datetime | None, last: datetime | None) -> int:
    """The narrowest bucket that shows [first, last] in at most TIMELINE_MAX_BUCKETS."""
    if first is None or last is None:
        return 3600
    span = (last - first).total_seconds()
    for b in TIMELINE_BUCKETS_S:
        if span / b < TIMELINE_MAX_BUCKETS:
            return b
    return TIMELINE_BUCKETS_S[-1]


def timeline(base: DataFrame, events: DataFrame, bucket_s: int) -> DataFrame:
    """Events per type per time bucket of `bucket_s` seconds (by their own time).

    Hour-or-wider buckets roll up from `event_base`; narrower ones (short ranges, hence
    small data) read the events once more."""
    if bucket_s >= 3600:
        start = F.floor(F.col("_h") * 3600 / F.lit(bucket_s)) * bucket_s
        src = base.withColumn("_b", start)
        agg = F.sum("events")
    else:
        start = F.floor(F.unix_micros(F.col("ts")) / F.lit(bucket_s * 1_000_000)) * bucket_s
        src = events.where(F.col("ts").isNotNull()).withColumn("_b", start)
        agg = F.count(F.lit(1))
    return (
        src.groupBy("_b", "event_type")
        .agg(agg.alias("events"))
        .select(
            # a UTC ISO string (the session time zone is UTC): a collected timestamp
            # would be shifted into the driver's local zone
            F.date_format(F.timestamp_seconds(F.col("_b")), "yyyy-MM-dd'T'HH:mm:ss'Z'").alias(
                "bucket_start"
            ),
            F.lit(bucket_s).alias("bucket_s"),
            "event_type",
            F.col("events").cast("long").alias("events"),
        )
    )
