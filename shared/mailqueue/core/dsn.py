"""Delivery status notifications: RFC 3464 reports in an RFC 6522 multipart/report.

One piece (~850 lines): every DSN is one document whose parts constrain each other (the
returned content's form decides part 1's wording and the report's size; the per-recipient
fields and the human text come from the same recipients), so the builder and its checks
stay together.

Pure functions: no I/O, no clock or randomness unless `now` / `message_id` are left out.
Nothing here logs; reports carry addresses and content, and those never go to logs.

Layout of every DSN (RFC 6522 §3, RFC 3464 §2):

1. ``text/plain``: what happened, per recipient, for a human.
2. ``message/delivery-status``: per-message fields, a blank line, then one group of
   per-recipient fields per reported recipient, groups separated by blank lines.
3. optional returned content (RFC 3461 §4.3, RFC 6522 §3):

   - ``message/rfc822``: the whole original, only for RET=FULL on a "failed" report, when
     it fits the size limit and is 7-bit clean with lines of at most 998 octets
     (RFC 2046 §5.2.1 forbids encoding a message/rfc822 body);
   - ``message/global`` + quoted-printable: the same when the original has 8-bit data;
     RFC 6532 §3.5/§3.7 allow any transfer encoding for message/global, so the DSN stays
     7-bit clean and the original still comes back byte for byte;
   - ``text/rfc822-headers``: the header section verbatim, encoded-words as they were, in
     every other case: RET=HDRS or no RET, non-failure reports, postmaster copies, and a
     RET=FULL original over the size limit (a truncated message/rfc822 would be
     malformed; part 1 says so). Headers with 8-bit octets that are not UTF-8 go
     quoted-printable, which RFC 6522 §4 allows for "broken or extended" headers;
   - ``message/global-headers`` + quoted-printable (RFC 6533 §6.3): raw UTF-8 (RFC 6532)
     headers. This is what RFC 6533 says to use for internationalised headers rather than
     down-converting to text/rfc822-headers. The registration prefers 8bit "whenever
     possible", but a builder cannot know the return path, and a DSN that bounces on a
     7-bit hop is lost, so it is always encoded.

The machine-readable part is always 7-bit ``message/delivery-status``: a non-ASCII
address is written as ``utf-8; <utf-8-addr-xtext>`` (RFC 6533 §3). Only a non-ASCII
*original sender* makes the DSN itself need SMTPUTF8 (its To: and RCPT TO carry it); the
returned envelope says so.
"""

from __future__ import annotations

import binascii
import enum
import hashlib
import re
import textwrap
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import format_datetime

from mailqueue.core.model import Envelope, Notify, Recipient, Result, Ret, utcnow

__all__ = [
    "DEFAULT_MAX_RETURNED",
    "EXPIRED_STATUS",
    "Action",
    "Dsn",
    "DsnRecipient",
    "DsnRequest",
    "Returned",
    "build_dsn",
    "dsn_wanted",
    "group_reports",
    "kind_of",
    "postmaster_copy_wanted",
    "utf8_addr_xtext",
    "xtext_decode",
]

# Exim returns at most 100K of a bounced message, Postfix 50000 octets: enough to see what
# bounced without mailing a large attachment back.
DEFAULT_MAX_RETURNED = 100 * 1024
# RFC 3463 §3.5 "Delivery time expired", reported with Action: failed (RFC 3464 §2.3.4
# lets a persistent transient status end in failure; Postfix does the same).
EXPIRED_STATUS = "4.4.7"
MAX_LINE = 998  # RFC 5322 §2.1.1, octets excluding CRLF
_FOLD_AT = 78  # RFC 5322 §2.1.1 SHOULD
_TEXT_WIDTH = 72

_STATUS_RE = re.compile(r"^([245])\.(\d{1,3})\.(\d{1,3})$")  # RFC 3463 §2
_HOST_RE = re.compile(r"^(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.?)+$")
_LITERAL_RE = re.compile(r"^\[[A-Za-z0-9.:-]{2,60}\]$")
_ADDR_TYPE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]{0,63}$")
_MSGID_RE = re.compile(rb"<[\x21-\x3b\x3d\x3f-\x7e]+@[\x21-\x3b\x3d\x3f-\x7e]+>")
_XTEXT_HEX_RE = re.compile(r"\+([0-9A-F]{2})")  # RFC 3461 §4: hexchar is upper case
_CTL_RE = re.compile(r"[\x00-\x1f\x7f]+")
_EOL_RE = re.compile(rb"\r?\n")


