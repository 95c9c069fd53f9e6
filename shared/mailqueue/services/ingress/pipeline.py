"""The acceptance pipeline: one submission in, a queued mail or a refusal out.

Every door (`doors/`: HTTP, batch, SMTP, SES receipt) turns its input into one
`Submission` and hands it to `Acceptance`; the steps, in this order:

1. the envelope: address syntax, the recipient limit, the principal's sender policy;
2. the delivery path (priority) and our tags (`mailqueue:principal`, `mailqueue:priority`);
3. suppression: policy "refuse" refuses the submission, "bounce" takes the suppressed
   recipients out and bounces them once the others are queued;
4. the content: an upload is read only now, once the envelope passed;
5. DKIM signability (DkimUnsignedPolicy=refuse);
6. every rule enqueue applies, before its first write;
7. enqueue behind the door's Received: field (`enqueue`: the one place a submission is
   stored), idempotent per key.

Steps 1, 2, 3 and 5 are a principal's: a received mail (`principal` None: SES receipt,
the SMTP receiving listener) comes for our receiving domains, whose rules (verdicts,
no open relay, the sender's syntax) its door applied, and it is tagged by its door.

Ingress emits only `Reject` events (one per refused request, or per refused recipient
of a received mail). `Send` events are not emitted here: the event writer derives them
from the table's stream when the mail's state items appear, so a mail is announced
exactly when it is durable, and a retried request that stores nothing announces nothing.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Protocol

from mailqueue.core.authz import principal_matches
from mailqueue.core.dsn import Action, DsnRecipient, DsnRequest, build_dsn, dsn_wanted
from mailqueue.core.errors import Conflict, InvalidInput, NotFound
from mailqueue.core.events import EventEmitter, MailInfo, QueueEvent
from mailqueue.core.model import (
    POOL_TAG,
    PRIORITY_TAG,
    Envelope,
    Priority,
    QueuedMail,
    Recipient,
    Result,
    from_iso,
    group_key_for,
    mail_id_for_key,
    new_mail_id,
    priority_of,
    utcnow,
)
from mailqueue.core.trace import line_ending, principal_tag
from mailqueue.core.transitions import TAG_VALUE_RE, merge_duplicates
from mailqueue.core.validate import validate_address, validate_content, validate_sender
from mailqueue.outbound.dkim import header_from_domain, header_section, unsignable
from mailqueue.outbound.suppression import (
    Entry,
    RecipientSuppressed,
    SuppressionStore,
    normalise,
    suppressed,
)
from mailqueue.outbound.unsubscribe import opt_out_scopes
from mailqueue.services.ingress.answers import Answer, accepted, refusal
from mailqueue.services.ingress.ports import IngressStorage
from mailqueue.services.ingress.request import guard_parse, preview
from mailqueue.services.ingress.settings import IngressSettings

log = logging.getLogger(__name__)

# how far before the stored arrival the first Received: date may lie (see `enqueue`)
_TRACE_SKEW_SECONDS = 2

# the Received: field of a mail, as a function of its date (see `Acceptance.enqueue`)
Stamp = Callable[[datetime], bytes]


class Upload(Protocol):
    """Content stored before the request (`POST /v1/uploads`): read only once the
    envelope passed, removed only once the mail is queued."""

    @property
    def key(self) -> str:
        """The idempotency key an upload implies when the request gave none (an upload
        is sent once)."""
        ...

    def read(self, key: str, envelope: Envelope) -> bytes | QueuedMail:
        """The octets; or, when an earlier identical request consumed the upload, its
        first answer. Refusals raise InvalidInput."""
        ...

    def consume(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Submission:
    """One mail as a door hands it over.

    `trace` builds the door's Received: field for the envelope that is finally queued;
    `key` is the full (door-scoped) idempotency key; `principal` None is a received mail.
    """

    envelope: Envelope
    content: bytes | Upload
    trace: Callable[[Envelope], Stamp]
    principal: str | None = None
    key: str | None = None
    not_before: datetime | None = None
    priority: Priority | None = None  # None: the principal's default


@dataclass(frozen=True, slots=True)
class Accepted:
    queued: QueuedMail
    notices: tuple[dict[str, Any], ...] = ()  # suppressed recipients bounced (policy bounce)
    replayed: bool = False  # an upload consumed by an earlier identical request


class Refused(Exception):
    """What the pipeline refused, and what it had reached by then: the octets read
    (0 before the content step) and the key in effect (an upload's, once read)."""

    def __init__(self, cause: InvalidInput | Conflict, size: int, key: str | None) -> None:
        super().__init__(str(cause))
        self.cause = cause
        self.size = size
        self.key = key


class Acceptance:
    """The pipeline (see the module docstring) over the queue core and the stores."""

    def __init__(
        self,
        settings: IngressSettings,
        storage: IngressStorage,
        emitter: EventEmitter,
        *,
        clock: Callable[[], datetime] = utcnow,
        suppression: SuppressionStore | None = None,
    ) -> None:
        self.s = settings
        self.storage = storage
        self.emitter = emitter
        self.clock = clock
        self.suppression = suppression
        self.senders = settings.senders()
        self.dkim = settings.dkim()
        self.pools = settings.pool_config()  # the routing policy (outbound/pools.py)

    def mail_id(self, full_key: str) -> str:
        return mail_id_for_key(self.s.storage.idempotency_scope, full_key)

    # ------------------------------------------------------------------ the sequence
    def accept(self, sub: Submission, now: datetime) -> Accepted:
        """Steps 1 to 7; a refusal raises `Refused`, storage errors pass unchanged."""
        key, size = sub.key, 0
        try:
            original = sub.envelope
            bounced: dict[int, Entry] = {}
            if sub.principal is not None:
                principal = sub.principal
                guard_parse(lambda: self._check_envelope(original, principal))
                priority = self._priority(sub.priority, principal)
                original = self._tagged(original, principal, priority)
                bounced = self._check_suppressed(original, now)  # tagged: bulk opt-outs
            envelope = original
            if bounced:  # SuppressionPolicy=bounce: the others go on, these bounce below
                kept = tuple(r for i, r in enumerate(original.recipients) if i not in bounced)
                envelope = replace(original, recipients=kept)
            if isinstance(sub.content, bytes):
                content = sub.content
            else:
                key = key or sub.content.key
                got = sub.content.read(key, envelope)
                if isinstance(got, QueuedMail):  # consumed by an earlier, identical request
                    return Accepted(got, replayed=True)
                content = got
            size = len(content)
            if sub.principal is not None:
                guard_parse(lambda: self._check_dkim(envelope, content))
            # every rule enqueue applies, before its first write (the S3 put)
            guard_parse(lambda: self.storage.validate(original, content))
            if envelope.recipients:
                queued = self.enqueue(envelope, content, sub.trace(envelope), key, sub.not_before)
                if queued.duplicate and sub.principal is not None:
                    # a received mail's answer names no recipients: no first answer needed
                    queued = self._stored_answer(queued, envelope)
            else:  # every recipient is suppressed: nothing to queue but their bounces
                queued = QueuedMail(self.mail_id(key) if key else new_mail_id(), (), ())
            notices = self._bounce_suppressed(original, bounced, content, queued.mail_id, now, key)
        except (InvalidInput, Conflict) as e:
            raise Refused(e, size, key) from e
        return Accepted(queued, tuple(notices))

    def answer(self, sub: Submission, doc: Any, key_field: str, now: datetime) -> Answer:
        """`accept` as the HTTP and SMTP doors answer it: 202 once durable (the upload
        then removed), else one Reject event and the 4xx. `doc` is what the Reject event
        previews; `key_field` names the key's field in an idempotency conflict."""
        try:
            got = self.accept(sub, now)
        except Refused as r:
            e = r.cause
            if isinstance(e, Conflict):
                field = key_field if sub.key is not None else "upload_id"
                e = InvalidInput("idempotency_conflict", str(e), field)
            self.reject(e, doc, r.key, now, r.size)
            return refusal(e)
        if got.replayed:
            return accepted(got.queued)
        if not isinstance(sub.content, bytes):
            sub.content.consume()
        answer = accepted(got.queued)
        if got.notices:
            answer.body["suppressed"] = list(got.notices)
        return answer

    # ------------------------------------------------------------------ 1, 2: who sends
    def _check_envelope(self, env: Envelope, principal: str) -> None:
        """Syntax of the addresses (the core's rules), then who may send what."""
        validate_sender(env.sender, smtputf8=env.smtputf8)
        if len(env.recipients) > self.s.max_recipients:
            raise InvalidInput(
                "too_many_recipients", f"at most {self.s.max_recipients} recipients", "recipients"
            )
        for i, r in enumerate(env.recipients):
            validate_address(r.address, f"recipients[{i}].address", smtputf8=env.smtputf8)
        self.check_sender_policy(env.sender, principal)

    def check_sender_policy(self, sender: str, principal: str) -> None:
        """Who may send as what: the null sender, then the sender policy's domains."""
        if sender == "":
            if principal not in self.s.null_sender_principals:
                raise InvalidInput(
                    "null_sender_forbidden", "this caller may not use the null sender", "sender"
                )
        else:
            domain = sender.rpartition("@")[2]
            if not self.senders.allows(principal, domain):
                raise InvalidInput(
                    "sender_not_allowed",
                    "this caller may not send as this sender domain (sender policy)",
                    "sender",
                )

    def _priority(self, asked: Priority | None, principal: str) -> Priority:
        """The mail's delivery path: what the caller asked, else its default; a bulk
        principal (IngressSettings.bulk_principals) may not ask for transactional."""
        if not principal_matches(principal, self.s.bulk_principals):
            return asked or Priority.TRANSACTIONAL
        if asked == Priority.TRANSACTIONAL:
            raise InvalidInput(
                "priority_not_allowed",
                "this caller's mail is bulk (bulk_principals); it may not ask for transactional",
                "priority",
            )
        return Priority.BULK

    def _tagged(self, envelope: Envelope, principal: str, priority: Priority) -> Envelope:
        """The submitter's tags plus ours: `mailqueue:principal`, the calling IAM principal
        (its hash when traces are private, or when the ARN is no valid tag value), and
        `mailqueue:priority` (the delivery path, read back by the storage) and, with more
        than one egress pool, `mailqueue:pool` (the routing policy's choice)."""
        who = principal
        if self.s.trace_private or not TAG_VALUE_RE.match(principal):
            who = principal_tag(principal)
        ours: tuple[tuple[str, str], ...] = (
            ("mailqueue:principal", who),
            (PRIORITY_TAG, priority.value),
        )
        if not self.pools.single:  # one pool: no tag, as before pools
            pool = self.pools.choose(
                priority=priority,
                principal=principal,
                sender=envelope.sender,
                tags=dict(envelope.tags),
            )
            ours = (*ours, (POOL_TAG, pool))
        return replace(envelope, tags=(*envelope.tags, *ours))

    # ------------------------------------------------------------------ 3: suppression
    def refuse_suppressed(self, address: str, index: int) -> None:
        """One recipient against the list under policy "refuse" (the SMTP door's RCPT,
        so the client hears it there): RecipientSuppressed when it is on it."""
        if self.suppression is None or self.s.suppression != "refuse":
            return
        found = suppressed(self.suppression, [address], self.clock().timestamp())
        entry = found.get(normalise(address))
        if entry is not None:
            raise RecipientSuppressed(address, entry, index)

    def _check_suppressed(self, env: Envelope, now: datetime) -> dict[int, Entry]:
        """The recipients on the suppression list (one BatchGetItem for up to 100
        distinct ones), by position. Policy "refuse": the first refuses the whole
        submission, before any write; "bounce": they are returned, to bounce."""
        if self.suppression is None or not env.recipients or env.null_sender:
            return {}  # a DSN is never refused for this (its sender must still learn)
        scopes = opt_out_scopes(env.tags, env.sender)  # one-click opt-outs (unsubscribe.py)
        found = suppressed(
            self.suppression, [r.address for r in env.recipients], now.timestamp(), scopes
        )
        out: dict[int, Entry] = {}
        for i, r in enumerate(env.recipients):
            entry = found.get(normalise(r.address))
            if entry is not None:
                if self.s.suppression != "bounce":
                    raise RecipientSuppressed(r.address, entry, i)
                out[i] = entry
        return out

    def _bounce_suppressed(
        self,
        env: Envelope,
        bounced: Mapping[int, Entry],
        content: bytes,
        mail_id: str,
        now: datetime,
        key: str | None,
    ) -> list[dict[str, Any]]:
        """Policy "bounce": each suppressed recipient bounces now, as with Amazon SES: a
        Bounce event (Permanent / OnAccountSuppressionList) and, where its NOTIFY asks,
        one DSN for them all to the sender. Their notices go into the 202's body.

        A retried keyed submission emits the same eventIds (de-duplicated downstream)
        and finds its DSN queued under the same derived key.
        """
        if not bounced:
            return []
        notices: list[dict[str, Any]] = []
        events: list[QueueEvent] = []
        reports: list[DsnRecipient] = []
        info = MailInfo(
            message_id=mail_id,
            source=env.sender,
            timestamp=now,
            destination=tuple(r.address for r in env.recipients),
            size=len(content),
            tags={k: (v,) for k, v in env.tags},
        )
        for i, entry in sorted(bounced.items()):
            r = env.recipients[i]
            since = entry.to_json()["added_at"]
            result = Result(0, entry.status or "5.1.1", f"recipient suppressed since {since}")
            events.append(
                QueueEvent(
                    event_type="Bounce",
                    mail=info,
                    recipient=r.address,
                    timestamp=now,
                    discriminator="suppressed",
                    result=result,
                    extra={
                        "bounce_class": ("Permanent", "OnAccountSuppressionList"),
                        "reporting_mta": self.s.hostname,
                        "suppressed_at": since,
                    },
                )
            )
            notices.append({"address": r.address, "status": result.status, "since": since})
            if dsn_wanted(env.sender, r.notify, Action.FAILED, delay_by_config=False):
                reports.append(
                    DsnRecipient(r.address, Action.FAILED, result.status, r.orcpt, result, now)
                )
        try:
            self.emitter.emit(events)
        except Exception:  # the mail is queued; its answer is the 202, whatever this is
            log.exception("could not emit the suppression Bounce events")
        if reports:
            self._queue_dsn(env, reports, content, mail_id, now, key)
        log.info("suppressed recipients bounced", extra={"mail_id": mail_id, "n": len(notices)})
        return notices

    def _queue_dsn(
        self,
        env: Envelope,
        reports: Sequence[DsnRecipient],
        content: bytes,
        mail_id: str,
        now: datetime,
        key: str | None,
    ) -> None:
        request = DsnRequest.for_envelope(
            env,
            reports,
            reporting_mta=self.s.hostname,
            postmaster_domain=self.s.hostname,
            arrival_date=now,
            content=content,
        )
        dsn_key = f"dsn:{mail_id}:suppressed"
        digest = hashlib.sha256(dsn_key.encode()).hexdigest()[:24]
        dsn = build_dsn(request, now=now, message_id=f"<dsn.{digest}@{self.s.hostname}>")
        # the DSN takes the submission's delivery path (priority)
        envelope = replace(dsn.envelope, tags=((PRIORITY_TAG, priority_of(env.tags).value),))
        try:
            self.storage.enqueue(envelope, dsn.content, idempotency_key=dsn_key)
        except Conflict:
            # a retry of this keyed submission: its DSN (built at the first try's time,
            # so other octets) is queued already and must not go out twice
            log.info("suppression dsn already queued", extra={"mail_id": mail_id})

    # ------------------------------------------------------------------ 5: DKIM
    def _check_dkim(self, env: Envelope, content: bytes) -> None:
        """DkimUnsignedPolicy=refuse: a mail that delivery would not sign is refused now,
        while the client can still be told (delivery never refuses for this)."""
        from_domain = header_from_domain(header_section(content))
        if self.dkim.refuses(from_domain, env.null_sender):
            raise InvalidInput(
                "dkim_unsigned_domain",
                "the From domain has no DKIM key here and unsigned mail is refused",
                "content",
            )
        if self.dkim.unsigned_policy == "refuse" and (
            self.dkim.signing_domain(from_domain, env.null_sender) is not None
        ):
            # a signing domain's mail that dkimpy cannot sign would leave unsigned
            why = unsignable(content)
            if why is not None:
                raise InvalidInput(
                    "dkim_unsignable", f"the mail cannot be signed: {why}", "content"
                )

    # ------------------------------------------------------------------ 7: enqueue
    def enqueue(
        self,
        envelope: Envelope,
        body: bytes,
        trace: Stamp,
        key: str | None,
        not_before: datetime | None = None,
    ) -> QueuedMail:
        """Enqueue the client's bytes behind our Received: field.

        The core compares the sha256 of what it stores, and the field carries a date: a
        retry (same key) builds it again with its own date, which the core calls a
        conflict. Then the first field is rebuilt from the stored arrival (the date is
        taken just before enqueue, so it is that second or one or two before) and the
        candidate whose digest is the stored one is enqueued again: a duplicate. Content
        that really differs matches no candidate and stays a conflict.
        """
        # the client's bytes are what must be a mail within the limit: checked before our
        # field is in front (which would make a header-less body look like one)
        validate_content(body, max_size=self.s.max_size)
        newline = line_ending(body)

        def content(date: datetime) -> bytes:
            return trace(date).replace(b"\r\n", newline) + body

        try:
            return self.storage.enqueue(
                envelope, content(self.clock()), idempotency_key=key, not_before=not_before
            )
        except Conflict:
            if key is None:
                raise
            first = self._first_content(key, content)
            if first is None:
                raise
        return self.storage.enqueue(envelope, first, idempotency_key=key, not_before=not_before)

    def _first_content(self, key: str, content: Stamp) -> bytes | None:
        try:
            mail, _ = self.storage.get_mail(self.mail_id(key))
        except NotFound:
            return None
        arrival = from_iso(mail.get("arrival")) if mail else None
        if mail is None or arrival is None:
            return None
        for back in range(_TRACE_SKEW_SECONDS + 1):
            candidate = content(arrival - timedelta(seconds=back))
            if hashlib.sha256(candidate).hexdigest() == mail.get("sha256"):
                return candidate
        return None

    # ------------------------------------------------------------------ first answers
    def replay(self, key: str, envelope: Envelope) -> QueuedMail | None:
        """The first answer for `key`, if that request queued a mail that still exists."""
        try:
            return self.first_answer(self.mail_id(key), envelope)
        except NotFound:
            return None

    def _stored_answer(self, queued: QueuedMail, envelope: Envelope) -> QueuedMail:
        """A duplicate's first answer; the core's own if the mail finished meanwhile."""
        try:
            return self.first_answer(queued.mail_id, envelope)
        except NotFound:
            return queued

    def first_answer(self, mail_id: str, envelope: Envelope) -> QueuedMail:
        """Rebuild the first answer from the stored mail; other recipients are a conflict.

        The core compares content, sender and the set of destination groups; recipients
        within the same domain are compared here.
        """
        mail, groups = self.storage.get_mail(mail_id)
        if mail is None:
            raise NotFound(mail_id)
        if mail.get("tomb"):
            return self._tombstone_answer(mail_id, mail, envelope)
        stored: dict[str, Recipient] = {r.rid: r for g in groups for r in g.recipients}
        ordered = sorted(stored.values(), key=lambda r: _rid_number(r.rid))
        merged, rids = merge_duplicates(envelope.recipients)  # duplicates were merged
        if [r.address for r in ordered] != [r.address for r in merged]:
            raise Conflict("idempotency key reused with different recipients")
        if mail.get("sender") != envelope.sender:
            raise Conflict("idempotency key reused with a different sender")
        return QueuedMail(
            mail_id=mail_id,
            recipients=tuple(
                (rid, r.address) for rid, r in zip(rids, envelope.recipients, strict=True)
            ),
            groups=tuple(mail.get("groups") or (g.key for g in groups)),
            duplicate=True,
        )

    def _tombstone_answer(
        self, mail_id: str, tomb: Mapping[str, Any], envelope: Envelope
    ) -> QueuedMail:
        """The mail was delivered and cleaned up; its tombstone keeps the content hash
        (checked by the core) and the groups, so recipients are compared by domain."""
        stored = list(tomb.get("groups") or ())
        if {g.partition("#")[0] for g in stored} != {
            group_key_for(r.address) for r in envelope.recipients
        }:
            raise Conflict("idempotency key reused with different recipients")
        _, rids = merge_duplicates(envelope.recipients)  # the ids the first answer gave
        return QueuedMail(
            mail_id=mail_id,
            recipients=tuple(
                (rid, r.address) for rid, r in zip(rids, envelope.recipients, strict=True)
            ),
            groups=tuple(stored),
            duplicate=True,
        )

    # ------------------------------------------------------------------ refusals
    def reject(self, e: InvalidInput, doc: Any, key: str | None, now: datetime, size: int) -> None:
        """One Reject event per refused request; a failure to emit never turns a 4xx into a 5xx."""
        sender, rcpts = preview(doc)
        # a keyed request refused twice produces the same eventId (de-duplicated downstream)
        mail_id = self.mail_id(key) if key else new_mail_id()
        event = QueueEvent(
            event_type="Reject",
            mail=MailInfo(
                message_id=mail_id, source=sender, timestamp=now, destination=rcpts, size=size
            ),
            recipient=e.address if isinstance(e, RecipientSuppressed) else None,
            timestamp=now,
            discriminator=e.code,
            extra={"reason": e.code, "field": e.field},
        )
        if isinstance(e, RecipientSuppressed):  # when (and why) the recipient was suppressed
            event.extra["suppressed_at"] = e.entry.to_json()["added_at"]
        log.info("refused", extra={"error": e.code, "field": e.field})
        try:
            self.emitter.emit([event])
        except Exception:  # the client's answer is the 4xx, whatever this is
            log.exception("could not emit the Reject event", extra={"error": e.code})


def _rid_number(rid: str) -> int:
    return int(rid[1:]) if rid[1:].isdigit() else 0
