"""Ingress: requests and received mail in, queued mails (or refusals) out.

One piece (~900 lines): the HTTP submission, the batch route, uploads and SES receipt
all end in the same sequence (validate, authorise the sender, check suppression, store,
answer) and share its refusals; `request.py`, `ses.py` and `settings.py` hold what is
not part of that sequence.

Ingress emits only `Reject` events (one per refused request, or per refused recipient
of a received mail). `Send` events are not emitted here: the event writer derives them
from the table's stream when the mail's state items appear, so a mail is announced
exactly when it is durable, and a retried request that stores nothing announces nothing.
"""

from __future__ import annotations

import hashlib
import logging
import re
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from mailqueue.core.authz import principal_matches
from mailqueue.core.dsn import Action, DsnRecipient, DsnRequest, build_dsn, dsn_wanted
from mailqueue.core.errors import (
    Conflict,
    InvalidInput,
    NotFound,
    PermanentStorageError,
    TransientStorageError,
)
from mailqueue.core.events import EventEmitter, MailInfo, QueueEvent
from mailqueue.core.jsonbody import parse_body
from mailqueue.core.model import (
    POOL_TAG,
    PRIORITY_TAG,
    Envelope,
    Group,
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
from mailqueue.core.trace import (
    address_literal,
    line_ending,
    principal_tag,
    received_field,
    top_received_by,
)
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
from mailqueue.services.feedback.service import FeedbackService
from mailqueue.services.ingress.request import (
    Submission,
    body_limit,
    check_idempotency_key,
    guard_parse,
    parse_batch,
    parse_submission,
    preview,
    printable,
)
from mailqueue.services.ingress.ses import SesReceipt, is_ses_event, parse_record, screen
from mailqueue.services.ingress.settings import IngressSettings

log = logging.getLogger(__name__)

# HTTP status per error code; anything not listed is 422 (well-formed but refused)
_STATUS = {
    "invalid_json": 400,
    "invalid_type": 400,
    "missing_field": 400,
    "unknown_field": 400,
    "invalid_base64": 400,
    "ambiguous_content": 400,
    "invalid_idempotency_key": 400,
    "forbidden_character": 400,
    "invalid_unicode": 400,
    "json_too_deep": 400,
    "duplicate_field": 400,
    "invalid_request": 400,
    "unauthenticated": 403,
    "null_sender_forbidden": 403,
    "sender_not_allowed": 403,
    "priority_not_allowed": 403,
    "invalid_priority": 400,
    "idempotency_conflict": 409,
    "too_large": 413,
}


# a batch item's idempotency key: the field in place of the single route's header
BATCH_KEY_FIELD = "idempotency_key"

# how far before the stored arrival the first Received: date may lie (see _enqueue_traced)
_TRACE_SKEW_SECONDS = 2


def http_status(code: str) -> int:
    return _STATUS.get(code, 422)


class RawStore(Protocol):
    """Objects ingress reads once and removes (uploads, SES's raw mails): S3 on AWS."""

    def size(self, key: str) -> int | None:
        """The object's size, None when there is no such object."""
        ...

    def read(self, key: str, limit: int) -> bytes | None:
        """At most `limit` + 1 bytes (so the caller sees an overflow); None when gone."""
        ...

    def delete(self, key: str) -> None: ...

    def presign_put(self, key: str, expires: int) -> str: ...


class IngressStorage(Protocol):
    """What ingress needs of the queue core (AwsStorage provides it)."""

    def enqueue(
        self,
        envelope: Envelope,
        content: bytes,
        *,
        idempotency_key: str | None = None,
        not_before: datetime | None = None,
    ) -> QueuedMail: ...

    def get_mail(self, mail_id: str) -> tuple[dict[str, Any] | None, list[Group]]: ...

    def validate(self, envelope: Envelope, content: bytes) -> None: ...


@dataclass(frozen=True, slots=True)
class Answer:
    """An HTTP answer, independent of API Gateway's response format."""

    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)
    error: str | None = None  # the error code of a refusal
    duplicate: bool = False
    batch: tuple[Answer, ...] = ()  # a batch's answer: each mail's own, in order


