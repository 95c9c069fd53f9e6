"""Queue events in Amazon SES's event-publishing format.

The records follow "Contents of event data that Amazon SES publishes to Amazon SNS /
Amazon Data Firehose" (SES Developer Guide): a consumer written from that page reads them
unchanged. Send is one record per message with every destination (as SES); Delivery,
Bounce and DeliveryDelay carry one recipient each (SES allows one or several). What SES
does not have lives in one namespaced place, so an SES consumer ignores it: the top-level
`mailqueue` object (eventId, attempt, operator action, reject details, next attempt), the
event type `mailqueue:Operator`, reject reasons `mailqueue:<code>` and `mailqueue:` tags.

The `eventId` is derived from (mail, recipient, event type, attempt number /
discriminator), so a retried handler that emits the same event again produces the same id
and downstream de-duplication works.

The vocabulary (event types, operator actions, SES's bounce and delay values) is defined
here once; the pipeline (installable alone, without this package) keeps a copy in
`mq_pipeline.consts` that a test holds equal to this one.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from mailqueue.core.model import Attempt, Result, to_iso

NAMESPACE = "mailqueue"
OPERATOR_EVENT = f"{NAMESPACE}:Operator"
#: one-click unsubscribe (SES's Subscription event); reputation pauses (ours, no `mail`)
SUBSCRIPTION_EVENT = "Subscription"
REPUTATION_EVENT = f"{NAMESPACE}:Reputation"
#: the egress pool that sent (an attempt's; `mailqueue:pool` is the one routed at enqueue)
SENDING_POOL_TAG = f"{NAMESPACE}:sending-pool"
#: SES's own value where SES has one: its Reject object's reason is "Bad content" for a
#: virus (https://docs.aws.amazon.com/ses/latest/dg/event-publishing-retrieving-sns-contents.html,
#: "Reject object": the only value SES uses); others are ours, namespaced "mailqueue:".
SES_REJECT_REASONS = {"virus": "Bad content"}

EVENT_TYPES = (
    "Send",
    "Delivery",
    "DeliveryDelay",
    "Bounce",
    "Reject",
    "Complaint",
    OPERATOR_EVENT,
    SUBSCRIPTION_EVENT,
    REPUTATION_EVENT,
)
# What the admin service stores (the command) -> what the event log says (what happened).
OPERATOR_ACTIONS: Mapping[str, str] = {
    "hold": "held",
    "release": "released",
    "retry": "retried",
    "delete": "deleted",
    "bounce": "bounced",
}
# SES's bounce types and the subtypes it lists under each (its "Bounce types" table).
SES_BOUNCE_TYPES: Mapping[str, tuple[str, ...]] = {
    "Undetermined": ("Undetermined",),
    "Permanent": ("General", "NoEmail", "Suppressed", "OnAccountSuppressionList"),
    "Transient": (
        "General",
        "MailboxFull",
        "MessageTooLarge",
        "ContentRejected",
        "AttachmentRejected",
    ),
}
SES_DELAY_TYPES = (
    "InternalFailure",
    "General",
    "MailboxFull",
    "SpamDetected",
    "RecipientServerError",
    "IPFailure",
    "TransientCommunicationFailure",
    "BYOIPHostNameLookupUnavailable",
    "Undetermined",
    "SendingDeferral",
)
HEADERS_MAX = 10 * 1024  # SES truncates the header list above 10 KB (headersTruncated)
#: what the event log reads of a message for `mail.headers`: the header section and its
#: blank line, at most this much (a ranged GET of the content, or the mail item's `hdrs`)
HEADER_READ_MAX = HEADERS_MAX + 1024
#: the mail item's write unit: `hdrs` is stored only while the item stays within it
MAIL_ITEM_WRITE_UNIT = 1024


def header_section(content: bytes) -> bytes:
    """The start of a message the event log needs: its header section up to and with the
    blank line, at most HEADER_READ_MAX bytes (what the ranged GET used to read)."""
    end, sep = content.find(b"\r\n\r\n"), 4
    if end < 0:
        end, sep = content.find(b"\n\n"), 2
    cut = HEADER_READ_MAX if end < 0 else min(end + sep, HEADER_READ_MAX)
    return content[:cut]


def pack_headers(content: bytes, room: int) -> str | bytes | None:
    """The header section as the mail item's `hdrs`, if it fits in `room` bytes: as text
    (UTF-8), else zlib-compressed (binary); None when neither fits (the event writer then
    reads the content's start from S3, as before). `room` keeps the mail item within one
    write unit: a second unit on its put and its delete ($1.25 per million) would cost
    more than the GET it saves ($0.40 per million)."""
    import zlib

    block = header_section(content)
    try:
        text = block.decode("utf-8")
        if len(block) <= room:
            return text
    except UnicodeDecodeError:
        pass
    z = zlib.compress(block, 9)
    return z if len(z) <= room else None


def unpack_headers(value: object) -> bytes | None:
    """The header section from a mail item's `hdrs` (text, zlib binary, or absent)."""
    import zlib

    if isinstance(value, str):
        return value.encode("utf-8")
    raw = getattr(value, "value", value)  # boto3's Binary
    if isinstance(raw, bytes | bytearray):
        return zlib.decompress(bytes(raw))
    return None


def event_id(*parts: object) -> str:
    return hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).hexdigest()[:32]


