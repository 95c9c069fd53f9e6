"""The queue's data model: typed, JSON-serialisable, no pickle.

A *mail* is stored content plus an envelope. Recipients sharing a domain (or a relay
route) form a *destination group*: the unit of one SMTP transaction and of one claim.
Each recipient keeps its own state and attempt history, because partial success within
one transaction is normal.
"""

from __future__ import annotations

import enum
import hashlib
import os
import time
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

__all__ = [
    "Attempt",
    "Envelope",
    "GroupState",
    "MailRef",
    "Notify",
    "Priority",
    "Recipient",
    "RecipientState",
    "Result",
    "Ret",
    "group_key_for",
    "new_mail_id",
    "utcnow",
]


def utcnow() -> datetime:
    return datetime.now(UTC)


def to_iso(ts: datetime | None) -> str | None:
    if ts is None:
        return None
    return ts.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def from_iso(value: str | None) -> datetime | None:
    if value is None:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def _b32(n: int, length: int) -> str:
    out = []
    for _ in range(length):
        out.append(_CROCKFORD[n & 31])
        n >>= 5
    return "".join(reversed(out))


def new_mail_id(now_ms: int | None = None) -> str:
    """A ULID: time-sortable, so browsing by arrival needs no extra index."""
    ms = int(time.time() * 1000) if now_ms is None else now_ms
    return _b32(ms, 10) + _b32(int.from_bytes(os.urandom(10), "big"), 16)


def mail_id_for_key(scope: str, key: str, now_ms: int | None = None) -> str:
    """Deterministic id for an idempotency key, so a retried enqueue lands on the same mail.

    The time prefix is not derivable from a retry, so the id is a hash with a fixed
    marker prefix ("K") instead of a ULID; it sorts apart from ULIDs, which is harmless.
    """
    digest = hashlib.sha256(f"{scope}\x00{key}".encode()).digest()
    return "K" + _b32(int.from_bytes(digest[:16], "big"), 25)


RESULT_TEXT_MAX = 512  # octets: RFC 5321 §4.5.3.1.5's reply line, text of a stored result
REMOTE_MTA_MAX = 255  # octets: a host name (RFC 5321 §4.5.3.1.2) or an address literal


def clip_utf8(text: str, limit: int) -> str:
    """`text` cut to at most `limit` UTF-8 octets on a character boundary, marked with ..."""
    raw = text.encode()
    if len(raw) <= limit:
        return text
    return raw[: max(limit - 3, 0)].decode("utf-8", "ignore") + "..."


class RecipientState(enum.StrEnum):
    QUEUED = "queued"
    INFLIGHT = "inflight"
    DELIVERED = "delivered"
    BOUNCED = "bounced"
    DELETED = "deleted"
    HELD = "held"

    @property
    def final(self) -> bool:
        return self in (RecipientState.DELIVERED, RecipientState.BOUNCED, RecipientState.DELETED)


class GroupState(enum.StrEnum):
    """State of a destination group, derived from its recipients (and the lease)."""

    QUEUED = "queued"  # some recipient waits for an attempt
    INFLIGHT = "inflight"  # claimed by one delivery attempt (a lease)
    HELD = "held"  # parked by an operator
    DSN = "dsn"  # all recipients final, a DSN still has to be built from the content
    DONE = "done"  # all recipients final, nothing needs the content any more


class Priority(enum.StrEnum):
    """Which delivery path a mail takes: transactional mail has its own queue and
    consumers, so a bulk backlog never delays it (both share the same site limits)."""

    TRANSACTIONAL = "transactional"
    BULK = "bulk"


# Stored as one of the queue's own message tags: on every item of the mail (no extra
# attribute) and in every event's mail.tags, as `mailqueue:principal` is.
PRIORITY_TAG = "mailqueue:priority"


PRINCIPAL_TAG = "mailqueue:principal"

# The egress pool chosen at enqueue (outbound/pools.py): a tag like the priority, so it
# is on every item of the mail and in every event's mail.tags (SES names a dedicated IP
# pool `sendingPoolName` in a configuration set's DeliveryOptions; its events carry the
# configuration set in mail.tags). Absent: the default pool (mail from before pools).
POOL_TAG = "mailqueue:pool"


def wait_item(wait: Result | None, now: datetime, until: datetime) -> dict[str, str] | None:
    """A group's `wait` as stored (Group.wait): the reason, when it was written, until
    when (None: no reason given, nothing stored)."""
    if wait is None:
        return None
    return {
        "status": wait.status,
        "text": wait.text,
        "at": to_iso(now) or "",
        "until": to_iso(until) or "",
    }


def pool_of(tags: Any) -> str:
    """A mail's egress pool from its tags ("" when none: the default pool)."""
    items = tags.items() if isinstance(tags, dict) else (tags or ())
    return next((str(v) for name, v in items if name == POOL_TAG), "")