class Action(enum.StrEnum):
    """RFC 3464 §2.3.3 action-value. Values match `Recipient.dsn_pending`."""

    FAILED = "failed"
    DELAYED = "delayed"
    DELIVERED = "delivered"
    RELAYED = "relayed"
    EXPANDED = "expanded"


class Returned(enum.StrEnum):
    """What part 3 of a DSN holds."""

    NONE = "none"  # content gone: the report has two parts
    HEADERS = "headers"
    FULL = "full"


_STATUS_CLASSES: dict[Action, frozenset[str]] = {
    Action.FAILED: frozenset("45"),  # 4.x only for expiry-style failures (4.4.7)
    Action.DELAYED: frozenset("4"),
    Action.DELIVERED: frozenset("2"),
    Action.RELAYED: frozenset("2"),
    Action.EXPANDED: frozenset("2"),
}


_DEFAULT_STATUS: dict[Action, str] = {  # RFC 3463 §3.1 "other or undefined" details
    Action.FAILED: "5.0.0",
    Action.DELAYED: "4.0.0",
    Action.DELIVERED: "2.0.0",
    Action.RELAYED: "2.0.0",
    Action.EXPANDED: "2.0.0",
}


def kind_of(action: Action | str) -> Notify:
    """The NOTIFY keyword (RFC 3461 §4.1) that asks for a report of this action."""
    act = Action(action)
    if act is Action.FAILED:
        return Notify.FAILURE
    if act is Action.DELAYED:
        return Notify.DELAY
    return Notify.SUCCESS  # delivered, relayed, expanded (RFC 3461 §5.2.2-§5.2.5)


@dataclass(frozen=True, slots=True)
class DsnRecipient:
    """One per-recipient report (RFC 3464 §2.3).

    `orcpt` is the RFC 3461 ORCPT parameter as received, ``addr-type;xtext``; it is
    xtext-decoded for Original-Recipient. `diagnostic` is the reply (or local verdict)
    behind the report: its code and text make Diagnostic-Code, its remote_mta Remote-MTA.
    """

    address: str
    action: Action
    status: str
    orcpt: str | None = None
    diagnostic: Result | None = None
    last_attempt: datetime | None = None
    will_retry_until: datetime | None = None

    def __post_init__(self) -> None:
        action = Action(self.action)  # a plain "failed" from Recipient.dsn_pending is fine
        object.__setattr__(self, "action", action)
        if not self.address or _CTL_RE.search(self.address):
            raise ValueError("recipient address is empty or has control characters")
        m = _STATUS_RE.match(self.status)
        if not m:
            raise ValueError(f"status {self.status!r} is not an RFC 3463 code")
        if m.group(1) not in _STATUS_CLASSES[action]:
            raise ValueError(f"status {self.status} does not fit action {action}")
        if self.will_retry_until is not None and action is not Action.DELAYED:
            raise ValueError("Will-Retry-Until is only for delayed reports (RFC 3464 §2.3.7)")

    @classmethod
    def from_recipient(
        cls,
        recipient: Recipient,
        action: Action | str,
        *,
        status: str | None = None,
        will_retry_until: datetime | None = None,
    ) -> DsnRecipient:
        """Report a queue recipient; the status defaults to its last result's."""
        act = Action(action)
        result = recipient.last_result
        if status is None:
            if result is not None and result.status[:1] in _STATUS_CLASSES[act]:
                status = result.status
            else:
                status = _DEFAULT_STATUS[act]
        return cls(
            address=recipient.address,
            action=act,
            status=status,
            orcpt=recipient.orcpt,
            diagnostic=result,
            last_attempt=recipient.last_attempt_at,
            will_retry_until=will_retry_until,
        )

    @classmethod
    def for_expiry(cls, recipient: Recipient) -> DsnRecipient:
        """Lifetime expired: failed with 4.4.7; the last deferral stays the diagnostic."""
        return cls.from_recipient(recipient, Action.FAILED, status=EXPIRED_STATUS)


