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

Complaints and late bounces also reach the reputation guard (outbound/reputation.py):
hard (Permanent) late bounces as bounces, Transient ones as soft bounces (apart), each
complaint as a complaint, counted against the principal and sender domain delivery
counted the mail's send under. Those come from the mail's origin, which delivery leaves
when the mail is finished (the queue's own items are gone by then), or from the mail
while it is still queued; feedback about a mail with neither is counted unattributed.
A SES retry of the same receipt counts again (the counters are sums, not sets): SES
retries a Lambda action only when the invocation failed, i.e. before the counts were
written, as they are written last.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import getaddresses, parsedate_to_datetime
from typing import Any, Protocol

from mailqueue.core.errors import InvalidInput, MailqueueError, NotFound
from mailqueue.core.events import EventEmitter, MailInfo, QueueEvent
from mailqueue.core.model import (
    PRINCIPAL_TAG,
    Group,
    Result,
    pool_of,
    principal_of,
    to_iso,
    utcnow,
)
from mailqueue.core.verp import Decoded, ForgedReturnPath, KeyRing, decode
from mailqueue.outbound.reputation import FeedbackKind, Origin, ReputationGuard, feedback_counts
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


def iso_date(value: str) -> str | None:
    """An ARF Arrival-Date / Received-Date (RFC 5322 date-time) as SES writes arrivalDate:
    ISO 8601 in UTC; None when it is not a date (SES then leaves the field out)."""
    try:
        when = parsedate_to_datetime(value.strip())
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    if when.tzinfo is None:  # RFC 5322's -0000: the local zone is unknown; taken as UTC
        when = when.replace(tzinfo=UTC)
    return to_iso(when.astimezone(UTC))


@dataclass
class Outcome:
    """What one received report came to (counters for metrics and tests)."""

    counts: Counter[str]
    events: list[QueueEvent]
    suppressed: list[Entry]
    # per mail: its origin (principal, sender) and the feedback for the reputation guard
    reputation: list[tuple[Origin | None, list[FeedbackKind]]] = field(default_factory=list)


class FeedbackService:
    def __init__(
        self,
        settings: FeedbackSettings,
        keys: Callable[[], KeyRing],
        mails: MailReader,
        emitter: EventEmitter,
        *,
        suppression: SuppressionStore | None = None,
        reputation: ReputationGuard | None = None,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.s = settings
        self.keys = keys
        self.mails = mails
        self.emitter = emitter
        self.suppression = suppression
        self.reputation = reputation
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
        self._count(out)
        self._log(out)
        return out

    def _count(self, out: Outcome) -> None:
        """The reputation guard hears the feedback (last: events and entries come first)."""
        guard = self.reputation
        if guard is None or not guard.counting or not out.reputation:
            return
        for origin, kinds in out.reputation:
            if origin is None:
                out.counts["reputation_unattributed"] += len(kinds)
                continue
            guard.note(origin.principal, origin.sender, feedback_counts(kinds), origin.pool)
            out.counts["reputation_counted"] += len(kinds)
        try:
            judged = guard.flush()
        except MailqueueError:  # the counts are lost, never the events
            log.warning("reputation counters not written")
            out.counts["reputation_failed"] += out.counts.pop("reputation_counted", 0)
            return
        for st in judged:
            if st.verdict in ("review", "pause"):
                out.counts[f"reputation_{st.verdict}"] += 1

    def _log(self, out: Outcome) -> None:
        log.info("feedback received", extra={"counts": dict(out.counts)})  # no addresses

    # ------------------------------------------------------------------ one mail
    def _one(self, d: Decoded, report: Report, report_id: str, out: Outcome) -> None:
        try:
            mail, groups = self.mails.get_mail(d.mail_id)
        except NotFound:
            mail, groups = None, []
        known = {r.rid: r.address for g in groups for r in g.recipients}
        origin = self._origin(d.mail_id, mail, groups)
        info = self._info(d.mail_id, mail, groups, report, origin)
        now = self.clock()
        kinds: list[FeedbackKind] = []
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
                kinds.append("complaint")
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
                            "arrival_date": iso_date(c.arrival_date[:100]),
                            "feedback": feedback,
                        },
                    )
                )
                self._suppress(out, address, f"complaint: {c.feedback_type}", "", d.mail_id, now)
            out.reputation.append((origin, kinds))
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
            kinds.append("bounce" if btype == "Permanent" else "soft_bounce")
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
        if kinds:
            out.reputation.append((origin, kinds))

    def _origin(
        self, mail_id: str, mail: dict[str, Any] | None, groups: list[Group]
    ) -> Origin | None:
        """The keys the mail's send was counted under: the origin delivery left, else the
        mail itself while it is still queued; None when neither is there."""
        if self.reputation is not None:
            try:
                got = self.reputation.origin(mail_id)
            except MailqueueError:
                log.warning("reputation origin not read")
                got = None
            if got is not None:
                return got
        if groups:
            g = groups[0]
            return Origin(
                mail_id, g.principal, g.sender, g.arrival.timestamp(), pool_of(g.tags)
            )
        if mail is not None and isinstance(mail.get("sender"), str):
            tags = mail.get("tags")
            return Origin(mail_id, principal_of(tags), mail["sender"], 0.0, pool_of(tags))
        return None

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
        self,
        mail_id: str,
        mail: dict[str, Any] | None,
        groups: list[Group],
        report: Report,
        origin: Origin | None = None,
    ) -> MailInfo:
        sender = ""
        if mail is not None and isinstance(mail.get("sender"), str):
            sender = mail["sender"]
        elif groups:
            sender = groups[0].sender
        elif origin is not None:  # the mail is gone; its origin says who sent it and when
            sender = origin.sender
        else:  # nothing is left of it but the returned copy's From
            got = getaddresses([report.original_header("From")])
            sender = got[0][1] if got and "@" in got[0][1] else ""
        tags: dict[str, tuple[str, ...]] = {}
        raw_tags = mail.get("tags") if mail is not None else None
        if isinstance(raw_tags, dict):
            tags = {
                str(k): (str(v),) for k, v in raw_tags.items() if str(k).startswith("mailqueue:")
            }
        if origin is not None and origin.principal and PRINCIPAL_TAG not in tags:
            tags[PRINCIPAL_TAG] = (origin.principal,)
        arrival = groups[0].arrival if groups else self.clock()
        if not groups and origin is not None and origin.arrival:
            arrival = datetime.fromtimestamp(origin.arrival, UTC)
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
