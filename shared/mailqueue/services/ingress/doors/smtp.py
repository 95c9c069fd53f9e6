"""The SMTP door: what the front door (`services/smtpd`) asks at MAIL, RCPT and the end
of DATA, answered with the API's rules.

A principal's submission (AUTH, ports 587/465) is the HTTP door's submission: the same
pipeline, sender policy and refusals. The receiving listener (port 25, no AUTH) takes
mail for the receiving domains as SES receipt does, and hands reports to the bounce
domain to the feedback service. Answers are `Answer`s; the server turns them into replies.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from mailqueue.core.errors import InvalidInput, TransientStorageError
from mailqueue.core.model import PRIORITY_TAG, Envelope
from mailqueue.core.trace import address_literal, principal_tag, received_field
from mailqueue.core.validate import validate_address, validate_sender
from mailqueue.services.feedback.service import FeedbackService
from mailqueue.services.ingress.answers import Answer, refusal
from mailqueue.services.ingress.pipeline import Acceptance, Stamp, Submission
from mailqueue.services.ingress.request import guard_parse
from mailqueue.services.ingress.settings import IngressSettings

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


class SmtpDoor:
    def __init__(
        self,
        settings: IngressSettings,
        acceptance: Acceptance,
        clock: Callable[[], datetime],
        feedback: FeedbackService | None = None,
    ) -> None:
        self.s = settings
        self.acceptance = acceptance
        self.clock = clock
        self.feedback = feedback

    def check_sender(self, sender: str, *, principal: str | None, smtputf8: bool) -> None:
        """MAIL FROM, checked early with the API's rules (address syntax, then the sender
        policy of the principal; none on the receiving listener, `principal` None), so
        the client hears a refusal at MAIL. A refusal is one Reject event, as on the API."""
        try:
            guard_parse(lambda: validate_sender(sender, smtputf8=smtputf8))
            if principal is not None:
                self.acceptance.check_sender_policy(sender, principal)
        except InvalidInput as e:
            self.acceptance.reject(e, {"sender": sender}, None, self.clock(), 0)
            raise

    def check_recipient(
        self, address: str, *, sender: str, principal: str | None, smtputf8: bool, index: int
    ) -> bool:
        """RCPT TO, checked with the API's rules: syntax; on the receiving listener the
        receiving domains (no open relay) or a bounce domain; on submission the
        suppression list (policy "refuse": the recipient is refused here, the others
        stay). True: a report for the feedback service (receiving listener only; a
        bounce-domain address on submission is ordinary mail, as before)."""
        try:
            return self._check_recipient(address, sender, principal, smtputf8, index)
        except InvalidInput as e:
            doc = {"sender": sender, "recipients": [address]}
            self.acceptance.reject(e, doc, None, self.clock(), 0)
            raise

    def _check_recipient(
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
        elif sender:
            self.acceptance.refuse_suppressed(address, index)
        return False

    def submit(self, mail: SmtpSubmission) -> Answer:
        """A mail at the end of DATA: the pipeline, for a principal's submission as for
        the API's, for the receiving listener after the receipt rules. 202 = durable
        (the SMTP server answers 250 only then); storage errors raise, as on the API."""
        now = self.clock()
        env = mail.envelope
        doc: dict[str, Any] = {
            "sender": env.sender,
            "recipients": [r.address for r in env.recipients],
        }

        def trace(e: Envelope) -> Stamp:
            return self._trace(mail, e)

        if mail.principal is not None:
            sub = Submission(env, mail.content, trace, principal=mail.principal)
            return self.acceptance.answer(sub, doc, "", now)
        fb = self.feedback
        if fb is not None and any(fb.is_feedback(r.address) for r in env.recipients):
            return self._receive_feedback(fb, mail, doc, now)
        env = replace(env, tags=((PRIORITY_TAG, self.s.ses_priority),))
        try:  # the receipt rules, as at RCPT and MAIL (a client may skip neither)
            for i, r in enumerate(env.recipients):
                self._check_recipient(r.address, env.sender, None, env.smtputf8, i)
            guard_parse(lambda: validate_sender(env.sender, smtputf8=env.smtputf8))
        except InvalidInput as e:
            self.acceptance.reject(e, doc, None, now, len(mail.content))
            return refusal(e)
        return self.acceptance.answer(Submission(env, mail.content, trace), doc, "", now)

    def _receive_feedback(
        self, fb: FeedbackService, mail: SmtpSubmission, doc: dict[str, Any], now: datetime
    ) -> Answer:
        """A report to the bounce domain on the receiving listener: the feedback service's
        `receive`, the call SES receipt makes (doors/ses.py), on the octets after DATA.
        202 only once its events and suppression entries are written: a failure of
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
                self._check_recipient(r.address, env.sender, None, env.smtputf8, i)
            guard_parse(lambda: validate_sender(env.sender, smtputf8=env.smtputf8))
        except InvalidInput as e:
            self.acceptance.reject(e, doc, None, now, len(mail.content))
            return refusal(e)
        report_id = "smtp-" + hashlib.sha256(mail.content).hexdigest()[:32]
        got = fb.receive([r.address for r in env.recipients], mail.content, report_id)
        if got.counts.get("suppression_failed"):
            # SES receipt lets this pass (its retry would not come); an SMTP client keeps
            # the report and sends it again when we say 451, so the entry is not lost
            raise TransientStorageError("suppression entries not written")
        return Answer(202, {"report_id": report_id, "feedback": dict(got.counts)})

    def _trace(self, mail: SmtpSubmission, env: Envelope) -> Stamp:
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