@dataclass(frozen=True, slots=True)
class DsnRequest:
    """Everything one DSN is built from: the original envelope, content and reports.

    `envid` is the RFC 3461 ENVID as received (xtext); `content` is None once the stored
    content is gone, and the DSN then says so and has no third part.
    """

    reporting_mta: str
    postmaster_domain: str
    envelope_sender: str
    arrival_date: datetime
    recipients: tuple[DsnRecipient, ...]
    content: bytes | None
    ret: Ret | None = None
    envid: str | None = None
    max_returned_size: int = DEFAULT_MAX_RETURNED

    def __post_init__(self) -> None:
        object.__setattr__(self, "recipients", tuple(self.recipients))
        if not self.recipients:
            raise ValueError("a DSN reports at least one recipient")
        if not _is_host(self.reporting_mta):
            raise ValueError("reporting_mta is not a host name")
        if not _is_host(self.postmaster_domain):
            raise ValueError("postmaster_domain is not a domain")
        if self.max_returned_size <= 0:
            raise ValueError("max_returned_size must be positive")
        if _CTL_RE.search(self.envelope_sender):
            raise ValueError("envelope sender has control characters")

    @classmethod
    def for_envelope(
        cls,
        envelope: Envelope,
        recipients: Iterable[DsnRecipient],
        *,
        reporting_mta: str,
        postmaster_domain: str,
        arrival_date: datetime,
        content: bytes | None,
        max_returned_size: int = DEFAULT_MAX_RETURNED,
    ) -> DsnRequest:
        """Take sender, RET and ENVID from the original envelope."""
        return cls(
            reporting_mta=reporting_mta,
            postmaster_domain=postmaster_domain,
            envelope_sender=envelope.sender,
            arrival_date=arrival_date,
            recipients=tuple(recipients),
            content=content,
            ret=envelope.ret,
            envid=envelope.envid,
            max_returned_size=max_returned_size,
        )


@dataclass(frozen=True, slots=True)
class Dsn:
    """A built DSN: RFC 5322 bytes (CRLF) and the envelope to send them with."""

    envelope: Envelope  # sender "" (RFC 5321 §4.5.5), one recipient
    content: bytes
    message_id: str
    kind: Notify  # FAILURE, DELAY or SUCCESS: what the Subject announces
    returned: Returned
    truncated: bool = False  # a full return was cut back to headers (or headers cut short)
    reported: tuple[str, ...] = field(default=())  # Final-Recipient addresses, in order


# ---------------------------------------------------------------------------------------
# Policy


def dsn_wanted(
    envelope_sender: str,
    recipient_notify: Sequence[Notify | str],
    action: Action | str,
    delay_by_config: bool,
) -> bool:
    """Whether the original sender gets a report of `action` for one recipient.

    Never to the null sender (RFC 5321 §4.5.5, RFC 3461 §6.1): that is how DSN loops end.
    NOTIFY=NEVER suppresses everything; no NOTIFY means FAILURE, plus DELAY if configured
    (RFC 3461 §4.1); relayed/expanded notices count as SUCCESS (RFC 3461 §5.2.2, §6.2).
    """
    if envelope_sender == "":
        return False
    notify = {Notify(n) for n in recipient_notify}
    kind = kind_of(action)
    if Notify.NEVER in notify:
        return False
    if not notify:
        return kind is Notify.FAILURE or (kind is Notify.DELAY and delay_by_config)
    return kind in notify


def postmaster_copy_wanted(
    envelope_sender: str,
    failed_recipients: Sequence[str],
    action: Action | str,
    postmaster: str | None,
    *,
    all_bounces: bool = False,
) -> bool:
    """Whether a configured postmaster gets a (headers-only) copy of a failure.

    A failed null-sender mail is a DSN (or a postmaster copy) that bounced: its sender will
    never hear of it, so postmaster gets one copy ("double bounce"). If the failed mail was
    itself addressed to postmaster, that copy is what failed: nothing more, so copies never
    go more than one level deep. Ordinary bounces are copied only with `all_bounces`.
    """
    if not postmaster or Action(action) is not Action.FAILED:
        return False
    if envelope_sender == "":
        pm = postmaster.lower()
        return not failed_recipients or any(r.lower() != pm for r in failed_recipients)
    return all_bounces


