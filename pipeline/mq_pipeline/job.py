"""The job: read the event log, run the transforms, write Parquet, CSV and summary.json.

Paths may be local or any Hadoop file system URI (s3:// on EMR): all I/O goes through
Spark or the JVM's Hadoop FileSystem, never boto3, so the same code runs under
`spark-submit --master local[*]` and on EMR Serverless.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from pyspark import StorageLevel
from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from . import arrow_write, report, transforms
from .consts import (
    BOUNCE_BANDS,
    PERCENTILE_ACCURACY,
    PERCENTILES,
    attempts_label,
    breach_lines,
    lag_bucket_labels,
    qshape_labels,
)
from .schema import PARTITION_FIELDS, READ_SCHEMA, REPUTATION_SCHEMA
from .transforms import UTC, TimeRange

TABLES = (
    "volumes", "delivery", "attempts", "reasons", "sched_lag", "qshape", "senders", "rejects",
    "timeline", "feedback", "reputation",
)
REPORT_THREADS = 3  # report tables computed concurrently (Spark runs their jobs side by side)

# The de-duplicated events are kept serialized (one byte array per block, spilled to disk
# when memory runs out) rather than as one object per row: 50 M events are ~12 GB of rows,
# and millions of long-lived row objects cost more in GC than Kryo costs to read them back.
# Measured on 10 M: same CPU either way, GC pauses 4.8 s -> <1 s.
EVENTS_STORAGE = StorageLevel(True, True, False, False)  # disk, memory, off-heap, deser.


@dataclass(frozen=True)
class JobConfig:
    """What to read, where to write, and the knobs of the reports."""

    events: str  # the directory holding dt=YYYY-MM-DD/hr=HH/ partitions
    out: str
    rng: TimeRange = field(default_factory=lambda: TimeRange(None, None))
    late_hours: int = 6  # how long after its hour an event may still be written
    partitions: int | None = None  # shuffle partitions; default: see shuffle_partitions()
    accuracy: int = PERCENTILE_ACCURACY
    top_reasons: int = 10
    min_volume: int = 100  # domains below this are not flagged for bounce rate
    csv_domains: int = 50  # domain rows kept in the CSVs (Parquet has all)
    qshape_at: datetime | None = None
    write_events: bool = False


def event_paths(root: str, rng: TimeRange, late_hours: int) -> str:
    """One glob over the day directories the range (plus lateness) can touch."""
    root = root.rstrip("/")
    if rng.start is None or rng.end is None:
        return f"{root}/dt=*/hr=*"
    last = rng.end + timedelta(hours=late_hours) - timedelta(microseconds=1)
    days: list[str] = []
    d = rng.start.astimezone(UTC).date()
    while d <= last.astimezone(UTC).date():
        days.append(d.isoformat())
        d += timedelta(days=1)
    glob = days[0] if len(days) == 1 else "{" + ",".join(days) + "}"
    return f"{root}/dt={glob}/hr=*"


def read_events(spark: SparkSession, root: str, rng: TimeRange, late_hours: int) -> DataFrame:
    """The raw events of the range's partitions, with an explicit schema.

    A range with no partitions at all yields an empty DataFrame, not an error, so a quiet
    day still produces (empty) reports.
    """
    schema = StructType(READ_SCHEMA.fields + PARTITION_FIELDS)
    try:
        raw = (
            spark.read.schema(schema)
            .option("basePath", root.rstrip("/"))
            .option("mode", "PERMISSIVE")
            .json(event_paths(root, rng, late_hours))
        )
    except AnalysisException as e:
        if "PATH_NOT_FOUND" not in str(e) and "Path does not exist" not in str(e):
            raise
        raw = spark.createDataFrame([], schema)
    return transforms.partition_filter(raw, rng, late_hours)


def input_bytes(df: DataFrame) -> int:
    """Spark's size estimate of a file source (the compressed bytes to read); 0 if unknown."""
    try:
        jdf: Any = df._jdf  # py4j handle: untyped
        size = int(str(jdf.queryExecution().optimizedPlan().stats().sizeInBytes()))
    except Exception:  # noqa: BLE001 - only a sizing hint
        return 0
    # Spark answers spark.sql.defaultSizeInBytes (Long.MaxValue) for a source it cannot size,
    # e.g. an events folder that exists but holds no file yet: that is "unknown", not 8 EiB
    # (it asked for 68,719,476,736 shuffle partitions and the job failed; issue 44)
    return size if 0 <= size < 2**62 else 0


