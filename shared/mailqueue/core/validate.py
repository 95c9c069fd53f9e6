"""Envelope and content validation: RFC 5321 syntax and limits, before anything is stored."""

from __future__ import annotations

import re

from mailqueue.core.address import MAX_DOMAIN as MAX_DOMAIN  # re-exported: RFC 5321 §4.5.3.1 limits
from mailqueue.core.address import MAX_LOCAL_PART as MAX_LOCAL_PART
from mailqueue.core.address import MAX_PATH as MAX_PATH
from mailqueue.core.address import AddressError
from mailqueue.core.address import parse as parse_mailbox
from mailqueue.core.errors import InvalidInput

MAX_LINE = 998  # RFC 5322 §2.1.1, octets excluding CRLF

_FORBIDDEN = re.compile(r"[\r\n\x00]")


def check_no_ctl(value: str, field: str) -> None:
    if _FORBIDDEN.search(value):
        raise InvalidInput("forbidden_character", "CR, LF and NUL are not allowed", field)


_SURROGATE = re.compile("[\ud800-\udfff]")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def check_text(value: str, field: str | None) -> None:
    """Any client string: it must encode as UTF-8 (no lone surrogate, which JSON's
    ``\\ud800`` escape can produce) and hold no C0/C1 control character or DEL.

    Checked before a string reaches storage: boto3 fails to encode a surrogate (a 500
    after the content is already in S3), and controls have no place in envelope fields.
    """
    if _SURROGATE.search(value):
        raise InvalidInput("invalid_unicode", "a lone UTF-16 surrogate is not text", field)
    if _CONTROL.search(value):
        raise InvalidInput("forbidden_character", "control characters are not allowed", field)


def is_ascii(value: str) -> bool:
    return value.isascii()


def validate_address(address: str, field: str, *, smtputf8: bool = False) -> str:
    """Validate one mailbox with the grammar the SMTP client sends by
    (:mod:`mailqueue.core.address`), so nothing accepted here is refused at delivery."""
    if not isinstance(address, str):
        raise InvalidInput("invalid_address", "address must be a string", field)
    check_no_ctl(address, field)
    try:
        parse_mailbox(address, smtputf8=smtputf8)
    except AddressError as e:
        raise InvalidInput(e.code, e.reason, field) from None
    return address


def validate_sender(sender: str, field: str = "sender", *, smtputf8: bool = False) -> str:
    """The null sender \"\" is allowed here; whether the caller may use it is policy."""
    if sender == "":
        return sender
    return validate_address(sender, field, smtputf8=smtputf8)


def validate_content(content: bytes, *, max_size: int, field: str = "content") -> None:
    """RFC 5322 sanity: a header section, no line over 998 octets, within the size limit."""
    if len(content) > max_size:
        raise InvalidInput("too_large", f"content exceeds {max_size} octets", field)
    if not content:
        raise InvalidInput("empty_content", "content is empty", field)
    head_end = _header_end(content)
    header = content[:head_end] if head_end >= 0 else content
    first = header.split(b"\n", 1)[0].rstrip(b"\r")
    if not re.match(rb"^[\x21-\x39\x3b-\x7e]+:", first):
        raise InvalidInput("no_header", "content does not start with a header section", field)
    start = 0
    n = len(content)
    while start < n:
        end = content.find(b"\n", start)
        if end < 0:
            end = n
        line_len = end - start
        if line_len and content[end - 1 : end] == b"\r" and end < n:
            line_len -= 1
        if line_len > MAX_LINE:
            raise InvalidInput("line_too_long", f"a line exceeds {MAX_LINE} octets", field)
        start = end + 1


def _header_end(content: bytes) -> int:
    a = content.find(b"\r\n\r\n")
    b = content.find(b"\n\n")
    cands = [x for x in (a, b) if x >= 0]
    return min(cands) if cands else -1


def header_section(content: bytes) -> bytes:
    end = _header_end(content)
    return content if end < 0 else content[:end]
