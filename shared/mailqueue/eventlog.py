"""The event log: queue events derived from the table's change stream, written to S3.

Why the DynamoDB stream (and not Firehose or a writer inside each function): every event
is a consequence of a durable state change, and the stream holds that change for 24 h
whatever happens to the function that made it. A function that dies right after its
write loses no event; one that dies before its write emits none (no phantom events).
The stream read by Lambda costs nothing; one S3 PUT per batch and partition hour is the
only cost (~$0.005 per 1,000 batches) against Firehose's $0.029/GB with 5 KB rounding
per record. Event ids are deterministic, so a retried batch produces the same ids and
the pipeline drops duplicates.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from boto3.dynamodb.types import TypeDeserializer

from .aws.clients import translate
from .events import MailInfo, QueueEvent
from .model import Attempt, Recipient, RecipientState, Result, from_iso, utcnow

_deser = TypeDeserializer()


def plain_image(image: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A stream image (DynamoDB JSON) as plain Python values (ints for numbers)."""
    if not image:
        return None
    from .aws.backend import _plain

    return {k: _plain(_deser.deserialize(v)) for k, v in image.items()}


def _recipients(item: Mapping[str, Any] | None) -> dict[str, Recipient]:
    if not item:
        return {}
    return {rid: Recipient.from_json(r) for rid, r in (item.get("rcpts") or {}).items()}


def _mail(item: Mapping[str, Any]) -> MailInfo:
    arrival = from_iso(item.get("arrival")) or utcnow()
    return MailInfo(
        message_id=str(item["pk"])[2:],
        source=str(item.get("sender", "")),
        timestamp=arrival,
        size=int(item.get("size", 0)),
    )


