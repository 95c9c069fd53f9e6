"""What a receiver's report says: bounces (RFC 3464 and what real MTAs send instead),
ARF complaints (RFC 5965) and auto-replies (RFC 3834). Pure functions over bytes.

Why heuristics: a large share of late bounces is not RFC 3464 (qmail, old Exim and
Sendmail, Exchange, webmail providers); they name the failed recipient and the remote
reply in prose. The rules (the phrases in data/bounce-rules.json, read by rules.py; the
address rules in addresses.py) were written against the Sisimai project's corpus
(tests/data/sisimai, checked against Sisimai itself in tests/feedback/test_sisimai.py) and
four others, each measured once while held out before it was tuned on:
Mail::DeliveryStatus::BounceParser's, Crisp's email-bounce-parser fixtures, Dada Mail's
and MailBounceDetector's, Sympa's (tests/data/*; bench/bounce_corpora.py), with Sisimai's
reason vocabulary for the verdict: a bounce is *hard* when the address
itself is dead (no such user, no such domain, moved, the domain accepts no mail) and
*soft* otherwise (full mailbox, blocked, policy, spam, expired, network...), since only
a dead address belongs on the suppression list.
Addresses only ever come from the report's own fields and prose, never from the returned
message; a delay warning, in whatever form, is a "delay" report, not a bounce.

One piece (~890 lines): a report's kinds are told apart by the same reading of its
parts (the report's own delivery-status parts, its prose, the returned message set
aside), and the prose readers for each MTA's form share one address filter (return
path, help desk, quoted replies, alias expansions): split up, each would need the
others' exclusions.
"""

from __future__ import annotations

import email
import email.policy
import ipaddress
import json
import re
from dataclasses import dataclass, field, replace
from email.message import Message
from email.utils import getaddresses, parseaddr

from mailqueue.services.feedback.addresses import (
    clean_address,
    message_ids,
    own_text,
    summary_recipient,
)
from mailqueue.services.feedback.headers import mend_folding
from mailqueue.services.feedback.rules import load_bounce_rules

# ------------------------------------------------------------------ the results


@dataclass(frozen=True, slots=True)
class Failure:
    """One recipient a bounce reports."""

    address: str  # lower-cased
    status: str  # enhanced status ("5.1.1"), "" when none was found
    diagnostic: str  # the remote reply or the report's prose, one line, ≤ 500 chars
    hard: bool  # the address is dead (see the module docstring)
    action: str = "failed"  # RFC 3464 Action: failed | delayed | ...
    reply_code: int = 0
    remote_mta: str = ""
    # the DSN's own fields as the receiver sent them (SES's event takes them verbatim):
    # "" when the report has none (a prose bounce)
    diagnostic_code: str = ""  # Diagnostic-Code, e.g. "smtp; 550 5.1.1 <a@b>: unknown"
    reporting_mta: str = ""  # Reporting-MTA, e.g. "dns; mx.example.net"
    remote_mta_ip: str = ""  # Remote-MTA when it names an IP address
    # RFC 3464 Original-Recipient (the address as the sender gave it, before forwarding
    # or alias expansion), when it differs from `address`: what the queue sent to
    original_recipient: str = ""


@dataclass(frozen=True, slots=True)
class Complaint:
    """An ARF feedback report."""

    feedback_type: str  # abuse, fraud, virus, other, not-spam, ...
    user_agent: str
    arrival_date: str  # as reported (RFC 5322 date), "" when absent
    recipients: tuple[str, ...]  # Original-Rcpt-To, or the original message's To:


@dataclass(frozen=True, slots=True)
class Report:
    kind: str  # "bounce" | "delay" | "complaint" | "autoreply" | "unknown"
    failures: tuple[Failure, ...] = ()
    complaint: Complaint | None = None
    # the returned message's header fields (for its Return-Path/To when the envelope
    # recipient of the report does not identify the mail)
    original: tuple[tuple[str, str], ...] = field(default_factory=tuple)

    def original_header(self, name: str) -> str:
        return next((v for n, v in self.original if n.lower() == name.lower()), "")


# ------------------------------------------------------------------ classification

# bounded (RFC 5321's 64-octet local part, 255-octet domain) so that a long run of
# address characters costs linear time, not quadratic (tests/feedback/test_parser_corpora)
_LOCAL_CHARS = "A-Za-z0-9!#$%&'*+/=?^_`{|}~.-"
_ADDR = rf"[{_LOCAL_CHARS}]{{1,64}}@[A-Za-z0-9][A-Za-z0-9.-]{{0,252}}\.[A-Za-z]{{2,63}}"
ADDR_RE = re.compile(_ADDR)
# the report's prose read at most (a bounce's own text is a few KB; one listing many
# recipients some tens): a bound on the work an oversized or hostile report can cause
MAX_PROSE = 128 * 1024
# failed recipients read from one report: a report is about one SMTP transaction, which
# the queue makes of at most 200 recipients (core/config group_recipient_limit)
MAX_FAILURES = 500
_LOCAL_CHAR_RE = re.compile(rf"[{_LOCAL_CHARS}]")
STATUS_RE = re.compile(r"(?<![\d.])([245])\.(\d{1,3})\.(\d{1,3})(?![\d.])")
REPLY_RE = re.compile(r"(?<![\d.])([245]\d\d)(?:[ ,;:-]|$)")

