"""Queue events, shaped like Amazon SES event publishing, one recipient per record.

Every state change of a recipient produces one event. The `eventId` is derived from
(mail, recipient, event type, attempt number / discriminator), so a retried handler that
emits the same event again produces the same id and downstream de-duplication works.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from .model import Attempt, Result, to_iso

EVENT_TYPES = ("Send", "Delivery", "DeliveryDelay", "Bounce", "Reject", "Operator")


def event_id(*parts: object) -> str:
    return hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class MailInfo:
    message_id: str  # our mail id
    source: str  # envelope sender ("" = null sender)
    timestamp: datetime  # arrival
    destination: tuple[str, ...] = ()
    size: int = 0


@dataclass(frozen=True, slots=True)
class QueueEvent:
    event_type: str
    mail: MailInfo
    recipient: str | None
    timestamp: datetime
    discriminator: str = ""  # attempt number, operator job id... makes eventId unique
    result: Result | None = None
    attempt: Attempt | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def event_id(self) -> str:
        return event_id(
            self.mail.message_id, self.recipient or "", self.event_type, self.discriminator
        )

    def to_json(self) -> dict[str, Any]:
        """The SES event publishing shape, plus our `attempt` block."""
        ts = to_iso(self.timestamp)
        doc: dict[str, Any] = {
            "eventId": self.event_id,
            "eventType": self.event_type,
            "mail": {
                "messageId": self.mail.message_id,
                "timestamp": to_iso(self.mail.timestamp),
                "source": self.mail.source,
                "destination": [self.recipient] if self.recipient else list(self.mail.destination),
                "size": self.mail.size,
            },
        }
        r = self.result
        rcpt = self.recipient or ""
        if self.event_type == "Send":
            doc["send"] = {}
        elif self.event_type == "Delivery":
            doc["delivery"] = {
                "timestamp": ts,
                "recipients": [rcpt],
                "smtpResponse": f"{r.code} {r.status} {r.text}" if r else "",
                "remoteMtaIp": r.remote_mta if r else None,
                "reportingMTA": self.extra.get("reporting_mta"),
                "processingTimeMillis": self.extra.get("processing_ms"),
            }
        elif self.event_type == "Bounce":
            doc["bounce"] = {
                "timestamp": ts,
                "bounceType": self.extra.get("bounce_type", "Permanent"),
                "bounceSubType": self.extra.get("bounce_sub_type", "General"),
                "bouncedRecipients": [
                    {
                        "emailAddress": rcpt,
                        "action": "failed",
                        "status": r.status if r else None,
                        "diagnosticCode": f"smtp; {r.code} {r.text}" if r else None,
                    }
                ],
                "reportingMTA": self.extra.get("reporting_mta"),
                "remoteMtaIp": r.remote_mta if r else None,
            }
        elif self.event_type == "DeliveryDelay":
            doc["deliveryDelay"] = {
                "timestamp": ts,
                "delayType": self.extra.get("delay_type", "TransientCommunicationFailure"),
                "expirationTime": self.extra.get("expiration_time"),
                "nextAttemptAt": self.extra.get("next_attempt_at"),
                "delayedRecipients": [
                    {
                        "emailAddress": rcpt,
                        "status": r.status if r else None,
                        "diagnosticCode": f"smtp; {r.code} {r.text}" if r else None,
                    }
                ],
                "reportingMTA": self.extra.get("reporting_mta"),
                "remoteMtaIp": r.remote_mta if r else None,
            }
        elif self.event_type == "Reject":
            doc["reject"] = {
                "timestamp": ts,
                "reason": self.extra.get("reason", ""),
                "field": self.extra.get("field"),
            }
        elif self.event_type == "Operator":
            doc["operator"] = {
                "timestamp": ts,
                "action": self.extra.get("action", ""),
                "actor": self.extra.get("actor"),
                "job": self.extra.get("job"),
            }
        if self.attempt is not None:
            a = self.attempt
            doc["attempt"] = {
                "number": a.number,
                "scheduledAt": to_iso(a.scheduled_at),
                "startedAt": to_iso(a.started_at),
                "finishedAt": to_iso(a.finished_at),
                "remoteMta": a.result.remote_mta,
                "tls": a.tls,
            }
        return doc


class EventEmitter(Protocol):
    """Where events go. The AWS implementation is chosen by the analytics issue."""

    def emit(self, events: Iterable[QueueEvent]) -> None: ...


class NullEmitter:
    def emit(self, events: Iterable[QueueEvent]) -> None:
        for _ in events:
            pass


class ListEmitter:
    """Keeps events in memory: for tests and the local stack's inspection."""

    def __init__(self) -> None:
        self.events: list[QueueEvent] = []

    def emit(self, events: Iterable[QueueEvent]) -> None:
        self.events.extend(events)

    def of_type(self, event_type: str) -> list[QueueEvent]:
        return [e for e in self.events if e.event_type == event_type]


def dumps(event: QueueEvent) -> str:
    return json.dumps(event.to_json(), separators=(",", ":"), sort_keys=True)