def group_reports(
    reports: Iterable[DsnRecipient],
) -> list[tuple[Notify, tuple[DsnRecipient, ...]]]:
    """Split one mail's reports of one batch into one DSN per kind.

    Kinds are FAILURE, DELAY and SUCCESS (delivered, relayed and expanded together), in
    that order, empty ones left out. RFC 3464 allows mixed actions in one DSN, but list
    managers and bounce processors act on the first or the "worst" action, and the Subject
    can only tell one story; a per-kind DSN is read right by all of them. A recipient
    reported twice in one kind keeps its place and its latest report.
    """
    buckets: dict[Notify, dict[str, DsnRecipient]] = {
        Notify.FAILURE: {},
        Notify.DELAY: {},
        Notify.SUCCESS: {},
    }
    for report in reports:
        buckets[kind_of(report.action)][report.address] = report
    return [(kind, tuple(b.values())) for kind, b in buckets.items() if b]


# ---------------------------------------------------------------------------------------
# Field encodings


def xtext_decode(value: str) -> str:
    """RFC 3461 §4 xtext: ``+HH`` (upper-case hex) is one octet, the rest is itself.

    Decoded octets are read as UTF-8 (invalid sequences become U+FFFD), so an escaped
    UTF-8 address comes back whole.
    """
    out = bytearray()
    pos = 0
    for m in _XTEXT_HEX_RE.finditer(value):
        out += value[pos : m.start()].encode("utf-8", "surrogatepass")
        out.append(int(m.group(1), 16))
        pos = m.end()
    out += value[pos:].encode("utf-8", "surrogatepass")
    return out.decode("utf-8", "replace")


def utf8_addr_xtext(address: str) -> str:
    """RFC 6533 §3 utf-8-addr-xtext: 7-bit form of an internationalised address.

    Printable ASCII except ``+``, ``=`` and ``\\`` stays; every other character becomes
    ``\\x{HEX}`` (upper case, at least two digits, no extra leading zeros).
    """
    out = []
    for ch in address:
        cp = ord(ch)
        if 0x21 <= cp <= 0x7E and ch not in "+=\\":
            out.append(ch)
        elif cp == 0:
            continue  # HEXPOINT cannot express NUL
        else:
            out.append(f"\\x{{{cp:02X}}}")
    return "".join(out)


def _typed_address(address: str, addr_type: str = "rfc822") -> str:
    """``type; address`` for Final-/Original-Recipient, 7-bit (RFC 3464 §2.3.1-2)."""
    clean = _CTL_RE.sub("", address).strip()
    if clean.isascii() and addr_type.lower() != "utf-8":
        return f"{addr_type}; {clean}"
    return f"utf-8; {utf8_addr_xtext(clean)}"


def _original_recipient(orcpt: str) -> str | None:
    """Original-Recipient value from an ORCPT parameter (RFC 3461 §6.3 d)."""
    addr_type, sep, value = orcpt.partition(";")
    if not sep:
        addr_type, value = "rfc822", orcpt
    addr_type = addr_type.strip()
    if not _ADDR_TYPE_RE.match(addr_type):
        return None
    decoded = xtext_decode(value.strip())
    if addr_type.lower() == "utf-8":
        # already utf-8-addr-xtext/unitext: re-escape only what is not 7-bit.
        decoded = "".join(c if c.isascii() else f"\\x{{{ord(c):02X}}}" for c in decoded)
        decoded = _CTL_RE.sub("", decoded)
        return f"utf-8; {decoded}" if decoded else None
    return _typed_address(decoded, addr_type) if decoded.strip() else None


def _ascii_text(text: str) -> str:
    """Single-line printable ASCII for a delivery-status field (RFC 3464 §2.1.1)."""
    text = _CTL_RE.sub(" ", text)
    text = "".join(c if c.isascii() else "?" for c in text)
    return " ".join(text.split())