def bounce_class(result: Result | None) -> tuple[str, str]:
    """(bounceType, bounceSubType) from the final result, using only SES's documented pairs.

    5.x.x is Permanent (5.1.x no such mailbox -> NoEmail); mailbox full and too large are
    listed by SES only as Transient, so they stay Transient whatever their class, as does
    every 4.x.x final failure (the 4.4.7 lifetime expiry). No result at all: Undetermined.
    """
    if result is None or result.status[:1] not in ("4", "5"):
        return ("Undetermined", "Undetermined")
    st = result.status
    if st in ("5.2.2", "4.2.2"):
        return ("Transient", "MailboxFull")
    if st in ("5.3.4", "5.2.3", "4.3.4", "4.2.3"):
        return ("Transient", "MessageTooLarge")
    if st.startswith("4"):
        return ("Transient", "General")
    if st in ("5.1.1", "5.1.2", "5.1.10", "5.1.6"):
        return ("Permanent", "NoEmail")
    return ("Permanent", "General")


def delay_type(result: Result | None) -> str:
    """SES's delayType for a temporary failure, from its enhanced status."""
    if result is None:
        return "Undetermined"
    st = result.status
    if st == "4.2.2":
        return "MailboxFull"
    if st in ("4.7.1", "4.7.0") and "spam" in result.text.lower():
        return "SpamDetected"
    if st.startswith("4.1."):
        return "RecipientServerError"
    # no connection (4.4.1), lost (4.4.2), DNS/routing failure (4.4.3, 4.4.4): SES has no
    # DNS value of its own and files lookups under its communication failures
    if st in ("4.4.1", "4.4.2", "4.4.3", "4.4.4", "4.4.6"):
        return "TransientCommunicationFailure"
    if st == "4.3.0" and result.code == 0:
        return "InternalFailure"  # our own side (content unreadable, no result recorded)
    if result.code >= 400 or st.startswith(("4.2.", "4.3.", "4.7.")):
        return "RecipientServerError"
    return "Undetermined"


def smtp_response(result: Result) -> str:
    """The server's reply as received: code and text (the text starts with the enhanced
    status when the server sent one; it is not repeated)."""
    return f"{result.code} {result.text}".strip()


def diagnostic_code(result: Result | None) -> str | None:
    """RFC 3464 Diagnostic-Code: `smtp; <reply>` when a server replied; a verdict of our
    own (code 0: no connection, expiry, operator) uses the `x-mailqueue` type."""
    if result is None:
        return None
    if result.code:
        return f"smtp; {smtp_response(result)}"
    return f"x-{NAMESPACE}; {result.status} {result.text}".strip()