@dataclass(frozen=True, slots=True)
class SesResult:
    disposition: str  # CONTINUE | STOP_RULE
    accepted: int = 0  # recipients queued
    refused: int = 0  # recipients refused (or all of a refused mail)
    duplicate: bool = False
    feedback: Mapping[str, int] = field(default_factory=dict)  # services/feedback counts

    def to_json(self) -> dict[str, str]:
        return {"disposition": self.disposition}


def _refusal(e: InvalidInput) -> Answer:
    return Answer(http_status(e.code), e.to_json(), error=e.code)


def _error(code: str, message: str) -> dict[str, Any]:
    return {"error": code, "message": message, "field": None}


def _unavailable(code: str, message: str) -> Answer:
    """What the single route answers when storage is unavailable: 503, retry."""
    return Answer(503, _error(code, message), {"Retry-After": "1"}, error=code)


def batch_body(results: Sequence[Answer]) -> dict[str, Any]:
    """A batch's 207 body: per mail, in request order, the status, body and headers the
    single route would have answered; and how many were accepted, refused, unavailable."""
    out: list[dict[str, Any]] = []
    for a in results:
        one: dict[str, Any] = {"status": a.status, "body": a.body}
        if a.headers:
            one["headers"] = a.headers
        out.append(one)
    return {
        "results": out,
        "accepted": sum(1 for a in results if a.status == 202),
        "refused": sum(1 for a in results if 400 <= a.status < 500),
        "failed": sum(1 for a in results if a.status >= 500),
    }


# a HELO name used in our Received: field's `from` (else "unknown")
_HELO_RE = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)(?:\.(?!-)[a-z0-9-]{1,63}(?<!-))*$")


@dataclass(frozen=True, slots=True)
class SmtpSubmission:
    """A mail as the SMTP server took it: the envelope (DSN parameters included), the
    octets after DATA (dot-unstuffed, CRLF), who sent it and how.

    `principal` is the authenticated user's principal (credentials store), None on the
    receiving listener (no AUTH: only the receiving domains, like SES receipt).
    """

    envelope: Envelope
    content: bytes
    principal: str | None
    client_ip: str | None = None
    helo: str = ""
    tls: bool = False


