"""One-click unsubscribe (RFC 8058, RFC 2369): the signed link and the header fields.

Why: Gmail and Yahoo require bulk senders to offer one-click unsubscribe; a recipient who
cannot leave a list easily presses "report spam" instead, which costs every sender on
the IPs. Delivery adds, before DKIM signing (so both fields are signed; dkim.py lists
them in its signed headers)::

    List-Unsubscribe: <https://<base>/u/<token>>, <mailto:<mailto>?subject=unsubscribe>
    List-Unsubscribe-Post: List-Unsubscribe=One-Click

to bulk mail (priority ``bulk``) and to transactional mail whose submitter asked for it
(tag ``list-unsubscribe: one-click``); never when the message already has a
List-Unsubscribe field (the sender runs its own), and only when the group has one
recipient (the token names the recipient, and one SMTP transaction carries one body).

The token is ``<kid>.<payload>.<mac>``: payload the base64url JSON of the mail id, the
recipient, the scope (``d``: sender domain, ``l``: the ``list-id`` tag) and target, and
the issue day; mac the first 16 octets of HMAC-SHA256 under the key ``kid`` over
``kid.payload``. Several keys may be configured (``{"kid": "<base64 key>"}``): new links
use ``current``, old links verify while their key is still listed (rotation). The
endpoint (services/unsubscribe.py) verifies it and suppresses the recipient for that
sender domain or list only.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
from dataclasses import dataclass
from typing import Any, Literal

from mailqueue.core.config import ConfigError
from mailqueue.core.model import PRIORITY_TAG, Priority

UnsubScope = Literal["sender_domain", "list"]
REQUEST_TAG = "list-unsubscribe"  # submitter tag: "one-click" on transactional mail
LIST_TAG = "list-id"  # submitter tag: the list the mail belongs to (scope of the opt-out)
ONE_CLICK_BODY = "List-Unsubscribe=One-Click"
_KID = re.compile(r"^[A-Za-z0-9_-]{1,16}$")
_MAC_LEN = 16
MAX_TOKEN = 900  # with the URL, well inside a header line's 998 octets


class InvalidToken(ValueError):
    """A link that is not ours, altered, of a retired key, or too old."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class UnsubscribeKeys:
    """The HMAC keys by id and the one new links use (settings: JSON + current id)."""

    keys: dict[str, bytes]
    current: str

    @classmethod
    def parse(cls, keys_json: str, current: str) -> UnsubscribeKeys:
        try:
            raw = json.loads(keys_json or "{}")
        except ValueError as e:
            raise ConfigError(f"list_unsubscribe_keys: not JSON: {e}") from None
        if not isinstance(raw, dict):
            raise ConfigError('list_unsubscribe_keys: {"kid": "<base64 key>"}')
        keys: dict[str, bytes] = {}
        for kid, value in raw.items():
            if not _KID.match(str(kid)) or not isinstance(value, str):
                raise ConfigError(f"list_unsubscribe_keys: bad key id {kid!r}")
            try:
                key = base64.b64decode(value, validate=True)
            except (binascii.Error, ValueError):
                raise ConfigError(f"list_unsubscribe_keys: key {kid!r} is not base64") from None
            if len(key) < 16:
                raise ConfigError(f"list_unsubscribe_keys: key {kid!r} under 128 bits")
            keys[str(kid)] = key
        if keys and current not in keys:
            raise ConfigError("list_unsubscribe_kid must name one of list_unsubscribe_keys")
        return cls(keys, current)


def keys_from_secret(text: str) -> UnsubscribeKeys:
    """The keys from their secret (Secrets Manager, never the environment): a JSON object
    ``{"current": "<kid>", "<kid>": "<base64 key>", ...}`` (template.yaml generates it)."""
    try:
        doc = json.loads(text)
    except ValueError:
        raise ConfigError("list-unsubscribe secret: not JSON") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("current"), str):
        raise ConfigError('list-unsubscribe secret: {"current": kid, kid: key, ...}')
    current = doc.pop("current")
    return UnsubscribeKeys.parse(json.dumps(doc), current)


@dataclass(frozen=True, slots=True)
class Unsubscription:
    """What a verified token says."""

    mail_id: str
    recipient: str
    scope: UnsubScope
    target: str
    issued_day: int
    kid: str


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _mac(key: bytes, signed: str) -> bytes:
    return hmac.new(key, signed.encode("ascii"), hashlib.sha256).digest()[:_MAC_LEN]


