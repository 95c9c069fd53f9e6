"""Reports received on the bounce domain: late bounces and complaints → events and the
suppression list.

Why a service of its own: a receiver's report is not mail to queue. It is read once
(parse.py), tied to the mail by its VERP envelope recipient (core/verp.py; a bad MAC is a
forgery: dropped and counted), and becomes SES-shaped events (`Bounce` for a late
failure, `Complaint` for an ARF report) written through the outbox emitter, since they
change no queue state: a finished mail keeps its events, the late ones are appended. A
late hard bounce and every complaint put the recipient on the suppression list with the
reason. Auto-replies (RFC 3834), delay reports and unreadable mail are counted, nothing
else. Retries of the same SES receipt produce the same event ids (the discriminator is
the receipt's message id), so downstream de-duplication holds.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from email.utils import getaddresses
from typing import Any, Protocol

from mailqueue.core.errors import InvalidInput, MailqueueError, NotFound
from mailqueue.core.events import EventEmitter, MailInfo, QueueEvent
from mailqueue.core.model import Group, Result, utcnow
from mailqueue.core.verp import Decoded, ForgedReturnPath, KeyRing, decode
from mailqueue.outbound.suppression import MAX_REASON, Entry, SuppressionStore, normalise
from mailqueue.services.feedback.parse import Failure, Report, parse

log = logging.getLogger(__name__)

DEFAULT_TTL_DAYS = 365
SES_FEEDBACK_TYPES = ("abuse", "auth-failure", "fraud", "not-spam", "other", "virus")


class MailReader(Protocol):
    """The queue's view of a mail, if it is still there (AwsStorage.get_mail)."""

    def get_mail(self, mail_id: str) -> tuple[dict[str, Any] | None, list[Group]]: ...


@dataclass(frozen=True, slots=True)
class FeedbackSettings:
    bounce_domains: frozenset[str]
    suppression_ttl_days: int = DEFAULT_TTL_DAYS
    hostname: str = "mailqueue.invalid"


def bounce_class(f: Failure) -> tuple[str, str]:
    """SES's (bounceType, bounceSubType) for a late failure: Permanent only when the
    address is dead (the verdict that suppresses it), Transient otherwise."""
    if f.hard:
        return ("Permanent", "NoEmail" if f.status.startswith("5.1.") else "General")
    text = f.diagnostic.lower()
    if f.status in ("5.2.2", "4.2.2") or "full" in text or "quota" in text:
        return ("Transient", "MailboxFull")
    if f.status in ("5.3.4", "5.2.3") or "too large" in text or "size" in text:
        return ("Transient", "MessageTooLarge")
    if f.status.startswith(("5.7.", "5.6.")) or "spam" in text or "content" in text:
        return ("Transient", "ContentRejected")
    return ("Transient", "General")


def reply_text(code: int, diagnostic: str) -> str:
    """The reply's text without its code (`550 5.1.1 unknown` -> `5.1.1 unknown`): the
    event writes code and text together, so a code left in the text would repeat."""
    if code:
        return re.sub(rf"^{code}[ -]", "", diagnostic.strip(), count=1)
    return diagnostic


def dsn_fields(f: Failure) -> dict[str, str]:
    """SES's bounce fields from the receiver's DSN as sent (core/events.py writes them in
    place of the queue's own): Diagnostic-Code, Reporting-MTA, Remote-MTA's IP."""
    out = {
        "diagnosticCode": f.diagnostic_code,
        "reportingMTA": f.reporting_mta,
        "remoteMtaIp": f.remote_mta_ip,
    }
    return {k: v for k, v in out.items() if v}


@dataclass
class Outcome:
    """What one received report came to (counters for metrics and tests)."""

    counts: Counter[str]
    events: list[QueueEvent]
    suppressed: list[Entry]


