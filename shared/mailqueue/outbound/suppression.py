"""Suppression list: recipients that hard-bounced are not sent to again for a while.

Why: mailbox providers judge a sender by how often it hits addresses that do not exist;
SES keeps such a list for its customers, and so must we. Delivery adds a recipient when
a remote server answers one of the configured permanent statuses (5.1.1, 5.1.10 ...),
with the reason, the time and the mail it came from; operators add, remove, import and
export entries (admin API, ``mailqueue suppression``); ingress refuses a submission to a
suppressed address (422 ``recipient_suppressed``). Entries expire after a configurable
time: the store's own expiry (DynamoDB TTL) drops them eventually, and every read
checks ``expires_at`` too, since TTL deletion lags by up to days.

The core is here (pure decisions, the :class:`SuppressionStore` port); the DynamoDB
adapter is ``mailqueue.backends.aws.suppression_store``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from mailqueue.core.address import AddressError, key
from mailqueue.core.config import ConfigError
from mailqueue.core.errors import InvalidInput
from mailqueue.core.model import Result

DEFAULT_STATUSES = "5.1.1,5.1.10"
DEFAULT_TTL_DAYS = 365
SUPPRESSION_POLICIES = ("refuse", "bounce", "off")
_STATUS_RE = re.compile(r"^5\.\d{1,3}\.\d{1,3}$")
MAX_REASON = 500


def parse_statuses(value: str | Iterable[str]) -> frozenset[str]:
    """The permanent enhanced statuses that suppress a recipient ("5.1.1,5.1.10")."""
    items = re.split(r"[\s,]+", value) if isinstance(value, str) else list(value)
    out = frozenset(s for s in items if s)
    bad = sorted(s for s in out if not _STATUS_RE.match(s))
    if bad:
        raise ConfigError(f"suppression statuses: {bad[0]!r} is not a 5.x.y enhanced status")
    return out


def normalise(address: str) -> str:
    """The list's key for an address: RFC 5321 equivalence, then lower case (a mailbox
    that bounced as User@ bounces as user@ too; the rare case-sensitive local part errs
    towards suppressing). Raises InvalidInput for something that is no address."""
    try:
        return key(address.strip()).lower()
    except AddressError as e:
        raise InvalidInput("invalid_address", f"not an address: {e}", "address") from None


SCOPE_SEP = "\t"  # never in an address (RFC 5321 allows no control character in one)


def scoped_key(address: str, scope: str = "") -> str:
    """The list's key: the normalised address alone (suppressed for every sender), or with
    a scope ("sender_domain:shop.example", "list:news"): only that sender's or list's mail
    (one-click unsubscribe, outbound/unsubscribe.py). Stores key entries by it unchanged."""
    return f"{address}{SCOPE_SEP}{scope}" if scope else address


@dataclass(frozen=True, slots=True)
class Entry:
    """One suppressed address: why, since when, until when, from which mail / by whom."""

    address: str  # normalised, with its scope when it has one (scoped_key)
    reason: str
    added_at: float  # epoch seconds
    expires_at: float  # epoch seconds; the entry means nothing after this
    source: str = ""  # the mail id a bounce came from; "" for an operator's entry
    status: str = ""  # the enhanced status that suppressed it (bounces)
    actor: str = ""  # "delivery", or the operator's principal

    def active(self, now: float) -> bool:
        return self.expires_at > now

    @property
    def mailbox(self) -> str:
        return self.address.partition(SCOPE_SEP)[0]

    @property
    def scope(self) -> str:
        """"" for every sender; else "sender_domain:<domain>" or "list:<id>"."""
        return self.address.partition(SCOPE_SEP)[2]

    def to_json(self) -> dict[str, Any]:
        return {
            "address": self.mailbox,
            **({"scope": self.scope} if self.scope else {}),
            "reason": self.reason,
            "added_at": _iso(self.added_at),
            "expires_at": _iso(self.expires_at),
            "source": self.source or None,
            "status": self.status or None,
            "actor": self.actor or None,
        }


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def hard_bounce(result: Result, statuses: frozenset[str]) -> bool:
    """Does this final result put the recipient on the list? Only a remote server's
    permanent reply counts (code 5xx); our own verdicts (code 0: no route, expiry,
    operator bounce) say nothing about the mailbox."""
    return 500 <= result.code <= 599 and result.status in statuses


def from_bounces(
    bounced: Mapping[str, Result],
    statuses: frozenset[str],
    *,
    now: float,
    ttl_seconds: float,
    source: str,
) -> list[Entry]:
    """Entries for the recipients (address -> final result) whose bounce suppresses them."""
    out: dict[str, Entry] = {}
    for address, r in bounced.items():
        if not hard_bounce(r, statuses):
            continue
        try:
            addr = normalise(address)
        except InvalidInput:
            continue
        reason = f"{r.code} {r.text}".strip()[:MAX_REASON]  # the reply (text has the status)
        out[addr] = Entry(addr, reason, now, now + ttl_seconds, source, r.status, "delivery")
    return list(out.values())


class SuppressionStore(Protocol):
    """Where entries live (the state table in AWS)."""

    requests: int  # requests made so far (cost accounting)

    def get_many(self, addresses: Sequence[str]) -> dict[str, Entry]:
        """The stored entries among these normalised addresses (expired ones included)."""
        ...

    def put_many(self, entries: Sequence[Entry]) -> None:
        """Add or replace entries (a later bounce refreshes the expiry)."""
        ...

    def delete(self, address: str) -> Entry | None:
        """Remove one entry; the removed entry, or None if there was none."""
        ...

    def page(self, cursor: str | None, limit: int) -> tuple[list[Entry], str | None]:
        """Some entries (expired ones included) and a cursor for the rest (None: done)."""
        ...


def suppressed(
    store: SuppressionStore, addresses: Iterable[str], now: float, scopes: Sequence[str] = ()
) -> dict[str, Entry]:
    """The active entries among these addresses (any form), keyed by normalised address:
    the address's own entry, else one scoped to one of `scopes` (this mail's sender
    domain or list)."""
    keys: list[str] = []
    for a in addresses:
        try:
            n = normalise(a)
        except InvalidInput:
            continue  # the envelope checks refuse it with their own reason
        keys += [n, *(scoped_key(n, s) for s in scopes if s)]
    found = store.get_many(list(dict.fromkeys(keys)))
    out: dict[str, Entry] = {}
    for k in keys:  # global first, then the scopes in order
        e = found.get(k)
        if e is not None and e.active(now):
            out.setdefault(e.mailbox, e)
    return out


class RecipientSuppressed(InvalidInput):
    """A submission names a suppressed recipient (422 recipient_suppressed)."""

    def __init__(self, address: str, entry: Entry, index: int) -> None:
        super().__init__(
            "recipient_suppressed",
            "a recipient is on the suppression list (it hard-bounced); "
            "an operator can remove it: mailqueue suppression remove ADDRESS",
            f"recipients[{index}].address",
        )
        self.address = address
        self.entry = entry