# the phrase rules (data/bounce-rules.json, each group with its source)
RULES = load_bounce_rules()
_DEAD_FIRST = RULES.patterns["dead_first"]
_SOFT_TEXT = RULES.patterns["soft_text"]
_HOST_TEXT = RULES.patterns["host_text"]
_USER_STRONG = RULES.patterns["user_strong"]
_HARD_TEXT = RULES.patterns["hard_text"]
_HARD_STATUS = RULES.hard_status
_CHALLENGE = RULES.patterns["challenge_text"]
_NAMES_ADDRESS = re.compile(
    r"[245]\d\d[ :-]+(?:\d\.\d\.\d+ )?(?:<"
    + _ADDR
    + r">(?::|\.\.\.|,)|unknown user "
    + _ADDR
    + ")",
    re.I,
)
_CMD_RCPT = re.compile(
    r"rcpt to\b|rcpt command|in reply to rcpt|after rcpt|>>> ?rcpt|rcpt to response|"
    r"does not like recipient|recipient address rejected|rejected recipient",
    re.I,
)
_CMD_DATA = re.compile(
    r"end of data|after data|in reply to data|data command|>>> ?data\b|text command|"
    r"after end of",
    re.I | re.M,
)

_CMD_MAIL = re.compile(r"after mail from|in reply to mail from|>>> ?mail from", re.I)


def command_of(text: str) -> str:
    """The SMTP command a reply answered, when the report says (RCPT, DATA or "")."""
    if _CMD_DATA.search(text):
        return "DATA"
    if _CMD_MAIL.search(text):
        return "MAIL"
    if _CMD_RCPT.search(text):
        return "RCPT"
    return ""


def is_hard(status: str, text: str, command: str = "") -> bool:
    """The verdict: is the address dead? Soft phrases win over hard ones (a 5.1.1 'user
    unknown or mailbox full' is full); a temporary status is soft; a dead-address status
    is hard; a dead-address phrase is hard unless it answered DATA (a content filter
    speaking, as Sisimai's "filtered" says)."""
    t = text or ""
    w = _words(t)  # the phrases are read without the addresses the reply names
    if _DEAD_FIRST.search(w):
        return True
    if _SOFT_TEXT.search(w):
        return False
    if status.startswith("4.") or status in ("5.1.7", "5.1.8"):  # later, or the sender
        return False
    if not status and 400 <= find_reply(t) <= 499:
        return False
    if status in _HARD_STATUS and command != "MAIL":
        return True
    if command == "MAIL":  # refused the sender, not the address
        return False
    if _HOST_TEXT.search(w):
        return True
    if _USER_STRONG.search(w):
        return True
    if _HARD_TEXT.search(w):
        if command:
            return command == "RCPT"
        if _NAMES_ADDRESS.search(t):  # "550 <a@b>... User unknown": a RCPT reply's form
            return True
        # no command named: a mailbox-status (5.2.x) or security (5.7.x) code says a
        # filter spoke, as Sisimai reads it
        return status in _HARD_STATUS
    return False


def _words(text: str) -> str:
    """A reply's words, as its phrases are read: without the addresses it names (an
    address is no phrase: `dmarc@reports.example` says nothing of DMARC, and "mailbox a@b
    unavailable" reads as "mailbox unavailable"), and a phrase folded over lines
    ("Host or domain" / "    name not found") read as one."""
    return re.sub(r"\s+", " ", ADDR_RE.sub("", text))


def find_status(text: str) -> str:
    """The first enhanced status in a text ("" when none)."""
    m = STATUS_RE.search(text)
    return ".".join(m.groups()) if m else ""


def find_reply(text: str) -> int:
    m = REPLY_RE.search(text)
    return int(m.group(1)) if m else 0


def _one_line(text: str, limit: int = 500) -> str:
    return re.sub(r"\s+", " ", text).strip()[:limit]


# ------------------------------------------------------------------ reading the mail

_AUTO_SUBJECT = re.compile(
    r"^(?:auto(?:matic)?[ -]?(?:reply|response|antwort)|out of (?:the )?office|vacation|"
    r"abwesenheit|absence|away from)",
    re.I,
)
_BOUNCE_SENDER = re.compile(r"mailer-daemon|post_?master|mail delivery|daemon|bounce", re.I)
_BOUNCE_SUBJECT = re.compile(
    r"undeliver|undelivered|delivery (?:status|failure|failed|notification|has failed|problem)|"
    r"returned mail|failure notice|mail delivery|non[- ]?delivery|could not be delivered|"
    r"failed|rejected|bounce|warning: could not|mail system error|not delivered|"
    r"delivery report|permanent error|nondeliverable|returned to sender",
    re.I,
)
_HELP_DESK = re.compile(r"contact|write to|send (?:an )?e-?mail to", re.I)
_HELP_DESK_END = re.compile(r"(?:contact|write to|send (?:an )?e-?mail to)\s*[:,]?\s*<?\s*$", re.I)


