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
from fnmatch import fnmatchcase

from mailqueue.core.config import ConfigError

_CROCKFORD = "0123456789abcdefghjkmnpqrstvwxyz"
MAC_CHARS = 10
_VERSION_RE = re.compile(r"^[0-9a-z]{1,4}$")
_LOCAL_RE = re.compile(
    r"^b(?P<ver>[0-9a-z]{1,4})-(?P<mail>[0-9a-z]{20,40})-(?P<rid>\d{1,5}|x)-(?P<mac>[0-9a-z]{10})$"
)
_DOMAIN_RE = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)(?:\.(?!-)[a-z0-9-]{1,63}(?<!-))+$")
_ARN_PATTERN_RE = re.compile(r"^arn:[\x21-\x7e]+$")  # as core/authz.check_pattern
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


_PRINCIPAL_NAME_RE = re.compile(r"^sha256:[0-9a-f]{16}$")  # core/trace.principal_tag


@dataclass(frozen=True, slots=True)
class ReturnPathPolicy:
    """Which mail gets a VERP return path, on which bounce domain. Data, from settings, a
    JSON object whose keys are sender domains, ``*``, or principals:

        {"example.org": "bounces.example.org", "*": "bounces.example.net",
         "arn:aws:sts::123456789012:assumed-role/newsletter/*": "bounces.news.example",
         "arn:aws:iam::123456789012:role/receipts": ""}

    A value "" is off. A principal key is an IAM ARN pattern (fnmatch, case-sensitive, as
    the sender policy's) or a ``sha256:`` principal name (what the mail's
    `mailqueue:principal` tag holds when traces are private: core/trace.principal_tag).

    Which wins: the principal, then the sender domain, then ``*``. The principal is who
    answers for the mail (the reputation guards count it too): an application that sends
    as several domains keeps its reports on its own bounce domain, and one switched off
    ("") stays off whatever domain it sends as. Among principal keys an exact one wins,
    then the patterns in the order written. The null sender always stays null.
    """

    by_sender_domain: Mapping[str, str]
    by_principal: tuple[tuple[str, str], ...] = ()  # (ARN pattern or name, bounce domain)

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
            raise ConfigError(
                'return_path_policy: {"sender domain, * or principal ARN": "bounce domain"}'
            )
        domains: dict[str, str] = {}
        principals: list[tuple[str, str]] = []
        for key, value in doc.items():
            v = value.lower().rstrip(".")
            if v and not _DOMAIN_RE.match(v):
                raise ConfigError(f"return_path_policy: not a bounce domain: {value!r}")
            if key.startswith(("arn:", "sha256:")):
                if not (_PRINCIPAL_NAME_RE.match(key) or _ARN_PATTERN_RE.match(key)):
                    raise ConfigError(
                        f"return_path_policy: {key!r} is not a principal ARN (pattern) "
                        "or a sha256:<16 hex> principal name"
                    )
                principals.append((key, v))  # ARNs are case-sensitive: kept as written
                continue
            k = key.lower().rstrip(".")
            if k != "*" and not _DOMAIN_RE.match(k):
                raise ConfigError(
                    f"return_path_policy: {key!r} is not a sender domain, * or a principal ARN"
                )
            domains[k] = v
        return cls(domains, tuple(principals))

    @property
    def enabled(self) -> bool:
        return any(self.by_sender_domain.values()) or any(v for _, v in self.by_principal)

    @property
    def bounce_domains(self) -> frozenset[str]:
        return frozenset(
            v for v in (*self.by_sender_domain.values(), *(v for _, v in self.by_principal)) if v
        )

    def _for_principal(self, principal: str) -> str | None:
        """The principal's entry (None: no key names it)."""
        if not principal:
            return None
        for key, value in self.by_principal:
            if key == principal:
                return value
        for key, value in self.by_principal:
            if fnmatchcase(principal, key):
                return value
        return None

    def bounce_domain(self, sender: str, principal: str = "") -> str:
        """The bounce domain for this envelope sender, submitted by `principal` (the mail's
        `mailqueue:principal` tag; "" when unknown); "" = keep the sender."""
        if not sender:
            return ""
        by_principal = self._for_principal(principal)
        if by_principal is not None:
            return by_principal
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
    principal: str = "",
) -> str:
    """What MAIL FROM says for this transaction: the VERP address when the policy covers
    the principal or the sender's domain, else the sender unchanged (the null sender
    always stays null)."""
    domain = policy.bounce_domain(sender, principal)
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