def principal_of(tags: Any) -> str:
    """The submitting principal from a mail's tags ("" when unknown: DSNs, old mail)."""
    items = tags.items() if isinstance(tags, dict) else (tags or ())
    return next((str(v) for name, v in items if name == PRINCIPAL_TAG), "")


def priority_of(tags: Any) -> Priority:
    """A mail's priority from its tags (pairs or a mapping); none or unknown: transactional,
    which is what mail queued before priorities existed (and DSNs of such mail) had."""
    items = tags.items() if isinstance(tags, dict) else (tags or ())
    for name, value in items:
        if name == PRIORITY_TAG:
            return Priority.BULK if value == Priority.BULK.value else Priority.TRANSACTIONAL
    return Priority.TRANSACTIONAL


class Notify(enum.StrEnum):
    """RFC 3461 NOTIFY keywords."""

    NEVER = "NEVER"
    SUCCESS = "SUCCESS"
    FAILURE = "FAILURE"
    DELAY = "DELAY"


class Ret(enum.StrEnum):
    """RFC 3461 RET: what a DSN returns of the original."""

    FULL = "FULL"
    HDRS = "HDRS"


@dataclass(frozen=True, slots=True)
class Result:
    """The outcome of one attempt for one recipient (an SMTP reply or a local verdict)."""

    code: int  # SMTP basic code, e.g. 250, 451, 550 (0 for a connection-level failure)
    status: str  # RFC 3463 enhanced status, e.g. "5.1.1"
    text: str  # diagnostic text, truncated
    remote_mta: str | None = None

    def __post_init__(self) -> None:
        # Bounded here, whoever builds it: a stored group holds one per recipient plus its
        # history, and DynamoDB's 400 KB item limit is sized on these bounds (README).
        if len(self.text.encode()) > RESULT_TEXT_MAX:
            object.__setattr__(self, "text", clip_utf8(self.text, RESULT_TEXT_MAX))
        if self.remote_mta is not None and len(self.remote_mta.encode()) > REMOTE_MTA_MAX:
            object.__setattr__(self, "remote_mta", clip_utf8(self.remote_mta, REMOTE_MTA_MAX))

    @property
    def permanent(self) -> bool:
        return self.status.startswith("5")

    @property
    def success(self) -> bool:
        return self.status.startswith("2")

    def describe(self) -> str:
        """One line for people: code (if a server replied), status and text, the status
        not repeated when the reply text already starts with it ("250 2.0.0 Ok")."""
        head = self.text.split(" ", 1)[0]
        parts = [str(self.code)] if self.code else []
        if head != self.status:
            parts.append(self.status)
        return " ".join([*parts, self.text]).strip()

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Result:
        return cls(
            code=int(d["code"]),
            status=str(d["status"]),
            text=str(d["text"]),
            remote_mta=d.get("remote_mta"),
        )


@dataclass(frozen=True, slots=True)
class Attempt:
    number: int
    scheduled_at: datetime | None
    started_at: datetime
    finished_at: datetime
    result: Result
    tls: bool = False
    site: str | None = None  # the traffic-shaping site (shaping.py), when shaping is on
    shaping: str | None = None  # "<rule id>:<actions>" of a backoff rule this attempt hit
    # the egress pool whose delivery made the attempt (outbound/pools.py): the routed
    # one of the `mailqueue:pool` tag, or the one its warm-up overflowed to
    pool: str | None = None

    def to_json(self) -> dict[str, Any]:
        out = {
            "number": self.number,
            "scheduled_at": to_iso(self.scheduled_at),
            "started_at": to_iso(self.started_at),
            "finished_at": to_iso(self.finished_at),
            "result": self.result.to_json(),
            "tls": self.tls,
        }
        if self.site is not None:
            out["site"] = self.site
        if self.shaping is not None:
            out["shaping"] = self.shaping
        if self.pool is not None:
            out["pool"] = self.pool
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Attempt:
        started = from_iso(d["started_at"])
        finished = from_iso(d["finished_at"])
        assert started is not None and finished is not None
        return cls(
            number=int(d["number"]),
            scheduled_at=from_iso(d.get("scheduled_at")),
            started_at=started,
            finished_at=finished,
            result=Result.from_json(d["result"]),
            tls=bool(d.get("tls", False)),
            site=d.get("site"),
            shaping=d.get("shaping"),
            pool=d.get("pool"),
        )


