"""The API's refusals as SMTP replies with enhanced status codes (RFC 3463).

The HTTP API answers a refused request with a 4xx and a machine-readable code; the SMTP
server answers the same code with the reply below, so a client sees the same decision
whichever door it used. Anything not listed is refused as content (554 5.6.0).
"""

from __future__ import annotations

# code → (reply code, enhanced status, text)
_BY_CODE: dict[str, tuple[int, str, str]] = {
    "invalid_address": (501, "5.1.3", "Bad address syntax"),
    "address_too_long": (501, "5.1.3", "Address too long"),
    "forbidden_character": (501, "5.1.3", "Bad address syntax (control character)"),
    "invalid_unicode": (501, "5.1.3", "Bad address syntax (not UTF-8)"),
    "invalid_request": (501, "5.1.3", "Bad address syntax"),
    "smtputf8_required": (553, "5.6.7", "Non-ASCII address needs SMTPUTF8"),
    "sender_not_allowed": (550, "5.7.1", "Sender address not allowed for this user"),
    "null_sender_forbidden": (550, "5.7.1", "Null sender not allowed for this user"),
    "priority_not_allowed": (550, "5.7.1", "Priority not allowed for this user"),
    "dkim_unsigned_domain": (550, "5.7.1", "From domain cannot be signed here"),
    "relay_denied": (554, "5.7.1", "Relay access denied"),
    "recipient_suppressed": (550, "5.1.1", "Recipient address is suppressed (it bounced)"),
    "unknown_recipient": (550, "5.1.1", "Recipient address rejected"),
    "too_large": (552, "5.3.4", "Message size exceeds fixed limit"),
    "too_many_recipients": (452, "4.5.3", "Too many recipients"),
    # a report to the bounce domain and ordinary mail in one transaction (receiving
    # listener): RFC 3463's X.5.3, the remaining recipients on a subsequent attempt
    "report_mixed": (452, "4.5.3", "Bounce-domain recipients go in a transaction of their own"),
    "no_recipients": (554, "5.5.1", "No valid recipients"),
    "line_too_long": (550, "5.6.0", "A line exceeds 998 octets (RFC 5322 2.1.1)"),
    "no_header": (550, "5.6.0", "Message has no header section"),
    "empty_content": (550, "5.6.0", "Message is empty"),
    "orcpt_too_long": (501, "5.5.4", "ORCPT too long"),
    "invalid_envid": (501, "5.5.4", "Bad ENVID"),
    "invalid_orcpt": (501, "5.5.4", "Bad ORCPT"),
    "invalid_notify": (501, "5.5.4", "Bad NOTIFY"),
    "invalid_ret": (501, "5.5.4", "Bad RET"),
    "too_many_tags": (550, "5.7.1", "Too many tags"),
    "invalid_tag": (550, "5.7.1", "Bad tag"),
    "duplicate_tag": (550, "5.7.1", "Bad tag"),
    # the DATA reader's own refusals
    "bare_lf": (550, "5.5.2", "Error: bare <LF> received"),
    "bare_cr": (550, "5.5.2", "Error: bare <CR> received"),
}

STORAGE_DOWN = "451 4.3.0 Error: queue file write error, try again later"


def reply_for(code: str, *, sender: bool = False) -> str:
    """The reply for a refusal `code`; address problems of MAIL FROM are X.1.7."""
    status, enhanced, text = _BY_CODE.get(code, (554, "5.6.0", "Message refused"))
    if sender and enhanced == "5.1.3":
        enhanced = "5.1.7"
    return f"{status} {enhanced} {text} ({code})"


def known_codes() -> frozenset[str]:
    return frozenset(_BY_CODE)