class FeedbackService:
    def __init__(
        self,
        settings: FeedbackSettings,
        keys: Callable[[], KeyRing],
        mails: MailReader,
        emitter: EventEmitter,
        *,
        suppression: SuppressionStore | None = None,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.s = settings
        self.keys = keys
        self.mails = mails
        self.emitter = emitter
        self.suppression = suppression
        self.clock = clock

    def is_feedback(self, recipient: str) -> bool:
        return recipient.rpartition("@")[2].lower().rstrip(".") in self.s.bounce_domains

    def receive(self, recipients: Sequence[str], raw: bytes, report_id: str) -> Outcome:
        """One received mail addressed to bounce-domain recipients (the envelope's, from
        SES's receipt). Events are emitted before the suppression entries are written;
        an emit failure raises (SES's retry re-emits with the same ids)."""
        out = Outcome(Counter(), [], [])
        ring = self.keys()
        targets: list[tuple[str, Decoded]] = []
        for rcpt in recipients:
            try:
                d = decode(ring, rcpt)
            except ForgedReturnPath:
                out.counts["forged"] += 1
                continue
            if d is None:
                out.counts["unidentified"] += 1
                continue
            targets.append((rcpt, d))
        if not targets:
            self._log(out)
            return out
        report = parse(raw)
        for _, d in targets:
            self._one(d, report, report_id, out)
        if out.events:
            self.emitter.emit(out.events)
        if out.suppressed and self.suppression is not None:
            try:
                self.suppression.put_many(out.suppressed)
            except MailqueueError:
                # the events are written; the entry is lost, never the event
                log.warning(
                    "could not add to the suppression list", extra={"n": len(out.suppressed)}
                )
                out.counts["suppression_failed"] += len(out.suppressed)
        self._log(out)
        return out

    def _log(self, out: Outcome) -> None:
        log.info("feedback received", extra={"counts": dict(out.counts)})  # no addresses

    # ------------------------------------------------------------------ one mail
    def _one(self, d: Decoded, report: Report, report_id: str, out: Outcome) -> None:
        try:
            mail, groups = self.mails.get_mail(d.mail_id)
        except NotFound:
            mail, groups = None, []
        known = {r.rid: r.address for g in groups for r in g.recipients}
        info = self._info(d.mail_id, mail, groups, report)
        now = self.clock()
        feedback = {"report": report_id, "late": True}
        if report.kind == "autoreply":
            out.counts["autoreply"] += 1
            return
        if report.kind == "complaint" and report.complaint is not None:
            c = report.complaint
            rcpts = self._recipients(d, known, list(c.recipients))
            if not rcpts:
                out.counts["unattributed"] += 1
                return
            for address in rcpts:
                out.counts["complaint"] += 1
                out.events.append(
                    QueueEvent(
                        "Complaint",
                        info,
                        address,
                        now,
                        discriminator=f"feedback:{report_id}",
                        extra={
                            # SES's values; an ARF type it does not list (opt-out) is other
                            "feedback_type": c.feedback_type
                            if c.feedback_type in SES_FEEDBACK_TYPES
                            else "other",
                            "user_agent": c.user_agent[:200],
                            "arrival_date": c.arrival_date[:100],
                            "feedback": feedback,
                        },
                    )
                )
                self._suppress(out, address, f"complaint: {c.feedback_type}", "", d.mail_id, now)
            return
        if report.kind == "delay":  # delayed, not failed: counted, no event (operations.md)
            out.counts["delayed"] += 1
            return
        if report.kind != "bounce":
            out.counts["unparsed"] += 1
            return
        failures = self._failures(d, known, report.failures)
        if not failures:
            out.counts["unattributed"] += 1
            return
        for address, f in failures:
            if f.action == "delayed":
                out.counts["delayed"] += 1
                continue
            btype, bsub = bounce_class(f)
            out.counts["bounce_hard" if f.hard else "bounce_soft"] += 1
            code = f.reply_code if 200 <= f.reply_code <= 599 else 0
            result = Result(
                code,
                f.status if f.status[:1] in ("4", "5") else ("5.0.0" if f.hard else "4.0.0"),
                reply_text(code, f.diagnostic)[:500],
                f.remote_mta[:255] or None,
            )
            out.events.append(
                QueueEvent(
                    "Bounce",
                    info,
                    address,
                    now,
                    discriminator=f"feedback:{report_id}",
                    result=result,
                    extra={
                        "bounce_class": (btype, bsub),
                        "reporting_mta": self.s.hostname,
                        "dsn": dsn_fields(f),
                        "feedback": {**feedback, "diagnostic": f.diagnostic[:500]},
                    },
                )
            )
            if f.hard and not known:
                # the mail's record is gone (its TTL): the address cannot be checked against
                # whom the queue sent to, so it is not suppressed on the report's word
                out.counts["suppression_unverified"] += 1
            elif f.hard:
                self._suppress(
                    out, address, f.diagnostic or "late hard bounce", result.status, d.mail_id, now
                )

    def _recipients(self, d: Decoded, known: Mapping[str, str], named: list[str]) -> list[str]:
        """Whom a report is about: the VERP's recipient when it names one; else the
        addresses the report names that are the mail's recipients (any, when the mail is
        gone and the report names exactly one)."""
        if d.rid is not None and d.rid in known:
            return [known[d.rid]]
        mine = {a.lower(): a for a in known.values()}
        if mine:
            return [mine[a.lower()] for a in named if a.lower() in mine]
        return named[:1] if len(named) == 1 else []

    def _failures(
        self, d: Decoded, known: Mapping[str, str], failures: tuple[Failure, ...]
    ) -> list[tuple[str, Failure]]:
        # a failure is known by its final address or by the one the queue sent to (a DSN's
        # Original-Recipient, when the receiver forwarded or expanded it)
        by: dict[str, Failure] = {}
        for f in failures:
            by.setdefault(f.address, f)
            if f.original_recipient:
                by.setdefault(f.original_recipient, f)
        if d.rid is not None and d.rid in known:
            address = known[d.rid]
            match = by.get(address.lower())
            return [(address, match or failures[0])] if failures else []
        named = list(by) if known else [f.address for f in failures]
        out: list[tuple[str, Failure]] = []
        seen: set[int] = set()
        for a in dict.fromkeys(self._recipients(d, known, named)):
            got = by.get(a.lower())
            if got is not None and id(got) not in seen:  # one event per failure
                seen.add(id(got))
                out.append((a, got))
        return out

    def _info(
        self, mail_id: str, mail: dict[str, Any] | None, groups: list[Group], report: Report
    ) -> MailInfo:
        sender = ""
        if mail is not None and isinstance(mail.get("sender"), str):
            sender = mail["sender"]
        elif groups:
            sender = groups[0].sender
        else:  # the mail is gone: the returned copy's From is what is left of it
            got = getaddresses([report.original_header("From")])
            sender = got[0][1] if got and "@" in got[0][1] else ""
        tags: dict[str, tuple[str, ...]] = {}
        raw_tags = mail.get("tags") if mail is not None else None
        if isinstance(raw_tags, dict):
            tags = {
                str(k): (str(v),) for k, v in raw_tags.items() if str(k).startswith("mailqueue:")
            }
        arrival = groups[0].arrival if groups else self.clock()
        return MailInfo(
            message_id=mail_id,
            source=sender,
            timestamp=arrival,
            destination=tuple(r.address for g in groups for r in g.recipients)[:50],
            tags=tags,
        )

    def _suppress(
        self, out: Outcome, address: str, reason: str, status: str, source: str, now: datetime
    ) -> None:
        try:
            addr = normalise(address)
        except InvalidInput:
            return
        t = now.timestamp()
        ttl = self.s.suppression_ttl_days * 86400.0
        out.suppressed.append(
            Entry(addr, reason[:MAX_REASON], t, t + ttl, source, status, "feedback")
        )