def _helps(text: str, pos: int) -> bool:
    """Is the address at `pos` the receiver's help desk ("For further assistance, contact
    a@b")? Said on its own line before it, or at the end of the line just above (a folded
    sentence); a help-desk sentence on the line above a recipient's own line ("contact
    a@b" / blank / "<c@d>:", qmail's) does not make the recipient one."""
    start = text.rfind("\n", 0, pos) + 1
    if _HELP_DESK.search(text, max(start, pos - 40), pos):
        return True
    if text[start:pos].strip(" \t<"):
        return False  # words before it on its line, none of them a help desk's
    above = text.rfind("\n", 0, max(0, start - 1)) + 1
    return bool(start and _HELP_DESK_END.search(text[above : start - 1]))
# a transcript's MAIL FROM, or a field naming the sender (Office 365's "Sender Address:"
# in its "Original Message Details"): the return path, not a recipient
_SENDER_CONTEXT = re.compile(
    r"(?:mail\s+from|envelope[- ]from|return-path|(?:original\s+)?sender(?:'s)?(?:\s+address)?|"
    r"from\s+address|message sent by)\s*[:=]?\s*<?\s*$",
    re.I,
)
# the report speaking to its reader (the sender it returns the mail to) by address
_GREETING = re.compile(r"(?:^|\n)[ \t]*(?:sorry|dear|hello|hi),?[ \t]*<?$", re.I)
# Hotmail's pre-ARF complaint: the message attached, "complaint about message from <ip>"
_COMPLAINT_SUBJECT = re.compile(r"complaint about message from", re.I)
_BOUNCE_BODY = re.compile(
    r"could not be delivered|undeliverable|delivery (?:has )?failed|permanent (?:fatal )?error|"
    r"not be delivered to|message was not delivered|unable to deliver",
    re.I,
)
# where the returned copy of the message starts in a plain-text bounce
_COPY_START = re.compile(
    r"^\s*(?:-+ ?(?:this is a copy|below this line|original message|the original message|"
    r"the header of the original|original message header)|"
    r"-+ ?(?:begin|start) (?:of )?(?:the )?(?:original|returned|forwarded)|"
    r"-+\s*(?:original|returned) (?:message|mail)|"
    r"-+ ?unsent message follows|"  # sendmail's
    r"content-type: message/rfc822|"
    r"your message reads \(in part\)|"
    r"-{3,} ?\S*original|"
    r"\s*----- transcript of session follows|"  # sendmail: keep, it holds the reply
    r"return-path: ?<)",
    re.I | re.M,
)


def parse(raw: bytes) -> Report:
    """Classify and read one received report."""
    msg = email.message_from_bytes(mend_folding(raw), policy=email.policy.compat32)
    ct = _ctype(msg)
    parts = list(msg.walk())
    types = [_ctype(p) for p in parts]
    if (
        "message/feedback-report" in types
        or _looks_like_arf(msg)
        or _COMPLAINT_SUBJECT.match(str(msg.get("Subject", "")).strip())
    ):
        return _arf(msg, parts)
    if _is_autoreply(msg) and "message/delivery-status" not in types:
        return Report("autoreply", original=_original_headers(parts))
    original = _original_headers(parts)
    ses = _ses_notification(_payload_text(msg) if not msg.is_multipart() else "")
    if ses is not None:
        return replace(ses, original=original)
    failures: list[Failure] = []
    # the report's own delivery-status parts, not those of the message it returns (a
    # bounce of a bounce returns the first report, whose recipients are not this one's);
    # a report with none of its own that returns another whole (a gateway passing a
    # report on: X5) is read by the one it carries
    ds_types = ("message/delivery-status", "message/global-delivery-status")
    ds = [p for p in _own_parts(msg) if _ctype(p) in ds_types]
    if not ds:
        ds = [p for p in parts if _ctype(p) in ds_types]
    text = _text_body(msg, parts)[:MAX_PROSE]
    if ds:
        for p in ds:
            failures += _delivery_status(p, text)
    if failures and all(f.action == "delayed" for f in failures):
        return Report("delay", tuple(failures), original=original)
    if not any(f.action == "failed" for f in failures) and is_delay_warning(msg, text):
        # a delay warning not in DSN form (Sendmail's, Exim's, Exchange's, Gmail's...)
        named = failures or _prose(msg, text, original)
        return Report(
            "delay", tuple(replace(f, action="delayed") for f in named), original=original
        )
    if not failures:
        failures = _prose(msg, text, original)
    if failures and all(_is_challenge(f) for f in failures):
        # a challenge-response notice (Boxbe's "Sender not pre-approved", "Your server
        # requires confirmation"): it asks the sender to confirm, it is no failure of the
        # address, so it is read as an auto-reply (dropped and counted, no event)
        return Report("autoreply", original=original)
    if failures:
        return Report("bounce", tuple(failures), original=original)
    if ct == "multipart/report" or _looks_like_bounce(msg):
        return Report("unknown", original=original)
    return Report("unknown", original=original)