def _display_text(text: str, limit: int = 600) -> str:
    """Single-line text for the human part; Unicode allowed, controls gone."""
    text = " ".join(_CTL_RE.sub(" ", text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _is_host(value: str) -> bool:
    return 0 < len(value) <= 255 and bool(_HOST_RE.match(value) or _LITERAL_RE.match(value))


def _remote_mta(value: str | None) -> str | None:
    """Remote-MTA host (RFC 3464 §2.3.5), tolerating a Postfix-style ``host[addr]``."""
    if not value:
        return None
    host = value.strip()
    if "[" in host and not host.startswith("["):
        host = host.split("[", 1)[0]
    return host if _is_host(host) else None


def _diagnostic_code(result: Result) -> str | None:
    """Diagnostic-Code value (RFC 3464 §2.3.6): the SMTP reply, or a local verdict."""
    text = _ascii_text(result.text)
    if 200 <= result.code <= 599:
        code = str(result.code)
        reply = text if text.split(" ", 1)[0].rstrip("-") == code else f"{code} {text}"
        return f"smtp; {reply.strip()}"
    # no SMTP reply (connection-level failure): an extension diagnostic-type, RFC 3464 §2.3.6
    return f"x-mailqueue; {text}" if text else None


def _date(value: datetime) -> str:
    """RFC 5322 §3.3 date-time; naive datetimes are UTC, like everywhere in the queue."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return format_datetime(value.astimezone(UTC))


def _field(name: str, value: str) -> str:
    """One header field, folded at spaces so no line passes 78 (SHOULD) / 998 (MUST)."""
    words = value.split(" ")
    lines: list[str] = []
    cur = f"{name}:"
    for word in words:
        while len(word) > MAX_LINE - 2:  # one unbreakable token: cut it, never overflow
            if cur.strip():
                lines.append(cur)
            lines.append(" " + word[: MAX_LINE - 2])
            word = word[MAX_LINE - 2 :]
            cur = ""
        if cur and len(cur) + 1 + len(word) > _FOLD_AT and cur.strip() != f"{name}:":
            lines.append(cur)
            cur = ""
        cur = f"{cur} {word}"
    lines.append(cur)
    return "\r\n".join(ln for ln in lines if ln)


# ---------------------------------------------------------------------------------------
# Content handling


def _crlf(data: bytes) -> bytes:
    return _EOL_RE.sub(b"\r\n", data)


def _split_content(content: bytes) -> tuple[bytes, bytes]:
    """(header section with its final CRLF, body) of CRLF-normalised content."""
    norm = _crlf(content)
    if norm.startswith(b"\r\n"):
        return b"", norm[2:]
    end = norm.find(b"\r\n\r\n")
    if end < 0:
        return (norm if norm.endswith(b"\r\n") else norm + b"\r\n"), b""
    return norm[: end + 2], norm[end + 4 :]


def _seven_bit_clean(data: bytes) -> bool:
    """RFC 2045 §2.7 7bit data: no NUL, no 8-bit octets, CR only in CRLF, short lines."""
    if re.search(rb"[\x00\x80-\xff]|\r(?!\n)", data):
        return False
    return all(len(line) <= MAX_LINE for line in data.split(b"\r\n"))


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _qp(data: bytes) -> bytes:
    """Quoted-printable (RFC 2045 §6.7) with CRLF line breaks and lines of <= 76."""
    encoded = binascii.b2a_qp(data, quotetabs=False, istext=True, header=False)
    return _crlf(encoded)


def _message_id_of(headers: bytes) -> str | None:
    """The original's Message-ID (first one), if it is a syntactically sane msg-id."""
    unfolded = re.sub(rb"\r\n[ \t]+", b" ", headers)
    for line in unfolded.split(b"\r\n"):
        name, sep, value = line.partition(b":")
        if sep and name.strip().lower() == b"message-id":
            m = _MSGID_RE.search(value)
            if m and len(m.group(0)) <= 900:
                return m.group(0).decode("ascii")
            return None
    return None


def _cut_headers(headers: bytes, limit: int) -> bytes:
    """Headers cut at a field boundary so they fit `limit`: still well-formed."""
    if len(headers) <= limit:
        return headers
    cut = headers.rfind(b"\r\n", 0, limit - 1)
    while cut > 0 and headers[cut + 2 : cut + 3] in (b" ", b"\t"):
        cut = headers.rfind(b"\r\n", 0, cut)
    return headers[: cut + 2] if cut > 0 else b""


@dataclass(frozen=True, slots=True)
class _Part:
    headers: tuple[tuple[str, str], ...]
    body: bytes  # CRLF lines, ending in CRLF


def _returned_part(
    content: bytes, want_full: bool, limit: int
) -> tuple[_Part, Returned, str | None]:
    """Part 3 and, when it is not what was asked for, a sentence saying why."""
    headers, _body = _split_content(content)
    note: str | None = None
    if want_full:
        if len(content) <= limit:
            whole = _crlf(content)
            if not whole.endswith(b"\r\n"):
                whole += b"\r\n"
            if _seven_bit_clean(whole):
                return _Part((("Content-Type", "message/rfc822"),), whole), Returned.FULL, None
            if _is_utf8(headers):
                part = _Part(
                    (
                        ("Content-Type", "message/global"),
                        ("Content-Transfer-Encoding", "quoted-printable"),
                    ),
                    _qp(whole),
                )
                return part, Returned.FULL, None
            note = (
                "Your message could not be returned in full because its header is not "
                "valid; only its header is attached."
            )
        else:
            note = (
                f"Your message was too large to return in full ({len(content)} octets; "
                f"the limit is {limit}), so only its header is attached."
            )
    cut = _cut_headers(headers, limit)
    if len(cut) < len(headers):
        note = (note + " " if note else "") + "The attached header was shortened."
    if _seven_bit_clean(cut):
        part = _Part((("Content-Type", "text/rfc822-headers"),), cut)
    elif _is_utf8(cut):
        part = _Part(
            (
                ("Content-Type", "message/global-headers"),
                ("Content-Transfer-Encoding", "quoted-printable"),
            ),
            _qp(cut),
        )
    else:
        part = _Part(
            (
                ("Content-Type", "text/rfc822-headers"),
                ("Content-Transfer-Encoding", "quoted-printable"),
            ),
            _qp(cut),
        )
    return part, Returned.HEADERS, note


# ---------------------------------------------------------------------------------------
# The report


# Subjects no other MTA uses: bounce parsers (Sisimai, ...) pick an MTA-specific reader
# by Subject, and Postfix's "Undelivered Mail Returned to Sender" made Sisimai read our
# multi-recipient reports with Postfix's reader, misattributing statuses. These fall to
# the generic RFC 3464 readers (tests/test_dsn_flufl.py, and Sisimai checked by hand).
_SUBJECTS = {
    Notify.FAILURE: "Mail returned to sender: not delivered",
    Notify.DELAY: "Mail not yet delivered: still being retried",
    Notify.SUCCESS: "Mail delivered: success report",
}


def _report_kind(recipients: Sequence[DsnRecipient]) -> Notify:
    """The kind the Subject announces: the most urgent action present."""
    kinds = {kind_of(r.action) for r in recipients}
    for kind in (Notify.FAILURE, Notify.DELAY, Notify.SUCCESS):
        if kind in kinds:
            return kind
    raise ValueError("no recipients")  # pragma: no cover - DsnRequest forbids it


def _delivery_status(req: DsnRequest) -> bytes:
    """Part 2: RFC 3464 §2.2 per-message fields, then §2.3 per-recipient groups."""
    head = [_field("Reporting-MTA", f"dns; {req.reporting_mta}")]
    if req.envid:
        envid = _ascii_text(xtext_decode(req.envid))
        if envid:
            head.append(_field("Original-Envelope-Id", envid))
    head.append(_field("Arrival-Date", _date(req.arrival_date)))
    blocks = ["\r\n".join(head)]
    for r in req.recipients:
        lines: list[str] = []
        if r.orcpt:
            orig = _original_recipient(r.orcpt)
            if orig:
                lines.append(_field("Original-Recipient", orig))
        lines.append(_field("Final-Recipient", _typed_address(r.address)))
        lines.append(_field("Action", r.action.value))
        lines.append(_field("Status", r.status))
        mta = _remote_mta(r.diagnostic.remote_mta if r.diagnostic else None)
        if mta:
            lines.append(_field("Remote-MTA", f"dns; {mta}"))
        diag = _diagnostic_code(r.diagnostic) if r.diagnostic else None
        if diag:
            lines.append(_field("Diagnostic-Code", diag))
        if r.last_attempt:
            lines.append(_field("Last-Attempt-Date", _date(r.last_attempt)))
        if r.action is Action.DELAYED and r.will_retry_until:
            lines.append(_field("Will-Retry-Until", _date(r.will_retry_until)))
        blocks.append("\r\n".join(lines))
    return ("\r\n\r\n".join(blocks) + "\r\n").encode("ascii")


def _explain(r: DsnRecipient, arrival: datetime) -> str:
    """One recipient's paragraph for the human part."""
    status = r.status
    said = ""
    reply = ""
    if r.diagnostic and r.diagnostic.text.strip():
        host = _remote_mta(r.diagnostic.remote_mta)
        said = _display_text(r.diagnostic.text)
        if 200 <= r.diagnostic.code <= 599 and not said.startswith(str(r.diagnostic.code)):
            said = f"{r.diagnostic.code} {said}"
        reply = f" The server {host} said: {said}" if host else f" Reason: {said}"
    who = f"<{_display_text(r.address, 300)}>:"
    if r.action is Action.FAILED:
        if status == EXPIRED_STATUS:
            what = (
                f"delivery has been tried since {_date(arrival)} without success, and the "
                f"message has now expired ({status}); the mail system has given up."
            )
            return f"{who} {what}" + (f" Last error: {said}" if said else "")
        transient = " (a temporary error that did not clear)" if status[0] == "4" else ""
        return f"{who} delivery failed permanently{transient} ({status}).{reply}"
    if r.action is Action.DELAYED:
        until = (
            f" The mail system will keep trying until {_date(r.will_retry_until)}."
            if r.will_retry_until
            else " The mail system will keep trying."
        )
        return f"{who} not delivered yet ({status}).{reply}{until}"
    if r.action is Action.DELIVERED:
        return f"{who} delivered ({status})."
    if r.action is Action.RELAYED:
        return (
            f"{who} relayed ({status}) to a system that does not send delivery "
            "notifications; you may not hear more about this recipient."
        )
    return (
        f"{who} delivered to a list or alias ({status}) and passed on to its members; "
        "their systems report from here on."
    )


def _human_text(
    req: DsnRequest, kind: Notify, note: str | None, returned: Returned, copy_to: str | None
) -> str:
    """Part 1 (RFC 6522 §3: a human-readable explanation)."""
    intro = {
        Notify.FAILURE: "Your message could not be delivered to the recipients below.",
        Notify.DELAY: (
            "Your message has not yet been delivered to the recipients below. This is "
            "only a warning; you do not need to send the message again."
        ),
        Notify.SUCCESS: "Your message was delivered to the recipients below.",
    }[kind]
    paras = [f"This is the mail system at host {req.reporting_mta}.", intro]
    if copy_to is not None:
        paras.insert(1, "This is a copy of a delivery report for the postmaster.")
    paras.extend(_explain(r, req.arrival_date) for r in req.recipients)
    if returned is Returned.FULL:
        paras.append("Your message is attached.")
    elif returned is Returned.HEADERS:
        paras.append(note or "The header of your message is attached.")
    else:
        paras.append("The content of your message is no longer available, so it is not attached.")
    if kind is not Notify.SUCCESS:
        paras.append(
            f"For further help, please contact postmaster@{req.postmaster_domain} and "
            "include this report."
        )
    wrapped = [
        textwrap.fill(
            p,
            _TEXT_WIDTH,
            subsequent_indent="    " if p.startswith("<") else "",
            break_long_words=True,
            break_on_hyphens=False,
        )
        for p in paras
    ]
    return "\n\n".join(wrapped) + "\n"


def _text_part(text: str) -> _Part:
    data = text.replace("\n", "\r\n").encode("utf-8")
    if text.isascii():
        return _Part(
            (
                ("Content-Type", "text/plain; charset=us-ascii"),
                ("Content-Description", "Notification"),
            ),
            data,
        )
    return _Part(
        (
            ("Content-Type", "text/plain; charset=utf-8"),
            ("Content-Transfer-Encoding", "quoted-printable"),
            ("Content-Description", "Notification"),
        ),
        _qp(data),
    )


def _normalise_msgid(message_id: str | None, host: str) -> str:
    if message_id is None:
        return f"<{uuid.uuid4().hex}@{host}>"
    mid = message_id.strip()
    if not mid.startswith("<"):
        mid = f"<{mid}>"
    if not _MSGID_RE.fullmatch(mid.encode("utf-8", "replace")):
        raise ValueError("message_id is not an RFC 5322 msg-id")
    return mid


def _boundary(message_id: str, parts: Sequence[_Part]) -> str:
    """Deterministic boundary that occurs in no part (RFC 2046 §5.1.1)."""
    for n in range(1000):
        digest = hashlib.sha256(f"{message_id}/{n}".encode()).hexdigest()[:40]
        boundary = f"=_dsn_{digest}"
        marker = b"--" + boundary.encode("ascii")
        if not any(marker in p.body for p in parts):
            return boundary
    raise RuntimeError("no free MIME boundary")  # pragma: no cover - 2**160 odds


def build_dsn(
    request: DsnRequest,
    *,
    now: datetime | None = None,
    message_id: str | None = None,
    to: str | None = None,
) -> Dsn:
    """Build one DSN for `request`'s recipients, addressed to the original sender.

    `to` sends it elsewhere instead (a postmaster copy, see `postmaster_copy_wanted`);
    such a copy returns headers only, never a body. A null-sender original without `to`
    is refused: no DSN about a DSN (RFC 5321 §4.5.5).
    """
    rcpt = request.envelope_sender if to is None else to
    if not rcpt:
        raise ValueError("no DSN to the null sender (RFC 3461 §6.1, RFC 5321 §4.5.5)")
    if _CTL_RE.search(rcpt) or "<" in rcpt or ">" in rcpt or len(rcpt.encode()) > 254:
        raise ValueError("DSN recipient is not a plain address")
    when = now if now is not None else utcnow()
    mid = _normalise_msgid(message_id, request.reporting_mta)
    kind = _report_kind(request.recipients)

    # Part 3 first: part 1 has to say what it holds.
    returned = Returned.NONE
    note: str | None = None
    third: _Part | None = None
    original_mid: str | None = None
    if request.content is not None:
        has_failure = any(r.action is Action.FAILED for r in request.recipients)
        # RFC 3461 §4.3: RET=FULL asks for the message in "failed" DSNs only; the
        # default (no RET) is headers, as for every other kind and every copy.
        want_full = request.ret is Ret.FULL and has_failure and to is None
        third, returned, note = _returned_part(
            request.content, want_full, request.max_returned_size
        )
        original_mid = _message_id_of(_split_content(request.content)[0])
    truncated = note is not None

    first = _text_part(_human_text(request, kind, note, returned, to))
    second = _Part(
        (
            ("Content-Type", "message/delivery-status"),
            ("Content-Description", "Delivery report"),
        ),
        _delivery_status(request),
    )
    parts = [first, second] + ([third] if third else [])
    boundary = _boundary(mid, parts)

    head = [
        _field("From", f"Mail Delivery System <MAILER-DAEMON@{request.postmaster_domain}>"),
        f"To: <{rcpt}>",
        _field("Subject", _SUBJECTS[kind]),
        _field("Date", _date(when)),
        f"Message-ID: {mid}",
    ]
    if original_mid:
        head.append(f"In-Reply-To: {original_mid}")
        head.append(f"References: {original_mid}")
    head += [
        "Auto-Submitted: auto-replied",  # RFC 3834 §5
        "MIME-Version: 1.0",
        _field(
            "Content-Type",
            f'multipart/report; report-type=delivery-status; boundary="{boundary}"',
        ),
    ]
    out = bytearray("\r\n".join(head).encode("utf-8"))
    out += b"\r\n\r\nThis is a MIME-encapsulated delivery status notification.\r\n"
    for part in parts:
        out += f"\r\n--{boundary}\r\n".encode("ascii")
        out += "".join(f"{k}: {v}\r\n" for k, v in part.headers).encode("ascii")
        out += b"\r\n" + part.body
    out += f"\r\n--{boundary}--\r\n".encode("ascii")
    data = bytes(out)
    if any(len(line) > MAX_LINE for line in data.split(b"\r\n")):
        raise RuntimeError("DSN line over 998 octets")  # pragma: no cover - by construction

    envelope = Envelope(
        sender="",
        recipients=(Recipient(rid="r0", address=rcpt),),
        smtputf8=not rcpt.isascii(),
    )
    return Dsn(
        envelope=envelope,
        content=data,
        message_id=mid,
        kind=kind,
        returned=returned,
        truncated=truncated,
        reported=tuple(r.address for r in request.recipients),
    )
