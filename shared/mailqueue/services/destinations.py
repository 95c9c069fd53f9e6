"""Event destinations: the queue's events delivered in real time, as SES configuration sets
publish them (EventBridge, SNS) and as KumoMTA's webhooks do (signed HTTPS POSTs).

Why a queue between the event writer and the destinations: a receiver that is down must
not hold the table's stream (which keeps changes for 24 h only) nor lose events. The event
writer, after its S3 objects are written, hands each event once per destination whose
filter takes it to an `EventOutbox` (an SQS queue on AWS): one message = one event for one
destination. The destinations function sends it; a failure leaves the message on the
queue, back after a backoff that doubles from `destination_retry_base_seconds` to its
maximum, until `destination_max_attempts` receives (the defaults span more than 24 h) move
it to a dead-letter queue with an alarm. Delivery is at least once: a receiver de-duplicates
on the event id (`X-Mailqueue-Event-Id`, the event's own `mailqueue.eventId`).

Webhooks are signed as Stripe's are: `X-Mailqueue-Signature: t=<unix>,v1=<hex>`, where
`<hex>` is HMAC-SHA256 of `<t>.<body>` under the destination's secret; a receiver checks
the MAC and that `t` is within its replay window (`verify_signature`, 300 s by default).

The destination list is data (`MQ_EVENT_DESTINATIONS`, JSON), validated at start: a bad
name, type, URL, event type or secret reference fails the cold start with the place and
the reason, never a silent default.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol
from urllib.parse import urlsplit

from mailqueue.core.config import ConfigError
from mailqueue.core.events import EVENT_TYPES

DestinationKind = Literal["webhook", "eventbridge", "sns"]
KINDS: tuple[DestinationKind, ...] = ("webhook", "eventbridge", "sns")
SIGNATURE_HEADER = "X-Mailqueue-Signature"
EVENT_ID_HEADER = "X-Mailqueue-Event-Id"
REPLAY_WINDOW_SECONDS = 300
#: The largest message every destination takes: an EventBridge PutEvents entry ("256KB":
#: docs.aws.amazon.com/eventbridge/latest/userguide/eb-putevent-size.html), an SNS message
#: (a topic's default MaximumMessageSize, 262,144 bytes: docs.aws.amazon.com/sns/latest/dg/
#: large-message-payloads.html) and an SQS message (the outbox's default, 256 KiB)
MAX_MESSAGE_BYTES = 256 * 1024
#: what an outbox envelope or a PutEvents entry adds around the event (destination name,
#: id, type; Source and DetailType), with room to spare
ENVELOPE_BYTES = 1024
MAX_EVENT_BYTES = MAX_MESSAGE_BYTES - ENVELOPE_BYTES
#: EventBridge's `source` for our events (SES's own is "aws.ses": not ours to use)
EVENTBRIDGE_SOURCE = "mailqueue"
_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
_ARN = re.compile(r"^arn:aws[a-z-]*:(events|sns):[a-z0-9-]+:\d{12}:[A-Za-z0-9/_.:-]+$")


@dataclass(frozen=True, slots=True)
class Destination:
    """Where one stream of events goes, and which events it takes."""

    name: str
    kind: DestinationKind
    target: str  # the webhook's URL, the bus's or topic's ARN
    events: frozenset[str]  # event types; every type when it holds "*"
    secret: str = ""  # a webhook's signing key, resolved at start (never logged)

    def takes(self, event_type: str) -> bool:
        return "*" in self.events or event_type in self.events


def parse_destinations(
    text: str,
    *,
    secrets: Mapping[str, str] | None = None,
    allow_http_loopback: bool = False,
    source: str = "MQ_EVENT_DESTINATIONS",
    need_secrets: bool = True,
) -> tuple[Destination, ...]:
    """The destination list, checked whole. `secrets`: webhook name -> signing key (from a
    Secrets Manager secret on AWS); a webhook without one is refused where it is sent
    (`need_secrets`; the event writer only filters and needs none)."""
    if not text.strip():
        return ()
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise ConfigError(f"{source}: not JSON: {e}") from e
    items = doc.get("destinations") if isinstance(doc, dict) else None
    if not isinstance(items, list):
        raise ConfigError(f'{source}: expected {{"destinations": [...]}}')
    out: list[Destination] = []
    seen: set[str] = set()
    for i, d in enumerate(items):
        where = f"{source}: destinations[{i}]"
        if not isinstance(d, dict):
            raise ConfigError(f"{where}: expected an object")
        unknown = set(d) - {"name", "type", "url", "arn", "events"}
        if unknown:
            raise ConfigError(f"{where}: unknown field(s) {sorted(unknown)}")
        name = d.get("name")
        if not isinstance(name, str) or not _NAME.match(name):
            raise ConfigError(f"{where}.name: 1-64 of a-z 0-9 _ -, starting with a letter or digit")
        if name in seen:
            raise ConfigError(f"{where}.name: {name!r} is used twice")
        seen.add(name)
        kind = d.get("type")
        if kind not in KINDS:
            raise ConfigError(f"{where}.type: one of {', '.join(KINDS)}")
        events = d.get("events", ["*"])
        typed = isinstance(events, list) and all(isinstance(e, str) for e in events)
        if not typed or not events:
            raise ConfigError(f"{where}.events: a non-empty list of event types")
        bad = [e for e in events if e != "*" and e not in EVENT_TYPES]
        if bad:
            raise ConfigError(f"{where}.events: unknown event type {bad[0]!r}")
        secret = ""
        if kind == "webhook":
            target = d.get("url")
            if not isinstance(target, str):
                raise ConfigError(f"{where}.url: required for a webhook")
            _check_url(target, where, allow_http_loopback)
            secret = (secrets or {}).get(name, "")
            if need_secrets and len(secret) < 16:
                raise ConfigError(f"{where}: webhook {name!r} needs a signing secret (16+ chars)")
        else:
            target = d.get("arn")
            service = "events" if kind == "eventbridge" else "sns"
            ok = isinstance(target, str) and _ARN.match(target) and f":{service}:" in target
            if not ok or not isinstance(target, str):
                raise ConfigError(f"{where}.arn: an {service} ARN")
        out.append(Destination(name, kind, target, frozenset(events), secret))
    return tuple(out)


def _check_url(url: str, where: str, allow_http_loopback: bool) -> None:
    u = urlsplit(url)
    loopback = u.hostname in ("127.0.0.1", "localhost", "::1")
    if u.scheme == "https" and u.hostname:
        return
    if u.scheme == "http" and loopback and allow_http_loopback:
        return
    raise ConfigError(f"{where}.url: an https:// URL (plain http only to loopback, locally)")


def sign(secret: str, body: bytes, now: float) -> str:
    """The signature header's value for `body` at `now`."""
    t = int(now)
    mac = hmac.new(secret.encode(), f"{t}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={t},v1={mac}"


def verify_signature(
    secret: str, header: str, body: bytes, now: float, window: int = REPLAY_WINDOW_SECONDS
) -> bool:
    """What a receiver checks: the MAC over timestamp and body, and a timestamp within
    `window` seconds of its own clock (an old request replayed is refused)."""
    parts = dict(p.split("=", 1) for p in header.split(",") if "=" in p)
    try:
        t = int(parts.get("t", ""))
    except ValueError:
        return False
    if abs(now - t) > window:
        return False
    want = hmac.new(secret.encode(), f"{t}.".encode() + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(want, parts.get("v1", ""))


@dataclass(frozen=True, slots=True)
class Envelope:
    """One event for one destination: what the outbox carries."""

    destination: str
    event_id: str
    event_type: str
    event: Mapping[str, Any]

    def encode(self) -> str:
        return json.dumps(
            {
                "d": self.destination,
                "id": self.event_id,
                "type": self.event_type,
                "event": self.event,
            },
            separators=(",", ":"),
        )

    @classmethod
    def decode(cls, body: str) -> Envelope:
        doc = json.loads(body)
        return cls(str(doc["d"]), str(doc["id"]), str(doc["type"]), doc["event"])


def event_bytes(event: Mapping[str, Any]) -> int:
    """The event's size as every destination is sent it (compact JSON, UTF-8)."""
    return len(json.dumps(event, separators=(",", ":")).encode())


def fit(event: Mapping[str, Any], limit: int = MAX_EVENT_BYTES) -> Mapping[str, Any] | None:
    """The event within `limit` bytes, or None. The event writer already keeps at most
    10 KB of headers (as SES does); what can still be too large is a mail to many long
    addresses (`mail.destination`, `commonHeaders.to`: up to 1,000 recipients). Shrunk in
    steps, each named in `mailqueue.truncated`: `mail.headers` dropped (`headersTruncated`
    true, SES's own flag), then `mail.commonHeaders` and `mail.destination` (the event's
    own recipients, e.g. `bounce.bouncedRecipients`, stay). The whole event is in the S3
    event log either way (its eventId finds it)."""
    if event_bytes(event) <= limit:
        return event
    mail = dict(event.get("mail") or {})
    ours = dict(event.get("mailqueue") or {})
    truncated: list[str] = []
    for step in (("headers",), ("commonHeaders", "destination")):
        for key in step:
            if key in mail:
                del mail[key]
                truncated.append(f"mail.{key}")
        if "mail.headers" in truncated:
            mail["headersTruncated"] = True
        smaller = {**event, "mail": mail, "mailqueue": {**ours, "truncated": truncated}}
        if event_bytes(smaller) <= limit:
            return smaller
    return None


def envelopes(
    events: Iterable[Mapping[str, Any]], destinations: Sequence[Destination]
) -> list[Envelope]:
    """Each event once per destination whose filter takes it, shrunk to fit (`fit`); an
    event no shrinking fits is left out (`too_large` counts it)."""
    return envelopes_and_too_large(events, destinations)[0]


def envelopes_and_too_large(
    events: Iterable[Mapping[str, Any]], destinations: Sequence[Destination]
) -> tuple[list[Envelope], int]:
    out: list[Envelope] = []
    too_large = 0
    for ev in events:
        kind = str(ev.get("eventType", ""))
        takers = [d for d in destinations if d.takes(kind)]
        if not takers:
            continue
        eid = str((ev.get("mailqueue") or {}).get("eventId", ""))
        sized = fit(ev)
        if sized is None:
            too_large += 1
            continue
        out.extend(Envelope(d.name, eid, kind, sized) for d in takers)
    return out, too_large


class EventOutbox(Protocol):
    """Where the event writer hands envelopes (an SQS queue on AWS): durable before it
    returns, so the stream batch is acknowledged only once they are."""

    def put(self, items: Sequence[Envelope]) -> None: ...


class Sender(Protocol):
    """Sends one envelope to one kind of destination; raises DestinationError."""

    def send(self, dest: Destination, env: Envelope) -> None: ...


class DestinationError(Exception):
    """A send that did not succeed; `retry` False for what no retry can fix (a 4xx other
    than 408/429: the receiver refuses this event) — it goes to the dead-letter queue at
    once rather than after a day of retries."""

    def __init__(self, message: str, retry: bool = True) -> None:
        super().__init__(message)
        self.retry = retry


@dataclass(frozen=True, slots=True)
class DestinationSettings:
    """The destinations function's settings (MQ_* variables), validated at start."""

    event_destinations: str = ""
    destination_retry_base_seconds: int = 30
    destination_retry_max_seconds: int = 3600
    destination_max_attempts: int = 32  # < the queue's maxReceiveCount: > 24 h of retries
    webhook_timeout_seconds: float = 10.0
    allow_http_loopback: bool = False  # the local stack's webhook receivers
    # the webhooks' signing keys, a JSON object name -> key: `secretsmanager:<id>` (the
    # template's EventWebhookSecretArn) or, for local use, `json:{...}`
    webhook_keys: str = ""
    destinations_queue_url: str = ""  # the outbox (its messages' visibility set on failure)
    destinations_dlq_url: str = ""
    region: str | None = None
    endpoint_url: str | None = None

    def __post_init__(self) -> None:
        base, top = self.destination_retry_base_seconds, self.destination_retry_max_seconds
        if not 1 <= base <= top <= 43_200:
            raise ConfigError(
                "destination_retry_base_seconds <= destination_retry_max_seconds <= 43200"
                " (SQS's longest visibility timeout, 12 h)"
            )
        if not 1 <= self.destination_max_attempts <= 1000:
            raise ConfigError("destination_max_attempts must be within 1..1000")
        if not 0 < self.webhook_timeout_seconds <= 60:
            raise ConfigError("webhook_timeout_seconds must be within (0, 60]")

    def retry_span_seconds(self) -> int:
        """How long an event is retried before it is dead-lettered."""
        return sum(self.backoff(n) for n in range(1, self.destination_max_attempts))

    def backoff(self, receive_count: int) -> int:
        """Seconds until the next try after the `receive_count`-th failed one."""
        top, base = self.destination_retry_max_seconds, self.destination_retry_base_seconds
        return int(min(top, base * 2 ** min(30, max(0, receive_count - 1))))


class RetryPort(Protocol):
    """What SQS does for a failed send (mailqueue.backends.aws.destinations.SqsRetry)."""

    def later(self, receipt_handle: str, seconds: int) -> None: ...

    def dead(self, body: str, receipt_handle: str, reason: str) -> None: ...


class DestinationService:
    """An outbox message in, its destination's send out."""

    def __init__(
        self,
        settings: DestinationSettings,
        destinations: Sequence[Destination],
        senders: Mapping[DestinationKind, Sender],
        clock: Any = time.time,
    ) -> None:
        self.settings = settings
        self.by_name = {d.name: d for d in destinations}
        self.senders = senders
        self.clock = clock

    def deliver(self, body: str) -> Envelope:
        """Send one message's event; raises DestinationError when it must be tried again."""
        env = Envelope.decode(body)
        dest = self.by_name.get(env.destination)
        if dest is None:  # removed from the list since: nothing to send it to
            raise DestinationError(f"unknown destination {env.destination!r}", retry=False)
        self.senders[dest.kind].send(dest, env)
        return env

    def process(self, body: str, receive_count: int, receipt: str, retry: RetryPort) -> str:
        """One queue message: "sent", "dead" (moved to the dead-letter queue: no retry can
        help, or the last attempt failed), or raises DestinationError after setting the
        message's next try (`backoff`), so the batch reports it failed and SQS keeps it."""
        try:
            self.deliver(body)
            return "sent"
        except DestinationError as e:
            if not e.retry or receive_count >= self.settings.destination_max_attempts:
                retry.dead(body, receipt, str(e))
                return "dead"
            retry.later(receipt, self.settings.backoff(receive_count))
            raise
        except (ValueError, KeyError) as e:  # not an envelope: no retry reads it better
            retry.dead(body, receipt, f"unreadable: {type(e).__name__}")
            return "dead"
