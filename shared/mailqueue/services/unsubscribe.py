"""The public one-click unsubscribe endpoint (RFC 8058): ``GET|POST /u/{token}``.

Why here and like this: the link is followed by the recipient's mail client (one-click:
a POST with ``List-Unsubscribe=One-Click``) or by a person (a GET from the message's
link); neither has AWS credentials, so the route has no IAM authorizer (template.yaml:
``Auth: Authorizer: NONE`` on the ingress HTTP API, served by the ingress function).
What protects it instead:

* the token's HMAC (outbound/unsubscribe.py): only links we issued do anything;
* a GET never unsubscribes (link scanners and previews follow GETs): it shows a plain
  page with a POST form;
* a POST is idempotent: the suppression entry's key is the address and scope, and the
  `Subscription` event's id is derived from the token's content, so a repeat changes
  nothing and emits nothing new;
* rate limits per source IP and per token (in the container: a sliding window; the
  template throttles the routes too), 429 with Retry-After beyond them.

What a POST records: a suppression entry scoped to the sender domain or the list
(``suppression.scoped_key``), so only that sender's bulk mail to the address is refused
at ingress; and a ``Subscription`` event in SES's format (contactList = the scope's
target, source ``UnsubscribeHeader``, newTopicPreferences.unsubscribeAll = true) whose
`mail` is the original mail's (sender and arrival from the origin delivery left,
outbound/reputation.Origin), and the unsubscribe is counted, apart from the rates, by the
reputation guard against that mail's principal and sender domain. No address or token is
logged.
"""

from __future__ import annotations

import html
import logging
import threading
import time
import urllib.parse
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from mailqueue.core.config import ConfigError, settings_from_env
from mailqueue.core.errors import InvalidInput, MailqueueError
from mailqueue.core.events import SUBSCRIPTION_EVENT, EventEmitter, MailInfo, QueueEvent
from mailqueue.core.model import PRINCIPAL_TAG
from mailqueue.outbound import unsubscribe as unsub
from mailqueue.outbound.reputation import Origin, ReputationGuard, feedback_counts
from mailqueue.outbound.suppression import Entry, SuppressionStore, normalise, scoped_key

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class UnsubscribeSettings:
    """Env: ``MQ_<FIELD>``; the keys are the delivery function's (same variables)."""

    list_unsubscribe_keys: str = ""  # inline (tests, the local stack); else the secret
    list_unsubscribe_kid: str = ""
    list_unsubscribe_key_name: str = ""  # Secrets Manager name, read by the composition
    list_unsubscribe_max_age_days: int = 180  # a link works this long after delivery
    list_unsubscribe_suppress_days: int = 3650  # how long the opt-out holds
    list_unsubscribe_ip_per_minute: int = 30
    list_unsubscribe_token_per_minute: int = 5

    def __post_init__(self) -> None:
        self.keys()
        if not 1 <= self.list_unsubscribe_max_age_days <= 3650:
            raise ConfigError("list_unsubscribe_max_age_days must be within 1..3650")
        if not 1 <= self.list_unsubscribe_suppress_days <= 3650:
            raise ConfigError("list_unsubscribe_suppress_days must be within 1..3650")
        if self.list_unsubscribe_ip_per_minute < 1 or self.list_unsubscribe_token_per_minute < 1:
            raise ConfigError("list_unsubscribe rate limits must be at least 1")

    def keys(self) -> unsub.UnsubscribeKeys:
        return unsub.UnsubscribeKeys.parse(self.list_unsubscribe_keys, self.list_unsubscribe_kid)

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None, **explicit: Any) -> UnsubscribeSettings:
        return settings_from_env(cls, env=env, **explicit)


@dataclass(frozen=True, slots=True)
class Page:
    status: int
    body: str
    headers: dict[str, str] = field(default_factory=dict)


