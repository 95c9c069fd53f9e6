"""Every table of the Spark report, computed again with DuckDB from the same files.

The baseline of `bench.report_speed`: one SQL pass per table over the same gzip JSON lines,
written from the metric definitions (pipeline/README.md, the docstrings of
mq_pipeline.report), so the bench can time both engines on the same work and check that
every aggregate the report writes is the same number. Shared with the job are only the
constants (bucket edges, bands, percentiles) and the reason normaliser's rule list.
Percentiles of the time to deliver are exact here (`quantile_disc`); the job's
`percentile_approx` must lie within its documented rank error of them. DuckDB is a
bench-only dependency: nothing in the job imports this.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from mq_pipeline.consts import (
    ATTEMPTS_CAP,
    BOUNCE_BANDS,
    LAG_EDGES_S,
    LAG_GAMMA,
    LAG_MIN_S,
    LAG_PERCENTILES,
    OPERATOR_EVENT,
    PERCENTILE_ACCURACY,
    PERCENTILES,
    QSHAPE_EDGES_MIN,
)
from mq_pipeline.report import timeline_bucket
from mq_pipeline.transforms import REASON_MAX_LEN, REASON_RULES, STATUS_RE

UTC = timezone.utc  # noqa: UP017 - as in mq_pipeline

# The fields the job reads (schema.READ_SCHEMA), timestamps as strings.
_COLUMNS = """{
  'eventType': 'VARCHAR',
  'mail': 'STRUCT(messageId VARCHAR, "timestamp" VARCHAR, source VARCHAR,
             destination VARCHAR[])',
  'delivery': 'STRUCT("timestamp" VARCHAR, recipients VARCHAR[])',
  'bounce': 'STRUCT("timestamp" VARCHAR, bounceType VARCHAR, bouncedRecipients
             STRUCT(emailAddress VARCHAR, status VARCHAR, diagnosticCode VARCHAR)[])',
  'deliveryDelay': 'STRUCT("timestamp" VARCHAR, delayedRecipients
             STRUCT(emailAddress VARCHAR, status VARCHAR, diagnosticCode VARCHAR)[])',
  'mailqueue': 'STRUCT(eventId VARCHAR, size BIGINT,
             attempt STRUCT(number INTEGER, scheduledAt VARCHAR, startedAt VARCHAR),
             operator STRUCT("timestamp" VARCHAR, action VARCHAR, recipients VARCHAR[]),
             reject STRUCT("timestamp" VARCHAR, reason VARCHAR, recipient VARCHAR))'
}"""

# grain -> (day, hour, domain) expressions over a table with day, hr, domain columns
_GRAINS = {
    "hour": ("day", "hr", "NULL"),
    "day": ("day", "NULL", "NULL"),
    "domain": ("NULL", "NULL", "domain"),
    "overall": ("NULL", "NULL", "NULL"),
}
GRAIN_KEY = ("grain", "day", "hour", "domain")


@dataclass(frozen=True)
class Params:
    """What the job was asked (its command line), so both compute the same report."""

    events: str
    start: datetime | None
    end: datetime | None
    late_hours: int = 6
    top_n: int = 10
    accuracy: int = PERCENTILE_ACCURACY


def _us(t: datetime) -> int:
    return (t - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)


def _q(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def _ts_us(col: str) -> str:
    return f"epoch_us(TRY_CAST({col} AS TIMESTAMPTZ))"


def normalise_reason_sql(col: str) -> str:
    """The job's reason normaliser (transforms.REASON_RULES) as DuckDB SQL."""
    out = f"lower({col})"
    for pattern, repl in REASON_RULES:
        out = f"regexp_replace({out}, {_q(pattern)}, {_q(repl)}, 'g')"
    return f"substring(trim({out}), 1, {REASON_MAX_LEN})"


