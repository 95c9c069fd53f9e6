"""The headline metrics computed independently with DuckDB, as a reference for the job.

Same definitions as the Spark job (pipeline/README.md; null-sender mail, DSNs, is left
out of the headline as there), written as one SQL script over the
same gzip JSON files, with exact quantiles. The benchmark runs both on the same data and
checks they agree: counts and rates exactly, percentiles within percentile_approx's rank
error. DuckDB is imported lazily: the job's zip never needs it.
"""

from __future__ import annotations

import math
import time
from datetime import datetime, timedelta, timezone
from typing import Any

from .consts import PERCENTILE_ACCURACY, PERCENTILES

UTC = timezone.utc  # noqa: UP017 - match transforms.py

_COLUMNS = """{
  'eventType': 'VARCHAR',
  'mail': 'STRUCT(messageId VARCHAR, "timestamp" VARCHAR, source VARCHAR,
             destination VARCHAR[])',
  'delivery': 'STRUCT("timestamp" VARCHAR, recipients VARCHAR[])',
  'bounce': 'STRUCT("timestamp" VARCHAR, bounceType VARCHAR, bouncedRecipients
             STRUCT(emailAddress VARCHAR, status VARCHAR, diagnosticCode VARCHAR)[])',
  'deliveryDelay': 'STRUCT("timestamp" VARCHAR, delayedRecipients
             STRUCT(emailAddress VARCHAR, status VARCHAR, diagnosticCode VARCHAR)[])',
  'mailqueue': 'STRUCT(eventId VARCHAR,
             attempt STRUCT(number INTEGER, scheduledAt VARCHAR, startedAt VARCHAR),
             operator STRUCT("timestamp" VARCHAR, action VARCHAR, recipients VARCHAR[]),
             reject STRUCT("timestamp" VARCHAR, recipient VARCHAR))'
}"""


def _us(col: str) -> str:
    """Epoch micros of an ISO-8601 string column (NULL if unparseable)."""
    return f"epoch_us(TRY_CAST({col} AS TIMESTAMPTZ))"