class SlidingWindow:
    """At most `limit` hits per key in any 60 s (per container; keys bounded, oldest out)."""

    def __init__(self, limit: int, clock: Callable[[], float], max_keys: int = 10_000) -> None:
        self.limit = limit
        self.clock = clock
        self.max_keys = max_keys
        self._hits: OrderedDict[str, list[float]] = OrderedDict()
        self._lock = threading.Lock()

    def take(self, key: str) -> float:
        """0 if allowed (counted), else the seconds until it would be."""
        now = self.clock()
        with self._lock:
            hits = [t for t in self._hits.pop(key, []) if t > now - 60]
            if len(hits) >= self.limit:
                self._hits[key] = hits
                return max(1.0, hits[0] + 60 - now)
            hits.append(now)
            self._hits[key] = hits
            while len(self._hits) > self.max_keys:
                self._hits.popitem(last=False)
            return 0.0


def _mask(address: str) -> str:
    local, _, domain = address.rpartition("@")
    return f"{local[:1]}***@{domain}" if local else address


def _page(status: int, title: str, text: str, *, form: bool = False, reason: str = "") -> Page:
    body = (
        '<!doctype html><html><head><meta charset="utf-8">'
        '<meta name="robots" content="noindex">'
        f"<title>{html.escape(title)}</title></head><body><h1>{html.escape(title)}</h1>"
        f"<p>{html.escape(text)}</p>"
    )
    if form:
        body += (
            '<form method="post"><input type="hidden" name="List-Unsubscribe" value="One-Click">'
            '<button type="submit">Unsubscribe</button></form>'
        )
    if reason:
        body += f'<p><small>reason: <code id="reason">{html.escape(reason)}</code></small></p>'
    body += "</body></html>"
    headers = {"Content-Type": "text/html; charset=utf-8", "Cache-Control": "no-store"}
    if reason:
        headers["X-Mailqueue-Error"] = reason
    return Page(status, body, headers)


def one_click_body(body: bytes | None, content_type: str) -> bool:
    """RFC 8058 §3.2: the POST carries List-Unsubscribe=One-Click (urlencoded or multipart)."""
    text = (body or b"").decode("utf-8", "replace")
    if content_type.lower().startswith("multipart/form-data"):
        return 'name="List-Unsubscribe"' in text and "One-Click" in text
    pairs = urllib.parse.parse_qs(text, keep_blank_values=True)
    return "One-Click" in pairs.get("List-Unsubscribe", [])