_RETURNED = ("message/rfc822", "message/global", "text/rfc822-headers", "message/rfc822-headers")


def _own_parts(msg: Message) -> list[Message]:
    """The parts of a report, without descending into the message it returns."""
    out = [msg]
    if msg.is_multipart() and _ctype(msg) not in _RETURNED:
        for sub in msg.get_payload():
            if isinstance(sub, Message):
                out += _own_parts(sub)
    return out


def _is_challenge(f: Failure) -> bool:
    return not f.hard and bool(
        _CHALLENGE.search(f.diagnostic) or _CHALLENGE.search(f.diagnostic_code)
    )


# a warning that delivery is still being tried (RFC 3464's "delayed", in prose)
_DELAY_SUBJECT = re.compile(
    r"delayed mail|\(delay\)|delivery (?:has been )?delayed|delay(?:ed)? (?:notification|notice)|"
    r"^warning: (?:could not send message for past|message \S+ delayed)|"
    r"message delayed|delivery (?:status notification|notification): delay|"
    r"^delayed:|still being retried|not yet (?:been )?delivered|delivery incomplete",
    re.I,
)
_DELAY_BODY = re.compile(
    r"warning message only|do not need to resend|has not (?:yet )?been delivered|"
    r"not (?:been )?delivered yet|(?:delivery|message) (?:has been|was|is) delayed|"
    r"has been delayed|still being retried|will (?:be )?retr(?:y|ied)|"
    r"will (?:continue|keep) (?:trying|to try|retrying)|will try (?:again|to deliver)|"
    r"retry for \d+ more|delivery attempts will continue|is still trying",
    re.I,
)
# what a final failure says, which a warning does not
_FINAL = re.compile(
    r"permanent(?:ly)? (?:fatal )?(?:error|failure|failed)|gave up|giving up|have given up|"
    r"could not be delivered|couldn't be delivered|undeliverable|cannot send message for \d+ days?|"
    r"delivery (?:has )?failed|failed permanently|was not delivered|deleted from (?:the )?queue",
    re.I,
)


def is_delay_warning(msg: Message, text: str) -> bool:
    """A report that delivery is delayed, not failed, in any form: the subject or the
    prose says it, and nothing says the mail was given up."""
    subject = str(msg.get("Subject", "")).strip()
    own = _cut_copy(text)[:5000]
    if _FINAL.search(subject) or _FINAL.search(own):
        return False
    return bool(_DELAY_SUBJECT.search(subject) or _DELAY_BODY.search(own))


def _ctype(p: Message) -> str:
    """The content type, robust to a badly folded header ("text/plain\n charset=...")."""
    return p.get_content_type().split()[0].rstrip(";").lower()


def _ses_notification(text: str) -> Report | None:
    """An Amazon SES notification (SNS JSON, as its email subscription sends it): a
    bounce's bouncedRecipients (Permanent being hard) or a complaint."""
    start = text.find("{")
    if start < 0 or "notificationType" not in text:
        return None
    try:
        try:
            doc, _ = json.JSONDecoder().raw_decode(text[start:])
        except ValueError:  # folded by a mail system: the lines joined again
            joined = text[start:].replace("\r", "").replace("\n ", "").replace("\n", "")
            doc, _ = json.JSONDecoder().raw_decode(joined)
        if isinstance(doc.get("Message"), str):  # the SNS envelope around it
            doc = json.loads(doc["Message"])
        if doc.get("notificationType") == "Complaint":
            c = doc["complaint"]
            return Report(
                "complaint",
                complaint=Complaint(
                    feedback_type=str(c.get("complaintFeedbackType") or "abuse"),
                    user_agent=str(c.get("userAgent") or ""),
                    arrival_date=str(c.get("arrivalDate") or ""),
                    recipients=tuple(
                        str(r["emailAddress"]).lower() for r in c["complainedRecipients"]
                    ),
                ),
            )
        bounce = doc["bounce"]
        permanent = bounce.get("bounceType") == "Permanent"
        out = []
        for r in bounce.get("bouncedRecipients", []):
            diag = str(r.get("diagnosticCode", ""))
            status = find_status(str(r.get("status", ""))) or find_status(diag)
            out.append(
                Failure(
                    address=str(r["emailAddress"]).lower(),
                    status=status,
                    diagnostic=_one_line(diag),
                    hard=permanent and is_hard(status or "5.1.1", diag),
                    reply_code=find_reply(diag),
                )
            )
        return Report("bounce", tuple(out))
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def _looks_like_bounce(msg: Message, text: str = "") -> bool:
    sender = str(msg.get("From", ""))
    subject = str(msg.get("Subject", ""))
    return bool(
        _BOUNCE_SENDER.search(sender)
        or _BOUNCE_SUBJECT.search(subject)
        or (text and _BOUNCE_BODY.search(text[:3000]))
    )