@dataclass(frozen=True, slots=True)
class Recipient:
    """One envelope recipient with its RFC 3461 parameters and its queue state."""

    rid: str  # stable id within the mail ("r0", "r1", ...)
    address: str
    notify: tuple[Notify, ...] = ()  # empty: the default (FAILURE, and DELAY by config)
    orcpt: str | None = None  # "rfc822;user@example.org"
    state: RecipientState = RecipientState.QUEUED
    attempts: int = 0
    first_attempt_at: datetime | None = None
    last_attempt_at: datetime | None = None
    last_result: Result | None = None
    dsn_pending: str | None = None  # "failed" | "delivered" | "delayed": a DSN must be built
    delay_warned: bool = False
    final_at: datetime | None = None

    @property
    def domain(self) -> str:
        return self.address.rpartition("@")[2].lower()

    def to_json(self) -> dict[str, Any]:
        return {
            "rid": self.rid,
            "address": self.address,
            "notify": [n.value for n in self.notify],
            "orcpt": self.orcpt,
            "state": self.state.value,
            "attempts": self.attempts,
            "first_attempt_at": to_iso(self.first_attempt_at),
            "last_attempt_at": to_iso(self.last_attempt_at),
            "last_result": self.last_result.to_json() if self.last_result else None,
            "dsn_pending": self.dsn_pending,
            "delay_warned": self.delay_warned,
            "final_at": to_iso(self.final_at),
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Recipient:
        lr = d.get("last_result")
        return cls(
            rid=str(d["rid"]),
            address=str(d["address"]),
            notify=tuple(Notify(n) for n in d.get("notify") or ()),
            orcpt=d.get("orcpt"),
            state=RecipientState(d.get("state", "queued")),
            attempts=int(d.get("attempts", 0)),
            first_attempt_at=from_iso(d.get("first_attempt_at")),
            last_attempt_at=from_iso(d.get("last_attempt_at")),
            last_result=Result.from_json(lr) if lr else None,
            dsn_pending=d.get("dsn_pending"),
            delay_warned=bool(d.get("delay_warned", False)),
            final_at=from_iso(d.get("final_at")),
        )

    def with_(self, **changes: Any) -> Recipient:
        return replace(self, **changes)


@dataclass(frozen=True, slots=True)
class Envelope:
    """What the SMTP envelope carries: sender (\"\" is the null sender) and recipients."""

    sender: str
    recipients: tuple[Recipient, ...]
    ret: Ret | None = None
    envid: str | None = None
    smtputf8: bool = False
    # message tags (SES's MessageTags: name, value), carried to every event of the mail
    tags: tuple[tuple[str, str], ...] = ()

    @property
    def null_sender(self) -> bool:
        return self.sender == ""

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "sender": self.sender,
            "recipients": [r.to_json() for r in self.recipients],
            "ret": self.ret.value if self.ret else None,
            "envid": self.envid,
            "smtputf8": self.smtputf8,
        }
        if self.tags:
            doc["tags"] = dict(self.tags)
        return doc

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Envelope:
        return cls(
            sender=str(d["sender"]),
            recipients=tuple(Recipient.from_json(r) for r in d["recipients"]),
            ret=Ret(d["ret"]) if d.get("ret") else None,
            envid=d.get("envid"),
            smtputf8=bool(d.get("smtputf8", False)),
            tags=tuple((str(k), str(v)) for k, v in (d.get("tags") or {}).items()),
        )


def group_key_for(address: str) -> str:
    """Destination group key: the recipient's domain, lower-cased (routes map domains)."""
    return address.rpartition("@")[2].lower()


@dataclass(frozen=True, slots=True)
class MailRef:
    mail_id: str
    group: str  # destination group key (the domain)

    def to_json(self) -> dict[str, Any]:
        return {"mail_id": self.mail_id, "group": self.group}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> MailRef:
        return cls(mail_id=str(d["mail_id"]), group=str(d["group"]))