def remote_ip(result: Result | None) -> str | None:
    """The connected IP when the remote MTA is recorded as one, else None (SES's field
    holds an IP address, never a host name)."""
    host = (result.remote_mta or "").strip("[]") if result else ""
    try:
        return str(ipaddress.ip_address(host)) if host else None
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class MailInfo:
    message_id: str  # our mail id
    source: str  # envelope sender ("" = null sender)
    timestamp: datetime  # arrival
    destination: tuple[str, ...] = ()
    size: int = 0
    headers: tuple[tuple[str, str], ...] = ()
    headers_truncated: bool = False
    tags: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    sending_account_id: str = "000000000000"
    source_arn: str = ""


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
        """The SES event-publishing record, plus the namespaced `mailqueue` object."""
        ts = to_iso(self.timestamp)
        m = self.mail
        doc: dict[str, Any] = {
            "eventType": self.event_type,
            "mail": _mail_json(m, self.recipient, self.event_type),
        }
        # the message size in octets: SES has no field for it; the report's byte totals
        ours: dict[str, Any] = {"eventId": self.event_id, "size": m.size}
        r = self.result
        rcpt = self.recipient or ""
        reporting = self.extra.get("reporting_mta") or "mailqueue.invalid"
        ip = remote_ip(r)
        if r is not None and r.remote_mta:
            ours["remoteMta"] = r.remote_mta
        if self.event_type == "Send":
            doc["send"] = {}
        elif self.event_type == "Delivery":
            doc["delivery"] = {
                "timestamp": ts,
                "processingTimeMillis": int(self.extra.get("processing_ms") or 0),
                "recipients": [rcpt],
                "smtpResponse": smtp_response(r) if r else "",
                "reportingMTA": reporting,
                **({"remoteMtaIp": ip} if ip else {}),
            }
        elif self.event_type == "Bounce":
            # a class decided by its producer (ingress: the suppression list), else the reply's
            btype, bsub = self.extra.get("bounce_class") or bounce_class(r)
            dsn = self.extra.get("dsn") or {}  # a late bounce: the receiver's DSN as sent
            rec: dict[str, Any] = {"emailAddress": rcpt, "action": "failed"}
            if r is not None:
                rec["status"] = r.status
                rec["diagnosticCode"] = dsn.get("diagnosticCode") or diagnostic_code(r)
            ip = dsn.get("remoteMtaIp") or ip
            doc["bounce"] = {
                "bounceType": btype,
                "bounceSubType": bsub,
                "bouncedRecipients": [rec],
                "timestamp": ts,
                "feedbackId": event_id(self.event_id, "feedback"),
                "reportingMTA": dsn.get("reportingMTA") or f"dns; {reporting}",
                **({"remoteMtaIp": ip} if ip else {}),
            }
            if self.extra.get("suppressed_at"):  # bounced by the suppression list: since when
                ours["suppressedAt"] = self.extra["suppressed_at"]
            if self.extra.get("feedback"):  # a late bounce: the receiver's report
                ours["feedback"] = self.extra["feedback"]
        elif self.event_type == "Complaint":
            # an ARF report (services/feedback): SES's complaint object, field for field
            complaint: dict[str, Any] = {
                "feedbackId": event_id(self.event_id, "feedback"),
                "complaintSubType": None,
                "complainedRecipients": [{"emailAddress": rcpt}],
                "timestamp": ts,
            }
            for key, name in (
                ("user_agent", "userAgent"),
                ("feedback_type", "complaintFeedbackType"),
                ("arrival_date", "arrivalDate"),
            ):
                if self.extra.get(key):
                    complaint[name] = self.extra[key]
            doc["complaint"] = complaint
            if self.extra.get("feedback"):
                ours["feedback"] = self.extra["feedback"]
        elif self.event_type == "DeliveryDelay":
            drec: dict[str, Any] = {"emailAddress": rcpt}
            if r is not None:
                drec["status"] = r.status
                drec["diagnosticCode"] = diagnostic_code(r)
            doc["deliveryDelay"] = {
                "timestamp": ts,
                "delayType": self.extra.get("delay_type") or delay_type(r),
                "expirationTime": self.extra.get("expiration_time"),
                "delayedRecipients": [drec],
                "reportingMTA": f"dns; {reporting}",
            }
            if self.extra.get("next_attempt_at"):
                ours["nextAttemptAt"] = self.extra["next_attempt_at"]
            if self.extra.get("wait"):  # a wait without an attempt (an egress pool's)
                ours["wait"] = self.extra["wait"]
        elif self.event_type == "Reject":
            reason = str(self.extra.get("reason") or "unspecified")
            doc["reject"] = {"reason": SES_REJECT_REASONS.get(reason, f"{NAMESPACE}:{reason}")}
            ours["reject"] = {
                "timestamp": ts,
                "reason": reason,
                "field": self.extra.get("field"),
                "recipient": self.recipient,
            }
            if self.extra.get("suppressed_at"):  # recipient_suppressed: since when
                ours["reject"]["suppressedAt"] = self.extra["suppressed_at"]
        elif self.event_type == SUBSCRIPTION_EVENT:  # one-click unsubscribe (SES's object)
            doc["subscription"] = self.extra.get("subscription", {})
            ours["subscription"] = self.extra.get("ours", {})
        elif self.event_type == OPERATOR_EVENT:
            ours["operator"] = {
                "timestamp": ts,
                "action": self.extra.get("action", ""),
                "actor": self.extra.get("actor"),
                "job": self.extra.get("job"),
                "recipients": [rcpt],
            }
        if self.attempt is not None:
            a = self.attempt
            ours["attempt"] = {
                "number": a.number,
                "scheduledAt": to_iso(a.scheduled_at),
                "startedAt": to_iso(a.started_at),
                "finishedAt": to_iso(a.finished_at),
                "remoteMta": a.result.remote_mta,
                "tls": a.tls,
            }
            if a.site is not None:
                ours["attempt"]["site"] = a.site
            if a.shaping is not None:
                ours["attempt"]["shaping"] = a.shaping
            if a.pool is not None:
                # the egress pool that made the attempt (SES names a configuration set's
                # dedicated IP pool `SendingPoolName`; its events have no field for it,
                # so ours is here and in mail.tags, where a consumer filters by tag)
                ours["attempt"]["sendingPoolName"] = a.pool
                doc["mail"]["tags"][SENDING_POOL_TAG] = [a.pool]
        doc[NAMESPACE] = ours
        return doc