def _is_autoreply(msg: Message) -> bool:
    """RFC 3834: Auto-Submitted other than 'no' from a non-daemon, or the usual
    vacation markers; a delivery report is never an auto-reply."""
    if _looks_like_bounce(msg):
        return False
    auto = str(msg.get("Auto-Submitted", "")).strip().lower()
    if auto and auto != "no":
        return True
    if str(msg.get("X-Autoreply", "")).strip() or str(msg.get("X-Autorespond", "")).strip():
        return True
    if str(msg.get("Precedence", "")).strip().lower() in ("auto_reply",):
        return True
    return bool(_AUTO_SUBJECT.search(str(msg.get("Subject", "")).strip()))


def _payload_text(p: Message) -> str:
    data = p.get_payload(decode=True)
    if not isinstance(data, bytes):
        inner = p.get_payload()
        if isinstance(inner, list):  # message/* parts: their sub-messages as text
            return "\n".join(str(m) for m in inner if isinstance(m, Message))
        return str(inner or "")
    charset = p.get_content_charset() or "utf-8"
    if b"\x1b$B" in data and charset.lower() in ("us-ascii", "utf-8", "ascii"):
        charset = "iso-2022-jp"  # undeclared JIS text (old Japanese MTAs)
    try:
        return data.decode(charset, errors="replace")
    except LookupError:
        return data.decode("latin-1")


def _text_body(msg: Message, parts: list[Message]) -> str:
    """The human-readable part(s) before the returned message."""
    if not msg.is_multipart():
        return _payload_text(msg)
    out: list[str] = []
    for p in parts:
        ct = _ctype(p)
        if ct in ("message/rfc822", "text/rfc822-headers", "message/rfc822-headers"):
            break
        if ct in ("text/plain", "text/html") and not p.is_multipart():
            t = _payload_text(p)
            if ct == "text/html":
                t = re.sub(r"<[^>]+>", " ", t)
                t = t.replace("&lt;", "<").replace("&gt;", ">").replace("&nbsp;", " ")
            out.append(t)
    if not any(t.strip() for t in out):  # a broken MIME structure: the raw body then
        body = msg.get_payload()
        return body if isinstance(body, str) else "\n".join(str(m) for m in body)
    return "\n".join(out)


def _original_headers(parts: list[Message]) -> tuple[tuple[str, str], ...]:
    for p in parts:
        ct = _ctype(p)
        if ct in ("message/rfc822", "message/global"):
            inner = p.get_payload()
            if isinstance(inner, list) and inner and isinstance(inner[0], Message):
                return tuple((k, str(v)) for k, v in inner[0].items())
        if ct in ("text/rfc822-headers", "message/rfc822-headers"):
            sub = email.message_from_string(_payload_text(p).lstrip())
            return tuple((k, str(v)) for k, v in sub.items())
    return ()


def _fields(block: str) -> list[dict[str, str]]:
    """An RFC 3464 delivery-status body as field groups (per-message, per-recipient)."""
    groups: list[dict[str, str]] = []
    cur: dict[str, str] = {}
    last = ""
    for line in block.replace("\r\n", "\n").split("\n"):
        if not line.strip():
            if cur:
                groups.append(cur)
                cur, last = {}, ""
            continue
        if line[0] in " \t" and last:
            cur[last] += " " + line.strip()
            continue
        name, sep, value = line.partition(":")
        if not sep:
            continue
        last = name.strip().lower()
        if last not in cur:
            cur[last] = value.strip()
    if cur:
        groups.append(cur)
    return groups


def _typed_address(value: str) -> str:
    """`rfc822; a@b` → a@b (angle brackets, quotes, `SMTP=` and trailing junk dropped;
    "" unless what is left is a valid address: addresses.clean_address)."""
    _, _, addr = value.rpartition(";")
    got = clean_address(addr)
    if got:
        return got
    m = ADDR_RE.search(addr) or ADDR_RE.search(value)
    return clean_address(m.group(0)) if m else ""