def _last_attempt(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> Attempt | None:
    hist_new = new.get("history") or []
    hist_old = (old or {}).get("history") or []
    if hist_new and (not hist_old or hist_new[-1] != hist_old[-1]):
        return Attempt.from_json(hist_new[-1])
    return None


def derive_events(
    old: Mapping[str, Any] | None, new: Mapping[str, Any] | None, *, reporting_mta: str = ""
) -> list[QueueEvent]:
    """Events implied by one item change (pure: images in, events out)."""
    item = new or old
    if not item:
        return []
    pk = str(item.get("pk", ""))
    sk = str(item.get("sk", ""))
    if pk.startswith("E#") and new is not None and old is None:
        return [OutboxEvent.from_item(new)]
    if not (pk.startswith("M#") and sk.startswith("G#")) or new is None:
        return []
    mail = _mail(new)
    before = _recipients(old)
    after = _recipients(new)
    attempt = _last_attempt(old, new)
    out: list[QueueEvent] = []
    op = new.get("op")
    op_new = bool(op) and op != (old or {}).get("op")
    extra_common = {"reporting_mta": reporting_mta}
    for rid, r in after.items():
        b = before.get(rid)
        if b is None:
            out.append(QueueEvent("Send", mail, r.address, mail.timestamp, "send"))
            continue
        result = r.last_result
        when = r.final_at or r.last_attempt_at or utcnow()
        if r.state != b.state and r.state == RecipientState.DELIVERED:
            out.append(
                QueueEvent(
                    "Delivery",
                    mail,
                    r.address,
                    when,
                    str(r.attempts),
                    result,
                    attempt,
                    {**extra_common, "processing_ms": _ms_between(mail.timestamp, when)},
                )
            )
        elif r.state != b.state and r.state == RecipientState.BOUNCED:
            permanent = bool(result and result.status.startswith("5"))
            out.append(
                QueueEvent(
                    "Bounce",
                    mail,
                    r.address,
                    when,
                    "bounce",
                    result,
                    attempt,
                    {
                        **extra_common,
                        "bounce_type": "Permanent" if permanent else "Transient",
                        "bounce_sub_type": _bounce_sub_type(result),
                    },
                )
            )
        elif r.attempts > b.attempts and r.state == RecipientState.QUEUED:
            out.append(
                QueueEvent(
                    "DeliveryDelay",
                    mail,
                    r.address,
                    r.last_attempt_at or when,
                    str(r.attempts),
                    result,
                    attempt,
                    {**extra_common, "next_attempt_at": new.get("next_at")},
                )
            )
        if op_new and (r.state != b.state or (op or {}).get("action") == "retried"):
            if r.state.final and b.state.final:
                continue
            at = from_iso((op or {}).get("at")) or utcnow()
            out.append(
                QueueEvent(
                    "Operator",
                    mail,
                    r.address,
                    at,
                    f"{(op or {}).get('action')}@{(op or {}).get('at')}",
                    None,
                    None,
                    {
                        "action": (op or {}).get("action"),
                        "actor": (op or {}).get("actor"),
                        "job": (op or {}).get("job"),
                    },
                )
            )
    return out


def _bounce_sub_type(result: Result | None) -> str:
    if result is None:
        return "General"
    if result.status in ("5.1.1", "5.1.2", "5.1.10"):
        return "NoEmail"
    if result.status.startswith("5.2.2") or result.status == "4.2.2":
        return "MailboxFull"
    if result.status in ("5.3.4", "5.2.3"):
        return "MessageTooLarge"
    return "General"


def _ms_between(a: datetime, b: datetime) -> int:
    return max(0, int((b - a).total_seconds() * 1000))


@dataclass(frozen=True)
class OutboxEvent(QueueEvent):
    """An event written by a function as an outbox item (e.g. Reject): passed through."""

    raw: dict[str, Any] | None = None

    @classmethod
    def from_item(cls, item: Mapping[str, Any]) -> OutboxEvent:
        raw = json.loads(str(item["event"]))
        ts = from_iso(raw.get("mail", {}).get("timestamp")) or utcnow()
        for key in ("reject", "operator", "delivery", "bounce", "deliveryDelay"):
            if isinstance(raw.get(key), dict) and raw[key].get("timestamp"):
                ts = from_iso(raw[key]["timestamp"]) or ts
        mail = MailInfo(
            message_id=str(raw.get("mail", {}).get("messageId", "")), source="", timestamp=ts
        )
        return cls(str(raw.get("eventType", "")), mail, None, ts, raw=raw)

    def to_json(self) -> dict[str, Any]:
        return dict(self.raw or {})

    @property
    def event_id(self) -> str:
        return str((self.raw or {}).get("eventId", ""))


def stream_events(
    records: Iterable[Mapping[str, Any]], *, reporting_mta: str = ""
) -> list[QueueEvent]:
    out: list[QueueEvent] = []
    for rec in records:
        ddb = rec.get("dynamodb", {})
        out.extend(
            derive_events(
                plain_image(ddb.get("OldImage")),
                plain_image(ddb.get("NewImage")),
                reporting_mta=reporting_mta,
            )
        )
    return out


def partition_of(ts: datetime) -> str:
    return f"dt={ts:%Y-%m-%d}/hr={ts:%H}"


def encode_lines(events: Sequence[QueueEvent]) -> bytes:
    lines = "".join(
        json.dumps(e.to_json(), separators=(",", ":"), sort_keys=True) + "\n" for e in events
    )
    return gzip.compress(lines.encode(), mtime=0)  # mtime 0: a retry writes identical bytes


class S3EventWriter:
    """Writes one gzip JSON-lines object per (batch, partition hour).

    The key is derived from the batch's first sequence number, so a retried batch
    overwrites its own objects instead of adding copies.
    """

    def __init__(self, s3: Any, bucket: str, prefix: str = "events/") -> None:
        self.s3 = s3
        self.bucket = bucket
        self.prefix = prefix

    def write(self, events: Sequence[QueueEvent], batch_id: str) -> list[str]:
        by_part: dict[str, list[QueueEvent]] = {}
        for e in events:
            by_part.setdefault(partition_of(e.timestamp), []).append(e)
        keys = []
        for part, evs in sorted(by_part.items()):
            key = f"{self.prefix}{part}/{batch_id}.json.gz"
            with translate("s3:PutObject"):
                self.s3.put_object(
                    Bucket=self.bucket,
                    Key=key,
                    Body=encode_lines(evs),
                    ContentType="application/x-ndjson",
                    ContentEncoding="gzip",
                )
            keys.append(key)
        return keys


def batch_id(records: Sequence[Mapping[str, Any]]) -> str:
    if not records:
        return "empty"
    first = records[0]
    seq = first.get("dynamodb", {}).get("SequenceNumber", "0")
    arn = str(first.get("eventSourceARN", ""))
    shard = arn.rsplit("/", 1)[-1][-12:] if arn else "local"
    return f"{shard}-{seq}"


def iter_jsonl(data: bytes) -> Iterator[dict[str, Any]]:
    for line in gzip.decompress(data).decode().splitlines():
        if line.strip():
            yield json.loads(line)


@dataclass(frozen=True, slots=True)
class EventWriterSettings:
    bucket: str
    prefix: str = "events/"
    hostname: str = "mailqueue.invalid"
    region: str | None = None
    endpoint_url: str | None = None


class EventWriterService:
    def __init__(self, settings: EventWriterSettings, s3: Any, counters: Any = None) -> None:
        self.settings = settings
        self.writer = S3EventWriter(s3, settings.bucket, settings.prefix)
        self.counters = counters

    @classmethod
    def from_env(cls) -> EventWriterService:
        from .aws.clients import make_clients
        from .config import StorageSettings, settings_from_env

        ss = settings_from_env(StorageSettings)
        settings = settings_from_env(
            EventWriterSettings, bucket=ss.bucket, region=ss.region, endpoint_url=ss.endpoint_url
        )
        clients = make_clients(region=ss.region, endpoint_url=ss.endpoint_url)
        return cls(settings, clients.s3, _counter_store(ss, clients))

    def handle(self, records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        events = stream_events(records, reporting_mta=self.settings.hostname)
        keys = self.writer.write(events, batch_id(records)) if events else []
        if self.counters is not None:
            self.counters.apply(records)
        return {"events": len(events), "objects": keys}


def _counter_store(ss: Any, clients: Any) -> Any:
    """The queue-size counters maintained from the same stream (see counters.py)."""
    from .config import settings_from_env
    from .counters import CounterSettings, counter_store

    return counter_store(ss.table, clients.dynamodb, settings_from_env(CounterSettings))