def _mail_json(m: MailInfo, recipient: str | None, event_type: str) -> dict[str, Any]:
    dest = list(m.destination) or ([recipient] if recipient else [])
    if recipient and recipient not in dest:
        dest.append(recipient)
    common = common_headers(m.headers)
    if not common.get("from"):
        common["from"] = [m.source] if m.source else []
    if not common.get("to"):
        common["to"] = list(dest)
    doc: dict[str, Any] = {
        "timestamp": to_iso(m.timestamp),
        "messageId": m.message_id,
        "source": m.source,
        "sourceArn": m.source_arn or f"arn:aws:ses:::identity/{_domain(m.source) or 'null'}",
        "sendingAccountId": m.sending_account_id,
        "destination": dest,
        "headersTruncated": m.headers_truncated,
        "headers": [{"name": n, "value": v} for n, v in m.headers],
        "commonHeaders": common,
        "tags": {
            f"{NAMESPACE}:from-domain": [_domain(m.source) or "null-sender"],
            **{k: list(v) for k, v in m.tags.items()},
        },
    }
    return doc


def _domain(address: str) -> str:
    return address.rpartition("@")[2].lower() if "@" in address else ""


_COMMON = {
    "from": "from",
    "to": "to",
    "cc": "cc",
    "bcc": "bcc",
    "reply-to": "replyTo",
    "return-path": "returnPath",
    "message-id": "messageId",
    "subject": "subject",
    "date": "date",
}
_LISTS = {"from", "to", "cc", "bcc", "replyTo"}


def common_headers(headers: Iterable[tuple[str, str]]) -> dict[str, Any]:
    """SES's `commonHeaders` from the header list (address headers as lists)."""
    from email.utils import getaddresses

    out: dict[str, Any] = {}
    for name, value in headers:
        key = _COMMON.get(name.lower())
        if key is None or key in out:
            continue
        if key in _LISTS:
            out[key] = [f"{n} <{a}>" if n else a for n, a in getaddresses([value]) if a] or [value]
        else:
            out[key] = value
    return out


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