def _delivery_status(p: Message, text: str) -> list[Failure]:
    payload = p.get_payload()
    if isinstance(payload, list):  # compat32 parses message/delivery-status into messages
        block = "\n\n".join(
            "\n".join(f"{k}: {v}" for k, v in m.items()) for m in payload if isinstance(m, Message)
        )
    else:
        block = _payload_text(p)
    out: list[Failure] = []
    per_msg: dict[str, str] = {}
    low = text.lower()
    for g in _fields(block):
        if len(out) >= MAX_FAILURES:
            break
        if "final-recipient" not in g and "original-recipient" not in g:
            per_msg.update(g)
            continue
        action = g.get("action", "failed").lower().split()[0] if g.get("action") else "failed"
        if action in ("delivered", "relayed", "expanded"):
            continue
        orig = _typed_address(g.get("original-recipient", ""))
        address = _typed_address(g.get("final-recipient", "")) or orig
        if not address:
            continue
        diag = g.get("diagnostic-code", "")
        diag = diag.split(";", 1)[1].strip() if ";" in diag[:12] else diag
        status = find_status(g.get("status", ""))
        span = _span_for(text, address, low)
        prose = _one_line(_diagnostic_line(span) or span)
        if not diag or diag.lower() in ("smtp;", "x-unix;"):
            diag = prose
        # a status of the generic class (5.0.0) says less than the reply itself
        if diag and (not status or status.endswith(".0.0")):
            status = find_status(diag) or status
        verdict_text = diag if _says_something(diag) or not prose else prose
        if not g.get("diagnostic-code", "").partition(";")[2].strip() and status[-4:] != ".0.0":
            # no reply in the fields, a definite status: the prose around the address is
            # no reply either, unless it quotes one (a line with a code); a disclaimer
            # ("scanned for all viruses") under a 5.1.1 does not make it soft
            verdict_text = _diagnostic_line(span)
        if action == "delayed" and not status:
            status = "4.0.0"
        raw_diag = _one_line(g.get("diagnostic-code", ""), 1000)
        out.append(
            Failure(
                address=address,
                status=status,
                diagnostic=_one_line(diag),
                hard=action != "delayed"
                and is_hard(
                    status,
                    verdict_text,
                    command_of(f"{diag} {span}") or _command_near(text, address, low),
                ),
                action=action,
                reply_code=find_reply(diag),
                remote_mta=g.get("remote-mta", "").rpartition(";")[2].strip()[:255],
                diagnostic_code=raw_diag if raw_diag.rstrip(";").strip() else "",
                reporting_mta=_one_line(per_msg.get("reporting-mta", ""), 255),
                remote_mta_ip=ip_of(g.get("remote-mta", "")),
                original_recipient=orig if orig != address else "",
            )
        )
    return out


def ip_of(remote_mta: str) -> str:
    """The IP address a Remote-MTA field names (`dns; 192.0.2.1`, `dns; [2001:db8::1]`,
    `dns; mx.example.net [192.0.2.1]`), "" when it names a host only."""
    value = remote_mta.rpartition(";")[2].strip()
    for cand in [value, *re.findall(r"\[([0-9A-Fa-f:.]+)\]", value)]:
        cand = cand.strip("[]")
        if cand.lower().startswith("ipv6:"):
            cand = cand[5:]
        try:
            return str(ipaddress.ip_address(cand))
        except ValueError:
            continue
    return ""


def _says_something(text: str) -> bool:
    w = _words(text)
    return any(r.search(w) for r in (_SOFT_TEXT, _HARD_TEXT, _HOST_TEXT, _USER_STRONG))


def _command_near(text: str, address: str, low: str = "") -> str:
    """The SMTP command a transcript shows next to an address (the lines before each
    mention: `>>> DATA` then `<<< 550 <a@b>... User unknown`)."""
    low = low or text.lower()
    window: list[str] = []
    i = low.find(address)
    while i >= 0 and len(window) < 20:
        start = i
        for _ in range(4):  # the line and the 3 before it
            start = low.rfind("\n", 0, start - 1) if start > 0 else -1
            if start < 0:
                break
        end = low.find("\n", i)
        end = low.find("\n", end + 1) if end >= 0 else -1  # and the one after
        window.append(text[start + 1 : end if end >= 0 else len(text)])
        i = low.find(address, i + len(address))
    return command_of("\n".join(window))


def _span_for(text: str, address: str, low: str = "") -> str:
    """What the text says right after an address: each mention up to the next other
    address; the first mention that carries a reason (else the first one)."""
    low = low or text.lower()
    clips: list[str] = []
    i = low.find(address)
    while i >= 0 and len(clips) < 20:
        end = i + 2000
        for m in ADDR_RE.finditer(text, i + len(address)):
            if m.group(0).lower().strip(".") != address:
                end = min(end, m.start())
                break
        # a line break before the address starts its line: "<<< 550 <a@b>... unknown"
        start = low.rfind("\n", 0, i) + 1
        clips.append(text[start:end])
        i = low.find(address, i + len(address))
    return next((c for c in clips if _says_something(c)), clips[0] if clips else "")


def _cut_copy(text: str) -> str:
    """The bounce's own prose: what precedes the returned copy of the message."""
    m = _COPY_START.search(text)
    if m and m.group(0).strip().lower().startswith("----- transcript"):
        rest = text[m.end() :]
        m2 = _COPY_START.search(rest)
        return text[: m.end() + m2.start()] if m2 else text
    return text[: m.start()] if m else text


