"""The return path that identifies a mail (VERP), protected by a MAC. Pure functions.

Why: a bounce sent later by the receiving system, or a complaint, comes back to the
envelope sender. When that address names the mail (and, for a one-recipient group, the
recipient), the report can be tied to it without trusting anything the report says;
the MAC makes forged reports (backscatter, someone guessing ids) recognisable.

Form: ``b<ver>-<mail id>-<rid>-<mac>@<bounce domain>``, all lower case, e.g.
``b1-01jd5x8k3q4r7s9t0v2w4y6z8a-0-4k9m2p7q1x@bounces.example.org`` (≤ 45 octets of
local part, under RFC 5321's 64):

* ``ver``: the key's version (1–4 of ``[0-9a-z]``), so keys rotate: new mail uses the
  current key, reports for older mail still verify with the key they were made with;
* ``mail id``: the queue's id, lower-cased (Crockford base32: case folds back losslessly);
* ``rid``: the recipient's number within the mail when the group sent has one recipient,
  ``x`` otherwise (one SMTP transaction per group stays one: the failed recipient is then
  read from the report and must be one of the mail's recipients);
* ``mac``: HMAC-SHA256 over ``ver|MAILID|rid|domain``, the first 50 bits in lower-case
  Crockford base32 (10 characters). Some MTAs lower-case local parts; nothing here
  depends on case.

The null sender stays null: DSNs the queue sends never get a return path.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

from mailqueue.core.config import ConfigError

_CROCKFORD = "0123456789abcdefghjkmnpqrstvwxyz"
MAC_CHARS = 10
_VERSION_RE = re.compile(r"^[0-9a-z]{1,4}$")
_LOCAL_RE = re.compile(
    r"^b(?P<ver>[0-9a-z]{1,4})-(?P<mail>[0-9a-z]{20,40})-(?P<rid>\d{1,5}|x)-(?P<mac>[0-9a-z]{10})$"
)
_DOMAIN_RE = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)(?:\.(?!-)[a-z0-9-]{1,63}(?<!-))+$")
MIN_KEY_BYTES = 16


@dataclass(frozen=True, slots=True)
class KeyRing:
    """The MAC keys by version and the one new mail uses."""

    current: str
    keys: Mapping[str, bytes]

    def __post_init__(self) -> None:
        if self.current not in self.keys:
            raise ConfigError("return path keys: the current version has no key")
        for v, k in self.keys.items():
            if not _VERSION_RE.match(v):
                raise ConfigError(f"return path keys: version {v!r} is not 1-4 of [0-9a-z]")
            if len(k) < MIN_KEY_BYTES:
                raise ConfigError(f"return path keys: key {v!r} is shorter than 16 bytes")

    @classmethod
    def parse(cls, text: str) -> KeyRing:
        """``{"current": "2", "keys": {"1": "<base64>", "2": "<base64>"}}`` (a secret's
        value, a file's content or the setting itself)."""
        try:
            doc = json.loads(text)
            keys = {
                str(v).lower(): base64.b64decode(k, validate=True) for v, k in doc["keys"].items()
            }
            return cls(str(doc["current"]).lower(), keys)
        except (ValueError, KeyError, TypeError, AttributeError, binascii.Error) as e:
            raise ConfigError(f"return path keys: not a key ring ({type(e).__name__})") from None


@dataclass(frozen=True, slots=True)
class ReturnPathPolicy:
    """Which sender domains get a VERP return path, on which bounce domain. Data, from
    settings: ``{"example.org": "bounces.example.org", "*": "bounces.example.net"}``;
    a domain mapped to "" is off, an unlisted one follows "*" (absent: off)."""

    by_sender_domain: Mapping[str, str]

    @classmethod
    def parse(cls, text: str) -> ReturnPathPolicy:
        if not text.strip():
            return cls({})
        try:
            doc = json.loads(text)
        except ValueError:
            raise ConfigError("return_path_policy is not JSON") from None
        if not isinstance(doc, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in doc.items()
        ):
            raise ConfigError('return_path_policy: {"sender domain or *": "bounce domain"}')
        out = {k.lower().rstrip("."): v.lower().rstrip(".") for k, v in doc.items()}
        for k, v in out.items():
            if k != "*" and not _DOMAIN_RE.match(k):
                raise ConfigError(f"return_path_policy: not a domain: {k!r}")
            if v and not _DOMAIN_RE.match(v):
                raise ConfigError(f"return_path_policy: not a bounce domain: {v!r}")
        return cls(out)

    @property
    def enabled(self) -> bool:
        return any(self.by_sender_domain.values())

    @property
    def bounce_domains(self) -> frozenset[str]:
        return frozenset(v for v in self.by_sender_domain.values() if v)

    def bounce_domain(self, sender: str) -> str:
        """The bounce domain for this envelope sender ("" = keep the sender)."""
        if not sender:
            return ""
        domain = sender.rpartition("@")[2].lower().rstrip(".")
        if domain in self.by_sender_domain:
            return self.by_sender_domain[domain]
        return self.by_sender_domain.get("*", "")


def _mac(key: bytes, version: str, mail_id: str, rid: str, domain: str) -> str:
    msg = f"{version}|{mail_id.upper()}|{rid}|{domain.lower()}".encode()
    digest = hmac.new(key, msg, hashlib.sha256).digest()
    n = int.from_bytes(digest[:8], "big") >> (64 - 5 * MAC_CHARS)
    return "".join(_CROCKFORD[(n >> (5 * i)) & 31] for i in reversed(range(MAC_CHARS)))


def rid_part(rids: list[str] | tuple[str, ...]) -> str:
    """The rid field: the recipient's number for a one-recipient group, else "x"."""
    if len(rids) == 1 and rids[0][1:].isdigit():
        return str(int(rids[0][1:]))
    return "x"


def encode(ring: KeyRing, mail_id: str, rid: str, domain: str) -> str:
    """The return path for a mail (rid: ``rid_part(...)``) on a bounce domain."""
    v = ring.current
    mac = _mac(ring.keys[v], v, mail_id, rid, domain)
    return f"b{v}-{mail_id.lower()}-{rid}-{mac}@{domain.lower()}"


def mail_from(
    policy: ReturnPathPolicy,
    ring: KeyRing | None,
    sender: str,
    mail_id: str,
    rids: list[str] | tuple[str, ...],
) -> str:
    """What MAIL FROM says for this transaction: the VERP address when the policy covers
    the sender's domain, else the sender unchanged (the null sender always stays null)."""
    domain = policy.bounce_domain(sender)
    if not domain or ring is None:
        return sender
    return encode(ring, mail_id, rid_part(rids), domain)


@dataclass(frozen=True, slots=True)
class Decoded:
    mail_id: str  # upper case, as the queue stores it
    rid: str | None  # "r<n>", or None when the return path named the group, not a recipient
    version: str
    domain: str


class ForgedReturnPath(ValueError):
    """A report to a bounce address whose MAC does not verify (or unknown key version)."""


def decode(ring: KeyRing, address: str) -> Decoded | None:
    """The mail a report's envelope recipient names: None when the address is not of
    our form (not a VERP address at all); ForgedReturnPath when it is, but the MAC does
    not verify."""
    local, _, domain = address.strip().strip("<>").rpartition("@")
    m = _LOCAL_RE.match(local.lower())
    if m is None:
        return None
    ver, mail, rid, mac = m.group("ver", "mail", "rid", "mac")
    key = ring.keys.get(ver)
    if key is None:
        raise ForgedReturnPath(f"unknown key version {ver!r}")
    want = _mac(key, ver, mail, rid, domain)
    if not hmac.compare_digest(want, mac):
        raise ForgedReturnPath("MAC does not verify")
    return Decoded(mail.upper(), None if rid == "x" else f"r{rid}", ver, domain.lower())
