"""Pure DataFrame -> DataFrame transforms: raw events to normalised events to outcomes.

Nothing here reads or writes: the job (`job.py`) wires sources and sinks, so each step can
be tested on a tiny DataFrame built with an explicit schema.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from .consts import OPERATOR_EVENT, PRINCIPAL_TAG, REPUTATION_EVENT

# Diagnostic text normalisation: applied in order, identically by Spark (Java regex) and
# by `normalise_reason_py` (Python re); the patterns use only syntax both engines share.
# Lower-casing happens first. The aim is that one cause groups into one row: the SMTP
# basic and enhanced codes (reported separately as `status`) are stripped from the front,
# addresses, IPs, ids and numbers are masked.
REASON_RULES: tuple[tuple[str, str], ...] = (
    (r"^\s*(?:(?:smtp|x-mailqueue);\s*)?(?:\d{1,3}[ -]+)?(?:[245]\.\d{1,3}\.\d{1,3}\s*)?", ""),
    (r"<?[a-z0-9._%+=\-]+@[a-z0-9.\-]+>?", "<addr>"),
    (r"\[?\b\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}\b\]?", "<ip>"),
    # what follows "id=" / "id:" is an id whatever its characters: all digits ("id=#") and
    # mixed ("id=<id>") made one reason two rows (no backreference: Java and Python differ;
    # no lookbehind: DuckDB's RE2, the bench's baseline, has none)
    (r"\bid=[a-z0-9._\-]+", "id=<id>"),
    (r"\bid:[a-z0-9._\-]+", "id:<id>"),
    # a long run of digits alone is an id too (issue 44): a 12-character hex id made only of
    # digits became "#" where one with a letter became "<id>", one reason in two rows
    (r"\b\d{10,}\b", "<id>"),
    (r"\b[a-z_]+\d[a-z0-9_]*\b|\b\d+[a-z_][a-z0-9_]*\b", "<id>"),
    (r"\d+", "#"),
    (r"\s+", " "),
)
REASON_MAX_LEN = 160
# The job may run on an older Python than the project's 3.11 (EMR's runtime), so no
# datetime.UTC, dataclass slots or zip(strict=) in the modules the driver imports.
UTC = timezone.utc  # noqa: UP017
STATUS_RE = r"\b([245]\.\d{1,3}\.\d{1,3})\b"


@dataclass(frozen=True)
class TimeRange:
    """A half-open UTC interval [start, end); None ends mean "whatever the data holds"."""

    start: datetime | None
    end: datetime | None

    @classmethod
    def day(cls, day: str) -> TimeRange:
        d = datetime.fromisoformat(day).replace(tzinfo=UTC)
        return cls(d, d + timedelta(days=1))

    @classmethod
    def parse(cls, start: str | None, end: str | None) -> TimeRange:
        """`--from`/`--to`: a date (the whole day; `--to` is inclusive) or an ISO time."""
        s = _parse_bound(start, end_side=False) if start else None
        e = _parse_bound(end, end_side=True) if end else None
        if s and e and e <= s:
            raise ValueError(f"empty range: {start} .. {end}")
        return cls(s, e)

    @property
    def bounded(self) -> bool:
        return self.start is not None and self.end is not None


def _parse_bound(value: str, end_side: bool) -> datetime:
    if len(value) == 10:  # YYYY-MM-DD
        d = datetime.fromisoformat(value).replace(tzinfo=UTC)
        return d + timedelta(days=1) if end_side else d
    t = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return t.replace(tzinfo=UTC) if t.tzinfo is None else t.astimezone(UTC)


_ASCII_UPPER = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


def lower_col(c: Column) -> Column:
    """`lower(c)`, with the same answers, but ASCII text (as many characters as bytes) is
    lower-cased by `translate`. Spark 4's `lower` maps case with ICU, and the first call in
    a JVM builds a table over all of Unicode: measured 7-9 s of a demo report's ~40 (issue
    28). Text with other characters still goes through `lower`, only those rows pay.
    Per row it is slower than `lower` (3 M strings: 21 s against 5 s), so only a small
    input, where that first call is most of the cost, uses it (`ascii_lower`)."""
    ascii_only = F.length(c) == F.octet_length(c)
    return F.when(ascii_only, F.translate(c, _ASCII_UPPER, _ASCII_UPPER.lower())).otherwise(
        F.lower(c)
    )


def _lower(c: Column, ascii_lower: bool) -> Column:
    return lower_col(c) if ascii_lower else F.lower(c)


def normalise_reason_col(c: Column, ascii_lower: bool = False) -> Column:
    """Spark version of the reason normaliser (see REASON_RULES); `ascii_lower`: see
    `lower_col` (same answers)."""
    out = _lower(c, ascii_lower)
    for pattern, repl in REASON_RULES:
        out = F.regexp_replace(out, pattern, repl)
    return F.substring(F.trim(out), 1, REASON_MAX_LEN)


def normalise_reason_py(text: str | None) -> str | None:
    """Python version of the same normaliser (the tests hold both to the same answers)."""
    import re

    if text is None:
        return None
    out = text.lower()
    for pattern, repl in REASON_RULES:
        out = re.sub(pattern, repl, out)
    return out.strip()[:REASON_MAX_LEN]


def ts_lit(t: datetime) -> Column:
    """A timestamp literal from epoch micros: independent of any local time zone."""
    if t.tzinfo is None:
        raise ValueError("naive datetime: pass an aware (UTC) time")
    return F.timestamp_micros(F.lit(_micros(t)))


def _part_key() -> Column:
    """"YYYY-MM-DDHH" of the partition an event was read from."""
    return F.concat(F.col("dt"), F.lpad(F.col("hr"), 2, "0"))


def partition_filter(raw: DataFrame, rng: TimeRange, late_hours: int) -> DataFrame:
    """Keep the dt/hr partitions that can hold events of `rng`.

    Partitions are by *write* time, so an event is never in an earlier hour than its own
    time, but a late one can be up to `late_hours` after it. The predicate uses only the
    partition columns so Spark prunes directories before opening files.
    """
    cond: Column | None = None
    if rng.start is not None:
        lo = rng.start.astimezone(UTC).strftime("%Y-%m-%d%H")
        cond = _part_key() >= lo
    if rng.end is not None:
        hi_t = rng.end.astimezone(UTC) + timedelta(hours=late_hours)
        hi = (hi_t - timedelta(microseconds=1)).strftime("%Y-%m-%d%H")
        c = _part_key() <= hi
        cond = c if cond is None else cond & c
    return raw if cond is None else raw.where(cond)


def normalise(raw: DataFrame, ascii_lower: bool = False) -> DataFrame:
    """Flatten the SES-format document into one narrow row per event and recipient.

    A Send lists every destination of the mail (as SES): it becomes one row per
    destination, with the eventId suffixed by the address so the rows stay distinct. The
    other types carry one recipient in their own object (`delivery.recipients`,
    `bouncedRecipients`, `delayedRecipients`, `mailqueue.operator.recipients`). A Reject
    has no recipient row (`rcpt` null); its domain is the refused recipient's or the first
    destination's, `n_dest` the number of destinations. A Subscription (one-click
    unsubscribe) is its recipient's row (`mail.destination`), marked `feedback` like a
    complaint, its `action` "unsubscribed" or "subscribed" (`subscription_action`).
    Reputation events (no mail) make no row. `principal` (the mail's
    `mailqueue:principal` tag) and `sender_domain` (its source's domain) are what the
    reputation guards count under, on every row. The wire type
    `mailqueue:Operator` is called "Operator" from here on. Timestamps arrive as ISO
    strings (see schema.READ_SCHEMA); unparseable ones become null rather than failing
    the job. Rows without an eventId or type are dropped. `ts_raw` keeps the event time's
    string for `in_range`, which drops it. `ascii_lower`: lower-case with `lower_col`
    (same answers; for small inputs).
    """
    m = F.col("mail")
    ours = F.col("mailqueue")
    dest = m.getField("destination")
    wire_type = F.col("eventType")
    et = F.when(wire_type == F.lit(OPERATOR_EVENT), F.lit("Operator")).otherwise(wire_type)
    bounce_r = F.try_element_at(F.col("bounce.bouncedRecipients"), F.lit(1))
    delay_r = F.try_element_at(F.col("deliveryDelay.delayedRecipients"), F.lit(1))
    one = F.coalesce(
        F.try_element_at(F.col("delivery.recipients"), F.lit(1)),
        bounce_r.getField("emailAddress"),
        delay_r.getField("emailAddress"),
        F.try_element_at(ours.getField("operator").getField("recipients"), F.lit(1)),
        F.try_element_at(F.col("complaint.complainedRecipients"), F.lit(1)).getField(
            "emailAddress"
        ),
        # a Subscription's recipient: its mail's destination (SES's mail object)
        F.when(wire_type == "Subscription", F.try_element_at(dest, F.lit(1))),
    )
    reject_rcpt = ours.getField("reject").getField("recipient")
    first_dest = F.try_element_at(dest, F.lit(1))
    rcpts = (
        F.when(wire_type == "Send", dest)
        .when(wire_type == "Reject", F.array(F.coalesce(reject_rcpt, first_dest)))
        .otherwise(F.array(one))
    )
    diag = F.coalesce(
        bounce_r.getField("diagnosticCode"),
        delay_r.getField("diagnosticCode"),
        ours.getField("reject").getField("reason"),
    )
    status = F.coalesce(
        bounce_r.getField("status"),
        delay_r.getField("status"),
        F.nullif(F.regexp_extract(diag, STATUS_RE, 1), F.lit("")),
    )
    ts_str = F.coalesce(
        F.col("delivery.timestamp"),
        F.col("deliveryDelay.timestamp"),
        F.col("bounce.timestamp"),
        F.col("complaint.timestamp"),
        F.col("subscription.timestamp"),
        ours.getField("operator").getField("timestamp"),
        ours.getField("reject").getField("timestamp"),
        m.getField("timestamp"),
    )
    ts = ts_str.try_cast("timestamp")
    att = ours.getField("attempt")
    lag = (
        F.unix_micros(att.getField("startedAt").try_cast("timestamp"))
        - F.unix_micros(att.getField("scheduledAt").try_cast("timestamp"))
    ) / F.lit(1_000_000.0)
    # Written to a later hour than its own. With the producer's UTC "...Z" form the date
    # and hour are read off the string (cheap); other forms format the parsed time.
    utc = ts_str.endswith("Z")
    ev_day = F.when(utc, F.substring(ts_str, 1, 10)).otherwise(F.date_format(ts, "yyyy-MM-dd"))
    ev_hr = F.when(utc, F.substring(ts_str, 12, 2)).otherwise(F.date_format(ts, "HH"))
    dt, hr = F.col("dt"), F.col("hr").try_cast("int")
    late = (dt > ev_day) | ((dt == ev_day) & (hr > ev_hr.try_cast("int")))
    eid = ours.getField("eventId")
    per_mail = (wire_type == "Send") | (wire_type == "Reject")
    # a receiver's report (services/feedback): a Complaint, or a Bounce marked late
    feedback = (wire_type == "Complaint") | F.coalesce(
        ours.getField("feedback").getField("late"), F.lit(False)
    )
    # a recipient's own report: one-click unsubscribe (services/unsubscribe), SES's
    # Subscription event; counted beside the mail's outcome like a complaint
    subscription = wire_type == "Subscription"
    feedback = feedback | subscription
    # reputation reviews/pauses are about a sender, not a mail: not a report row
    keep = eid.isNotNull() & wire_type.isNotNull() & (wire_type != REPUTATION_EVENT)
    rows = raw.where(keep).select(
        eid.alias("_eid"),
        et.alias("event_type"),
        m.getField("messageId").alias("message_id"),
        F.posexplode_outer(rcpts).alias("_pos", "_rcpt"),
        F.size(dest).cast("int").alias("n_dest"),
        m.getField("timestamp").try_cast("timestamp").alias("accepted_at"),
        ts.alias("ts"),
        status.alias("status"),
        diag.alias("diag"),
        F.col("bounce.bounceType").alias("bounce_type"),
        F.coalesce(ours.getField("operator").getField("action"), subscription_action())
        .alias("action"),
        att.getField("number").alias("attempt"),
        lag.cast("double").alias("sched_lag_s"),
        late.alias("late"),
        ts_str.alias("ts_raw"),
        # SES fills a Subscription's mail.source; ours is "" (the link's token does not
        # carry the sender): null, not the null sender, so report.feedback looks it up
        F.when(subscription, F.nullif(m.getField("source"), F.lit("")))
        .when(per_mail | feedback, m.getField("source"))
        .alias("sender"),
        F.when(per_mail, ours.getField("size")).alias("size"),
        F.when(wire_type == "Send", F.col("_pos")).cast("int").alias("dest_pos"),
        F.when(feedback, F.lit(True)).alias("feedback"),
        F.try_element_at(
            m.getField("tags").getItem(PRINCIPAL_TAG), F.lit(1)
        ).alias("principal"),
        F.nullif(
            _lower(F.substring_index(m.getField("source"), "@", -1), ascii_lower), F.lit("")
        ).alias("_sdom"),
    )
    r = F.col("_rcpt")
    send = F.col("event_type") == "Send"
    return rows.select(
        F.when(send, F.concat_ws("/", F.col("_eid"), _lower(r, ascii_lower)))
        .otherwise(F.col("_eid"))
        .alias("event_id"),
        "event_type",
        "message_id",
        F.when(F.col("event_type") != "Reject", r).alias("rcpt"),
        _lower(F.substring_index(r, "@", -1), ascii_lower).alias("domain"),
        "n_dest", "accepted_at", "ts", "status", "diag", "bounce_type", "action", "attempt",
        "sched_lag_s", "late", "ts_raw", "sender", "size", "dest_pos", "feedback",
        "principal",
        # a source without "@" (the null sender) has no domain
        F.when(F.col("_sdom").contains("."), F.col("_sdom")).alias("sender_domain"),
    )


UNSUBSCRIBED = "unsubscribed"
RESUBSCRIBED = "subscribed"


def subscription_action() -> Column:
    """A Subscription event's `action`: "unsubscribed" when its new preferences opt out of
    the whole list (`newTopicPreferences.unsubscribeAll`, what one-click writes) or name a
    topic as OptOut (SES's per-topic form), "subscribed" otherwise (an opt-in); null on
    the other types."""
    new = F.col("subscription.newTopicPreferences")
    opted_out = F.coalesce(new.getField("unsubscribeAll"), F.lit(False)) | F.coalesce(
        F.exists(
            new.getField("topicSubscriptionStatus"),
            lambda t: t.getField("subscriptionStatus") == F.lit("OptOut"),
        ),
        F.lit(False),
    )
    choice = F.when(opted_out, F.lit(UNSUBSCRIBED)).otherwise(F.lit(RESUBSCRIBED))
    return F.when(F.col("eventType") == "Subscription", choice)


# The producer's form, "YYYY-MM-DDTHH:MM:SS.mmmZ": fixed width, so it sorts as it reads.
_CANONICAL_TS_LEN = 24


def _whole_ms(t: datetime) -> bool:
    return t.microsecond % 1000 == 0


def in_range(events: DataFrame, rng: TimeRange) -> DataFrame:
    """Events whose own time is in the range (late ones included, early partitions not).

    The optimizer moves this filter below normalise's projection, substituting `ts` by its
    definition, so every reference to `ts` here would parse the timestamp string once
    more per row (three parses per event with `start <= ts < end`: measured ~5 s CPU on
    10 M events). So the producer's canonical UTC form is compared as a string (exact for
    a fixed-width ISO form and a whole-millisecond bound), other forms parse once. A
    canonical-looking string that is not a valid time passes here and leaves with a null
    `ts`; `job.prepare` drops those after de-duplication, where `ts` is a column.
    """
    out = events
    ts = F.col("ts")
    start, end = rng.start, rng.end
    by_time: Column | None = None
    if start is not None and end is not None:
        width = (end - start) // timedelta(microseconds=1)
        since = (F.unix_micros(ts) - F.lit(_micros(start))).cast("double")
        by_time = F.floor(since / F.lit(float(width))) == 0  # one reference to ts
    elif start is not None:
        by_time = ts >= ts_lit(start)
    elif end is not None:
        by_time = ts < ts_lit(end)
    if by_time is not None:
        cond = by_time
        if "ts_raw" in events.columns and all(
            _whole_ms(t) for t in (start, end) if t is not None
        ):
            raw = F.col("ts_raw")
            canonical = (
                (F.length(raw) == _CANONICAL_TS_LEN)
                & raw.endswith("Z")
                & (F.substring(raw, 11, 1) == "T")
            )
            by_str: Column = F.lit(True)
            if start is not None:
                by_str = by_str & (raw >= F.lit(_iso_ms(start)))
            if end is not None:
                by_str = by_str & (raw < F.lit(_iso_ms(end)))
            cond = F.when(canonical, by_str).otherwise(by_time)
        out = out.where(cond)
    return out.drop("ts_raw")


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _micros(t: datetime) -> int:
    return (t - _EPOCH) // timedelta(microseconds=1)


def _iso_ms(t: datetime) -> str:
    return t.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


# Fields of an event that its eventId is derived from or that are fixed when it is
# emitted: copies of one event agree on them, so they can be grouping keys.
_FIXED = (
    "event_type", "rcpt", "domain", "n_dest", "status", "diag", "bounce_type", "action",
    "attempt", "sender",
)


def dedupe(events: DataFrame, partitions: int) -> DataFrame:
    """One row per eventId, with `copies` (how often it was read) and `late` only if every
    copy was late.

    Copies share the mail (the id is derived from it), so the data is hash-partitioned by
    message_id once, here, and both this aggregation and the per-recipient outcome
    aggregation downstream reuse that partitioning: one shuffle for the whole job.
    The fields in _FIXED are grouping keys next to the eventId (they are equal in every
    copy of an event); only timing may differ between re-emissions, and the earliest is
    kept. This keeps every aggregate fixed-width, so Spark can use its hash aggregate
    instead of sorting all events (measured: ~15 % of the job's CPU on 10 M events).
    """
    keys = ["message_id", "event_id", *[c for c in _FIXED if c in events.columns]]
    timing = [c for c in events.columns if c not in (*keys, "late")]
    out = (
        events.repartition(partitions, "message_id")
        .groupBy(*keys)
        .agg(
            *[F.min(c).alias(c) for c in timing],
            F.min(F.col("late")).alias("late"),
            F.count(F.lit(1)).alias("copies"),
        )
    )
    return out.select(*[c for c in (*events.columns, "copies") if c in out.columns])


def _seconds_between(a: Column, b: Column) -> Column:
    return ((F.unix_micros(b) - F.unix_micros(a)) / F.lit(1_000_000.0)).cast("double")


def outcomes(events: DataFrame, rng: TimeRange) -> DataFrame:
    """One row per mail x recipient accepted in the range: its final state as of the end.

    Final events: Delivery -> delivered; Bounce or operator "bounced" -> bounced; operator
    "deleted" -> deleted; the earliest final event wins. A hard bounce is a Permanent
    bounce with a 5.x.x status (a 4.4.7 lifetime expiry is a bounce but not a hard one).
    `attempts` is the highest attempt number seen, `deferrals` the DeliveryDelay count.
    `dsn` says the mail was sent with the null sender (a delivery status notification: the
    report keeps it apart from the mail users sent); `first_rcpt` marks one row per mail.
    """
    et = F.col("event_type")
    ts = F.col("ts")
    is_bounce = (et == "Bounce") | ((et == "Operator") & (F.col("action") == "bounced"))
    is_hard = (
        (et == "Bounce") & (F.col("bounce_type") == "Permanent") & F.col("status").startswith("5")
    )
    agg = (
        events.where(~et.isin("Reject", "Complaint", "Subscription") & F.col("rcpt").isNotNull())
        .groupBy("message_id", "rcpt", "domain")
        .agg(
            F.min("accepted_at").alias("accepted_at"),
            F.min(F.when(et == "Delivery", ts)).alias("delivered_at"),
            F.min(F.when(is_bounce, ts)).alias("bounced_at"),
            F.min(F.when(is_hard, ts)).alias("hard_at"),
            F.min(F.when((et == "Operator") & (F.col("action") == "deleted"), ts)).alias(
                "deleted_at"
            ),
            F.coalesce(F.max("attempt"), F.lit(0)).cast("int").alias("attempts"),
            F.count(F.when(et == "DeliveryDelay", 1)).alias("deferrals"),
            F.min(F.when(et == "Delivery", F.col("attempt"))).alias("delivered_attempt"),
            # from the mail's Send: sent with the null sender (a DSN), its size, and whether
            # this is its first destination (so per-message sums count it once). Fixed-width
            # aggregates only: a string max would force a sort-based aggregation.
            F.max(F.when(et == "Send", (F.col("sender") == "").cast("int"))).alias("_dsn"),
            F.max(F.when(et == "Send", F.col("size"))).alias("size"),
            F.min(F.when(et == "Send", F.col("dest_pos"))).alias("_pos"),
        )
    )
    final_at = F.least("delivered_at", "bounced_at", "deleted_at")
    state = (
        F.when(F.col("final_at").isNull(), "pending")
        .when(F.col("delivered_at") == F.col("final_at"), "delivered")
        .when(F.col("bounced_at") == F.col("final_at"), "bounced")
        .otherwise("deleted")
    )
    out = agg.withColumn("final_at", final_at).withColumn("final_state", state)
    if rng.start is not None:
        out = out.where(F.col("accepted_at") >= ts_lit(rng.start))
    if rng.end is not None:
        out = out.where(F.col("accepted_at") < ts_lit(rng.end))
    return out.select(
        "message_id",
        "rcpt",
        "domain",
        "accepted_at",
        "final_state",
        "final_at",
        "attempts",
        "deferrals",
        "delivered_attempt",
        ((F.col("final_state") == "bounced") & F.col("hard_at").isNotNull()).alias(
            "hard_bounce"
        ),
        _seconds_between(F.col("accepted_at"), F.col("final_at")).alias("time_to_final_s"),
        F.coalesce(F.col("_dsn") == 1, F.lit(False)).alias("dsn"),
        "size",
        F.coalesce(F.col("_pos") == 0, F.lit(False)).alias("first_rcpt"),
    )