def shuffle_partitions(spark: SparkSession, raw: DataFrame, configured: int | None) -> int:
    """2 x cores, or more for big inputs: the de-duplication hashes every event of a
    partition in one task, so ~128 MiB of gzip input per partition keeps a task's hash
    map in memory instead of spilling (which made 50 M events 7x slower than 10 M)."""
    if configured:
        return configured
    par = max(1, spark.sparkContext.defaultParallelism)
    n = max(2, 2 * par, -(-input_bytes(raw) // (128 * 2**20)))
    # A multiple of the cores: 7 tasks on 2 cores leave one core idle for the last one.
    return -(-n // par) * par


def prepare(
    spark: SparkSession, cfg: JobConfig, partitions: int | None = None,
    raw: DataFrame | None = None, ascii_lower: bool = False,
) -> DataFrame:
    """Normalised, de-duplicated events of the range (not yet materialised).

    Columns only the optional events table needs are dropped after de-duplication: the
    job keeps every event in memory, and narrower rows are what lets 50 M of them fit.
    `raw` is `read_events`' answer when the caller already has it; `ascii_lower`: see
    `transforms.lower_col`.
    """
    if raw is None:
        raw = read_events(spark, cfg.events, cfg.rng, cfg.late_hours)
    n = shuffle_partitions(spark, raw, partitions)
    spark.conf.set("spark.sql.shuffle.partitions", str(n))
    normalised = transforms.normalise(raw, ascii_lower)
    events = transforms.dedupe(transforms.in_range(normalised, cfg.rng), n)
    if cfg.rng.start is not None or cfg.rng.end is not None:
        # A time that does not parse is outside any range (see transforms.in_range).
        events = events.where(F.col("ts").isNotNull())
    return events if cfg.write_events else events.drop("event_id", "n_dest")


# ---------------------------------------------------------------- output helpers


def _is_local(path: str) -> bool:
    return "://" not in path or path.startswith("file://")


def _local(path: str) -> Path:
    return Path(path[len("file://") :] if path.startswith("file://") else path)


def write_text(spark: SparkSession, path: str, text: str) -> None:
    """Write a small text file locally, or through Hadoop's FileSystem (s3:// etc.)."""
    if _is_local(path):
        p = _local(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
        return
    sc: Any = spark.sparkContext  # py4j handles: untyped
    hpath = sc._jvm.org.apache.hadoop.fs.Path(path)
    fs = hpath.getFileSystem(sc._jsc.hadoopConfiguration())
    stream = fs.create(hpath, True)
    try:
        stream.write(bytearray(text.encode("utf-8")))
    finally:
        stream.close()


def _csv_value(v: Any) -> Any:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, datetime):
        return v.astimezone(UTC).isoformat().replace("+00:00", "Z")
    return v


def to_csv(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(columns)
    for r in rows:
        w.writerow([_csv_value(r.get(c)) for c in columns])
    return buf.getvalue()


def _local_relation(df: DataFrame) -> DataFrame:
    """`df` computed (one job) into a local relation in the driver JVM: later collects of
    it, to the JVM or to Python, take no job. Only for a few rows: they are Java objects."""
    jdf: Any = df._jdf  # py4j handles: untyped
    jspark: Any = df.sparkSession._jsparkSession
    return DataFrame(jspark.createDataFrame(jdf.collectAsList(), jdf.schema()), df.sparkSession)


def _write_table(
    df: DataFrame, path: str, files: int = 1, small: bool = False
) -> list[dict[str, Any]]:
    """Write a report table as Parquet and return its rows to the driver.

    Without Arrow, a big log's table is computed once into a local checkpoint (its
    aggregation stays parallel), then written and collected from there: no second
    computation and no Parquet read-back job (listing the output, opening its footers),
    which was ~1.2 s of a demo report's 15 s (docs/benchmarks.md, "Report speed").

    A local output (and pyarrow installed) takes one job: the table is collected to Python,
    where its rows are wanted anyway, and written from there by Arrow (`arrow_write`; the
    rows of a report table are a few thousand at most, domains x grains). At 1 M events
    the tables' step went 24.9 -> 21.5 s, on the demo log 8.0 -> ~6 s.

    Otherwise (s3:// on EMR, no pyarrow), for a `small` log, where each job is fixed cost,
    the table is collected once into a local relation in the driver JVM, which the Parquet
    write reads and which answers the collect to Python without a job (two jobs a table,
    not three). Not for big logs: their domain tables are thousands of rows, which this
    would turn into Java objects and back, and ship to the write in one task (1m events:
    the tables' step 22.5 -> 27.3 s).
    """
    if _is_local(path) and arrow_write.supports(df.schema):
        got = df.collect()
        arrow_write.write(df.schema, got, _local(path))
        return [r.asDict(recursive=True) for r in got]
    if small:
        table = _local_relation(df)
    else:
        table = df.localCheckpoint(eager=True)
    table.coalesce(files).write.mode("overwrite").parquet(path)
    return [r.asDict(recursive=True) for r in table.collect()]


def _build_and_write(
    build: Callable[[], DataFrame], path: str, small: bool = False
) -> list[dict[str, Any]]:
    """Build a table's DataFrame (which analyses it) and write it, in a worker thread."""
    return _write_table(build(), path, small=small)


_GRAIN_ORDER = {"overall": 0, "day": 1, "hour": 2, "domain": 3}


def _grain_key(r: dict[str, Any]) -> tuple[Any, ...]:
    return (_GRAIN_ORDER.get(r.get("grain") or "", 9), r.get("day") or "", r.get("hour") or 0)


# ---------------------------------------------------------------- the job


class _Steps:
    """Wall time per step, and (in local mode, where the driver JVM does all the work) the
    JVM's CPU time, logged to stderr and kept in summary.json, for tuning."""

    def __init__(self, spark: SparkSession) -> None:
        self._stat: Path | None = None
        try:
            sc: Any = spark.sparkContext  # py4j handles: untyped
            if str(sc.master).startswith("local"):
                stat = Path(f"/proc/{sc._jvm.java.lang.ProcessHandle.current().pid()}/stat")
                self._stat = stat if stat.exists() else None
        except Exception:  # noqa: BLE001 - a missing metric must not fail the job
            self._stat = None
        self.t = time.perf_counter()
        self.c = self._cpu()
        self.times: dict[str, dict[str, float]] = {}

    def _cpu(self) -> float:
        if self._stat is None:
            return 0.0
        fields = self._stat.read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def done(self, name: str) -> None:
        now, cpu = time.perf_counter(), self._cpu()
        wall, used = now - self.t, cpu - self.c
        self.times[name] = {"wall_s": round(wall, 2), "jvm_cpu_s": round(used, 2)}
        print(f"[mq-pipeline] {name}: {wall:.1f}s wall, {used:.1f}s JVM CPU", file=sys.stderr,
              flush=True)
        self.t, self.c = now, cpu


# A log this small (compressed bytes read) is all fixed cost: ~40 small queries whose CPU
# goes to planning and to compiling generated code, not to the rows. For it, expressions
# are interpreted (no Janino compile per stage) and adaptive execution, which splits
# every query into a job per shuffle, is off; shuffles have one partition unless
# --partitions says otherwise (one task per stage instead of 2 x cores: ~8 % of a demo
# report's CPU), and text is lower-cased without Spark 4's ICU table when it can be
# (transforms.lower_col). Bigger inputs keep Spark's defaults.
SMALL_INPUT_BYTES = 16 * 2**20
# A small log's outcomes (a row per recipient) are written by Arrow from the driver up to
# this many events: a bound on the rows brought to Python (where the cross-over with
# Spark's write job lies was not measured; a demo log is a few dozen events).
ARROW_OUTCOMES_MAX_EVENTS = 50_000
SMALL_INPUT_PARTITIONS = 1
# For every input: case mapping by the JVM (what Spark 3 did; same answers on the log's
# addresses and replies) instead of ICU, whose first use in a JVM builds a table over all
# of Unicode while every task waits on it (~1.3 s at 1 M events, JFR).
JOB_CONF = {"spark.sql.icu.caseMappings.enabled": "false"}
SMALL_INPUT_CONF = {
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
    "spark.sql.adaptive.enabled": "false",
    # No broadcast joins (report.feedback leaves out its hint too): a broadcast is a Spark
    # job of its own (four a demo report), a sort-merge join of a few rows a stage of one.
    "spark.sql.autoBroadcastJoinThreshold": "-1",
}


@contextmanager
def session_conf(spark: SparkSession, conf: dict[str, str]) -> Iterator[None]:
    """Set SQL options for the block and put the previous values back (the tests share
    one session)."""
    before = {k: spark.conf.get(k, None) for k in conf}
    for k, v in conf.items():
        spark.conf.set(k, v)
    try:
        yield
    finally:
        for k, old in before.items():
            if old is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, old)


def run(spark: SparkSession, cfg: JobConfig) -> dict[str, Any]:
    """Run the whole job; returns the summary that is also written as summary.json."""
    t0 = time.perf_counter()
    raw = read_events(spark, cfg.events, cfg.rng, cfg.late_hours)
    small = input_bytes(raw) < SMALL_INPUT_BYTES
    if small and cfg.partitions is None:
        cfg = replace(cfg, partitions=SMALL_INPUT_PARTITIONS)
    with session_conf(spark, {**JOB_CONF, **(SMALL_INPUT_CONF if small else {})}):
        return _run(spark, cfg, raw, t0, small)


def _run(
    spark: SparkSession, cfg: JobConfig, raw: DataFrame, t0: float, small: bool
) -> dict[str, Any]:
    steps = _Steps(spark)
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    out = cfg.out.rstrip("/")

    # Materialise once, reuse for every report. A local checkpoint keeps rows as they come
    # out of the aggregation (measured on 10 M events: ~0 s extra CPU, where building the
    # columnar cache of persist() cost ~40 s), and it keeps the message_id partitioning,
    # so the outcome aggregation below needs no second shuffle.
    # Adaptive execution is off for this one query: with it, the checkpoint forgets the
    # partitioning and the outcome aggregation shuffles all events a second time.
    aqe = spark.conf.get("spark.sql.adaptive.enabled") or "true"
    spark.conf.set("spark.sql.adaptive.enabled", "false")
    try:
        events = prepare(spark, cfg, cfg.partitions, raw, ascii_lower=small).localCheckpoint(
            eager=True, storageLevel=EVENTS_STORAGE
        )
    finally:
        spark.conf.set("spark.sql.adaptive.enabled", aqe)
    steps.done("read+normalise+dedupe (checkpointed)")
    # the input statistics are gathered while the base is checkpointed: no job of their own
    observed = Observation()
    base = report.event_base(events).observe(observed, *report.input_stats()).localCheckpoint(
        eager=True
    )
    stats = dict(observed.get)
    for k in ("first", "last"):
        us = stats[k]
        stats[k] = None if us is None else datetime.fromtimestamp(us / 1e6, UTC)
    steps.done("event base")
    if cfg.write_events:
        events.write.mode("overwrite").parquet(f"{out}/parquet/events")
    # not checkpointed: only the sched_lag table reads it, so that is one job, not two
    lag_hist = report.lag_histogram(events)

    def write_outcomes() -> DataFrame:
        """Outcomes go straight to Parquet and the reports read them back (column-pruned
        and vectorised): holding 20 M+ outcome rows in memory next to the events evicted
        the events to disk and made 50 M events 14x slower than 10 M in this step. A small
        log's outcomes are kept in memory instead: the tables read them without listing the
        files and opening their footers once per table. Up to ARROW_OUTCOMES_MAX_EVENTS
        (and a local output) they are collected once into a local relation in the driver
        JVM, which answers the collect for Arrow's write without a job of its own (one job,
        where a checkpoint and a collect are two)."""
        per_rcpt = transforms.outcomes(events, cfg.rng)
        path = f"{out}/parquet/outcomes"
        if small:
            if (
                stats["events"] <= ARROW_OUTCOMES_MAX_EVENTS
                and _is_local(path)
                and arrow_write.supports(per_rcpt.schema)
            ):
                per_rcpt = _local_relation(per_rcpt)
                arrow_write.write(
                    per_rcpt.schema, per_rcpt.collect(), _local(path),
                    no_dictionary=("message_id", "rcpt"),
                )
                return per_rcpt
            per_rcpt = per_rcpt.localCheckpoint(eager=True)
        (
            per_rcpt.write.mode("overwrite")
            # ids are unique: a dictionary would only be built to be thrown away
            .option("parquet.enable.dictionary#message_id", "false")
            .option("parquet.enable.dictionary#rcpt", "false")
            .parquet(path)
        )
        if small:
            return per_rcpt
        return spark.read.schema(per_rcpt.schema).parquet(path)

    at = cfg.qshape_at
    if at is None:
        ends = [t for t in (cfg.rng.end, stats["last"]) if t is not None]
        at = min(ends) if ends else None

    bucket_s = report.timeline_bucket(stats["first"], stats["last"])
    one_day = _one_utc_day(cfg.rng)
    # tables of the events (and their hourly base), then tables of the outcomes
    on_events: dict[str, Callable[[], DataFrame]] = {
        "volumes": lambda: report.volumes(base),
        "reasons": lambda: report.reasons(base, cfg.top_reasons, ascii_lower=small),
        "sched_lag": lambda: report.sched_lag(base, lag_hist),
        "senders": lambda: report.senders(base, cfg.top_reasons),
        "rejects": lambda: report.rejects(base, cfg.top_reasons),
        # complaints, late bounces (services/feedback), unsubscribes (services/unsubscribe)
        "feedback": lambda: report.feedback(events, broadcast=not small),
        # what the reputation guards count, per principal and sender domain (SES's bands)
        "reputation": lambda: report.reputation(events),
        "timeline": lambda: report.timeline(base, events, bucket_s),
    }

    def on_outcomes(outcomes: DataFrame) -> dict[str, Callable[[], DataFrame]]:
        frames: dict[str, Callable[[], DataFrame]] = {
            "delivery": lambda: report.delivery(outcomes, cfg.accuracy, one_day=one_day),
            "attempts": lambda: report.attempts_histogram(outcomes),
        }
        if at is not None:
            at_ = at
            frames["qshape"] = lambda: report.qshape(outcomes, at_)
        return frames

    # The report tables are small jobs whose time is mostly the driver analysing,
    # planning and compiling them (building a DataFrame analyses it: ~40 % of a demo
    # report's table time); built and run side by side, one table's planning overlaps
    # another's. For a small log the outcomes are written beside the event tables too
    # (first: the delivery table, the longest, waits for them); a big log's outcomes
    # write has the machine to itself, as it is most of that step's time.
    with ThreadPoolExecutor(max_workers=REPORT_THREADS) as pool:
        futures: dict[str, Future[list[dict[str, Any]]]] = {}

        def submit(frames: dict[str, Callable[[], DataFrame]]) -> None:
            for name, build in frames.items():
                futures[name] = pool.submit(
                    _build_and_write, build, f"{out}/parquet/{name}", small
                )

        if small:
            outcomes_f = pool.submit(write_outcomes)
            submit(on_events)
            submit(on_outcomes(outcomes_f.result()))
        else:
            outcomes = write_outcomes()
            steps.done("outcomes")
            # the delivery table first: on a big log it is the longest
            submit({**on_outcomes(outcomes), **on_events})
        rows = {name: fut.result() for name, fut in futures.items()}
    steps.done(("outcomes and " if small else "") + "report tables (" + ", ".join(futures) + ")")
    rows.setdefault("qshape", [])

    top = _top_domains(rows["delivery"], cfg.csv_domains)
    csv_rows = _write_csvs(spark, out, rows, top)
    summary = _summary(cfg, stats, rows, at, csv_rows, time.perf_counter() - t0)
    summary["steps_s"] = steps.times
    write_text(spark, f"{out}/summary.json", json.dumps(summary, indent=2, default=str) + "\n")
    return summary


def _one_utc_day(rng: TimeRange) -> bool:
    """The range is exactly one UTC day (outcomes are filtered to it by acceptance)."""
    if rng.start is None or rng.end is None:
        return False
    start = rng.start.astimezone(UTC)
    midnight = start.replace(hour=0, minute=0, second=0, microsecond=0)
    return start == midnight and rng.end - rng.start == timedelta(days=1)


def _top_domains(delivery_rows: Iterable[dict[str, Any]], n: int) -> list[str]:
    doms = [r for r in delivery_rows if r["grain"] == "domain"]
    doms.sort(key=lambda r: (-r["recipients"], r["domain"] or ""))
    return [r["domain"] for r in doms[:n]]


def _write_csvs(
    spark: SparkSession, out: str, rows: dict[str, list[dict[str, Any]]], top: list[str]
) -> dict[str, int]:
    """Small CSVs for people and the renderer: domain rows only for the top domains."""
    keep = set(top)
    counts: dict[str, int] = {}

    def small(name: str) -> list[dict[str, Any]]:
        rs = [r for r in rows[name] if r["grain"] != "domain" or r["domain"] in keep]
        rs.sort(key=_grain_key)
        return rs

    def emit(name: str, rs: list[dict[str, Any]], cols: Sequence[str]) -> None:
        write_text(spark, f"{out}/csv/{name}.csv", to_csv(rs, cols))
        counts[name] = len(rs)

    g = list(report.GRAIN_COLS)
    vol = small("volumes")
    vol.sort(key=lambda r: (*_grain_key(r), r["domain"] or "", r["event_type"]))
    emit("volumes", vol, [*g, "event_type", "events", "late"])

    dl = small("delivery")
    rank = {d: i for i, d in enumerate(top)}
    dl.sort(key=lambda r: (*_grain_key(r), rank.get(r["domain"], 0)))
    pct = [f"ttd_p{round(p * 100)}_s" for p in PERCENTILES]
    emit(
        "delivery",
        dl,
        [
            *g, "recipients", "delivered", "bounced", "hard_bounced", "deleted", "pending",
            "finalised", "delivery_rate", "attempted", "first_attempt_delivered",
            "first_attempt_rate", "deferred", "deferred_finalised", "deferred_delivered",
            "retry_yield", "deferrals", *pct, "ttd_max_s", "ttd_mean_s", "hard_bounce_rate",
            "bounce_band", "delivered_of_sent", "mails", "bytes_received", "bytes_delivered",
            "dsn_recipients", "dsn_delivered", "dsn_bounced", "dsn_deleted", "dsn_pending",
            "dsn_bytes",
        ],
    )

    at = small("attempts")
    for r in at:
        r["attempts_label"] = attempts_label(r["attempts_bucket"])
    at.sort(key=lambda r: (*_grain_key(r), rank.get(r["domain"], 0), r["attempts_bucket"]))
    emit("attempts", at, [*g, "attempts_bucket", "attempts_label", "final_state", "recipients"])

    rs = small("reasons")
    rs.sort(key=lambda r: (*_grain_key(r), rank.get(r["domain"], 0), r["kind"], r["rank"]))
    emit("reasons", rs, [*g, "kind", "rank", "status", "reason", "events", "share"])

    lag = small("sched_lag")
    labels = lag_bucket_labels()
    for r in lag:
        for i, lab in enumerate(labels):
            r[f"lag {lab}"] = r.get(f"lag_bucket_{i}")
    emit(
        "sched_lag",
        lag,
        [*g, "attempts", "p50_s", "p90_s", "p99_s", "max_s", "mean_s",
         *[f"lag {x}" for x in labels]],
    )

    # qshape, wide like postfix's: one row per domain (TOTAL first), a column per bucket.
    ql = qshape_labels()
    wide: dict[str, dict[str, Any]] = {}
    for r in rows["qshape"]:
        key = "TOTAL" if r["grain"] == "overall" else r["domain"]
        row = wide.setdefault(key, {"domain": key, "total": 0, **{b: 0 for b in ql}})
        row[ql[r["bucket"]]] += r["recipients"]
        row["total"] += r["recipients"]
    q = sorted(wide.values(), key=lambda r: (r["domain"] != "TOTAL", -r["total"], r["domain"]))
    emit("qshape", q[: len(top) + 1], ["domain", "total", *ql])

    snd = sorted(rows["senders"], key=lambda r: r["rank"])
    emit("senders", snd, ["rank", "sender", "mails", "recipients", "bytes", "rejected"])
    rej = sorted(rows["rejects"], key=lambda r: r["rank"])
    emit("rejects", rej, ["rank", "reason", "events", "share"])
    fb = sorted(
        rows["feedback"], key=lambda r: (r["grain"], -r["complaints"], r["domain"] or "",
                                         r["sender"] or "")
    )
    emit("feedback", fb, ["grain", "domain", "sender", *report.FEEDBACK_COUNTS])
    worst = {"pause": 0, "review": 1, "ok": 2, "too_few": 3}
    rep = sorted(
        rows["reputation"],
        key=lambda r: (r["scope"], worst.get(r["verdict"], 4), -r["sends"], r["target"]),
    )
    emit("reputation", rep, [f.name for f in REPUTATION_SCHEMA.fields])
    tl = sorted(rows["timeline"], key=lambda r: (r["bucket_start"], r["event_type"]))
    emit("timeline", tl, ["bucket_start", "bucket_s", "event_type", "events"])
    return counts


def _iso(t: datetime | None) -> str | None:
    return None if t is None else t.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _summary(
    cfg: JobConfig,
    stats: dict[str, Any],
    rows: dict[str, list[dict[str, Any]]],
    at: datetime | None,
    csv_rows: dict[str, int],
    seconds: float,
) -> dict[str, Any]:
    overall = next((r for r in rows["delivery"] if r["grain"] == "overall"), {})
    lag = next((r for r in rows["sched_lag"] if r["grain"] == "overall"), {})
    by_type = {
        r["event_type"]: r["events"] for r in rows["volumes"] if r["grain"] == "overall"
    }
    pending_at = sum(r["recipients"] for r in rows["qshape"] if r["grain"] == "overall")
    keys = [
        "recipients", "delivered", "bounced", "hard_bounced", "deleted", "pending",
        "finalised", "delivery_rate", "delivered_of_sent", "first_attempt_rate",
        "retry_yield", "deferred", "mails", "bytes_received", "bytes_delivered",
        "hard_bounce_rate", "bounce_band", "ttd_max_s", "ttd_mean_s",
        *[f"ttd_p{round(p * 100)}_s" for p in PERCENTILES],
    ]
    rng = cfg.rng
    return {
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
        "seconds": round(seconds, 2),
        "range": {
            "from": _iso(rng.start),
            "to": _iso(rng.end),
            "late_hours": cfg.late_hours,
        },
        "input": {
            "rows_read": stats["rows"],
            "events": stats["events"],
            "duplicates_removed": stats["rows"] - stats["events"],
            "late_events": stats["late"],
            "first_event": _iso(stats["first"]),
            "last_event": _iso(stats["last"]),
        },
        "events_by_type": by_type,
        "headline": {k: overall.get(k) for k in keys},
        "dsn": {
            k[len("dsn_") :]: overall.get(k, 0) or 0
            for k in (
                "dsn_recipients", "dsn_delivered", "dsn_bounced", "dsn_deleted",
                "dsn_pending", "dsn_bytes",
            )
        },
        "sched_lag": {k: lag.get(k) for k in ("attempts", "p50_s", "p90_s", "p99_s", "max_s")},
        "qshape": {"at": _iso(at), "pending": pending_at},
        "feedback": {  # what receivers and recipients reported after accepting mail
            k: sum(r[k] for r in rows.get("feedback", []) if r["grain"] == "domain")
            for k in report.FEEDBACK_COUNTS
        },
        "percentiles": {
            "function": "percentile_approx",
            "accuracy": cfg.accuracy,
            "rank_error": f"each percentile's rank is within n/{cfg.accuracy} of the exact rank",
        },
        "thresholds": {
            "hard_bounce_rate": {name: limit for limit, name in BOUNCE_BANDS},
            "min_domain_volume": cfg.min_volume,
        },
        "breaches": report.breaches(rows["delivery"], cfg.min_volume),
        "labels": {
            "qshape_buckets_min": qshape_labels(),
            "sched_lag_buckets": lag_bucket_labels(),
            "timeline_bucket_s": report.timeline_bucket(stats["first"], stats["last"]),
        },
        "tables": {
            name: {
                "parquet": f"parquet/{name}",
                "rows": len(rows.get(name, [])),
                "csv": f"csv/{name}.csv",
                "csv_rows": csv_rows.get(name, 0),
            }
            for name in TABLES
        }
        | {"outcomes": {"parquet": "parquet/outcomes", "rows": overall.get("recipients", 0)}},
    }


# ---------------------------------------------------------------- command line


def parse_args(argv: Sequence[str] | None = None) -> JobConfig:
    ap = argparse.ArgumentParser(
        prog="main.py", description="mailqueue event analytics (run with spark-submit)"
    )
    ap.add_argument("--events", required=True, help="dir of dt=/hr= partitions (local or s3://)")
    ap.add_argument(
        "--out",
        required=True,
        help="output dir (local or s3://); {date} becomes the range's first day, so a "
        "daily schedule keeps one report per day",
    )
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--date", help="one UTC day, YYYY-MM-DD")
    g.add_argument("--from", dest="start", help="start: YYYY-MM-DD or ISO time (inclusive)")
    ap.add_argument("--to", dest="end", help="end: YYYY-MM-DD (inclusive day) or ISO time")
    ap.add_argument("--late-hours", type=int, default=6)
    ap.add_argument("--partitions", type=int, default=None, help="shuffle partitions")
    ap.add_argument("--accuracy", type=int, default=PERCENTILE_ACCURACY)
    ap.add_argument("--top-reasons", type=int, default=10)
    ap.add_argument("--min-volume", type=int, default=100)
    ap.add_argument("--csv-domains", type=int, default=50)
    ap.add_argument("--qshape-at", default=None, help="ISO time; default: end of range/data")
    ap.add_argument("--write-events", action="store_true", help="also write normalised events")
    a = ap.parse_args(argv)
    if a.date and a.end:
        ap.error("--to goes with --from, not --date")
    if a.date == "yesterday":  # the daily schedule's argument (a static schedule input)
        a.date = (datetime.now(UTC).date() - timedelta(days=1)).isoformat()
    rng = TimeRange.day(a.date) if a.date else TimeRange.parse(a.start, a.end)
    at = None
    if a.qshape_at:
        at = datetime.fromisoformat(a.qshape_at.replace("Z", "+00:00"))
        at = at.replace(tzinfo=UTC) if at.tzinfo is None else at
    out = a.out
    if "{date}" in out:
        if rng.start is None:
            ap.error("--out with {date} needs --date or --from")
        out = out.replace("{date}", rng.start.astimezone(UTC).date().isoformat())
    return JobConfig(
        events=a.events,
        out=out,
        rng=rng,
        late_hours=a.late_hours,
        partitions=a.partitions,
        accuracy=a.accuracy,
        top_reasons=a.top_reasons,
        min_volume=a.min_volume,
        csv_domains=a.csv_domains,
        qshape_at=at,
        write_events=a.write_events,
    )


def build_spark(app: str = "mq-pipeline") -> SparkSession:
    """The session: master and memory come from spark-submit, the rest is set here."""
    spark = (
        SparkSession.builder.appName(app)
        .config("spark.sql.session.timeZone", "UTC")
        # gzip files are not splittable; smaller packing gives 2 cores balanced tasks.
        .config("spark.sql.files.maxPartitionBytes", str(32 * 1024 * 1024))
        # Per-domain percentile sketches: stay in the hash aggregate for a few 1000 keys.
        .config("spark.sql.objectHashAggregate.sortBased.fallbackThreshold", "4096")
        # No Python UDFs and few driver-side objects: give Spark's execution and storage
        # pool 80 % of the heap (default 60 %) so the checkpointed events stay in memory.
        .config("spark.memory.fraction", "0.8")
        # What does not fit is spilled; Kryo (UnsafeRow supports it) is far cheaper than
        # Java serialisation for that.
        .config("spark.serializer", "org.apache.spark.serializer.KryoSerializer")
        # ... of rows, which hold no references to one another: Kryo's reference table is
        # cleared for every row written, for nothing (~2 % of the read step's CPU at 1 M).
        .config("spark.kryo.referenceTracking", "false")
        # PySpark's DataFrame debugging records the Python call site of every function and
        # Column call in the JVM (a session lookup, a conf read and a set and clear of the
        # origin: ~10,000 py4j round trips in a demo report, ~1.5 s of it). Errors still
        # carry the Python traceback and Spark's own context.
        .config("spark.python.sql.dataFrameDebugging.enabled", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    return spark


def main(argv: Sequence[str] | None = None) -> int:
    cfg = parse_args(argv)
    spark = build_spark()
    try:
        summary = run(spark, cfg)
    finally:
        spark.stop()
    h = summary["headline"]
    print(
        json.dumps(
            {
                "seconds": summary["seconds"],
                "events": summary["input"]["events"],
                "recipients": h["recipients"],
                "delivery_rate": h["delivery_rate"],
                # what breached, not a bare count: hard-bounce rate over an SES band
                "hard_bounce_breaches": breach_lines(summary["breaches"]),
                "out": cfg.out,
            }
        )
    )
    return 0