def _by_grain(
    source: str, grains: Sequence[str], aggs: str, extra: Sequence[str] = (), where: str = ""
) -> str:
    """One scan, GROUPING SETS: rows keyed (grain, day, hour, domain, *extra)."""
    sets = []
    used: list[str] = []
    for g in grains:
        cols = [c for c in _GRAINS[g] if c != "NULL"]
        used += [c for c in cols if c not in used]
        sets.append("(" + ", ".join([*cols, *extra]) + ")")
    grain = "CASE"
    for col, name in (("domain", "domain"), ("hr", "hour"), ("day", "day")):
        if col in used:
            grain += f" WHEN GROUPING({col}) = 0 THEN '{name}'"
    grain += " ELSE 'overall' END"
    day = "day" if "day" in used else "NULL"
    hr = "hr" if "hr" in used else "NULL"
    dom = "domain" if "domain" in used else "NULL"
    cols = ", ".join(extra) + ", " if extra else ""
    return (f"SELECT {grain} AS grain, {day}::VARCHAR AS day, {hr}::INTEGER AS hour, "
            f"{dom}::VARCHAR AS domain, {cols}{aggs} FROM {source} {where} "
            f"GROUP BY GROUPING SETS ({', '.join(sets)})")


def _rows(con: Any, sql: str) -> list[dict[str, Any]]:
    cur = con.execute(sql)
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


def connect(threads: int | None = None, memory_limit: str = "6GB",
            temp_dir: str | None = None) -> Any:
    """A DuckDB connection set up like the bench's other DuckDB reference."""
    import duckdb

    con = duckdb.connect()
    for s in ("SET TimeZone = 'UTC'", f"SET memory_limit = '{memory_limit}'",
              "SET preserve_insertion_order = false", "SET enable_progress_bar = false"):
        con.execute(s)
    if temp_dir:
        con.execute(f"SET temp_directory = {_q(temp_dir)}")
    if threads:
        con.execute(f"SET threads = {int(threads)}")
    return con


