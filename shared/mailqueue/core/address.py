"""The one mailbox grammar: RFC 5321 §4.1.2/§4.1.3, extended by RFC 6531 (SMTPUTF8).

The ingress validates with it and the SMTP client builds ``MAIL FROM:<…>`` and
``RCPT TO:<…>`` from it, so whatever the ingress accepts goes on the wire, and whatever
the client would refuse never gets past the ingress (issue 14: quoted local parts with
``<`` were accepted, then refused by the client: a sender's mail was never delivered nor
bounced).

Grammar (RFC 5321)::

    Mailbox       = Local-part "@" ( Domain / address-literal )
    Local-part    = Dot-string / Quoted-string
    Dot-string    = Atom *("." Atom)          Atom = 1*atext
    Quoted-string = DQUOTE *(qtextSMTP / quoted-pairSMTP) DQUOTE
    qtextSMTP     = %d32-33 / %d35-91 / %d93-126     quoted-pairSMTP = "\\" %d32-126
    Domain        = sub-domain *("." sub-domain)     sub-domain = Let-dig [Ldh-str]
    address-literal = "[" ( IPv4-address-literal / IPv6-address-literal /
                            General-address-literal ) "]"

RFC 6531 adds UTF8-non-ascii to atext and qtextSMTP, and U-labels to sub-domain.

Decisions where the RFCs leave room (each what a mail operator would expect):

* **Quoted local parts are accepted**, with any qtext (``<``, ``>``, ``@``, space, …),
  and sent as RFC 5321 §4.1.2 asks: "all quoted forms MUST be treated as equivalent,
  and the sending system SHOULD transmit the form that uses the minimum quoting
  possible" — ``"john"@x`` goes out as ``john@x``, ``"a<b"@x`` as ``"a<b"@x``,
  ``"a\\b"@x`` as ``ab@x`` (Postfix does the same). An empty local part (``""@x``) is
  refused: no mailbox has an empty name.
* **Limits** (§4.5.3.1: local part 64 octets, domain 255, path 256 with the brackets)
  apply to the form sent on the wire; the input may be at most 1,000 characters.
* **Domains** need at least two labels (§2.3.5: only fully-qualified names); no trailing
  dot. A U-label must convert to an A-label (IDNA 2003 ToASCII, the codec
  :mod:`mailqueue.outbound.routing` looks the domain up with) that is LDH and ≤ 63 octets.
* **Address literals**: IPv4 (no leading zeros: ``[010.0.0.1]`` is ambiguous, and the
  router's :mod:`ipaddress` refuses it) and ``IPv6:`` (tag case-insensitive) in exactly
  the four forms of §4.1.3, no zone id. General-address-literals are refused: IANA has
  registered no tag other than IPv6, so nothing could route them.
* **Non-ASCII** (RFC 6531) only with SMTPUTF8; C1 controls and surrogates never.
* **Equivalence** (:attr:`Mailbox.key`, for merging duplicate recipients): the local part
  compares by its meaning (quotes and escapes removed) and case-sensitively (§2.4: "the
  local-part MUST be interpreted and assigned semantics only by the host specified in
  the domain part"); the domain case-insensitively, U-labels as their A-labels; IPv6
  literals in their canonical text. No Unicode normalisation of local parts (RFC 6531
  requires none; the receiving host decides).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from encodings import idna as _idna

__all__ = [
    "MAX_DOMAIN",
    "MAX_INPUT",
    "MAX_LOCAL_PART",
    "MAX_PATH",
    "AddressError",
    "Mailbox",
    "key",
    "parse",
    "parse_path",
    "wire_path",
]

MAX_LOCAL_PART = 64  # octets, RFC 5321 §4.5.3.1.1
MAX_DOMAIN = 255  # octets, §4.5.3.1.2
MAX_PATH = 256  # octets including "<" and ">", §4.5.3.1.3
MAX_INPUT = 1000  # characters of input considered at all

_ATEXT = "A-Za-z0-9!#$%&'*+/=?^_`{|}~\\-"  # in a character class: "-" escaped
# RFC 3629 UTF8-non-ascii, less the C1 controls: U+00A0 and up, no surrogates, i.e.
# U+00A0-U+D7FF and U+E000-U+10FFFF, written as a negated class: the same characters,
# but re compiles it in well under 1 ms where the positive ranges cost ~20 ms of cold start
_NON_ASCII = r"[^\x00-\x9f\ud800-\udfff]"
_DOT_ATOM_CHAR = rf"(?:[{_ATEXT}]|{_NON_ASCII})"
_DOT_STRING_UTF8 = re.compile(rf"{_DOT_ATOM_CHAR}+(?:\.{_DOT_ATOM_CHAR}+)*")
_QUOTED_UTF8 = re.compile(rf'"((?:[\x20\x21\x23-\x5b\x5d-\x7e]|{_NON_ASCII}|\\[\x20-\x7e])*)"')
_UNESCAPE = re.compile(r"\\(.)")
_LDH_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
_U_LABEL = re.compile(rf"(?:[A-Za-z0-9-]|{_NON_ASCII}){{1,63}}")
_IDNA_DOTS = re.compile("[\u3002\uff0e\uff61]")  # label separators to IDNA 2003
_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_IPV4 = re.compile(rf"{_OCTET}(?:\.{_OCTET}){{3}}")
_HEX4 = re.compile(r"[0-9A-Fa-f]{1,4}")
_TAG = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?:[\x21-\x5a\x5e-\x7e]+")


class AddressError(ValueError):
    """Not a mailbox this queue accepts; ``code`` is the machine-readable reason."""

    def __init__(self, code: str, reason: str) -> None:
        super().__init__(reason)
        self.code = code  # invalid_address | address_too_long | smtputf8_required
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Mailbox:
    """A parsed mailbox: its parts, its wire form, its equivalence key."""

    local: str  # the local part's meaning: outer quotes and backslash escapes removed
    domain: str  # as given (case kept); "[…]" for an address literal
    domain_key: str  # lower-case A-label form, or the canonical literal

    @property
    def literal(self) -> bool:
        return self.domain.startswith("[")

    @property
    def local_wire(self) -> str:
        """The local part with the minimum quoting possible (RFC 5321 §4.1.2)."""
        if _DOT_STRING_UTF8.fullmatch(self.local):
            return self.local
        return '"' + self.local.replace("\\", "\\\\").replace('"', '\\"') + '"'

    @property
    def wire(self) -> str:
        """What goes between ``<`` and ``>`` in MAIL FROM / RCPT TO."""
        return f"{self.local_wire}@{self.domain}"

    @property
    def smtputf8(self) -> bool:
        """Whether sending it needs the SMTPUTF8 extension (RFC 6531)."""
        return not self.wire.isascii()

    @property
    def key(self) -> str:
        """Equal for the addresses RFC 5321 says are the same mailbox (see module doc)."""
        return f"{self.local}@{self.domain_key}"


def parse(address: str, *, smtputf8: bool = True) -> Mailbox:
    """Parse one mailbox; ``smtputf8`` False refuses non-ASCII. Raises AddressError."""
    if not isinstance(address, str):
        raise AddressError("invalid_address", "address must be a string")
    if not address:
        raise AddressError("invalid_address", "empty address")
    if len(address) > MAX_INPUT:
        raise AddressError("address_too_long", f"address longer than {MAX_INPUT} characters")
    if not address.isascii() and not smtputf8:
        raise AddressError("smtputf8_required", "internationalised address needs smtputf8 declared")
    raw_local, at, domain = address.rpartition("@")
    if not at or not raw_local or not domain:
        raise AddressError("invalid_address", "address must be local-part@domain")
    mailbox = Mailbox(_local(raw_local), domain, _domain(domain))
    if len(mailbox.local_wire.encode()) > MAX_LOCAL_PART:
        raise AddressError("address_too_long", f"local part longer than {MAX_LOCAL_PART} octets")
    if len(domain.encode()) > MAX_DOMAIN or len(mailbox.domain_key) > MAX_DOMAIN:
        raise AddressError("address_too_long", f"domain longer than {MAX_DOMAIN} octets")
    if len(mailbox.wire.encode()) + 2 > MAX_PATH:
        raise AddressError("address_too_long", f"path longer than {MAX_PATH} octets")
    return mailbox


def key(address: str) -> str:
    """The equivalence key of a valid address (AddressError otherwise)."""
    return parse(address).key


def wire_path(address: str) -> str:
    """``<wire form>`` for MAIL FROM / RCPT TO; ``<>`` for the null sender."""
    return "<>" if address == "" else f"<{parse(address).wire}>"


def parse_path(text: str) -> tuple[Mailbox | None, str]:
    """Parse ``<mailbox>`` at the start of ``text`` (a MAIL/RCPT argument after the
    colon): the mailbox (None for ``<>``) and the rest (parameters). Quoted strings may
    hold ``>``, so the closing bracket is found by the grammar, not by searching."""
    if not text.startswith("<"):
        raise AddressError("invalid_address", "path must start with '<'")
    i, n = 1, len(text)
    quoted = False
    while i < n:
        c = text[i]
        if quoted and c == "\\":
            i += 2
            continue
        if c == '"':
            quoted = not quoted
        elif c == ">" and not quoted:
            inner, rest = text[1:i], text[i + 1 :]
            return (parse(inner) if inner else None), rest.lstrip(" ")
        i += 1
    raise AddressError("invalid_address", "path has no closing '>'")


def _local(raw: str) -> str:
    """The local part's meaning; refuses what is neither Dot-string nor Quoted-string."""
    if raw.startswith('"'):
        m = _QUOTED_UTF8.fullmatch(raw)
        if m is None:
            raise AddressError("invalid_address", "local part is not an RFC 5321 quoted string")
        local = _UNESCAPE.sub(r"\1", m.group(1))
        if not local:
            raise AddressError("invalid_address", "empty local part")
        return local
    if not _DOT_STRING_UTF8.fullmatch(raw):
        raise AddressError("invalid_address", "local part is not RFC 5321 syntax")
    return raw