def headline(
    events_dir: str,
    start: datetime | None,
    end: datetime | None,
    late_hours: int = 6,
    accuracy: int = PERCENTILE_ACCURACY,
    memory_limit: str = "6GB",
    temp_dir: str | None = None,
    threads: int | None = None,
) -> dict[str, Any]:
    """Headline metrics of [start, end) over `events_dir` (dt=/hr= partitions)."""
    import duckdb

    t0 = time.perf_counter()
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.execute(f"SET memory_limit = '{memory_limit}'")
    con.execute("SET preserve_insertion_order = false")
    con.execute("SET enable_progress_bar = false")
    if temp_dir:
        con.execute(f"SET temp_directory = '{temp_dir}'")
    if threads:
        con.execute(f"SET threads = {int(threads)}")
    where = ["eventId IS NOT NULL", "eventType IS NOT NULL"]
    if start is not None:
        lo = start.astimezone(UTC).strftime("%Y-%m-%d%H")
        where.append(f"dt || lpad(hr, 2, '0') >= '{lo}'")
        where.append(f"ts >= {round(start.timestamp() * 1e6)}")
    if end is not None:
        hi_t = end.astimezone(UTC) + timedelta(hours=late_hours) - timedelta(microseconds=1)
        where.append(f"dt || lpad(hr, 2, '0') <= '{hi_t.strftime('%Y-%m-%d%H')}'")
        where.append(f"ts < {round(end.timestamp() * 1e6)}")
    acc_filter = []
    if start is not None:
        acc_filter.append(f"accepted >= {round(start.timestamp() * 1e6)}")
    if end is not None:
        acc_filter.append(f"accepted < {round(end.timestamp() * 1e6)}")
    glob = events_dir.rstrip("/") + "/dt=*/hr=*/*.gz"
    con.execute(f"""
        CREATE TEMP TABLE ev AS
        WITH raw AS (
          SELECT
            mailqueue.eventId || CASE WHEN eventType = 'Send' THEN '/' || lower(r) ELSE '' END
              AS eventId,
            CASE WHEN eventType = 'mailqueue:Operator' THEN 'Operator' ELSE eventType END
              AS eventType,
            mail, bounce, mailqueue.operator AS operator, mailqueue.attempt AS attempt, dt, hr, r,
            {_us("coalesce(delivery.timestamp, deliveryDelay.timestamp, bounce.timestamp, "
                 "mailqueue.operator.timestamp, mailqueue.reject.timestamp, "
                 "mail.timestamp)")} AS ts,
            coalesce(bounce.bouncedRecipients[1].status,
                     deliveryDelay.delayedRecipients[1].status,
                     nullif(regexp_extract(coalesce(bounce.bouncedRecipients[1].diagnosticCode,
                        deliveryDelay.delayedRecipients[1].diagnosticCode),
                        '\\b([245]\\.\\d{{1,3}}\\.\\d{{1,3}})\\b', 1), '')) AS status
          FROM read_json('{glob}', format = 'newline_delimited', compression = 'gzip',
                         columns = {_COLUMNS}, hive_partitioning = true,
                         hive_types = {{'dt': 'VARCHAR', 'hr': 'VARCHAR'}},
                         ignore_errors = true),
            unnest(CASE WHEN eventType = 'Send' THEN mail.destination
                        WHEN eventType = 'Reject' THEN [NULL]
                        ELSE [coalesce(delivery.recipients[1],
                                       bounce.bouncedRecipients[1].emailAddress,
                                       deliveryDelay.delayedRecipients[1].emailAddress,
                                       mailqueue.operator.recipients[1])] END) AS u(r)
        )
        SELECT eventId AS event_id, any_value(eventType) AS event_type,
          any_value(mail.messageId) AS message_id,
          any_value(CASE WHEN eventType <> 'Reject' THEN r END) AS rcpt,
          min({_us("mail.timestamp")}) AS accepted, min(ts) AS ts,
          any_value(status) AS status, any_value(bounce.bounceType) AS bounce_type,
          any_value(operator.action) AS action, max(attempt.number) AS attempt,
          any_value(CASE WHEN eventType = 'Send' THEN mail.source END) AS sender,
          min({_us("attempt.startedAt")} - {_us("attempt.scheduledAt")}) / 1e6 AS lag_s,
          count(*) AS copies,
          bool_and(dt || lpad(hr, 2, '0') > strftime(make_timestamptz(ts), '%Y-%m-%d%H'))
            AS late
        FROM raw WHERE {" AND ".join(where)}
        GROUP BY eventId
    """)
    acc_where = ("WHERE " + " AND ".join(acc_filter)) if acc_filter else ""
    con.execute(f"""
        CREATE TEMP TABLE oc AS
        WITH per AS (
          SELECT message_id, rcpt, min(accepted) AS accepted,
            min(ts) FILTER (WHERE event_type = 'Delivery') AS delivered_at,
            min(ts) FILTER (WHERE event_type = 'Bounce'
                            OR (event_type = 'Operator' AND action = 'bounced')) AS bounced_at,
            min(ts) FILTER (WHERE event_type = 'Bounce' AND bounce_type = 'Permanent'
                            AND starts_with(status, '5')) AS hard_at,
            min(ts) FILTER (WHERE event_type = 'Operator' AND action = 'deleted') AS deleted_at,
            coalesce(max(attempt), 0) AS attempts,
            count(*) FILTER (WHERE event_type = 'DeliveryDelay') AS deferrals,
            min(attempt) FILTER (WHERE event_type = 'Delivery') AS delivered_attempt,
            coalesce(bool_or(event_type = 'Send' AND sender = ''), false) AS dsn
          FROM ev WHERE event_type <> 'Reject' AND rcpt IS NOT NULL
          GROUP BY message_id, rcpt
        ), fin AS (
          SELECT *, least(delivered_at, bounced_at, deleted_at) AS final_at FROM per
        )
        SELECT *, CASE WHEN final_at IS NULL THEN 'pending'
                       WHEN delivered_at = final_at THEN 'delivered'
                       WHEN bounced_at = final_at THEN 'bounced' ELSE 'deleted' END AS state
        FROM fin {acc_where}
    """)
    ev_row = con.execute(
        "SELECT count(*), sum(copies), count(*) FILTER (WHERE late), "
        "count(lag_s), max(lag_s) FROM ev"
    ).fetchone()
    assert ev_row is not None
    by_type = dict(con.execute("SELECT event_type, count(*) FROM ev GROUP BY 1").fetchall())
    o = con.execute("""
        SELECT count(*),
          count(*) FILTER (WHERE state = 'delivered'),
          count(*) FILTER (WHERE state = 'bounced'),
          count(*) FILTER (WHERE state = 'bounced' AND hard_at IS NOT NULL),
          count(*) FILTER (WHERE state = 'deleted'),
          count(*) FILTER (WHERE state = 'pending'),
          count(*) FILTER (WHERE attempts >= 1),
          count(*) FILTER (WHERE state = 'delivered' AND delivered_attempt = 1),
          count(*) FILTER (WHERE deferrals > 0),
          count(*) FILTER (WHERE deferrals > 0 AND state <> 'pending'),
          count(*) FILTER (WHERE deferrals > 0 AND state = 'delivered'),
          max((final_at - accepted) / 1e6) FILTER (WHERE state = 'delivered')
        FROM oc WHERE NOT dsn
    """).fetchone()
    assert o is not None
    (n, delivered, bounced, hard, deleted, pending, attempted, fad, deferred, dfin, ddel,
     ttd_max) = o
    finalised = delivered + bounced + deleted

    # Exact quantiles, plus the band percentile_approx may answer in: ranks within
    # n / accuracy (+1) of p * n.
    slack = 1 / accuracy + 1 / max(delivered, 1)
    qs: list[float] = []
    for p in PERCENTILES:
        qs += [p, max(0.0, p - slack), min(1.0, p + slack)]
    qrow = con.execute(
        "SELECT quantile_disc((final_at - accepted) / 1e6, ?) FROM oc "
        "WHERE state = 'delivered' AND NOT dsn",
        [qs],
    ).fetchone()
    qv = list(qrow[0]) if qrow and qrow[0] is not None else [None] * len(qs)
    pct = {}
    for i, p in enumerate(PERCENTILES):
        name = f"ttd_p{round(p * 100)}_s"
        pct[name] = {"exact": qv[3 * i], "lo": qv[3 * i + 1], "hi": qv[3 * i + 2]}
    con.close()

    def ratio(a: int, b: int) -> float | None:
        return a / b if b else None

    return {
        "seconds": round(time.perf_counter() - t0, 2),
        "input": {
            "events": ev_row[0],
            "rows_read": int(ev_row[1] or 0),
            "duplicates_removed": int(ev_row[1] or 0) - ev_row[0],
            "late_events": ev_row[2],
        },
        "events_by_type": by_type,
        "headline": {
            "recipients": n,
            "delivered": delivered,
            "bounced": bounced,
            "hard_bounced": hard,
            "deleted": deleted,
            "pending": pending,
            "finalised": finalised,
            "deferred": deferred,
            "delivery_rate": ratio(delivered, finalised),
            "first_attempt_rate": ratio(fad, attempted),
            "retry_yield": ratio(ddel, dfin),
            "hard_bounce_rate": ratio(hard, n),
            "ttd_max_s": ttd_max,
        },
        "ttd_percentiles": pct,
        "sched_lag": {"attempts": ev_row[3], "max_s": ev_row[4]},
    }