class UnsubscribeService:
    def __init__(
        self,
        settings: UnsubscribeSettings,
        store: SuppressionStore,
        emitter: EventEmitter,
        *,
        reputation: ReputationGuard | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.s = settings
        self.reputation = reputation
        self.keys = settings.keys()
        self.store = store
        self.emitter = emitter
        self.clock = clock
        self.per_ip = SlidingWindow(settings.list_unsubscribe_ip_per_minute, clock)
        self.per_token = SlidingWindow(settings.list_unsubscribe_token_per_minute, clock)

    def _verify(self, token: str) -> unsub.Unsubscription | Page:
        if not self.keys.keys:
            return _page(
                404,
                "Not found",
                "This service sends no unsubscribe links.",
                reason="not_configured",
            )
        try:
            return unsub.verify_token(
                self.keys,
                urllib.parse.unquote(token),
                today=int(self.clock() // 86400),
                max_age_days=self.s.list_unsubscribe_max_age_days,
            )
        except unsub.InvalidToken as e:
            return _page(400, "Invalid link", str(e), reason=e.code)

    def handle(
        self,
        method: str,
        token: str,
        *,
        source_ip: str,
        body: bytes | None = None,
        content_type: str = "",
    ) -> Page:
        method = method.upper()
        if method not in ("GET", "POST"):
            return _page(405, "Method not allowed", "GET or POST.", reason="method_not_allowed")
        for limiter, key in (
            (self.per_ip, f"ip:{source_ip}"),
            (self.per_token, f"t:{token[-24:]}"),
        ):
            wait = limiter.take(key)
            if wait:
                page = _page(
                    429, "Too many requests", "Please try again later.", reason="rate_limited"
                )
                page.headers["Retry-After"] = str(int(wait))
                return page
        u = self._verify(token)
        if isinstance(u, Page):
            return u
        what = f"{'the list ' if u.scope == 'list' else ''}{u.target}"
        if method == "GET":  # never unsubscribes: scanners follow links
            return _page(
                200,
                "Unsubscribe",
                f"Stop mail from {what} to {_mask(u.recipient)}?",
                form=True,
            )
        if not one_click_body(body, content_type):
            return _page(
                400,
                "Invalid request",
                "Expected List-Unsubscribe=One-Click.",
                reason="missing_one_click",
            )
        try:
            address = normalise(u.recipient)
        except InvalidInput:
            return _page(400, "Invalid link", "The link names no address.", reason="invalid_token")
        scope = unsub.suppression_scope(u.scope, u.target)
        key = scoped_key(address, scope)
        now = self.clock()
        current = self.store.get_many([key]).get(key)
        if current is not None and current.active(now):
            return _page(200, "Unsubscribed", f"{_mask(u.recipient)} is unsubscribed from {what}.")
        ttl = self.s.list_unsubscribe_suppress_days * 86400.0
        self.store.put_many(
            [Entry(key, "unsubscribed (one-click)", now, now + ttl, u.mail_id, "", "unsubscribe")]
        )
        origin = self._origin(u.mail_id)
        self.emitter.emit([subscription_event(u, now, method="one-click", origin=origin)])
        self._count(origin)
        return _page(200, "Unsubscribed", f"{_mask(u.recipient)} is unsubscribed from {what}.")

    def _origin(self, mail_id: str) -> Origin | None:
        if self.reputation is None:
            return None
        try:
            return self.reputation.origin(mail_id)
        except MailqueueError:
            log.warning("reputation origin not read (unsubscribe)")
            return None

    def _count(self, origin: Origin | None) -> None:
        """The unsubscribe, counted apart (no rate, no verdict) by the reputation guard."""
        if self.reputation is None or not self.reputation.counting or origin is None:
            return
        try:
            self.reputation.note(origin.principal, origin.sender, feedback_counts(["unsubscribe"]))
            self.reputation.flush()
        except MailqueueError:  # the opt-out and its event are written; the count is lost
            log.warning("reputation counters not written (unsubscribe)")


def subscription_event(
    u: unsub.Unsubscription, now: float, *, method: str, origin: Origin | None = None
) -> QueueEvent:
    """SES's Subscription event for an opt-out (its eventId fixed by the token's content).
    Its `mail` is the original mail's: sender and arrival from its origin; without one
    (reputation guards off, or past feedback_days) the sender is unknown ("") and the
    arrival is the day the link was issued (the token's day, the delivery's)."""
    ts = datetime.fromtimestamp(now, UTC)
    if origin is not None:
        source, sent = origin.sender, datetime.fromtimestamp(origin.arrival, UTC)
        tags = {PRINCIPAL_TAG: (origin.principal,)} if origin.principal else {}
    else:
        source, sent, tags = "", datetime.fromtimestamp(u.issued_day * 86400, UTC), {}
    prefs_new = {"unsubscribeAll": True, "topicSubscriptionStatus": []}
    prefs_old = {"unsubscribeAll": False, "topicSubscriptionStatus": []}
    stamp = ts.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return QueueEvent(
        SUBSCRIPTION_EVENT,
        MailInfo(u.mail_id, source, sent, (u.recipient,), tags=tags),
        u.recipient,
        ts,
        discriminator=f"{u.scope}:{u.target}",
        extra={
            "subscription": {
                "contactList": u.target,
                "timestamp": stamp,
                "source": "UnsubscribeHeader",
                "newTopicPreferences": prefs_new,
                "oldTopicPreferences": prefs_old,
            },
            "ours": {
                "recipient": u.recipient,
                "scope": u.scope,
                "target": u.target,
                "method": method,
            },
        },
    )
