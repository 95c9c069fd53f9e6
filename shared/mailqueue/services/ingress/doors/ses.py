"""The SES receipt door: a receipt rule's Lambda action, after its S3 action stored the
raw mail under ``<prefix><mail.messageId>``.

The event carries no body. The envelope comes from the receipt, never from the headers:
``receipt.recipients`` are the RCPT TO addresses this rule matched, ``mail.source`` is
the MAIL FROM. Parsing and screening (verdicts, the sender's syntax, no open relay) are
pure functions; a screened mail goes to the pipeline as a received mail, keyed by SES's
messageId, and reports to the bounce domain go to the feedback service.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from mailqueue.core.errors import Conflict, InvalidInput, NotFound
from mailqueue.core.events import EventEmitter, MailInfo, QueueEvent
from mailqueue.core.model import PRIORITY_TAG, Envelope, Recipient, from_iso
from mailqueue.core.trace import received_field, top_received_by
from mailqueue.core.validate import check_text, validate_address, validate_sender
from mailqueue.services.feedback.service import FeedbackService
from mailqueue.services.ingress.pipeline import Acceptance, Refused, Stamp, Submission
from mailqueue.services.ingress.ports import RawStore
from mailqueue.services.ingress.request import printable
from mailqueue.services.ingress.settings import IngressSettings

log = logging.getLogger(__name__)

_MESSAGE_ID_RE = re.compile(r"^[A-Za-z0-9._=-]{1,200}$")


@dataclass(frozen=True, slots=True)
class SesReceipt:
    message_id: str
    source: str  # "" for the null sender
    recipients: tuple[str, ...]
    verdicts: dict[str, str]  # spam, virus, spf, dkim, dmarc → PASS | FAIL | GRAY | ...
    invocation_type: str  # Event | RequestResponse
    timestamp: str

    @property
    def smtputf8(self) -> bool:
        return not all(a.isascii() for a in (self.source, *self.recipients))


def is_ses_event(event: Mapping[str, Any]) -> bool:
    records = event.get("Records")
    return (
        isinstance(records, list)
        and bool(records)
        and isinstance(records[0], dict)
        and records[0].get("eventSource") == "aws:ses"
    )


def parse_record(record: Mapping[str, Any]) -> SesReceipt:
    """Read what we use of one record; a malformed one is an InvalidInput (not retried)."""
    ses = record.get("ses")
    if not isinstance(ses, dict):
        raise InvalidInput("invalid_event", "record without 'ses'", "ses")
    mail, receipt = ses.get("mail"), ses.get("receipt")
    if not isinstance(mail, dict) or not isinstance(receipt, dict):
        raise InvalidInput("invalid_event", "record without mail/receipt", "ses")
    message_id = mail.get("messageId")
    if not isinstance(message_id, str) or not _MESSAGE_ID_RE.match(message_id):
        # the id becomes part of an S3 key we read and delete
        raise InvalidInput("invalid_event", "bad mail.messageId", "mail.messageId")
    source = mail.get("source", "")
    if not isinstance(source, str):
        raise InvalidInput("invalid_event", "bad mail.source", "mail.source")
    if source == "<>":
        source = ""
    rcpts = receipt.get("recipients")
    if not isinstance(rcpts, list) or not all(isinstance(r, str) for r in rcpts):
        raise InvalidInput("invalid_event", "bad receipt.recipients", "receipt.recipients")
    verdicts: dict[str, str] = {}
    for name in ("spam", "virus", "spf", "dkim", "dmarc"):
        v = receipt.get(f"{name}Verdict")
        if isinstance(v, dict) and isinstance(v.get("status"), str):
            verdicts[name] = v["status"].upper()
    action = receipt.get("action")
    invocation = action.get("invocationType") if isinstance(action, dict) else None
    return SesReceipt(
        message_id=message_id,
        source=source,
        recipients=tuple(dict.fromkeys(rcpts)),  # de-duplicated, order kept
        verdicts=verdicts,
        invocation_type=invocation if isinstance(invocation, str) else "Event",
        timestamp=str(mail.get("timestamp", "")),
    )


@dataclass(frozen=True, slots=True)
class Screening:
    """What to do with a received mail: `reason` set = refuse it whole."""

    accepted: tuple[str, ...]
    refused: tuple[tuple[str, InvalidInput], ...]  # per recipient
    reason: InvalidInput | None = None


def screen(
    r: SesReceipt,
    *,
    receiving_domains: tuple[str, ...],
    spam_policy: str,
    virus_policy: str,
) -> Screening:
    """Verdicts, sender syntax and recipient domains: the no-open-relay rule lives here."""
    if virus_policy == "reject" and r.verdicts.get("virus") == "FAIL":
        return Screening((), (), InvalidInput("virus", "virus verdict FAIL", "virusVerdict"))
    if spam_policy == "reject" and r.verdicts.get("spam") == "FAIL":
        return Screening((), (), InvalidInput("spam", "spam verdict FAIL", "spamVerdict"))
    if not r.recipients:
        err = InvalidInput("no_recipients", "no recipients", "receipt.recipients")
        return Screening((), (), err)
    try:
        check_text(r.source, "mail.source")  # encodable first: the checks below encode
        validate_sender(r.source, "mail.source", smtputf8=r.smtputf8)
    except InvalidInput as e:
        return Screening((), (), e)
    accepted: list[str] = []
    refused: list[tuple[str, InvalidInput]] = []
    for i, rcpt in enumerate(r.recipients):
        field = f"receipt.recipients[{i}]"
        try:
            check_text(rcpt, field)
            validate_address(rcpt, field, smtputf8=r.smtputf8)
        except InvalidInput as e:
            refused.append((rcpt, e))
            continue
        domain = rcpt.rpartition("@")[2].lower().rstrip(".")
        if domain not in receiving_domains:
            refused.append((rcpt, InvalidInput("relay_denied", "not a receiving domain", field)))
            continue
        accepted.append(rcpt)
    return Screening(tuple(accepted), tuple(refused))


# ---------------------------------------------------------------------- the door
@dataclass(frozen=True, slots=True)
class SesResult:
    disposition: str  # CONTINUE | STOP_RULE
    accepted: int = 0  # recipients queued
    refused: int = 0  # recipients refused (or all of a refused mail)
    duplicate: bool = False
    feedback: Mapping[str, int] = field(default_factory=dict)  # services/feedback counts

    def to_json(self) -> dict[str, str]:
        return {"disposition": self.disposition}


class SesDoor:
    def __init__(
        self,
        settings: IngressSettings,
        acceptance: Acceptance,
        inbound: RawStore,
        emitter: EventEmitter,
        clock: Callable[[], datetime],
        feedback: FeedbackService | None = None,
    ) -> None:
        self.s = settings
        self.acceptance = acceptance
        self.inbound = inbound
        self.emitter = emitter
        self.clock = clock
        self.feedback = feedback  # reports to the bounce domain (services/feedback)

    def receive(self, event: Mapping[str, Any]) -> SesResult:
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
        mail_id = self.acceptance.mail_id(key)
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
            self._emit(r, mail_id, [(rcpt, e) for rcpt, e in sc.refused])
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
                self.acceptance.first_answer(mail_id, envelope)
            except NotFound:
                raise NotFound(f"SES raw mail {raw_key} is missing") from None
            return SesResult("CONTINUE", len(sc.accepted), len(sc.refused), duplicate=True)
        if len(content) > self.s.max_size:
            return self._refuse_mail(
                r, mail_id, raw_key, InvalidInput("too_large", "mail exceeds the size limit", None)
            )
        stamp = self._trace(r, mail_id, content, sc.accepted)
        sub = Submission(envelope, content, lambda _: stamp, key=key)
        try:
            queued = self.acceptance.accept(sub, self.clock()).queued
        except Refused as e:
            if isinstance(e.cause, Conflict):  # not the sender's doing: Lambda retries
                raise e.cause from None
            return self._refuse_mail(r, mail_id, raw_key, e.cause, size=len(content))
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

    def _trace(self, r: SesReceipt, mail_id: str, raw: bytes, accepted: Sequence[str]) -> Stamp:
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
        self._emit(r, mail_id, [(None, e)], size)
        self._drop_raw(raw_key)
        return SesResult("STOP_RULE", refused=len(r.recipients))

    def _emit(
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
