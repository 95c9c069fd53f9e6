"""Build test events with the real producer (`mailqueue.core.events`), so the pipeline is
tested against exactly what the queue writes, and small DataFrames with explicit schemas."""

from __future__ import annotations

import gzip
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from mailqueue.core.events import OPERATOR_EVENT, MailInfo, QueueEvent, dumps
from mailqueue.core.model import Attempt, Result, to_iso
from mq_pipeline.schema import NORMALISED_SCHEMA, PARTITION_FIELDS, READ_SCHEMA
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

T0 = datetime(2026, 5, 4, 10, 0, tzinfo=UTC)


def at(minutes: float, base: datetime = T0) -> datetime:
    return base + timedelta(minutes=minutes)


def mail(mid: str, rcpt: str | Sequence[str], arrival: datetime) -> MailInfo:
    dest = (rcpt,) if isinstance(rcpt, str) else tuple(rcpt)
    return MailInfo(
        message_id=mid, source="app@sender.example", timestamp=arrival, destination=dest, size=1200
    )


def send(m: MailInfo, rcpt: str | None = None) -> QueueEvent:
    """The mail's one Send (SES: every destination in one record); `rcpt` is added to the
    destinations if the mail does not list it."""
    if rcpt is not None and rcpt not in m.destination:
        m = replace(m, destination=(*m.destination, rcpt))
    return QueueEvent("Send", m, None, m.timestamp)


def attempt(
    n: int, scheduled: datetime, lag_s: float, dur_s: float, code: int, status: str, text: str
) -> Attempt:
    started = scheduled + timedelta(seconds=lag_s)
    return Attempt(
        number=n,
        scheduled_at=scheduled,
        started_at=started,
        finished_at=started + timedelta(seconds=dur_s),
        result=Result(code, status, text, "203.0.113.9"),
        tls=True,
    )


def delivery(m: MailInfo, rcpt: str, a: Attempt) -> QueueEvent:
    return QueueEvent(
        "Delivery", m, rcpt, a.finished_at, str(a.number), a.result, a,
        {"reporting_mta": "mq-1", "processing_ms": 5},
    )


def delay(m: MailInfo, rcpt: str, a: Attempt, next_at: datetime | None = None) -> QueueEvent:
    nxt = next_at or a.finished_at + timedelta(minutes=5)
    return QueueEvent(
        "DeliveryDelay", m, rcpt, a.finished_at, str(a.number), a.result, a,
        {
            "next_attempt_at": to_iso(nxt),
            "expiration_time": to_iso(m.timestamp + timedelta(hours=12)),
        },
    )


def bounce(
    m: MailInfo, rcpt: str, ts: datetime, result: Result, a: Attempt | None = None
) -> QueueEvent:
    """bounceType/bounceSubType follow from the result, by the producer's rules."""
    return QueueEvent("Bounce", m, rcpt, ts, str(a.number) if a else "expired", result, a)


def operator(m: MailInfo, rcpt: str, ts: datetime, action: str, job: str = "j1") -> QueueEvent:
    return QueueEvent(OPERATOR_EVENT, m, rcpt, ts, job, extra={"action": action, "actor": "ops"})


def reject(m: MailInfo, ts: datetime, reason: str = "invalid recipient address") -> QueueEvent:
    return QueueEvent("Reject", m, None, ts, extra={"reason": reason, "field": "destination"})


def write_events(root: Path, events: Iterable[tuple[QueueEvent, datetime]]) -> Path:
    """Write (event, write time) pairs as gzip JSON lines in dt=/hr= partitions of the write
    time; returns the events directory."""
    parts: dict[str, list[str]] = defaultdict(list)
    for ev, written in events:
        parts[written.astimezone(UTC).strftime("dt=%Y-%m-%d/hr=%H")].append(dumps(ev))
    base = root / "events"
    for part, lines in parts.items():
        d = base / part
        d.mkdir(parents=True, exist_ok=True)
        with gzip.open(d / "part-0000.json.gz", "wt") as fh:
            fh.write("\n".join(lines) + "\n")
    return base


def raw_df(spark: SparkSession, docs: Sequence[tuple[str, str, str]]) -> DataFrame:
    """(dt, hr, JSON line) triples as the raw events DataFrame the reader produces."""
    schema = StructType(READ_SCHEMA.fields + PARTITION_FIELDS)
    rows = spark.createDataFrame(list(docs), "dt string, hr string, j string")
    return rows.select(F.from_json("j", READ_SCHEMA).alias("d"), "dt", "hr").select(
        "d.*", "dt", "hr"
    ).select(*[f.name for f in schema.fields])


NORM_COLS = [f.name for f in NORMALISED_SCHEMA.fields if f.name != "copies"]


def norm_row(**kw: Any) -> dict[str, Any]:
    """A normalised event row with defaults for everything not given."""
    row: dict[str, Any] = dict.fromkeys(NORM_COLS)
    row.update(n_dest=1, late=False)
    row.update(kw)
    if row.get("rcpt") and row.get("domain") is None:
        row["domain"] = row["rcpt"].rsplit("@", 1)[1].lower()
    return row


def norm_df(spark: SparkSession, rows: Sequence[dict[str, Any]], copies: bool = True) -> DataFrame:
    """Normalised events (with `copies` = 1 unless given) from row dicts."""
    schema = NORMALISED_SCHEMA if copies else StructType(
        [f for f in NORMALISED_SCHEMA.fields if f.name != "copies"]
    )
    names = [f.name for f in schema.fields]
    data = [tuple({**r, "copies": r.get("copies", 1)}.get(n) for n in names) for r in rows]
    return spark.createDataFrame(data, schema)
