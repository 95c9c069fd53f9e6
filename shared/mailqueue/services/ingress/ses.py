"""SES receipt events (Lambda action): parsing and screening, pure functions.

The event carries no body: SES's S3 action stored the raw mail under
``<prefix><mail.messageId>`` before invoking us. The envelope comes from the receipt,
never from the headers: ``receipt.recipients`` are the RCPT TO addresses this rule
matched, ``mail.source`` is the MAIL FROM.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mailqueue.core.errors import InvalidInput
from mailqueue.core.validate import check_text, validate_address, validate_sender

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