def _domain(domain: str) -> str:
    """The domain's comparison key; refuses what RFC 5321 (as decided above) does not allow."""
    if domain.startswith("["):
        return _literal(domain)
    labels = domain.split(".")
    if len(labels) < 2:
        raise AddressError("invalid_address", "domain must be fully qualified")
    out = []
    for label in labels:
        if label.isascii():
            if not _LDH_LABEL.fullmatch(label):
                raise AddressError("invalid_address", "domain is not a valid host name")
            out.append(label.lower())
            continue
        if (
            not _U_LABEL.fullmatch(label)
            or _IDNA_DOTS.search(label)
            or label[0] == "-"
            or label[-1] == "-"
        ):
            raise AddressError("invalid_address", "domain has an invalid U-label")
        try:
            a_label = _idna.ToASCII(label).decode("ascii").lower()
        except UnicodeError:
            raise AddressError("invalid_address", "domain has an invalid U-label") from None
        if not _LDH_LABEL.fullmatch(a_label):
            raise AddressError("invalid_address", "domain has an invalid U-label")
        out.append(a_label)
    return ".".join(out)


def _literal(domain: str) -> str:
    """An address literal's key: ``[a.b.c.d]`` or ``[ipv6:<canonical>]``."""
    if not domain.endswith("]") or len(domain) < 3:
        raise AddressError("invalid_address", "bad address literal")
    inner = domain[1:-1]
    if _IPV4.fullmatch(inner):
        return f"[{inner}]"
    if inner[:5].lower() == "ipv6:":
        text = inner[5:]
        if _ipv6(text):
            try:
                return f"[ipv6:{ipaddress.IPv6Address(text).compressed}]"
            except ValueError:
                pass
        raise AddressError("invalid_address", "bad IPv6 address literal")
    if _TAG.fullmatch(inner):
        raise AddressError("invalid_address", "unsupported address literal (only IPv4 and IPv6)")
    raise AddressError("invalid_address", "bad address literal")


def _ipv6(text: str) -> bool:
    """RFC 5321 §4.1.3 IPv6-addr: full, comp (at most 6 groups besides "::"), and the
    v4 forms (6 groups, or at most 4 besides "::", then an IPv4 address)."""
    v4 = "." in text
    if v4:
        head, colon, tail = text.rpartition(":")
        if not colon or not _IPV4.fullmatch(tail):
            return False
        text = head + ":" if head.endswith(":") else head
    full, comp = (6, 4) if v4 else (8, 6)
    if text.count("::") > 1:
        return False
    if "::" in text:
        left, right = text.split("::")
        groups = (left.split(":") if left else []) + (right.split(":") if right else [])
        limit_ok = len(groups) <= comp
    else:
        groups = text.split(":")
        limit_ok = len(groups) == full
    return limit_ok and all(_HEX4.fullmatch(g) for g in groups)
