"""Operator suspensions: stop delivery to a site, a recipient domain or from a sender
domain for a while, without touching the mails.

Why: an operator who sees a provider push back, or a customer's domain misbehave, wants
delivery there to stop now, for queued mail and for mail that arrives later, and to start
again by itself. A suspended group is re-armed without an attempt (no connection, no
attempt counted, lifetime still runs), like a group whose site is out of budget
(shaping.py). Suspensions are few: every delivery container reads them all with one
Query, cached for `refresh` seconds; each carries its expiry, checked at use (the
store's TTL deletion only tidies up).

The DynamoDB adapter is ``mailqueue.backends.aws.suspension_store``.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

from mailqueue.core.errors import InvalidInput
from mailqueue.core.trace import principal_key

Scope = Literal["site", "domain", "sender_domain", "principal", "pool"]
SCOPES: tuple[Scope, ...] = ("site", "domain", "sender_domain", "principal", "pool")
MAX_SECONDS = 30 * 86400
_TARGET = re.compile(r"^[a-z0-9][a-z0-9._:,*-]{0,199}$")
# an egress pool (outbound/pools.py), or a site in one pool: "<pool>|<site>"
_POOL = re.compile(r"^[a-z][a-z0-9-]{0,30}$")
_POOL_SITE = re.compile(r"^[a-z][a-z0-9-]{0,30}\|[a-z0-9][a-z0-9._:,*-]{0,199}$")
# a principal is an IAM ARN (case kept; reputation.py pauses one automatically)
_PRINCIPAL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/@+=,*-]{0,499}$")


def parse_scope(value: Any) -> Scope:
    if value not in SCOPES:
        raise InvalidInput("invalid_scope", "scope must be one of " + "|".join(SCOPES), "scope")
    return value  # type: ignore[no-any-return]


def parse_target(value: Any, scope: Scope | None = None) -> str:
    if scope == "principal":
        p = value.strip() if isinstance(value, str) else ""
        if not _PRINCIPAL.match(p):
            raise InvalidInput("invalid_target", "a principal (IAM ARN)", "target")
        return p
    t = value.strip().lower().rstrip(".") if isinstance(value, str) else ""
    if scope == "pool":
        if not _POOL.match(t):
            raise InvalidInput("invalid_target", "an egress pool name", "target")
        return t
    if scope == "site" and _POOL_SITE.match(t):
        return t  # a site in one pool
    if not _TARGET.match(t):
        raise InvalidInput("invalid_target", "a site or domain name (lower case)", "target")
    return t


@dataclass(frozen=True, slots=True)
class Suspension:
    scope: Scope
    target: str
    until: float  # epoch seconds
    reason: str = ""
    actor: str = ""
    created_at: float = 0.0

    def active(self, now: float) -> bool:
        return self.until > now

    def to_json(self) -> dict[str, Any]:
        return {
            "scope": self.scope,
            "target": self.target,
            "until": _iso(self.until),
            "reason": self.reason or None,
            "actor": self.actor or None,
            "created_at": _iso(self.created_at),
        }


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def matching(
    suspensions: Sequence[Suspension],
    now: float,
    *,
    domain: str,
    sender_domain: str,
    site: str | None,
    principal: str = "",
    pool: str = "",
) -> Suspension | None:
    """The active suspension that holds a group (the one ending last), if any: a site
    suspension holds it in every pool, a "<pool>|<site>" one in that egress pool only,
    a pool suspension everything the pool sends. A principal is compared by its digest
    (core/trace.principal_key): a suspension naming the ARN holds mail whose tag holds the
    digest (trace_private on) and the reverse."""
    keys = {("domain", domain.lower()), ("sender_domain", sender_domain.lower())}
    if principal:
        keys.add(("principal", principal_key(principal)))
    if pool:
        keys.add(("pool", pool))
    if site:
        keys.add(("site", site))
        if pool:
            keys.add(("site", f"{pool}|{site}"))

    def key(s: Suspension) -> tuple[str, str]:
        return (s.scope, principal_key(s.target) if s.scope == "principal" else s.target)

    hits = [s for s in suspensions if s.active(now) and key(s) in keys]
    return max(hits, key=lambda s: s.until, default=None)


class SuspensionStore(Protocol):
    requests: int

    def all(self) -> list[Suspension]:
        """Every stored suspension (expired ones too, until TTL deletes them)."""
        ...

    def put(self, s: Suspension) -> None: ...

    def delete(self, scope: Scope, target: str) -> Suspension | None: ...


class SuspensionCache:
    """Per container: the store's suspensions, read again after `refresh` seconds."""

    def __init__(
        self, store: SuspensionStore, refresh: float, clock: Callable[[], float] = time.time
    ) -> None:
        self.store = store
        self.refresh = refresh
        self.clock = clock
        self._items: list[Suspension] = []
        self._read_at = -1e18
        self._lock = threading.Lock()

    def current(self) -> list[Suspension]:
        now = self.clock()
        with self._lock:
            if now - self._read_at >= self.refresh:
                self._items = self.store.all()
                self._read_at = now
            return self._items

    def find(
        self,
        *,
        domain: str,
        sender_domain: str,
        site: str | None,
        principal: str = "",
        pool: str = "",
    ) -> Suspension | None:
        return matching(
            self.current(),
            self.clock(),
            domain=domain,
            sender_domain=sender_domain,
            site=site,
            principal=principal,
            pool=pool,
        )

    def forget(self) -> None:
        """Read the store again at the next use (after this container changed it)."""
        with self._lock:
            self._read_at = -1e18
