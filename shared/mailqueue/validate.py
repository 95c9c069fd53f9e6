"""Envelope and content validation: RFC 5321 syntax and limits, before anything is stored."""

from __future__ import annotations

import re

from .errors import InvalidInput

# RFC 5321 §4.5.3.1
MAX_LOCAL_PART = 64
MAX_DOMAIN = 255
MAX_PATH = 256  # including the angle brackets
MAX_LINE = 998  # RFC 5322 §2.1.1, octets excluding CRLF

_ATEXT = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]"
_DOT_ATOM = rf"{_ATEXT}+(?:\.{_ATEXT}+)*"
_QUOTED = r'"(?:[\x20\x21\x23-\x5b\x5d-\x7e]|\\[\x20-\x7e])*"'
_LOCAL_RE = re.compile(rf"^(?:{_DOT_ATOM}|{_QUOTED})$")
_UTF8_ATEXT = r"(?:[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]|[^\x00-\x7f])"
_LOCAL_UTF8_RE = re.compile(rf"^(?:{_UTF8_ATEXT}+(?:\.{_UTF8_ATEXT}+)*|{_QUOTED})$")
_LABEL_RE = re.compile(r"^(?!-)[A-Za-z0-9-]{1,63}(?<!-)$")
_ULABEL_RE = re.compile(r"^(?!-)(?:[A-Za-z0-9-]|[^\x00-\x7f]){1,63}(?<!-)$")
_IPV4_LIT_RE = re.compile(r"^\[(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})\]$")
_FORBIDDEN = re.compile(r"[\r\n\x00]")


def check_no_ctl(value: str, field: str) -> None:
    if _FORBIDDEN.search(value):
        raise InvalidInput("forbidden_character", "CR, LF and NUL are not allowed", field)


def is_ascii(value: str) -> bool:
    return value.isascii()


def validate_address(address: str, field: str, *, smtputf8: bool = False) -> str:
    """Validate one mailbox per RFC 5321 (and RFC 6531 when SMTPUTF8 is declared)."""
    if not isinstance(address, str):
        raise InvalidInput("invalid_address", "address must be a string", field)
    check_no_ctl(address, field)
    if not address:
        raise InvalidInput("invalid_address", "empty address", field)
    if not address.isascii() and not smtputf8:
        raise InvalidInput(
            "smtputf8_required", "internationalised address needs smtputf8 declared", field
        )
    if len(address.encode()) + 2 > MAX_PATH:
        raise InvalidInput("address_too_long", f"path longer than {MAX_PATH} octets", field)
    local, at, domain = address.rpartition("@")
    if not at or not local or not domain:
        raise InvalidInput("invalid_address", "address must be local-part@domain", field)
    if len(local.encode()) > MAX_LOCAL_PART:
        raise InvalidInput(
            "address_too_long", f"local part longer than {MAX_LOCAL_PART} octets", field
        )
    if len(domain.encode()) > MAX_DOMAIN:
        raise InvalidInput("address_too_long", f"domain longer than {MAX_DOMAIN} octets", field)
    local_re = _LOCAL_UTF8_RE if smtputf8 else _LOCAL_RE
    if not local_re.match(local):
        raise InvalidInput("invalid_address", "local part is not RFC 5321 syntax", field)
    m = _IPV4_LIT_RE.match(domain)
    if m:
        if any(int(g) > 255 for g in m.groups()):
            raise InvalidInput("invalid_address", "bad address literal", field)
        return address
    label_re = _ULABEL_RE if smtputf8 else _LABEL_RE
    labels = domain.split(".")
    if len(labels) < 2 or not all(label_re.match(lb) for lb in labels):
        raise InvalidInput("invalid_address", "domain is not a valid host name", field)
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
