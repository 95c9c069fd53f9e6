"""Trace fields and hop counting: the queue's `Received:` line and its loop guard.

Every mail the ingress accepts gets one `Received:` field (RFC 5321 §4.4) in front of
the client's bytes, and delivery counts the `Received:` fields of the header section
before it connects anywhere: a mail that went round more than `hopcount_limit` times
(Postfix's name and default, 50) is in a loop and is bounced 5.4.6 instead of being
sent round once more.

Form (RFC 5321 §4.4 ``Stamp``; every clause is on the grammar, comments are CFWS)::

    Received: from http-api (principal sha256:...) by mq.example.com
     (mailqueue HTTPS API) id K...; Tue, 02 Jan 2024 03:04:05 +0000

* ``with`` is left out for the HTTP API and SES receipt: neither hop is SMTP/LMTP, the
  IANA "Mail Transmission Types" registry has no HTTP entry, and §4.4 says servers
  SHOULD NOT use unregistered names. The transport is named in the ``by`` comment.
* ``for`` names the recipient only when there is exactly one (more would disclose the
  other, possibly Bcc, recipients) and only for an ASCII address.
* Lines are folded at whitespace to at most 78 octets; no token is long enough to make a
  line exceed 998 (every part is bounded below), and the whole field fits in
  :data:`TRACE_RESERVE`, the allowance the size limit grants on top of the client's mail.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
from collections.abc import Iterable
from datetime import UTC, datetime
from email.utils import format_datetime
from typing import Any, BinaryIO

__all__ = [
    "HEADER_SCAN_LIMIT",
    "HOPCOUNT_LIMIT",
    "TRACE_RESERVE",
    "HeaderPeek",
    "count_received",
    "line_ending",
    "header_prefix",
    "peek_header",
    "principal_key",
    "principal_tag",
    "received_field",
    "top_received_by",
]

HOPCOUNT_LIMIT = 50  # Postfix's hopcount_limit default
TRACE_RESERVE = 2048  # octets: upper bound of one field we prepend (the size limit's allowance)
# The one limit on the header section every reader reads (Postfix's header_size_limit,
# 102,400: "the maximum amount of memory in bytes for storing a message header"): ingress
# (the From field under DkimUnsignedPolicy, dkim.header_section), delivery (hop count and
# the From field it signs for: peek_header). A header section longer than this is read in
# its first HEADER_SCAN_LIMIT octets, cut at the last whole field (`header_prefix`), by
# both alike: ingress read 256 KiB and delivery 100 KiB, so a From field between the two
# was accepted under "refuse" and delivered unsigned (issue 43 item 12).
HEADER_SCAN_LIMIT = 102_400
_FOLD = 78
_CHUNK = 8192
_PRINCIPAL_MAX = 128  # longer ARNs are shown as their digest
_DOMAIN_RE = re.compile(r"^(?!-)[A-Za-z0-9-]{1,63}(?<!-)(?:\.(?!-)[A-Za-z0-9-]{1,63}(?<!-))*$")
_ATOM_RE = re.compile(r"^[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+$")
_RECEIVED_RE = re.compile(rb"^received[ \t]*:", re.IGNORECASE)
_BY_RE = re.compile(rb"\bby[ \t\r\n]+([A-Za-z0-9.-]{1,253})", re.IGNORECASE)


def _domain(value: str, what: str) -> str:
    if len(value) > 253 or not _DOMAIN_RE.match(value):
        raise ValueError(f"{what} is not a domain name: {value!r}")
    return value


def _comment(text: str) -> str:
    """A comment's text as ctext: printable ASCII without the three specials."""
    cleaned = "".join(c for c in text if 0x21 <= ord(c) <= 0x7E and c not in "()\\" or c == " ")
    return "(" + " ".join(cleaned.split()) + ")"


def address_literal(ip: str) -> str | None:
    """``[192.0.2.1]`` / ``[IPv6:2001:db8::1]`` (RFC 5321 §4.1.3), None if not an IP."""
    try:
        addr = ipaddress.ip_address(ip.strip())
    except ValueError:
        return None
    return f"[IPv6:{addr.compressed}]" if addr.version == 6 else f"[{addr}]"


_HEADER_END = re.compile(rb"\r?\n\r?\n")


def header_prefix(content: bytes, limit: int = HEADER_SCAN_LIMIT) -> bytes:
    """The header section (with its blank line) if it ends within `limit` octets; else
    the whole fields among the first `limit` octets (a field cut by the limit, or whose
    continuation lines cannot be seen, is left out: never half a From)."""
    m = _HEADER_END.search(content, 0, limit)
    if m is not None:
        return content[: m.end()]
    head = content[:limit]
    if len(content) < limit:
        return head  # the content ends inside its header section: nothing is cut
    # (decided on the first `limit` octets alone, so that delivery, which has read just
    # those, cuts exactly where ingress, which has the whole content, does)
    # the last field start whose field is seen whole: a line break followed by a
    # non-blank byte, within the limit (the byte after the limit says nothing)
    i = head.rfind(b"\n")
    while i >= 0 and (i + 1 >= len(head) or head[i + 1 : i + 2] in (b" ", b"\t")):
        i = head.rfind(b"\n", 0, i)
    return head[: i + 1]


def principal_tag(principal: str) -> str:
    """A stable, non-revealing name for an IAM principal: operators can recompute it."""
    return "sha256:" + hashlib.sha256(principal.encode()).hexdigest()[:16]


def principal_key(principal: str) -> str:
    """One name for a principal whichever form names it: a digest (``sha256:…``) as is,
    an ARN as its digest. The `mailqueue:principal` tag holds either, as trace_private
    says, and an operator may type either; compared by this they are the same."""
    return principal if principal.startswith("sha256:") else principal_tag(principal)