@dataclass(frozen=True, slots=True)
class Group:
    """A destination group of one mail: the recipients delivered in one SMTP transaction."""

    mail_id: str
    key: str
    sender: str
    recipients: tuple[Recipient, ...]
    state: GroupState
    next_attempt_at: datetime
    arrival: datetime
    content_key: str
    size: int
    ret: Ret | None = None
    envid: str | None = None
    smtputf8: bool = False
    lease_until: datetime | None = None
    lease_token: str | None = None
    history: tuple[Attempt, ...] = ()  # the last few attempts of this group, newest last
    groups_in_mail: int = 0  # how many groups the mail has (0: unknown)
    priority: Priority = Priority.TRANSACTIONAL  # the delivery path (queue) of its trigger
    principal: str = ""  # who submitted it (its `mailqueue:principal` tag): reputation.py
    tags: tuple[tuple[str, str], ...] = ()  # the mail's tags (unsubscribe.py reads two)
    # a traffic-shaping slot booked for this group when it was postponed (opaque to
    # storage; outbound.shaping.Reservation reads it): it comes back and sends, no poll
    reservation: str | None = None
    # why the group last waited without an attempt (a pool paused or missing, a warm-up
    # day's budget spent: services/delivery.py), as {"status", "text", "at", "until"};
    # the event log makes a DeliveryDelay of each new one (attempts are not counted)
    wait: dict[str, str] | None = field(default=None, compare=False)
    # where the backend's index orders this group, when that may lag `next_attempt_at`
    # (AwsStorage: the `by_state` entry's `due`; opaque to the core, not compared)
    index_due: datetime | None = field(default=None, compare=False)

    @property
    def ref(self) -> MailRef:
        return MailRef(self.mail_id, self.key)

    @property
    def pool(self) -> str:
        """The egress pool chosen at enqueue (its `mailqueue:pool` tag; "": default)."""
        return pool_of(self.tags)

    @property
    def attempts(self) -> int:
        return max((r.attempts for r in self.recipients), default=0)

    def pending(self) -> tuple[Recipient, ...]:
        """Recipients an attempt should try (not final, not held)."""
        return tuple(
            r
            for r in self.recipients
            if r.state in (RecipientState.QUEUED, RecipientState.INFLIGHT)
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "mail_id": self.mail_id,
            "key": self.key,
            "sender": self.sender,
            "recipients": [r.to_json() for r in self.recipients],
            "state": self.state.value,
            "next_attempt_at": to_iso(self.next_attempt_at),
            "arrival": to_iso(self.arrival),
            "content_key": self.content_key,
            "size": self.size,
            "ret": self.ret.value if self.ret else None,
            "envid": self.envid,
            "smtputf8": self.smtputf8,
            "lease_until": to_iso(self.lease_until),
            "history": [a.to_json() for a in self.history],
            "priority": self.priority.value,
        }


def derive_group_state(recipients: tuple[Recipient, ...] | list[Recipient]) -> GroupState:
    """The group's resting state (no lease) from its recipients' states."""
    states = {r.state for r in recipients}
    if RecipientState.INFLIGHT in states:
        return GroupState.INFLIGHT
    if RecipientState.QUEUED in states:
        return GroupState.QUEUED
    if RecipientState.HELD in states:
        return GroupState.HELD
    if any(r.dsn_pending for r in recipients):
        return GroupState.DSN
    return GroupState.DONE


@dataclass(frozen=True, slots=True)
class QueuedMail:
    """What enqueue answers: ids the caller can quote later."""

    mail_id: str
    recipients: tuple[tuple[str, str], ...]  # (rid, address)
    groups: tuple[str, ...]
    duplicate: bool = False  # True when an idempotent retry found the mail already queued

    def to_json(self) -> dict[str, Any]:
        return {
            "mail_id": self.mail_id,
            "recipients": [{"id": rid, "address": a} for rid, a in self.recipients],
            "groups": list(self.groups),
            "duplicate": self.duplicate,
        }


@dataclass(slots=True)
class Claim:
    """A held lease on one group: proof for every later transition of this attempt.

    Mutable on purpose: `resolved` collects the recipients this attempt has already
    recorded, so the transition that resolves the last one also releases the lease.
    """

    group: Group
    token: str
    receipt_handle: str | None = None  # the SQS receipt this attempt came from, if any
    started_at: datetime = field(default_factory=utcnow)
    resolved: set[str] = field(default_factory=set)
    released: bool = False
    number: int = 0  # this attempt's number, fixed at claim time (0: derive from the group)
    site: str | None = None  # traffic-shaping site, recorded on the attempt
    shaping: str | None = None  # backoff rule hit by this attempt, recorded on the attempt
    sending_pool: str | None = None  # the egress pool sending it, recorded on the attempt
    # the queue (URL) the receipt handle belongs to, from the record's eventSourceARN;
    # None: the group's own priority queue
    receipt_queue: str | None = None
    # a fresh trigger for this claim (no receipt to re-arm) goes to this egress pool's
    # queue instead of the group's own (delivery hands a group to another pool)
    hand_to: str | None = None
    # the content, when the storage returned it with the claim (a solo mail on AWS): the
    # attempt then reads nothing more
    content: bytes | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        # Fixed when the claim is taken: a transaction with mixed results is recorded in
        # several writes, and each write raises the group's attempt counts; the attempt's
        # number must not move with them (one SMTP transaction is one attempt).
        if not self.number:
            self.number = self.group.attempts + 1

    @property
    def attempt_number(self) -> int:
        return self.number

    def unresolved(self) -> tuple[Recipient, ...]:
        return tuple(r for r in self.group.pending() if r.rid not in self.resolved)

    @property
    def ref(self) -> MailRef:
        return self.group.ref


@dataclass(frozen=True, slots=True)
class Page:
    """One page of a listing; `cursor` is opaque and None on the last page."""

    items: tuple[Any, ...]
    cursor: str | None