class IngressService:
    def __init__(
        self,
        settings: IngressSettings,
        storage: IngressStorage,
        uploads: RawStore,
        inbound: RawStore,
        emitter: EventEmitter,
        *,
        clock: Callable[[], datetime] = utcnow,
        suppression: SuppressionStore | None = None,
        feedback: FeedbackService | None = None,
    ) -> None:
        self.s = settings
        self.suppression = suppression
        self.feedback = feedback  # reports to the bounce domain (services/feedback)
        self.senders = settings.senders()
        self.dkim = settings.dkim()
        self.storage = storage
        self.uploads = uploads
        self.inbound = inbound
        self.emitter = emitter
        self.clock = clock
        self.pools = settings.pool_config()  # the routing policy (outbound/pools.py)

    @property
    def max_body(self) -> int:
        """The largest request body read at all (413 `too_large` above it)."""
        return body_limit(self.s.max_size, self.s.max_recipients)

    # ------------------------------------------------------------------ keys
    def _key(self, principal: str, key: str) -> str:
        """Idempotency keys are scoped per caller: two callers never share a mail."""
        return f"http\x1f{principal}\x1f{key}"

    def _mail_id(self, full_key: str) -> str:
        return mail_id_for_key(self.s.storage.idempotency_scope, full_key)

    def upload_key(self, principal: str, upload_id: str) -> str:
        """Uploads live under a per-caller folder: one caller cannot send another's upload."""
        tag = hashlib.sha256(principal.encode()).hexdigest()[:20]
        return f"{self.s.upload_prefix}{tag}/{upload_id}"

    # ------------------------------------------------------------------ HTTP
    def create_upload(self, principal: str | None) -> Answer:
        if not principal:
            return _refusal(
                InvalidInput("unauthenticated", "no IAM principal in the request", None)
            )
        upload_id = secrets.token_hex(16)
        url = self.uploads.presign_put(self.upload_key(principal, upload_id), self.s.upload_expires)
        return Answer(
            201,
            {
                "upload_id": upload_id,
                "url": url,
                "method": "PUT",
                "expires_in": self.s.upload_expires,
                "max_size": self.s.max_size,
            },
        )

    def submit(
        self,
        body: bytes | str | None,
        *,
        principal: str | None,
        idempotency_key: str | None,
        client_ip: str | None = None,
    ) -> Answer:
        """POST /v1/messages: 202 only once content, state and trigger are durable."""
        now = self.clock()
        key: str | None = None
        try:
            if not principal:
                raise InvalidInput("unauthenticated", "no IAM principal in the request", None)
            if idempotency_key is not None:
                key = self._key(principal, check_idempotency_key(idempotency_key))
            # parsing and validation: whatever fails in them is a 4xx (guard_parse)
            doc = guard_parse(lambda: parse_body(body, max_body=self.max_body))
        except InvalidInput as e:
            self._reject_request(e, None, key, now, 0)
            return _refusal(e)
        return self._submit_doc(doc, principal, key, "Idempotency-Key", client_ip, now)

    def submit_batch(
        self,
        body: bytes | str | None,
        *,
        principal: str | None,
        client_ip: str | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> Answer:
        """POST /v1/messages/batch: up to `max_batch` mails, each taken exactly as
        `submit` takes one (its `idempotency_key` field in place of the header), with
        one result per mail, in order.

        A problem of the request as a whole (not JSON, no `messages` list, too many, too
        large, no principal) is one 4xx and nothing is queued. Otherwise the answer is
        207 with each mail's own status and body: 202 means that mail is durable, as for
        the single route. A storage failure ends only its own mail (503, retryable, as
        the single route answers); mails not started within `batch_time_budget` are
        answered 503 `not_attempted` without being tried.
        """
        started = monotonic()
        now = self.clock()
        try:
            if not principal:
                raise InvalidInput("unauthenticated", "no IAM principal in the request", None)
            doc = guard_parse(lambda: parse_body(body, max_body=self.s.max_batch_body))
            items = guard_parse(lambda: parse_batch(doc, max_batch=self.s.max_batch))
        except InvalidInput as e:
            self._reject_request(e, None, None, now, len(body or b""))
            return _refusal(e)
        results: list[Answer] = []
        for item in items:
            if monotonic() - started >= self.s.batch_time_budget:
                results.append(_unavailable("not_attempted", "not attempted in time; retry it"))
                continue
            try:
                results.append(self._submit_item(item, principal, client_ip))
            except TransientStorageError as e:
                log.warning("storage unavailable for a mail of a batch", extra={"cause": str(e)})
                results.append(_unavailable("unavailable", "try again"))
            except PermanentStorageError:
                log.exception("storage failure for a mail of a batch")
                results.append(Answer(500, _error("internal", "storage failure"), error="internal"))
        return Answer(207, batch_body(results), batch=tuple(results))

    def _submit_item(self, item: Any, principal: str, client_ip: str | None) -> Answer:
        """One mail of a batch: what `submit` does with a body, the key from its field."""
        now = self.clock()
        key: str | None = None
        try:
            if not isinstance(item, dict):  # what parse_body says of a body that is no object
                raise InvalidInput("invalid_json", "a message must be a JSON object", None)
            doc = dict(item)
            raw_key = doc.pop(BATCH_KEY_FIELD, None)
            if raw_key is not None:
                if not isinstance(raw_key, str):
                    raise InvalidInput(
                        "invalid_idempotency_key", "must be a string", BATCH_KEY_FIELD
                    )
                key = self._key(principal, check_idempotency_key(raw_key, BATCH_KEY_FIELD))
        except InvalidInput as e:
            self._reject_request(e, item, key, now, 0)
            return _refusal(e)
        return self._submit_doc(doc, principal, key, BATCH_KEY_FIELD, client_ip, now)

    def _submit_doc(
        self,
        doc: dict[str, Any],
        principal: str,
        key: str | None,
        key_field: str,
        client_ip: str | None,
        now: datetime,
    ) -> Answer:
        """A parsed submission: validated, then queued; 202 once durable, else a 4xx."""
        try:
            sub = guard_parse(
                lambda: parse_submission(
                    doc,
                    max_size=self.s.max_size,
                    now=now,
                    max_delay_seconds=self.s.max_delay_seconds,
                    max_recipients=self.s.max_recipients,
                )
            )
        except InvalidInput as e:
            self._reject_request(e, doc, key, now, 0)
            return _refusal(e)

        def trace(env: Envelope) -> Callable[[datetime], bytes]:
            return self._http_trace(principal, client_ip, env, key)

        return self._submit_sub(sub, doc, principal, key, key_field, now, trace)

    def _submit_sub(
        self,
        sub: Submission,
        doc: dict[str, Any],
        principal: str,
        key: str | None,
        key_field: str,
        now: datetime,
        trace: Callable[[Envelope], Callable[[datetime], bytes]],
    ) -> Answer:
        """The one sequence every submission (HTTP, batch item, SMTP) ends in: envelope
        and sender policy, suppression, priority and tags, content rules, enqueue."""
        keyed = key is not None
        size = 0
        try:
            guard_parse(lambda: self._check_envelope(sub.envelope, principal))
            priority = self._priority(sub.priority, principal)
            sub = replace(sub, envelope=self._tagged(sub.envelope, principal, priority))
            bounced = self._check_suppressed(sub.envelope, now)  # tagged: bulk opt-outs
            original = sub.envelope
            if bounced:  # SuppressionPolicy=bounce: the others go on, these bounce below
                kept = tuple(r for i, r in enumerate(original.recipients) if i not in bounced)
                sub = replace(sub, envelope=replace(original, recipients=kept))
            if sub.upload_id is not None:
                # an upload is sent once: its id is the idempotency key unless one was given
                key = key or self._key(principal, f"upload:{sub.upload_id}")
                content = self._read_upload(principal, sub.upload_id, key, sub)
                if isinstance(content, Answer):
                    return content  # the upload was consumed by an earlier, identical request
            else:
                assert sub.content is not None
                content = sub.content
            size = len(content)
            guard_parse(lambda: self._check_dkim(sub.envelope, content))
            # every rule enqueue applies, before its first write (the S3 put)
            guard_parse(lambda: self.storage.validate(original, content))
            if sub.envelope.recipients:
                queued = self._enqueue_traced(
                    sub.envelope, content, trace(sub.envelope), key, sub.not_before
                )
                if queued.duplicate:
                    queued = self._stored_answer(queued, sub.envelope)
            else:  # every recipient is suppressed: nothing to queue but their bounces
                queued = QueuedMail(self._mail_id(key) if key else new_mail_id(), (), ())
            notices = self._bounce_suppressed(original, bounced, content, queued.mail_id, now, key)
        except InvalidInput as e:
            self._reject_request(e, doc, key, now, size)
            return _refusal(e)
        except Conflict as e:
            field = key_field if keyed else "upload_id"
            err = InvalidInput("idempotency_conflict", str(e), field)
            self._reject_request(err, doc, key, now, size)
            return _refusal(err)
        if sub.upload_id is not None:
            self.uploads.delete(self.upload_key(principal, sub.upload_id))
        answer = self._accepted(queued)
        if notices:
            answer.body["suppressed"] = notices
        return answer

    # ------------------------------------------------------------------ SMTP
    def smtp_check_sender(self, sender: str, *, principal: str | None, smtputf8: bool) -> None:
        """MAIL FROM, checked early with the API's rules (address syntax, then the sender
        policy of the principal; none on the receiving listener, `principal` None), so
        the client hears a refusal at MAIL. A refusal is one Reject event, as on the API."""
        try:
            guard_parse(lambda: validate_sender(sender, smtputf8=smtputf8))
            if principal is not None:
                self._check_sender_policy(sender, principal)
        except InvalidInput as e:
            self._reject_request(e, {"sender": sender}, None, self.clock(), 0)
            raise

    def smtp_check_recipient(
        self, address: str, *, sender: str, principal: str | None, smtputf8: bool, index: int
    ) -> bool:
        """RCPT TO, checked with the API's rules: syntax; on the receiving listener the
        receiving domains (no open relay) or a bounce domain; on submission the
        suppression list (policy "refuse": the recipient is refused here, the others
        stay). True: a report for the feedback service (receiving listener only; a
        bounce-domain address on submission is ordinary mail, as before)."""
        try:
            return self._check_smtp_recipient(address, sender, principal, smtputf8, index)
        except InvalidInput as e:
            doc = {"sender": sender, "recipients": [address]}
            self._reject_request(e, doc, None, self.clock(), 0)
            raise

    def _check_smtp_recipient(
        self, address: str, sender: str, principal: str | None, smtputf8: bool, index: int
    ) -> bool:
        field = f"recipients[{index}].address"
        guard_parse(lambda: validate_address(address, field, smtputf8=smtputf8))
        if principal is None:
            if self.feedback is not None and self.feedback.is_feedback(address):
                return True  # any local part, as the BounceDomains receipt rule takes it
            domain = address.rpartition("@")[2].lower().rstrip(".")
            if domain not in self.s.receiving_domains:
                raise InvalidInput("relay_denied", "not a receiving domain", field)
        elif self.suppression is not None and self.s.suppression == "refuse" and sender:
            found = suppressed(self.suppression, [address], self.clock().timestamp())
            entry = found.get(normalise(address))
            if entry is not None:
                raise RecipientSuppressed(address, entry, index)
        return False

    def submit_smtp(self, mail: SmtpSubmission) -> Answer:
        """A mail at the end of DATA: the API's sequence (`_submit_sub`) for a principal's
        submission, the receipt rules for the receiving listener. 202 = durable (the
        SMTP server answers 250 only then); storage errors raise, as on the API."""
        now = self.clock()
        env = mail.envelope
        doc: dict[str, Any] = {
            "sender": env.sender,
            "recipients": [r.address for r in env.recipients],
        }
        if mail.principal is not None:
            sub = Submission(envelope=env, content=mail.content, upload_id=None, not_before=None)

            def trace(e: Envelope) -> Callable[[datetime], bytes]:
                return self._smtp_trace(mail, e)

            return self._submit_sub(sub, doc, mail.principal, None, "", now, trace)
        fb = self.feedback
        if fb is not None and any(fb.is_feedback(r.address) for r in env.recipients):
            return self._receive_smtp_feedback(fb, mail, doc, now)
        env = replace(env, tags=((PRIORITY_TAG, self.s.ses_priority),))
        try:
            for i, r in enumerate(env.recipients):
                self._check_smtp_recipient(r.address, env.sender, None, env.smtputf8, i)
            guard_parse(lambda: validate_sender(env.sender, smtputf8=env.smtputf8))
            guard_parse(lambda: self.storage.validate(env, mail.content))
            queued = self._enqueue_traced(env, mail.content, self._smtp_trace(mail, env), None)
        except InvalidInput as e:
            self._reject_request(e, doc, None, now, len(mail.content))
            return _refusal(e)
        return self._accepted(queued)

    def _receive_smtp_feedback(
        self, fb: FeedbackService, mail: SmtpSubmission, doc: dict[str, Any], now: datetime
    ) -> Answer:
        """A report to the bounce domain on the receiving listener: the feedback service's
        `receive`, the call SES receipt makes (`_receive_feedback`), on the octets after
        DATA. 202 only once its events and suppression entries are written: a failure of
        either raises (the client hears 451 and sends again; the report id is the digest
        of the octets, so the retry's events carry the same ids). A forged VERP or an
        auto-reply is taken and dropped (202, nothing written), as SES receipt does.

        Every recipient must be on a bounce domain: the server refuses the other kind at
        RCPT (452 4.5.3, `report_mixed`), so a mixed envelope here is refused whole."""
        env = mail.envelope
        try:
            if not all(fb.is_feedback(r.address) for r in env.recipients):
                raise InvalidInput(
                    "report_mixed", "a report to the bounce domain goes alone", "recipients"
                )
            for i, r in enumerate(env.recipients):
                self._check_smtp_recipient(r.address, env.sender, None, env.smtputf8, i)
            guard_parse(lambda: validate_sender(env.sender, smtputf8=env.smtputf8))
        except InvalidInput as e:
            self._reject_request(e, doc, None, now, len(mail.content))
            return _refusal(e)
        report_id = "smtp-" + hashlib.sha256(mail.content).hexdigest()[:32]
        got = fb.receive([r.address for r in env.recipients], mail.content, report_id)
        if got.counts.get("suppression_failed"):
            # SES receipt lets this pass (its retry would not come); an SMTP client keeps
            # the report and sends it again when we say 451, so the entry is not lost
            raise TransientStorageError("suppression entries not written")
        return Answer(202, {"report_id": report_id, "feedback": dict(got.counts)})

    def _smtp_trace(self, mail: SmtpSubmission, env: Envelope) -> Callable[[datetime], bytes]:
        """The Received: field of an SMTP mail. A submission (AUTH) is private like the
        API's (no client address, the principal's digest) unless trace_private is off;
        a received mail names the client's address, as every MTA does."""
        private = mail.principal is not None and self.s.trace_private
        literal = None if private or not mail.client_ip else address_literal(mail.client_ip)
        helo = mail.helo.lower().rstrip(".")
        from_domain = helo if _HELO_RE.match(helo) and len(helo) <= 253 else "unknown"
        if private:
            from_domain = "smtp-submission"
        who = None
        if mail.principal is not None:
            who = "principal " + (
                principal_tag(mail.principal) if self.s.trace_private else mail.principal[:128]
            )
        protocol = ("ESMTPSA" if mail.principal is not None else "ESMTP") + (
            " TLS" if mail.tls else ""
        )
        rcpts = [r.address for r in env.recipients]

        def build(date: datetime) -> bytes:
            return received_field(
                by=self.s.hostname,
                date=date,
                from_domain=from_domain,
                tcp_info=literal,
                from_comment=who,
                by_comment=f"mailqueue smtpd {protocol}",
                recipients=rcpts,
            )

        return build

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
        `mailqueue:priority` (the delivery path, read back by the storage)."""
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

    # ------------------------------------------------------------------ trace
    def _http_trace(
        self, principal: str, client_ip: str | None, envelope: Envelope, key: str | None
    ) -> Callable[[datetime], bytes]:
        """The Received: field of an HTTP submission, as a function of its date.

        The queue id is known here only for keyed submissions (the id is derived from the
        key); an unkeyed mail's id is drawn inside `enqueue`, so its field has no ``id``.
        """
        literal = None if self.s.trace_private or not client_ip else address_literal(client_ip)
        who = principal_tag(principal) if self.s.trace_private else principal
        if len(who) > 128:
            who = principal_tag(principal)
        mail_id = self._mail_id(key) if key else None
        rcpts = [r.address for r in envelope.recipients]

        def build(date: datetime) -> bytes:
            return received_field(
                by=self.s.hostname,
                date=date,
                from_domain="http-api",
                tcp_info=literal,
                from_comment=f"principal {who}",
                by_comment="mailqueue HTTPS API",
                queue_id=mail_id,
                recipients=rcpts,
            )

        return build

    def _enqueue_traced(
        self,
        envelope: Envelope,
        body: bytes,
        trace: Callable[[datetime], bytes],
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

    def _first_content(self, key: str, content: Callable[[datetime], bytes]) -> bytes | None:
        try:
            mail, _ = self.storage.get_mail(self._mail_id(key))
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

    def _accepted(self, queued: QueuedMail) -> Answer:
        body = queued.to_json()
        body.pop("duplicate", None)
        headers = {"Idempotent-Replayed": "true"} if queued.duplicate else {}
        log.info(
            "queued",
            extra={
                "mail_id": queued.mail_id,
                "groups": len(queued.groups),
                "recipients": len(queued.recipients),
                "duplicate": queued.duplicate,
            },
        )
        return Answer(202, body, headers, duplicate=queued.duplicate)

    def _check_envelope(self, env: Envelope, principal: str) -> None:
        """Syntax of the addresses (the core's rules), then who may send what."""
        validate_sender(env.sender, smtputf8=env.smtputf8)
        if len(env.recipients) > self.s.max_recipients:
            raise InvalidInput(
                "too_many_recipients", f"at most {self.s.max_recipients} recipients", "recipients"
            )
        for i, r in enumerate(env.recipients):
            validate_address(r.address, f"recipients[{i}].address", smtputf8=env.smtputf8)
        self._check_sender_policy(env.sender, principal)

    def _check_sender_policy(self, sender: str, principal: str) -> None:
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

    def _read_upload(
        self, principal: str, upload_id: str, key: str, sub: Submission
    ) -> bytes | Answer:
        obj = self.upload_key(principal, upload_id)
        size = self.uploads.size(obj)
        if size is None:
            replay = self._replay(key, sub.envelope)
            if replay is not None:
                return replay
            raise InvalidInput("unknown_upload", "no such upload (or it expired)", "upload_id")
        if size > self.s.max_size:
            raise InvalidInput("too_large", f"upload exceeds {self.s.max_size} octets", "upload_id")
        data = self.uploads.read(obj, self.s.max_size)
        if data is None:  # removed between HEAD and GET: a concurrent identical request
            replay = self._replay(key, sub.envelope)
            if replay is not None:
                return replay
            raise InvalidInput("unknown_upload", "no such upload (or it expired)", "upload_id")
        if len(data) > self.s.max_size:
            raise InvalidInput("too_large", f"upload exceeds {self.s.max_size} octets", "upload_id")
        return data

    def _replay(self, key: str, envelope: Envelope) -> Answer | None:
        """The first answer for `key`, if that request queued a mail that still exists."""
        mail_id = self._mail_id(key)
        try:
            queued = self._first_answer(mail_id, envelope)
        except NotFound:
            return None
        return self._accepted(queued)

    def _stored_answer(self, queued: QueuedMail, envelope: Envelope) -> QueuedMail:
        """A duplicate's first answer; the core's own if the mail finished meanwhile."""
        try:
            return self._first_answer(queued.mail_id, envelope)
        except NotFound:
            return queued

    def _first_answer(self, mail_id: str, envelope: Envelope) -> QueuedMail:
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

    def _reject_request(
        self, e: InvalidInput, doc: Any, key: str | None, now: datetime, size: int
    ) -> None:
        """One Reject event per refused request; a failure to emit never turns a 4xx into a 5xx."""
        sender, rcpts = preview(doc)
        # a keyed request refused twice produces the same eventId (de-duplicated downstream)
        mail_id = self._mail_id(key) if key else new_mail_id()
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

    # ------------------------------------------------------------------ SES
    def receive_ses(self, event: Mapping[str, Any]) -> SesResult:
        """An SES receipt (Lambda action). Refusals return STOP_RULE; storage errors raise,
        so Lambda retries the event, and the SES messageId keeps the retry idempotent."""
        if not is_ses_event(event):
            raise ValueError("not an SES receipt event")
        results = [self._receive_record(rec) for rec in event["Records"]]
        ok = [r for r in results if r.disposition == "CONTINUE"]
        feedback: dict[str, int] = {}
        for res in results:
            for name, n in res.feedback.items():
                feedback[name] = feedback.get(name, 0) + n
        return SesResult(
            disposition="CONTINUE" if ok else "STOP_RULE",
            accepted=sum(r.accepted for r in results),
            refused=sum(r.refused for r in results),
            duplicate=any(r.duplicate for r in results),
            feedback=feedback,
        )

    def _receive_record(self, record: Mapping[str, Any]) -> SesResult:
        try:
            r = parse_record(record)
        except InvalidInput as e:
            # SES never sends this; nothing to retry, and nothing we could name in an event
            log.error("malformed SES record", extra={"error": e.code, "field": e.field})
            return SesResult("STOP_RULE")
        key = f"ses\x1f{r.message_id}"
        mail_id = self._mail_id(key)
        raw_key = f"{self.s.ses_prefix}{r.message_id}"
        fb = self.feedback
        reports = [a for a in r.recipients if fb is not None and fb.is_feedback(a)]
        if fb is not None and reports:  # not mail to queue: a receiver's report
            return self._receive_feedback(fb, r, reports, raw_key, record)
        sc = screen(
            r,
            receiving_domains=self.s.receiving_domains,
            spam_policy=self.s.spam_verdict,
            virus_policy=self.s.virus_verdict,
        )
        if sc.reason is not None:
            return self._refuse_mail(r, mail_id, raw_key, sc.reason)
        if sc.refused:
            self._emit_ses(r, mail_id, [(rcpt, e) for rcpt, e in sc.refused])
        if not sc.accepted:
            self._drop_raw(raw_key)
            return SesResult("STOP_RULE", refused=len(sc.refused))
        content = self.inbound.read(raw_key, self.s.max_size)
        envelope = Envelope(
            sender=r.source,
            recipients=tuple(Recipient(rid="", address=a) for a in sc.accepted),
            smtputf8=r.smtputf8,
            tags=((PRIORITY_TAG, self.s.ses_priority),),  # IngressSettings.ses_priority
        )
        if content is None:
            try:
                self._first_answer(mail_id, envelope)
            except NotFound:
                raise NotFound(f"SES raw mail {raw_key} is missing") from None
            return SesResult("CONTINUE", len(sc.accepted), len(sc.refused), duplicate=True)
        if len(content) > self.s.max_size:
            return self._refuse_mail(
                r, mail_id, raw_key, InvalidInput("too_large", "mail exceeds the size limit", None)
            )
        try:
            queued = self._enqueue_traced(
                envelope, content, self._ses_trace(r, mail_id, content, sc.accepted), key
            )
        except InvalidInput as e:
            return self._refuse_mail(r, mail_id, raw_key, e, size=len(content))
        self._drop_raw(raw_key)
        log.info(
            "received",
            extra={
                "mail_id": queued.mail_id,
                "recipients": len(sc.accepted),
                "refused": len(sc.refused),
                "duplicate": queued.duplicate,
            },
        )
        return SesResult("CONTINUE", len(sc.accepted), len(sc.refused), queued.duplicate)

    def _receive_feedback(
        self,
        fb: FeedbackService,
        r: SesReceipt,
        reports: list[str],
        raw_key: str,
        record: Mapping[str, Any],
    ) -> SesResult:
        """Reports on the bounce domain go to the feedback service; the other recipients
        of the same mail (rare) are received as usual, then the raw object goes."""
        content = self.inbound.read(raw_key, self.s.max_size)
        if content is None:  # a retry after the raw object was dropped: already done
            return SesResult("STOP_RULE", duplicate=True)
        got = fb.receive(reports, content, r.message_id)
        rest = [a for a in r.recipients if a not in reports]
        if rest:
            ses = dict(record["ses"])
            ses["receipt"] = {**ses["receipt"], "recipients": rest}
            res = self._receive_record({**record, "ses": ses})
            return replace(res, feedback=dict(got.counts))
        self._drop_raw(raw_key)
        return SesResult("STOP_RULE", feedback=dict(got.counts))

    def _ses_trace(
        self, r: SesReceipt, mail_id: str, raw: bytes, accepted: Sequence[str]
    ) -> Callable[[datetime], bytes]:
        """The Received: field of an SES receipt. Its date is SES's receipt time, the same
        for every retry of the event, so the stored bytes are too. `from` is the host SES
        names as `by` in its own Received: field (the hop that handed the mail to us)."""
        try:
            received = from_iso(r.timestamp) if r.timestamp else None
        except ValueError:
            received = None
        if received is not None and received.tzinfo is None:
            received = received.replace(tzinfo=UTC)
        source = top_received_by(raw) or "amazonses.com"

        def build(date: datetime) -> bytes:
            return received_field(
                by=self.s.hostname,
                date=received or date,
                from_domain=source,
                by_comment="mailqueue SES receipt",
                queue_id=mail_id,
                recipients=accepted,
            )

        return build

    def _refuse_mail(
        self, r: SesReceipt, mail_id: str, raw_key: str, e: InvalidInput, size: int = 0
    ) -> SesResult:
        self._emit_ses(r, mail_id, [(None, e)], size)
        self._drop_raw(raw_key)
        return SesResult("STOP_RULE", refused=len(r.recipients))

    def _emit_ses(
        self,
        r: SesReceipt,
        mail_id: str,
        refusals: Sequence[tuple[str | None, InvalidInput]],
        size: int = 0,
    ) -> None:
        """Emitted before anything is deleted; an emit failure raises (the retry re-emits
        with the same eventIds)."""
        now = self.clock()
        info = MailInfo(  # printable: the strings come from the sending MTA
            message_id=mail_id,
            source=printable(r.source),
            timestamp=now,
            destination=tuple(printable(a) for a in r.recipients[:50]),
            size=size,
        )
        self.emitter.emit(
            QueueEvent(
                event_type="Reject",
                mail=info,
                recipient=None if rcpt is None else printable(rcpt),
                timestamp=now,
                discriminator=e.code,
                extra={"reason": e.code, "field": e.field},
            )
            for rcpt, e in refusals
        )
        log.info("refused received mail", extra={"errors": sorted({e.code for _, e in refusals})})

    def _drop_raw(self, raw_key: str) -> None:
        if self.s.ses_delete_raw:
            self.inbound.delete(raw_key)


def _rid_number(rid: str) -> int:
    return int(rid[1:]) if rid[1:].isdigit() else 0