def make_token(keys: UnsubscribeKeys, u: Unsubscription) -> str:
    doc = {
        "m": u.mail_id,
        "r": u.recipient,
        "s": "d" if u.scope == "sender_domain" else "l",
        "t": u.target,
        "i": u.issued_day,
    }
    payload = _b64(json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode("utf-8"))
    signed = f"{keys.current}.{payload}"
    return f"{signed}.{_b64(_mac(keys.keys[keys.current], signed))}"


def verify_token(
    keys: UnsubscribeKeys, token: str, *, today: int, max_age_days: int
) -> Unsubscription:
    """The token's content, or InvalidToken (checked in constant time, before parsing)."""
    if len(token) > MAX_TOKEN or token.count(".") != 2:
        raise InvalidToken("invalid_token", "not an unsubscribe link of this sender")
    kid, payload, mac = token.split(".")
    key = keys.keys.get(kid)
    if key is None:
        raise InvalidToken("invalid_token", "this link's key is no longer in use")
    try:
        given = _unb64(mac)
    except (binascii.Error, ValueError):
        raise InvalidToken("invalid_token", "not an unsubscribe link of this sender") from None
    if not hmac.compare_digest(given, _mac(key, f"{kid}.{payload}")):
        raise InvalidToken("invalid_token", "not an unsubscribe link of this sender")
    try:
        doc: Any = json.loads(_unb64(payload).decode("utf-8"))
        u = Unsubscription(
            str(doc["m"]),
            str(doc["r"]),
            "sender_domain" if doc["s"] == "d" else "list",
            str(doc["t"]),
            int(doc["i"]),
            kid,
        )
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        raise InvalidToken("invalid_token", "not an unsubscribe link of this sender") from None
    if today - u.issued_day > max_age_days:
        raise InvalidToken("expired_token", "this unsubscribe link has expired")
    return u


def wanted(tags: tuple[tuple[str, str], ...]) -> bool:
    """Does this mail get the fields? Bulk mail always, transactional on request."""
    t = dict(tags)
    if t.get(REQUEST_TAG) == "off":
        return False
    return t.get(PRIORITY_TAG) == Priority.BULK.value or t.get(REQUEST_TAG) == "one-click"


def scope_of(tags: tuple[tuple[str, str], ...], sender: str) -> tuple[UnsubScope, str] | None:
    """The opt-out's scope: the mail's list, else its envelope sender's domain."""
    list_id = dict(tags).get(LIST_TAG, "").strip()
    if list_id:
        return "list", list_id
    domain = sender.rpartition("@")[2].strip().lower().rstrip(".")
    return ("sender_domain", domain) if domain else None


def has_field(head: bytes, name: bytes) -> bool:
    return re.search(rb"(?im)^" + re.escape(name) + rb"[ \t]*:", head) is not None


def header_fields(url: str, mailto: str, eol: bytes) -> bytes:
    """The two fields, folded after the HTTPS URL (RFC 2369 §2: URLs in angle brackets)."""
    value = f"<{url}>"
    if mailto:
        value += f",{eol.decode()} <mailto:{mailto}?subject=unsubscribe>"
    return (
        f"List-Unsubscribe: {value}".encode()
        + eol
        + f"List-Unsubscribe-Post: {ONE_CLICK_BODY}".encode()
        + eol
    )


def suppression_scope(scope: UnsubScope, target: str) -> str:
    """How the suppression list names this scope (suppression.Entry.scope)."""
    return f"{scope}:{target}"


def opt_out_scopes(tags: tuple[tuple[str, str], ...], sender: str) -> list[str]:
    """The suppression scopes that hold this submission: a mail that carries the fields
    (bulk, or asked for) is held by an opt-out from its sender domain or from its list;
    other mail (a receipt, a password reset) only by the address's own entry."""
    if not wanted(tags):
        return []
    domain = sender.rpartition("@")[2].strip().lower().rstrip(".")
    out = [suppression_scope("sender_domain", domain)] if domain else []
    list_id = dict(tags).get(LIST_TAG, "").strip()
    if list_id:
        out.append(suppression_scope("list", list_id))
    return out