def compute(con: Any, p: Params) -> dict[str, Any]:
    """Every report table of the job's run over `p`, plus the input statistics. Leaves
    the tables `ev` and `oc` in `con` for `check_quantiles`."""
    t0 = time.perf_counter()
    part_where = ["mailqueue.eventId IS NOT NULL", "eventType IS NOT NULL"]
    ts_where = []
    if p.start is not None:
        part_where.append(f"dt || lpad(hr, 2, '0') >= '{p.start.astimezone(UTC):%Y-%m-%d%H}'")
        ts_where.append(f"ts_us >= {_us(p.start)}")
    if p.end is not None:
        hi = p.end.astimezone(UTC) + timedelta(hours=p.late_hours) - timedelta(microseconds=1)
        part_where.append(f"dt || lpad(hr, 2, '0') <= '{hi:%Y-%m-%d%H}'")
        ts_where.append(f"ts_us < {_us(p.end)}")
    if ts_where:
        ts_where.append("ts_us IS NOT NULL")
    glob = p.events.rstrip("/") + "/dt=*/hr=*/*.gz"
    one = ("coalesce(delivery.recipients[1], bounce.bouncedRecipients[1].emailAddress, "
           "deliveryDelay.delayedRecipients[1].emailAddress, mailqueue.operator.recipients[1])")
    # normalise + range filter + de-duplication (transforms.normalise, in_range, dedupe)
    con.execute(f"""
        CREATE TEMP TABLE ev AS
        WITH src AS (
          SELECT *,
            coalesce(bounce.bouncedRecipients[1].diagnosticCode,
                     deliveryDelay.delayedRecipients[1].diagnosticCode,
                     mailqueue.reject.reason) AS diag,
            coalesce(delivery.timestamp, deliveryDelay.timestamp, bounce.timestamp,
                     mailqueue.operator.timestamp, mailqueue.reject.timestamp,
                     mail.timestamp) AS ts_str,
            CASE WHEN eventType = 'Send' THEN mail.destination
                 WHEN eventType = 'Reject'
                   THEN [coalesce(mailqueue.reject.recipient, mail.destination[1])]
                 ELSE [{one}] END AS rc
          FROM read_json({_q(glob)}, format = 'newline_delimited', compression = 'gzip',
                         columns = {_COLUMNS}, hive_partitioning = true,
                         hive_types = {{'dt': 'VARCHAR', 'hr': 'VARCHAR'}},
                         ignore_errors = true)
          WHERE {" AND ".join(part_where)}
        ), flat AS (
          SELECT
            CASE WHEN eventType = 'Send'
                 THEN concat_ws('/', mailqueue.eventId, lower(rc[i + 1]))
                 ELSE mailqueue.eventId END AS event_id,
            CASE WHEN eventType = {_q(OPERATOR_EVENT)} THEN 'Operator' ELSE eventType END
              AS event_type,
            mail.messageId AS message_id,
            CASE WHEN eventType <> 'Reject' THEN rc[i + 1] END AS rcpt,
            lower(string_split(rc[i + 1], '@')[-1]) AS domain,
            {_ts_us("mail.timestamp")} AS accepted_us,
            {_ts_us("ts_str")} AS ts_us,
            coalesce(bounce.bouncedRecipients[1].status, deliveryDelay.delayedRecipients[1].status,
                     nullif(regexp_extract(diag, {_q(STATUS_RE)}, 1), '')) AS status,
            diag,
            bounce.bounceType AS bounce_type,
            mailqueue.operator.action AS action,
            mailqueue.attempt.number AS attempt,
            ({_ts_us("mailqueue.attempt.startedAt")}
             - {_ts_us("mailqueue.attempt.scheduledAt")}) / 1e6 AS lag_s,
            dt || lpad(hr, 2, '0')
              > strftime(TRY_CAST(ts_str AS TIMESTAMPTZ), '%Y-%m-%d%H') AS late,
            CASE WHEN eventType IN ('Send', 'Reject') THEN mail.source END AS sender,
            CASE WHEN eventType IN ('Send', 'Reject') THEN mailqueue.size END AS size,
            CASE WHEN eventType = 'Send' THEN i END AS dest_pos
          FROM src,
            unnest(CASE WHEN rc IS NULL OR len(rc) = 0 THEN [NULL::BIGINT]
                        ELSE range(len(rc)) END) AS u(i)
        ), dd AS (
          SELECT message_id, event_id, event_type, rcpt, domain, status, diag, bounce_type,
            action, attempt, sender,
            min(accepted_us) AS accepted_us, min(ts_us) AS ts_us, min(lag_s) AS lag_s,
            min(size) AS size, min(dest_pos) AS dest_pos, bool_and(late) AS late,
            count(*) AS copies
          FROM flat {"WHERE " + " AND ".join(ts_where) if ts_where else ""}
          GROUP BY ALL
        )
        SELECT *, make_timestamptz(ts_us) AS ts,
          strftime(make_timestamptz(ts_us), '%Y-%m-%d') AS day,
          hour(make_timestamptz(ts_us)) AS hr
        FROM dd
    """)
    acc = []
    if p.start is not None:
        acc.append(f"accepted_us >= {_us(p.start)}")
    if p.end is not None:
        acc.append(f"accepted_us < {_us(p.end)}")
    # transforms.outcomes: one row per mail x recipient accepted in the range
    con.execute(f"""
        CREATE TEMP TABLE oc AS
        WITH per AS (
          SELECT message_id, rcpt, domain, min(accepted_us) AS accepted_us,
            min(ts_us) FILTER (WHERE event_type = 'Delivery') AS delivered_at,
            min(ts_us) FILTER (WHERE event_type = 'Bounce'
                            OR (event_type = 'Operator' AND action = 'bounced')) AS bounced_at,
            min(ts_us) FILTER (WHERE event_type = 'Bounce' AND bounce_type = 'Permanent'
                            AND starts_with(status, '5')) AS hard_at,
            min(ts_us) FILTER (WHERE event_type = 'Operator' AND action = 'deleted')
              AS deleted_at,
            coalesce(max(attempt), 0) AS attempts,
            count(*) FILTER (WHERE event_type = 'DeliveryDelay') AS deferrals,
            min(attempt) FILTER (WHERE event_type = 'Delivery') AS delivered_attempt,
            coalesce(max((sender = '')::INTEGER) FILTER (WHERE event_type = 'Send') = 1, false)
              AS dsn,
            max(size) FILTER (WHERE event_type = 'Send') AS size,
            coalesce(min(dest_pos) FILTER (WHERE event_type = 'Send') = 0, false) AS first_rcpt
          FROM ev WHERE event_type <> 'Reject' AND rcpt IS NOT NULL
          GROUP BY message_id, rcpt, domain
        ), fin AS (
          SELECT *, least(delivered_at, bounced_at, deleted_at) AS final_us FROM per
          {"WHERE " + " AND ".join(acc) if acc else ""}
        )
        SELECT *,
          CASE WHEN final_us IS NULL THEN 'pending'
               WHEN delivered_at = final_us THEN 'delivered'
               WHEN bounced_at = final_us THEN 'bounced' ELSE 'deleted' END AS final_state,
          (final_us - accepted_us) / 1e6 AS ttf,
          strftime(make_timestamptz(accepted_us), '%Y-%m-%d') AS day,
          hour(make_timestamptz(accepted_us)) AS hr
        FROM fin
    """)
    con.execute("""
        CREATE TEMP VIEW ocx AS SELECT *,
          final_state = 'bounced' AND hard_at IS NOT NULL AS hard_bounce FROM oc
    """)

    stats = _rows(con, """
        SELECT count(*) AS events, coalesce(sum(copies), 0)::BIGINT AS rows,
          count(*) FILTER (WHERE late) AS late, min(ts_us) AS first_us, max(ts_us) AS last_us
        FROM ev""")[0]
    first = None if stats["first_us"] is None else datetime.fromtimestamp(
        stats["first_us"] / 1e6, UTC)
    last = None if stats["last_us"] is None else datetime.fromtimestamp(
        stats["last_us"] / 1e6, UTC)
    out: dict[str, Any] = {"input": {
        "rows_read": stats["rows"], "events": stats["events"],
        "duplicates_removed": stats["rows"] - stats["events"], "late_events": stats["late"],
    }}

    out["volumes"] = _rows(con, _by_grain(
        "ev", ("hour", "day", "domain", "overall"),
        "count(*) AS events, count(*) FILTER (WHERE late) AS late", extra=("event_type",)))

    out["delivery"] = _delivery(con, p)

    out["attempts"] = _rows(con, _by_grain(
        f"(SELECT *, least(attempts, {ATTEMPTS_CAP}) AS attempts_bucket FROM oc WHERE NOT dsn)",
        ("day", "domain", "overall"), "count(*) AS recipients",
        extra=("attempts_bucket", "final_state")))

    con.execute(f"""
        CREATE TEMP TABLE rs AS
        WITH per AS (
          SELECT day, domain,
            CASE WHEN event_type = 'DeliveryDelay' THEN 'deferral' ELSE 'bounce' END AS kind,
            coalesce(status, '') AS st, diag, count(*) AS n
          FROM ev WHERE event_type IN ('DeliveryDelay', 'Bounce') GROUP BY ALL
        ), texts AS (
          SELECT diag, coalesce({normalise_reason_sql('diag')}, '') AS reason
          FROM (SELECT DISTINCT diag FROM per)
        )
        SELECT per.*, texts.reason FROM per JOIN texts ON per.diag IS NOT DISTINCT FROM texts.diag
    """)
    grouped = _by_grain("rs", ("day", "domain", "overall"), "sum(n)::BIGINT AS events",
                        extra=("kind", "st", "reason"))
    out["reasons"] = _rows(con, f"""
        SELECT * FROM (
          SELECT grain, day, hour, domain, kind, st AS status, reason, events,
            row_number() OVER (PARTITION BY grain, day, domain, kind
                               ORDER BY events DESC, st, reason) AS rank,
            events / sum(events) OVER (PARTITION BY grain, day, domain, kind) AS share
          FROM ({grouped})) WHERE rank <= {p.top_n}""")

    out["sched_lag"] = _sched_lag(con)

    at_candidates = [t for t in (p.end, last) if t is not None]
    out["qshape"] = []
    if at_candidates:
        at = _us(min(at_candidates))
        bucket = str(len(QSHAPE_EDGES_MIN))
        for i in reversed(range(len(QSHAPE_EDGES_MIN))):
            bucket = f"CASE WHEN age_min < {QSHAPE_EDGES_MIN[i]} THEN {i} ELSE {bucket} END"
        out["qshape"] = _rows(con, f"""
            WITH pend AS (
              SELECT domain, ({bucket})::INTEGER AS bucket FROM (
                SELECT domain, ({at} - accepted_us) / 60e6 AS age_min FROM oc
                WHERE accepted_us <= {at} AND (final_us IS NULL OR final_us > {at})))
            SELECT 'domain' AS grain, domain, bucket, count(*) AS recipients FROM pend
              GROUP BY domain, bucket
            UNION ALL
            SELECT 'overall', NULL, bucket, count(*) FROM pend GROUP BY bucket""")

    out["senders"] = _rows(con, f"""
        SELECT * FROM (
          SELECT *, row_number() OVER (ORDER BY mails DESC, rejected DESC, sender) AS rank
          FROM (
            SELECT sender,
              count(*) FILTER (WHERE dest_pos = 0) AS mails,
              count(*) FILTER (WHERE event_type = 'Send') AS recipients,
              coalesce(sum(size) FILTER (WHERE dest_pos = 0), 0) AS bytes,
              count(*) FILTER (WHERE event_type = 'Reject') AS rejected
            FROM ev WHERE event_type IN ('Send', 'Reject') AND sender IS NOT NULL
            GROUP BY sender)) WHERE rank <= {p.top_n}""")

    out["rejects"] = _rows(con, f"""
        SELECT * FROM (
          SELECT *, row_number() OVER (ORDER BY events DESC, reason) AS rank,
            events / sum(events) OVER () AS share
          FROM (SELECT coalesce(diag, '') AS reason, count(*) AS events FROM ev
                WHERE event_type = 'Reject' GROUP BY 1)) WHERE rank <= {p.top_n}""")

    b = timeline_bucket(first, last)
    start = (f"floor((ts_us // 3600000000) * 3600 / {b}) * {b}" if b >= 3600
             else f"floor(ts_us / {b * 1_000_000}) * {b}")
    out["timeline"] = _rows(con, f"""
        SELECT strftime(make_timestamptz((b * 1000000)::BIGINT), '%Y-%m-%dT%H:%M:%SZ')
            AS bucket_start, {b} AS bucket_s, event_type, count(*) AS events
        FROM (SELECT ({start})::BIGINT AS b, event_type FROM ev WHERE ts_us IS NOT NULL)
        GROUP BY b, event_type""")
    out["seconds"] = round(time.perf_counter() - t0, 2)
    return out