def line_ending(content: bytes) -> bytes:
    """The client's line ending (CRLF unless its first line ends in a bare LF), so the
    stored mail does not mix the two."""
    nl = content.find(b"\n", 0, HEADER_SCAN_LIMIT)
    return b"\n" if nl >= 0 and (nl == 0 or content[nl - 1 : nl] != b"\r") else b"\r\n"


def _fold(tokens: Iterable[str], newline: str) -> str:
    """Join with single spaces, breaking before a token that would pass column 78."""
    lines: list[str] = []
    cur = ""
    for tok in tokens:
        if not cur:
            cur = tok
        elif len(cur) + 1 + len(tok) <= _FOLD:
            cur += " " + tok
        else:
            lines.append(cur)
            cur = " " + tok  # continuation: FWS at the fold
    lines.append(cur)
    return newline.join(lines) + newline


def received_field(
    *,
    by: str,
    date: datetime,
    from_domain: str,
    queue_id: str | None = None,
    tcp_info: str | None = None,
    from_comment: str | None = None,
    by_comment: str | None = "mailqueue",
    recipients: Iterable[str] = (),
    newline: bytes = b"\r\n",
) -> bytes:
    """One folded `Received:` field, ASCII, ending in `newline`.

    `tcp_info` is an address literal (only when the client's address may be shown);
    `recipients` gives the ``for`` clause when it holds exactly one ASCII address.
    """
    tokens = ["Received:", "from", _domain(from_domain, "from_domain")]
    if tcp_info is not None:
        if address_literal(tcp_info.strip("[]").removeprefix("IPv6:")) != tcp_info:
            raise ValueError(f"tcp_info must be an address literal: {tcp_info!r}")
        tokens.append(f"({tcp_info})")
    if from_comment:
        tokens.extend(_comment(from_comment[:200]).split(" "))
    tokens += ["by", _domain(by, "by")]
    if by_comment:
        tokens.extend(_comment(by_comment[:100]).split(" "))
    if queue_id is not None:
        if len(queue_id) > 64 or not _ATOM_RE.match(queue_id):
            raise ValueError(f"queue id is not an atom: {queue_id!r}")
        tokens += ["id", queue_id]
    rcpts = list(recipients)
    if len(rcpts) == 1 and rcpts[0].isascii() and len(rcpts[0]) <= 256 and "@" in rcpts[0]:
        if not any(c in rcpts[0] for c in "\r\n<>") and " " not in rcpts[0]:
            tokens += ["for", f"<{rcpts[0]}>"]
    if date.tzinfo is None:
        raise ValueError("date must be timezone-aware")
    stamp = format_datetime(date.astimezone(UTC).replace(microsecond=0))
    tokens[-1] += ";"
    tokens += stamp.split(" ")
    out = _fold(tokens, newline.decode()).encode("ascii")
    assert len(out) <= TRACE_RESERVE  # every part above is bounded
    return out


# ---------------------------------------------------------------------- reading


def _header_lines(head: bytes) -> list[bytes]:
    """The lines of the header section in `head` (up to the first empty line)."""
    lines = head.split(b"\n")
    out: list[bytes] = []
    for raw in lines:
        line = raw[:-1] if raw.endswith(b"\r") else raw
        if not line:
            break
        out.append(line)
    return out


def count_received(head: bytes) -> int:
    """`Received:` fields in the header section of `head` (the body is never looked at).

    Only `Received:` counts, as with Postfix's hopcount_limit: `Delivered-To:` is added by
    final delivery agents, not relays, and this queue never adds one (qmail counts both;
    either catches a relay loop, since every pass adds a `Received:`).
    """
    return sum(1 for line in _header_lines(head) if _RECEIVED_RE.match(line))


def top_received_by(head: bytes) -> str | None:
    """The ``by`` domain of the first `Received:` field (who handed the mail to us)."""
    lines = _header_lines(head[:HEADER_SCAN_LIMIT])
    for i, line in enumerate(lines):
        if _RECEIVED_RE.match(line):
            field = [line]
            for cont in lines[i + 1 :]:
                if cont[:1] not in (b" ", b"\t"):
                    break
                field.append(cont)
            m = _BY_RE.search(b" ".join(field))
            if m is None:
                return None
            name = m.group(1).decode("ascii").rstrip(".")
            return name if _DOMAIN_RE.match(name) and "." in name else None
    return None


class HeaderPeek:
    """A stream whose first octets were already read: they are served again first."""

    def __init__(self, head: bytes, rest: BinaryIO) -> None:
        self.head = head  # the header section as read (callers look at fields in it)
        self._head = head
        self._pos = 0
        self._rest = rest

    def read(self, n: int = -1) -> bytes:
        if self._pos < len(self._head):
            if n is None or n < 0:
                out = self._head[self._pos :] + self._rest.read()
                self._pos = len(self._head)
                return out
            out = self._head[self._pos : self._pos + n]
            self._pos += len(out)
            return out
        return self._rest.read(n)

    def close(self) -> None:
        close: Any = getattr(self._rest, "close", None)
        if close is not None:
            close()


def peek_header(stream: BinaryIO, limit: int = HEADER_SCAN_LIMIT) -> tuple[bytes, HeaderPeek]:
    """Read the header section (at most `limit` octets) and a stream that still yields
    the whole content: the hop count never costs a second GetObject."""
    buf = bytearray()
    while len(buf) < limit:
        chunk = stream.read(min(_CHUNK, limit - len(buf)))
        if not chunk:
            break
        start = max(0, len(buf) - 3)
        buf += chunk
        if b"\n\n" in buf[start:] or b"\n\r\n" in buf[start:] or buf.startswith((b"\n", b"\r\n")):
            break
    head = bytes(buf)
    return head, HeaderPeek(head, stream)
