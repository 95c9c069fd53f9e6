"""The event log: queue events derived from the table's change stream, written to S3.

Why the DynamoDB stream (and not Firehose or a writer inside each function): every event
is a consequence of a durable state change, and the stream holds that change for 24 h
whatever happens to the function that made it. A function that dies right after its
write loses no event; one that dies before its write emits none (no phantom events). The
service reads changes through a `ChangeSource` and writes through an `EventSink`
(`mailqueue.backends.aws.eventlog`: the DynamoDB stream and S3; composed in
`mailqueue.compose.events`). The stream read by Lambda costs nothing; one S3 PUT per
batch and partition hour is the only cost (~$0.005 per 1,000 batches) against Firehose's
$0.029/GB with 5 KB rounding per record. Event ids are deterministic, so a retried batch
produces the same ids and the pipeline drops duplicates. Records are in SES's
event-publishing format (`mailqueue.core.events`).
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from email.parser import BytesHeaderParser
from email.policy import compat32
from typing import Any, Protocol

from mailqueue.core.events import (
    HEADERS_MAX,
    OPERATOR_ACTIONS,
    OPERATOR_EVENT,
    MailInfo,
    QueueEvent,
    header_section,
)
from mailqueue.core.model import (
    Attempt,
    Recipient,
    RecipientState,
    Result,
    from_iso,
    to_iso,
    utcnow,
)
from mailqueue.services.destinations import (
    Destination,
    EventOutbox,
    envelopes_and_too_large,
    parse_destinations,
)


def _recipients(item: Mapping[str, Any] | None) -> dict[str, Recipient]:
    if not item:
        return {}
    return {rid: Recipient.from_json(r) for rid, r in (item.get("rcpts") or {}).items()}


@dataclass(frozen=True, slots=True)
class EventContext:
    """What the producer adds to every record besides the item images."""

    reporting_mta: str = "mailqueue.invalid"
    account_id: str = "000000000000"
    region: str = "us-east-1"
    queue_lifetime_s: int = 5 * 86400  # the delivery function's maximal_queue_lifetime


def _mail(item: Mapping[str, Any], ctx: EventContext) -> MailInfo:
    arrival = from_iso(item.get("arrival")) or utcnow()
    source = str(item.get("sender", ""))
    domain = source.rpartition("@")[2].lower() if "@" in source else "null-sender"
    return MailInfo(
        message_id=str(item["pk"])[2:],
        source=source,
        timestamp=arrival,
        destination=tuple(r.address for r in _recipients(item).values()),
        size=int(item.get("size", 0)),
        tags={str(k): (str(v),) for k, v in (item.get("tags") or {}).items()},
        sending_account_id=ctx.account_id,
        source_arn=f"arn:aws:ses:{ctx.region}:{ctx.account_id}:identity/{domain}",
    )


def _last_attempt(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> Attempt | None:
    hist_new = new.get("history") or []
    hist_old = (old or {}).get("history") or []
    if hist_new and (not hist_old or hist_new[-1] != hist_old[-1]):
        return Attempt.from_json(hist_new[-1])
    return None


def derive_events(
    old: Mapping[str, Any] | None,
    new: Mapping[str, Any] | None,
    *,
    reporting_mta: str = "",
    ctx: EventContext | None = None,
) -> list[QueueEvent]:
    """Events implied by one item change (pure: images in, events out).

    A group's INSERT gives one Send for the group's recipients; `stream_events` merges the
    groups of one mail into one Send, as SES sends one per message.
    """
    ctx = ctx or EventContext(reporting_mta=reporting_mta or "mailqueue.invalid")
    item = new or old
    if not item:
        return []
    pk = str(item.get("pk", ""))
    sk = str(item.get("sk", ""))
    if pk.startswith("E#") and new is not None and old is None:
        return [OutboxEvent.from_item(new)]
    if not (pk.startswith("M#") and sk.startswith("G#")) or new is None:
        return []
    mail = _mail(new, ctx)
    before = _recipients(old)
    after = _recipients(new)
    attempt = _last_attempt(old, new)
    out: list[QueueEvent] = []
    op: Mapping[str, Any] = new.get("op") or {}
    op_new = bool(op) and op != (old or {}).get("op")
    action = OPERATOR_ACTIONS.get(str(op.get("action")), str(op.get("action")))
    common = {"reporting_mta": ctx.reporting_mta}
    expires = to_iso(mail.timestamp + timedelta(seconds=ctx.queue_lifetime_s))
    wait_new: Mapping[str, Any] | None = new.get("wt") or None
    if wait_new is not None and wait_new == (old or {}).get("wt"):
        wait_new = None  # written before: its event was made then
    if old is None and after:
        key = new.get("content_key")
        if key == SOLO_MARK:  # a solo mail: its content is in this item
            key = f"{INLINE_PREFIX}{pk}|{sk}"
        out.append(QueueEvent("Send", mail, None, mail.timestamp, extra={"content_key": key}))
    for rid, r in after.items():
        b = before.get(rid)
        if b is None:
            continue
        result = r.last_result
        when = r.final_at or r.last_attempt_at or utcnow()
        if r.state != b.state and r.state == RecipientState.DELIVERED:
            processing = {"processing_ms": _ms_between(mail.timestamp, when)}
            out.append(
                QueueEvent(
                    "Delivery",
                    mail,
                    r.address,
                    when,
                    str(r.attempts),
                    result,
                    attempt,
                    {**common, **processing},
                )
            )
        elif r.state != b.state and r.state == RecipientState.BOUNCED:
            out.append(
                QueueEvent("Bounce", mail, r.address, when, "bounce", result, attempt, common)
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
                    {**common, "next_attempt_at": new.get("next_at"), "expiration_time": expires},
                )
            )
        if wait_new and r.state == RecipientState.QUEUED and r.attempts == b.attempts:
            # a wait without an attempt (an egress pool's: Group.wait): SES's
            # SendingDeferral, "deemed appropriate to internally defer the message"
            out.append(
                QueueEvent(
                    "DeliveryDelay",
                    mail,
                    r.address,
                    from_iso(wait_new.get("at")) or when,
                    f"wait@{wait_new.get('at')}",
                    Result(0, str(wait_new.get("status") or "4.4.5"), str(wait_new.get("text"))),
                    None,
                    {
                        **common,
                        "next_attempt_at": wait_new.get("until") or new.get("next_at"),
                        "expiration_time": expires,
                        "delay_type": "SendingDeferral",
                        "wait": {
                            "reason": str(wait_new.get("text") or ""),
                            "until": wait_new.get("until") or None,
                        },
                    },
                )
            )
        if op_new and (r.state != b.state or action == "retried"):
            if r.state.final and b.state.final:
                continue
            at = from_iso(op.get("at")) or utcnow()
            out.append(
                QueueEvent(
                    OPERATOR_EVENT,
                    mail,
                    r.address,
                    at,
                    f"{action}@{op.get('at')}",
                    extra={"action": action, "actor": op.get("actor"), "job": op.get("job")},
                )
            )
    return out


def merge_sends(events: Sequence[QueueEvent]) -> list[QueueEvent]:
    """One Send per mail: the Sends of a mail's groups merged, in order, at the first's
    place. (A mail whose group items fall into two stream batches gives two Sends with the
    same eventId and the destinations of each part; the pipeline reads destinations per
    recipient, so it counts each recipient once either way.)"""
    first: dict[str, int] = {}
    out: list[QueueEvent] = []
    for e in events:
        if e.event_type != "Send" or isinstance(e, OutboxEvent):
            out.append(e)
            continue
        i = first.get(e.mail.message_id)
        if i is None:
            first[e.mail.message_id] = len(out)
            out.append(e)
            continue
        prev = out[i]
        dest = prev.mail.destination + tuple(
            a for a in e.mail.destination if a not in prev.mail.destination
        )
        out[i] = replace(prev, mail=replace(prev.mail, destination=dest))
    return out


def _ms_between(a: datetime, b: datetime) -> int:
    return max(0, int((b - a).total_seconds() * 1000))


def parse_header_block(data: bytes) -> tuple[tuple[tuple[str, str], ...], bool]:
    """(headers, truncated) from the start of a message: SES's `headers` list, cut at
    HEADERS_MAX bytes (then `headersTruncated` is true)."""
    end = data.find(b"\r\n\r\n")
    end = data.find(b"\n\n") if end < 0 else end
    block = data if end < 0 else data[:end]
    truncated = end < 0 or len(block) > HEADERS_MAX
    if len(block) > HEADERS_MAX:
        block = block[:HEADERS_MAX].rsplit(b"\n", 1)[0]
    msg = BytesHeaderParser(policy=compat32).parsebytes(block + b"\r\n\r\n")
    headers = tuple((k, " ".join(str(v).split())) for k, v in msg.items())
    return headers, truncated


@dataclass(frozen=True)
class OutboxEvent(QueueEvent):
    """An event written by a function as an outbox item (e.g. Reject): passed through."""

    raw: dict[str, Any] | None = None

    @classmethod
    def from_item(cls, item: Mapping[str, Any]) -> OutboxEvent:
        raw = json.loads(str(item["event"]))
        ts = from_iso(raw.get("mail", {}).get("timestamp")) or utcnow()
        ours = raw.get("mailqueue") or {}
        for obj in (
            ours.get("reject"),
            ours.get("operator"),
            *(raw.get(k) for k in ("delivery", "bounce", "deliveryDelay")),
        ):
            if isinstance(obj, dict) and obj.get("timestamp"):
                ts = from_iso(obj["timestamp"]) or ts
        mail = MailInfo(
            message_id=str(raw.get("mail", {}).get("messageId", "")), source="", timestamp=ts
        )
        return cls(str(raw.get("eventType", "")), mail, None, ts, raw=raw)

    def to_json(self) -> dict[str, Any]:
        return dict(self.raw or {})

    @property
    def event_id(self) -> str:
        return str(((self.raw or {}).get("mailqueue") or {}).get("eventId", ""))


def partition_of(ts: datetime) -> str:
    return f"dt={ts:%Y-%m-%d}/hr={ts:%H}"


def encode_lines(events: Sequence[QueueEvent]) -> bytes:
    lines = "".join(
        json.dumps(e.to_json(), separators=(",", ":"), sort_keys=True) + "\n" for e in events
    )
    return gzip.compress(lines.encode(), mtime=0)  # mtime 0: a retry writes identical bytes


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
    account_id: str = "000000000000"  # MQ_ACCOUNT_ID: mail.sendingAccountId, sourceArn
    max_queue_lifetime_seconds: int = 5 * 86400  # as DeliverySettings: expirationTime
    read_headers: bool = True  # Range GET of each new mail's header block for `mail.headers`
    # real-time destinations (mailqueue.services.destinations): the list, and the outbox
    # queue the writer hands their events to once its S3 objects are written
    event_destinations: str = ""
    destinations_queue_url: str = ""
    allow_http_loopback: bool = False

    def __post_init__(self) -> None:
        if not self.bucket:
            raise ValueError("bucket must be set")
        if self.max_queue_lifetime_seconds <= 0:
            raise ValueError("max_queue_lifetime_seconds must be positive")
        if not (len(self.account_id) == 12 and self.account_id.isdigit()):
            raise ValueError("account_id must be 12 digits")
        if self.destinations() and not self.destinations_queue_url:
            raise ValueError("event_destinations is set but destinations_queue_url is empty")

    def destinations(self) -> tuple[Destination, ...]:
        return parse_destinations(
            self.event_destinations,
            allow_http_loopback=self.allow_http_loopback,
            need_secrets=False,
        )

    @property
    def context(self) -> EventContext:
        return EventContext(
            reporting_mta=self.hostname,
            account_id=self.account_id,
            region=self.region or "us-east-1",
            queue_lifetime_s=self.max_queue_lifetime_seconds,
        )


class ChangeSource(Protocol):
    """Where the writer reads a batch of state changes from (the table's stream on AWS)."""

    def changes(
        self, records: Sequence[Mapping[str, Any]]
    ) -> list[tuple[dict[str, Any] | None, dict[str, Any] | None]]:
        """Each record's (old, new) item image as plain values, in order."""
        ...

    def stored_headers(self, records: Sequence[Mapping[str, Any]]) -> dict[str, bytes]:
        """Mail id -> header section, for the mails whose items in `records` hold it."""
        ...

    def batch_id(self, records: Sequence[Mapping[str, Any]]) -> str:
        """Deterministic per batch (a retried batch overwrites its own objects)."""
        ...


class EventSink(Protocol):
    """Where events go (gzip JSON lines in S3 on AWS); returns what it wrote."""

    def write(self, events: Sequence[QueueEvent], batch_id: str) -> list[str]: ...


class HeaderSource(Protocol):
    """The start of a mail's content (at most `HEADER_READ_MAX` bytes) by content key;
    None when it is gone or not readable (the Send then goes without headers)."""

    def read(self, content_key: str) -> bytes | None: ...


def stream_events(
    changes: Iterable[tuple[Mapping[str, Any] | None, Mapping[str, Any] | None]],
    *,
    reporting_mta: str = "",
    ctx: EventContext | None = None,
) -> list[QueueEvent]:
    """The events of a batch of item changes, a mail's groups' Sends merged."""
    ctx = ctx or EventContext(reporting_mta=reporting_mta or "mailqueue.invalid")
    out: list[QueueEvent] = []
    for old, new in changes:
        out.extend(derive_events(old, new, ctx=ctx))
    return merge_sends(out)


class EventWriterService:
    """A batch of state changes in, its SES-shaped events out to the sink."""

    def __init__(
        self,
        settings: EventWriterSettings,
        *,
        source: ChangeSource,
        sink: EventSink,
        headers: HeaderSource | None = None,
        outbox: EventOutbox | None = None,
    ) -> None:
        self.settings = settings
        self.source = source
        self.sink = sink
        self.headers = headers
        self.outbox = outbox
        self.destinations = settings.destinations()
        if self.destinations and outbox is None:
            raise ValueError("event destinations need an outbox")

    def handle(self, records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        events = stream_events(self.source.changes(records), ctx=self.settings.context)
        if self.settings.read_headers:
            stored = self.source.stored_headers(records)
            events = [self._with_headers(e, stored) for e in events]
        keys = self.sink.write(events, self.source.batch_id(records)) if events else []
        handed = too_large = 0
        if events and self.destinations and self.outbox is not None:
            # after the log: an event is in the log before any destination hears of it; a
            # failure here fails the batch, which is retried whole (same object keys, same
            # event ids: destinations de-duplicate)
            items, too_large = envelopes_and_too_large(
                (e.to_json() for e in events), self.destinations
            )
            self.outbox.put(items)
            handed = len(items)
        return {
            "events": len(events),
            "objects": keys,
            "destinations": handed,
            "destinations_too_large": too_large,
        }

    def _with_headers(self, event: QueueEvent, stored: Mapping[str, bytes]) -> QueueEvent:
        """A Send with the message's header block: from the mail item's `hdrs` when its
        INSERT is in the batch (the usual case: it is written with the group items, in
        the same shard), else one read of the content's start while it still exists (a
        content already gone or not readable leaves the list empty)."""
        if event.event_type != "Send":
            return event
        block = stored.get(event.mail.message_id)
        if block is None:
            key = event.extra.get("content_key")
            if not key or self.headers is None:
                return event
            data = self.headers.read(str(key))
            if data is None:
                return event
            block = header_section(data)
        headers, truncated = parse_header_block(block)
        mail = replace(event.mail, headers=headers, headers_truncated=truncated)
        return replace(event, mail=mail)


INLINE_PREFIX = "ddb:"  # = backends.aws.items.INLINE_PREFIX (a test holds them equal)
SOLO_MARK = "ddb:|"  # = backends.aws.items.SOLO_MARK