def _delivery(con: Any, p: Params) -> list[dict[str, Any]]:
    """report.delivery: outcome counts, rates, band and exact ttd quantile bands."""
    counts = {
        "recipients": "count(*) FILTER (WHERE NOT dsn)",
        "delivered": "count(*) FILTER (WHERE NOT dsn AND final_state = 'delivered')",
        "bounced": "count(*) FILTER (WHERE NOT dsn AND final_state = 'bounced')",
        "hard_bounced": "count(*) FILTER (WHERE NOT dsn AND hard_bounce)",
        "deleted": "count(*) FILTER (WHERE NOT dsn AND final_state = 'deleted')",
        "pending": "count(*) FILTER (WHERE NOT dsn AND final_state = 'pending')",
        "attempted": "count(*) FILTER (WHERE NOT dsn AND attempts >= 1)",
        "first_attempt_delivered": "count(*) FILTER (WHERE NOT dsn AND "
                                   "final_state = 'delivered' AND delivered_attempt = 1)",
        "deferred": "count(*) FILTER (WHERE NOT dsn AND deferrals > 0)",
        "deferred_finalised": "count(*) FILTER (WHERE NOT dsn AND deferrals > 0 "
                              "AND final_state <> 'pending')",
        "deferred_delivered": "count(*) FILTER (WHERE NOT dsn AND deferrals > 0 "
                              "AND final_state = 'delivered')",
        "deferrals": "coalesce(sum(deferrals) FILTER (WHERE NOT dsn), 0)",
        "ttd_sum": "sum(ttf) FILTER (WHERE NOT dsn AND final_state = 'delivered')",
        "ttd_max_s": "max(ttf) FILTER (WHERE NOT dsn AND final_state = 'delivered')",
        "mails": "count(*) FILTER (WHERE NOT dsn AND first_rcpt)",
        "bytes_received": "sum(size) FILTER (WHERE NOT dsn AND first_rcpt)",
        "bytes_delivered": "sum(size) FILTER (WHERE NOT dsn AND final_state = 'delivered')",
        "dsn_recipients": "count(*) FILTER (WHERE dsn)",
        "dsn_delivered": "count(*) FILTER (WHERE dsn AND final_state = 'delivered')",
        "dsn_bounced": "count(*) FILTER (WHERE dsn AND final_state = 'bounced')",
        "dsn_deleted": "count(*) FILTER (WHERE dsn AND final_state = 'deleted')",
        "dsn_pending": "count(*) FILTER (WHERE dsn AND final_state = 'pending')",
        "dsn_bytes": "sum(size) FILTER (WHERE dsn AND first_rcpt)",
    }
    # Exact quantiles (the job's are approximate: `check_quantiles` holds them to their
    # documented rank error afterwards, outside the timed part).
    qlist = "[" + ", ".join(repr(q) for q in PERCENTILES) + "]"
    counts["_ttd_q"] = (f"quantile_disc(ttf, {qlist}) "
                        "FILTER (WHERE NOT dsn AND final_state = 'delivered')")
    aggs = ", ".join(f"{v} AS {k}" for k, v in counts.items())
    base = _rows(con, _by_grain("ocx", tuple(_GRAINS), aggs))
    for r in base:
        r["ttd_mean_s"] = r["ttd_sum"] / r["delivered"] if r["delivered"] else None
        del r["ttd_sum"]
        r["finalised"] = r["delivered"] + r["bounced"] + r["deleted"]
        r["delivery_rate"] = _ratio(r["delivered"], r["finalised"])
        r["delivered_of_sent"] = _ratio(r["delivered"], r["recipients"])
        r["first_attempt_rate"] = _ratio(r["first_attempt_delivered"], r["attempted"])
        r["retry_yield"] = _ratio(r["deferred_delivered"], r["deferred_finalised"])
        r["hard_bounce_rate"] = _ratio(r["hard_bounced"], r["recipients"])
        r["bounce_band"] = _band(r["hard_bounce_rate"])
        exact = r.pop("_ttd_q") or [None] * len(PERCENTILES)
        for q, v in zip(PERCENTILES, exact, strict=True):
            r[f"ttd_p{round(q * 100)}_s"] = Exact(v)
    return base