def _prose(msg: Message, text: str, original: tuple[tuple[str, str], ...]) -> list[Failure]:
    """A non-standard bounce: the failed recipients named in the prose (or an Exim-style
    X-Failed-Recipients header), each with the reply text that follows it."""
    if not _looks_like_bounce(msg, text) and not msg.get("X-Failed-Recipients"):
        return []
    own = own_text(_cut_copy(text))
    ids = message_ids(text)
    senders = {
        a.lower() for _, a in getaddresses([str(msg.get("From", "")), str(msg.get("To", ""))])
    }
    senders |= {
        a.lower()
        for n, v in original
        if n.lower() in ("from", "return-path", "reply-to", "sender")
        for _, a in getaddresses([v])
    }
    named = [
        a
        for a in (clean_address(x) for x in str(msg.get("X-Failed-Recipients", "")).split(","))
        if a
    ]
    spans: dict[str, None] = {}
    not_rcpt: set[str] = set(ids)
    # alias expansion: "<final> (expanded from <alias>)" (Postfix), "final\n (generated
    # from alias)" (Exim): one failure, of the final address, whose original recipient
    # (what the sender gave, as a DSN's Original-Recipient) is the alias; the alias is no
    # failed recipient of its own
    aliases: dict[str, str] = {}
    for m in _EXPANDED.finditer(own):
        final, alias = clean_address(m.group(1)), clean_address(m.group(2))
        if final and alias and final != alias:
            aliases.setdefault(final, alias)
    not_rcpt |= set(aliases.values()) - set(aliases)
    heads = _recipient_paragraphs(own)
    has_fields = bool(re.search(r"^[ \t]*final-recipient[ \t]*:", own, re.I | re.M))
    for m in ADDR_RE.finditer(own):
        if m.start() and _LOCAL_CHAR_RE.match(own, m.start() - 1):
            continue  # the tail of a local part longer than 64: no address
        a = clean_address(m.group(0))
        if not a:
            continue
        head = _head_at(heads, m.start())
        if head and head != a:
            # in a Postfix recipient paragraph ("<a@b>: host x said: 550 <c@d>: ..."),
            # another address is the reply's or the alias's, not a failed recipient
            continue
        if has_fields and _IN_DIAGNOSTIC.match(own[own.rfind("\n", 0, m.start()) + 1 : m.start()]):
            # the same in a report's fields written out as prose: the address a
            # Diagnostic-Code quotes is the reply's; the recipient is Final-Recipient's
            continue
        before = own[max(0, m.start() - 40) : m.start()]
        if _helps(own, m.start()) or _SENDER_CONTEXT.search(before) or _GREETING.search(before):
            # the receiver's help desk, the envelope sender, or the reader the report
            # greets ("Sorry a@b. Your mail to the following recipients ...": AOL)
            not_rcpt.add(a)
            continue
        if re.match(r"(?:mailer-daemon|postmaster)$", a.split("@")[0]):
            continue
        spans.setdefault(a, None)
    admin = _ADMIN_SECTION.search(own)
    if admin:
        # Exchange's "Diagnostic information for administrators" repeats the recipients
        # its user part names, as the next hop spelt them (a forwarding, an alias): an
        # address only there is taken when the user part names none
        users = {
            clean_address(m.group(0)) for m in ADDR_RE.finditer(own, 0, admin.start())
        } & set(spans)
        if users:
            for a in set(spans) - users:
                spans.pop(a, None)
    for a in not_rcpt:
        spans.pop(a, None)
    if not named:
        named = [a for a in spans if a not in senders] or list(spans)[:1]
    if not named:
        # a notice naming the failed message only by its summary ("Subject: s", "To:
        # a@b") in its own text: the summary's one recipient, as a last resort
        last = summary_recipient(_cut_copy(text))
        if last and last not in senders and last not in not_rcpt:
            named = [last]
    own_low = own.lower()
    out = []
    for a in named[:MAX_FAILURES]:
        reason = _span_for(own, a, own_low)
        if not _says_something(reason):
            reason = own
        command = command_of(reason) or _command_near(own, a, own_low)
        if _says_something(_diagnostic_line(reason, whole=False)):
            # the reply starts on the line with its code: read it whole, folded lines and
            # all ("552 5.2.2 <a@b>: Recipient address rejected:" / "Mailbox quota
            # exceeded"); a code alone on its line leaves the verdict to the paragraph
            reason = _diagnostic_line(reason)
        status = find_status(reason)
        diag_line = _diagnostic_line(reason)
        reply = re.search(r"(?<![\d.])[245]\d\d(?:[ -].*|$)", diag_line)
        out.append(
            Failure(
                address=a,
                status=status,
                diagnostic=_one_line(diag_line or reason),
                hard=is_hard(status, reason, command),
                reply_code=find_reply(reason),
                # the remote reply the prose quotes, from its code on, as SES would type it
                diagnostic_code=f"smtp; {_one_line(reply.group(0))}" if reply else "",
                original_recipient=aliases.get(a, ""),
            )
        )
    return out