def compare(spark_summary: dict[str, Any], ref: dict[str, Any]) -> list[str]:
    """Differences between the job's summary.json and the reference; empty when they agree.

    Counts and maxima must be equal, rates equal to 1e-12 relative, and each time-to-deliver
    percentile must lie in the reference's [lo, hi] rank band.
    """
    problems: list[str] = []

    def same(name: str, a: Any, b: Any) -> None:
        if isinstance(a, float) or isinstance(b, float):
            ok = a is not None and b is not None and math.isclose(a, b, rel_tol=1e-12)
        else:
            ok = a == b
        if not ok:
            problems.append(f"{name}: job {a!r} != reference {b!r}")

    for k, v in ref["input"].items():
        same(f"input.{k}", spark_summary["input"][k], v)
    for k, v in ref["events_by_type"].items():
        same(f"events_by_type.{k}", spark_summary["events_by_type"].get(k), v)
    for k, v in ref["headline"].items():
        same(f"headline.{k}", spark_summary["headline"][k], v)
    same("sched_lag.attempts", spark_summary["sched_lag"]["attempts"], ref["sched_lag"]["attempts"])
    same("sched_lag.max_s", spark_summary["sched_lag"]["max_s"], ref["sched_lag"]["max_s"])
    for k, band in ref["ttd_percentiles"].items():
        v = spark_summary["headline"][k]
        if band["lo"] is None or v is None:
            if not (band["lo"] is None and v is None):
                problems.append(f"{k}: job {v!r}, reference {band!r}")
        elif not band["lo"] <= v <= band["hi"]:
            problems.append(f"{k}: job {v} outside [{band['lo']}, {band['hi']}]")
    return problems