class Exact(float):
    """An exact quantile: the job's approximate one is checked by rank, not by value."""

    def __new__(cls, v: float | None) -> Exact:
        return super().__new__(cls, math.nan if v is None else v)


def _ratio(a: int, b: int) -> float | None:
    return a / b if b else None


def _band(rate: float | None) -> str:
    if rate is None:
        return "ok"
    for limit, name in BOUNCE_BANDS:
        if rate >= limit:
            return name
    return "ok"


def _sched_lag(con: Any) -> list[dict[str, Any]]:
    """report.sched_lag: exact counts, mean, max and buckets; quantiles from the same
    log-spaced bins as the job (the value at rank ceil(p * n))."""
    edges: list[float | None] = [None, *LAG_EDGES_S, None]
    buckets = []
    for i in range(len(LAG_EDGES_S) + 1):
        lo, hi = edges[i], edges[i + 1]
        cond = ["lag_s IS NOT NULL"]
        if lo is not None:
            cond.append(f"lag_s >= {lo}")
        if hi is not None:
            cond.append(f"lag_s < {hi}")
        buckets.append(f"count(*) FILTER (WHERE {' AND '.join(cond)}) AS lag_bucket_{i}")
    grains = ("hour", "day", "overall")
    exact = _rows(con, _by_grain(
        "ev", grains,
        "count(*) AS attempts, sum(lag_s) / count(*) AS mean_s, max(lag_s) AS max_s, "
        + ", ".join(buckets), where="WHERE lag_s IS NOT NULL"))
    binned = (f"(SELECT *, CASE WHEN lag_s <= {LAG_MIN_S} THEN 0 ELSE "
              f"ceil(ln(lag_s / {LAG_MIN_S}) / {math.log(LAG_GAMMA)!r})::INTEGER END AS bin "
              "FROM ev WHERE lag_s IS NOT NULL)")
    hist = _rows(con, _by_grain(binned, grains, "count(*) AS n", extra=("bin",)))
    per: dict[tuple[Any, ...], list[tuple[int, int]]] = {}
    for r in hist:
        per.setdefault((r["grain"], r["day"], r["hour"], r["domain"]), []).append(
            (r["bin"], r["n"]))
    for r in exact:
        bins = sorted(per.get((r["grain"], r["day"], r["hour"], r["domain"]), []))
        total = sum(n for _, n in bins)
        for q in LAG_PERCENTILES:
            rank = max(1, math.ceil(q * total))
            cum, pick = 0, None
            for b, n in bins:
                cum += n
                if cum >= rank:
                    pick = b
                    break
            name = f"p{round(q * 100)}_s"
            r[name] = None if pick is None else (
                LAG_MIN_S if pick == 0
                else LAG_MIN_S * LAG_GAMMA**pick * (2 / (1 + LAG_GAMMA)))
    return exact