_ADMIN_SECTION = re.compile(r"^[ \t]*diagnostic information for administrators", re.I | re.M)
_IN_DIAGNOSTIC = re.compile(r"[ \t]*diagnostic[- ]code[ \t]*:", re.I)
_EXPANDED = re.compile(
    rf"<?({_ADDR})>?\s+\((?:expanded|generated) from:?\s*<?({_ADDR})>?\)", re.I
)
# a Postfix recipient paragraph: "<a@b>: ..." or "<a@b> (expanded from <c@d>): ..." at the
# start of a line (not indented: an indented one is the reply folded under it)
_POSTFIX_HEAD = re.compile(
    rf"^<({_ADDR})>(?:[ \t]+\(expanded from <[^>\n]*>\))?:[ \t]", re.M | re.I
)


def _recipient_paragraphs(text: str) -> list[tuple[int, int, str]]:
    """(start, end, recipient) of each Postfix recipient paragraph: up to a blank line or
    the next recipient's line."""
    heads = list(_POSTFIX_HEAD.finditer(text))
    out = []
    for i, m in enumerate(heads):
        end = re.search(r"\n[ \t]*\n", text[m.end() :])
        stop = m.end() + end.start() if end else len(text)
        if i + 1 < len(heads):
            stop = min(stop, heads[i + 1].start())
        out.append((m.start(), stop, m.group(1).lower()))
    return out


def _head_at(heads: list[tuple[int, int, str]], pos: int) -> str:
    """The recipient whose Postfix paragraph holds a position ("" when none)."""
    return next((clean_address(a) for s, e, a in heads if s <= pos < e), "")


def _diagnostic_line(text: str, whole: bool = True) -> str:
    """The reply a prose bounce quotes (from the line with a 5xx/4xx code), if any, read
    whole: a reply folded over lines ("552 5.2.2 <a@b>: Recipient address rejected:" /
    "    Mailbox quota exceeded") goes on in the lines indented under it, up to a blank
    line or a line indented less (the next recipient). `whole=False`: that line only."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if REPLY_RE.search(line) or STATUS_RE.search(line):
            if not whole:
                return line
            indent = len(line) - len(line.lstrip(" \t"))
            got = [line.rstrip()]
            for nxt in lines[i + 1 : i + 12]:
                lead = len(nxt) - len(nxt.lstrip(" \t"))
                if not nxt.strip() or lead == 0 or lead < indent:
                    break
                got.append(nxt.strip())
            return " ".join(got)
    return ""


# ------------------------------------------------------------------ ARF


def _looks_like_arf(msg: Message) -> bool:
    return str(msg.get("Feedback-Type", "")).strip() != "" or bool(
        re.search(r"feedback-type:", str(msg.get_payload()) if not msg.is_multipart() else "", re.I)
    )


def _arf(msg: Message, parts: list[Message]) -> Report:
    pairs: list[tuple[str, str]] = []  # the report's fields, repeated ones kept
    for p in parts:
        if _ctype(p) == "message/feedback-report":
            payload = p.get_payload()
            if isinstance(payload, list):
                for m in payload:
                    if isinstance(m, Message):
                        pairs += [(k.lower(), str(v).strip()) for k, v in m.items()]
            else:
                pairs += [(k, v) for g in _fields(_payload_text(p)) for k, v in g.items()]
    if not pairs:  # a non-multipart report: fields in the header or the body
        pairs = [(k.lower(), str(v).strip()) for k, v in msg.items()]
        if not msg.is_multipart():
            pairs += [(k, v) for g in _fields(_payload_text(msg)) for k, v in g.items()]
    fields: dict[str, str] = {}
    for k, v in pairs:
        fields.setdefault(k, v)
    original = _original_headers(parts)
    rcpts = [_typed_address(v) for k, v in pairs if k in ("original-rcpt-to", "removal-recipient")]
    rcpts = [r for r in rcpts if r]
    if not rcpts:
        rcpts = [
            a.lower()
            for n, v in original
            if n.lower() == "to"
            for _, a in getaddresses([v])
            if "@" in a
        ]
    ftype = (fields.get("feedback-type") or "abuse").split()[0].lower()
    return Report(
        "complaint",
        complaint=Complaint(
            feedback_type=ftype,
            user_agent=fields.get("user-agent", ""),
            arrival_date=fields.get("arrival-date", "") or fields.get("received-date", ""),
            recipients=tuple(dict.fromkeys(rcpts)),
        ),
        original=original,
    )


def envelope_address(value: str) -> str:
    """An address out of a header value (Return-Path, To), lower-cased."""
    return parseaddr(value)[1].lower()