# ---------------------------------------------------------------- comparison

KEYS = {
    "volumes": (*GRAIN_KEY, "event_type"),
    "delivery": GRAIN_KEY,
    "attempts": (*GRAIN_KEY, "attempts_bucket", "final_state"),
    "reasons": (*GRAIN_KEY, "kind", "rank"),
    "sched_lag": GRAIN_KEY,
    "qshape": ("grain", "domain", "bucket"),
    "senders": ("rank",),
    "rejects": ("rank",),
    "timeline": ("bucket_start", "event_type"),
}
REL_TOL = 1e-9  # sums of doubles in another order; counts and ints must be equal


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        if a is None or b is None:
            return a is None and b is None
        return math.isclose(float(a), float(b), rel_tol=REL_TOL, abs_tol=1e-12)
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, bool) or isinstance(b, bool):
        return bool(a) == bool(b)
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    return str(a) == str(b)


def compare(
    spark_tables: dict[str, list[dict[str, Any]]], spark_input: dict[str, Any],
    ref: dict[str, Any], limit: int = 20,
) -> tuple[int, list[str]]:
    """(numbers compared, differences): every value of every reference row against the
    job's row with the same key; rows only one side has are differences too."""
    problems: list[str] = []
    checked = 0
    for k, v in ref["input"].items():
        checked += 1
        if not _same(spark_input.get(k), v):
            problems.append(f"input.{k}: job {spark_input.get(k)!r} != duckdb {v!r}")
    for table, keys in KEYS.items():
        mine = {tuple(r.get(k) for k in keys): r for r in spark_tables.get(table, [])}
        theirs = {tuple(r.get(k) for k in keys): r for r in ref[table]}
        for key in sorted(set(mine) ^ set(theirs), key=repr)[:limit]:
            side = "job" if key in mine else "duckdb"
            problems.append(f"{table}{list(key)}: row only in {side}")
        for key in set(mine) & set(theirs):
            a, b = mine[key], theirs[key]
            for col, want in b.items():
                if col in keys:
                    continue
                if isinstance(want, Exact):  # by rank: check_quantiles
                    continue
                checked += 1
                got = a.get(col)
                ok = _same(got, want)
                if not ok:
                    problems.append(f"{table}{list(key)}.{col}: job {got!r} != duckdb {want!r}")
    return checked, problems


def check_quantiles(
    con: Any, spark_delivery: Sequence[dict[str, Any]], accuracy: int
) -> tuple[int, list[str]]:
    """Each ttd percentile of the job within percentile_approx's rank error: some rank
    the job's value holds among the group's delivered times is within n / accuracy + 1
    of p * n (run after `compute`, on its tables; not timed)."""
    con.execute("CREATE OR REPLACE TEMP TABLE sp (grain VARCHAR, day VARCHAR, hour INTEGER, "
                "domain VARCHAR, q DOUBLE, v DOUBLE)")
    rows = []
    for r in spark_delivery:
        for q in PERCENTILES:
            rows.append((r["grain"], r["day"], r["hour"], r["domain"], q,
                         r.get(f"ttd_p{round(q * 100)}_s")))
    con.executemany("INSERT INTO sp VALUES (?, ?, ?, ?, ?, ?)", rows)
    con.execute("CREATE OR REPLACE TEMP TABLE dl AS SELECT day, hr AS hour, domain, ttf "
                "FROM oc WHERE NOT dsn AND final_state = 'delivered'")
    problems: list[str] = []
    checked = 0
    for g, on in (("hour", "d.day = s.day AND d.hour = s.hour"), ("day", "d.day = s.day"),
                  ("domain", "d.domain = s.domain"), ("overall", "true")):
        res = _rows(con, f"""
            SELECT s.grain, s.day, s.hour, s.domain, s.q, s.v,
              count(d.ttf) AS n, count(d.ttf) FILTER (WHERE d.ttf < s.v) AS below,
              count(d.ttf) FILTER (WHERE d.ttf <= s.v) AS upto
            FROM sp s LEFT JOIN dl d ON {on}
            WHERE s.grain = '{g}' GROUP BY ALL""")
        for r in res:
            checked += 1
            n, v = r["n"], r["v"]
            if n == 0:
                ok = v is None
            else:
                target, slack = r["q"] * n, n / accuracy + 1
                ok = v is not None and r["below"] + 1 <= target + slack and (
                    r["upto"] >= target - slack)
            if not ok:
                problems.append(f"delivery[{g}, {r['day']}, {r['hour']}, {r['domain']}] "
                                f"ttd p{round(r['q'] * 100)}: job {v!r} outside the rank "
                                f"band (n={n}, below={r['below']}, upto={r['upto']})")
    return checked, problems
