"""Reputation guards: rolling bounce and complaint rates per principal and sender domain,
and an automatic pause of sending above thresholds.

Why: receivers judge the sending IPs by what all of their mail does; one customer whose
list is stale (bounces) or unwanted (complaints) spoils delivery for every other. SES
watches each account's rates over its recent sends and puts it under review, then pauses
it; this does the same per principal (the submitter) and per sender domain, with SES's
defaults: bounces 5 % review / 10 % pause, complaints 0.1 % / 0.5 %.

How it is counted (cheap, no hot key):

* Inputs: every final result delivery records (a send; a remote 5xx SES would call a
  hard bounce, ``bounceType`` Permanent, is a bounce; a Transient one is a soft bounce,
  counted apart) and feedback that arrives later (``record_feedback``, called by
  services/feedback for late bounces and ARF complaints, and by services/unsubscribe for
  one-click unsubscribes, counted apart). Only hard bounces count toward the bounce rate,
  as SES counts them ("Amazon SES only counts hard bounces", the Reputation metrics FAQ of
  the SES Developer Guide, https://docs.aws.amazon.com/ses/latest/dg/faqs-enforcement.html).
* Feedback arrives after the mail has left the queue (a finished mail's items are gone at
  once), so delivery leaves an ``Origin`` of each finished mail whose return path can
  bring feedback (VERP, one-click links): principal, sender, arrival, for
  ``feedback_days``; feedback finds it by the mail id its VERP or token names, and counts
  against the same keys delivery counted the send under.
* Counts are summed in the container and written once per invocation per key
  (``flush``), as ``ADD`` on a time bucket item of one of ``shards`` partitions chosen at
  random: a principal sending 1,000 mails a second writes ``invocations / shards`` items
  a second per partition, not 1,000 (the DynamoDB adapter is
  ``mailqueue.backends.aws.reputation_store``).
* Rates are over the last ``window_sends`` sends: the newest buckets are summed until they
  hold that many (at most ``max_age_buckets`` back); below ``min_sends`` there is no verdict.
* Evaluated after a flush, at most every ``evaluate_seconds`` per key per container.

A pause is an operator suspension (suspensions.py) of scope ``principal`` or
``sender_domain`` with actor ``reputation``: paused mail waits in the queue (re-armed, not
refused, not lost) and the pause lasts until an operator resumes it (``mailqueue
reputation resume``), which also restarts the counting (buckets before the resume are
ignored, so the old rates cannot pause it again at once). Each review, pause and resume is
an event (``mailqueue:Reputation``) and a log line; the handler publishes the rates as
CloudWatch metrics (template.yaml's alarms watch them).
"""

from __future__ import annotations

import json
import logging
import math
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from mailqueue.core.config import ConfigError
from mailqueue.core.errors import MailqueueError
from mailqueue.core.events import REPUTATION_EVENT, bounce_class, event_id
from mailqueue.core.model import Result, to_iso
from mailqueue.core.trace import principal_key
from mailqueue.outbound.suspensions import MAX_SECONDS, Suspension, SuspensionStore

log = logging.getLogger(__name__)

RepScope = Literal["principal", "sender_domain", "pool"]
REP_SCOPES: tuple[RepScope, ...] = ("principal", "sender_domain", "pool")
# scopes a "pause" verdict suspends: an egress pool's is judged (its warm-up stops
# ramping, outbound/warmup.py; a review event) but not suspended, since that would stop
# every sender's mail for one sender's list, whose own scopes are paused already
PAUSE_SCOPES: tuple[RepScope, ...] = ("principal", "sender_domain")
ACTOR = "reputation"
EVENT_TYPE = REPUTATION_EVENT
FeedbackKind = Literal["bounce", "soft_bounce", "complaint", "unsubscribe"]
FEEDBACK_KINDS: tuple[FeedbackKind, ...] = ("bounce", "soft_bounce", "complaint", "unsubscribe")


@dataclass(frozen=True, slots=True)
class Thresholds:
    """When to review and when to pause (fractions, not percents); validated at start."""

    bounce_review: float = 0.05
    bounce_pause: float = 0.10
    complaint_review: float = 0.001
    complaint_pause: float = 0.005
    window_sends: int = 1000  # rates over the last N sends
    min_sends: int = 200  # fewer sends than this in the window: no verdict
    bucket_seconds: int = 3600
    max_age_buckets: int = 24 * 14  # look back at most this many buckets
    shards: int = 4
    evaluate_seconds: float = 60.0
    # how long after delivery feedback is still attributed to the mail's principal and
    # sender domain (the Origin record's TTL): complaints and late bounces come within days
    feedback_days: int = 30

    def __post_init__(self) -> None:
        for kind in ("bounce", "complaint"):
            review, pause = getattr(self, f"{kind}_review"), getattr(self, f"{kind}_pause")
            if not 0 < review < pause <= 1:
                raise ConfigError(f"reputation: need 0 < {kind}_review < {kind}_pause <= 1")
        if not 1 <= self.min_sends <= self.window_sends <= 10_000_000:
            raise ConfigError("reputation: need 1 <= min_sends <= window_sends <= 10000000")
        if not 60 <= self.bucket_seconds <= 86400:
            raise ConfigError("reputation: bucket_seconds must be within 60..86400")
        if not 1 <= self.max_age_buckets <= 10_000 or not 1 <= self.shards <= 64:
            raise ConfigError("reputation: max_age_buckets 1..10000, shards 1..64")
        if not 0 <= self.evaluate_seconds <= 3600:
            raise ConfigError("reputation: evaluate_seconds must be within 0..3600")
        if not 1 <= self.feedback_days <= 365:
            raise ConfigError("reputation: feedback_days must be within 1..365")

    @classmethod
    def parse(cls, value: str | Mapping[str, Any]) -> Thresholds:
        """From the setting (JSON object; "" or "{}" = SES's defaults)."""
        try:
            doc = json.loads(value or "{}") if isinstance(value, str) else dict(value)
        except ValueError as e:
            raise ConfigError(f"reputation thresholds: not JSON: {e}") from None
        if not isinstance(doc, dict):
            raise ConfigError("reputation thresholds: a JSON object")
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(doc) - known)
        if unknown:
            raise ConfigError(f"reputation thresholds: unknown field {unknown[0]!r}")
        try:
            return cls(**doc)
        except TypeError as e:
            raise ConfigError(f"reputation thresholds: {e}") from None


@dataclass(slots=True)
class Counts:
    """sends; hard bounces (the bounce rate's); complaints; and, counted apart (no rate of
    their own in SES's enforcement), soft bounces and unsubscribes."""

    sends: int = 0
    bounces: int = 0
    complaints: int = 0
    soft_bounces: int = 0
    unsubscribes: int = 0

    def add(self, other: Counts) -> None:
        self.sends += other.sends
        self.bounces += other.bounces
        self.complaints += other.complaints
        self.soft_bounces += other.soft_bounces
        self.unsubscribes += other.unsubscribes

    def __bool__(self) -> bool:
        return bool(
            self.sends or self.bounces or self.complaints or self.soft_bounces or self.unsubscribes
        )


@dataclass(frozen=True, slots=True)
class Origin:
    """What feedback needs of the mail it is about, kept after the mail leaves the queue:
    the keys delivery counted it under (principal as its `mailqueue:principal` tag holds
    it, sender, the pool that sent it) and its arrival (SES's `mail.timestamp` of the
    late events)."""

    mail_id: str
    principal: str
    sender: str
    arrival: float  # epoch seconds
    pool: str = ""  # the egress pool that sent it: a warming pool's ramp holds on feedback

    @property
    def sender_domain(self) -> str:
        return self.sender.rpartition("@")[2].lower().rstrip(".")


class ReputationStore(Protocol):
    """Bucketed, sharded counters (the state table in AWS)."""

    requests: int

    def add(self, key: str, shard: int, bucket: int, counts: Counts, expires_at: int) -> None:
        """Add to one bucket of one shard (created on first use)."""
        ...

    def buckets(self, key: str, shards: int, since: int) -> dict[int, Counts]:
        """Per bucket number >= since, the counts summed over the shards."""
        ...

    def set_baseline(self, key: str, bucket: int) -> None:
        """Counting restarts: buckets before this one are ignored from now on."""
        ...

    def baseline(self, key: str) -> int:
        """The bucket counting starts from (0: ever)."""
        ...

    def remember(self, origins: Sequence[Origin], expires_at: int) -> None:
        """Keep finished mails' origins until expires_at (feedback attribution)."""
        ...

    def origin(self, mail_id: str) -> Origin | None:
        """A finished mail's origin, if kept and not expired."""
        ...


@dataclass(frozen=True, slots=True)
class Standing:
    """A key's rates over its window and what they call for."""

    scope: RepScope
    target: str
    sends: int
    bounces: int
    complaints: int
    verdict: Literal["ok", "review", "pause", "too_few"]
    reason: str = ""
    soft_bounces: int = 0
    unsubscribes: int = 0

    @property
    def bounce_rate(self) -> float:
        return self.bounces / self.sends if self.sends else 0.0

    @property
    def complaint_rate(self) -> float:
        return self.complaints / self.sends if self.sends else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "scope": self.scope,
            "target": self.target,
            "sends": self.sends,
            "bounces": self.bounces,
            "complaints": self.complaints,
            "softBounces": self.soft_bounces,
            "unsubscribes": self.unsubscribes,
            "bounceRate": round(self.bounce_rate, 6),
            "complaintRate": round(self.complaint_rate, 6),
            "verdict": self.verdict,
            "reason": self.reason or None,
        }


def judge(scope: RepScope, target: str, c: Counts, t: Thresholds) -> Standing:
    """The verdict on one key's window (pure): hard bounces and complaints over sends;
    soft bounces and unsubscribes are shown, never judged."""
    soft, unsubs = c.soft_bounces, c.unsubscribes
    if c.sends < t.min_sends:
        return Standing(
            scope,
            target,
            c.sends,
            c.bounces,
            c.complaints,
            "too_few",
            soft_bounces=soft,
            unsubscribes=unsubs,
        )
    br, cr = c.bounces / c.sends, c.complaints / c.sends
    over: list[str] = []
    verdict: Literal["ok", "review", "pause"] = "ok"
    for name, rate, review, pause in (
        ("bounce", br, t.bounce_review, t.bounce_pause),
        ("complaint", cr, t.complaint_review, t.complaint_pause),
    ):
        if rate >= pause:
            verdict = "pause"
            over.append(f"{name} rate {rate:.2%} >= {pause:.2%}")
        elif rate >= review:
            verdict = "review" if verdict == "ok" else verdict
            over.append(f"{name} rate {rate:.2%} >= review {review:.2%}")
    why = f"{'; '.join(over)} over the last {c.sends} sends" if over else ""
    return Standing(
        scope,
        target,
        c.sends,
        c.bounces,
        c.complaints,
        verdict,
        why,
        soft_bounces=soft,
        unsubscribes=unsubs,
    )


def window(per_bucket: Mapping[int, Counts], t: Thresholds) -> Counts:
    """The newest buckets summed until they hold window_sends sends."""
    total = Counts()
    for b in sorted(per_bucket, reverse=True):
        total.add(per_bucket[b])
        if total.sends >= t.window_sends:
            break
    return total


def rep_key(scope: RepScope, target: str) -> str:
    """The counters' key. A principal's is its digest (core/trace.principal_key) whether
    the mail's tag holds the ARN (trace_private off) or the digest (on), so the ARN and
    the digest read the same counters whatever trace_private says."""
    return f"{scope}#{principal_key(target) if scope == 'principal' else target}"


def targets(principal: str, sender: str, pool: str = "") -> list[tuple[RepScope, str]]:
    """The keys a mail counts under: its principal, its sender's domain and the egress
    pool that sent it (when there are pools)."""
    out: list[tuple[RepScope, str]] = [("pool", pool)] if pool else []
    if principal:
        out.append(("principal", principal))
    domain = sender.rpartition("@")[2].lower().rstrip(".")
    if domain:
        out.append(("sender_domain", domain))
    return out


def same_target(scope: RepScope, a: str, b: str) -> bool:
    """Whether two targets name the same key: principals by their digest (an ARN and its
    `sha256:` digest are one principal), domains as written (parse_target lowers them)."""
    return principal_key(a) == principal_key(b) if scope == "principal" else a == b


def counts_of(results: Mapping[str, Result]) -> Counts:
    """A group's final results as reputation counts: each final result is a send; a remote
    permanent reply (5xx) is a bounce when its Bounce event says Permanent (the same
    class, core/events.bounce_class), a soft bounce when it says Transient (mailbox full,
    too large). Our own verdicts (no reply: expiry, no route) say nothing about the list."""
    c = Counts()
    for r in results.values():
        if r.success or r.permanent:
            c.sends += 1
            if 500 <= r.code <= 599:
                if bounce_class(r)[0] == "Permanent":
                    c.bounces += 1
                else:
                    c.soft_bounces += 1
    return c


ReputationEvents = Callable[[dict[str, Any]], None]


def reputation_event(
    action: Literal["review", "paused", "resumed"],
    scope: RepScope,
    target: str,
    at: float,
    *,
    standing: Standing | None = None,
    actor: str = ACTOR,
) -> dict[str, Any]:
    """One event-log record (no `mail`: it is about a sender, not a message)."""
    ts = to_iso_epoch(at)
    body: dict[str, Any] = {
        "action": action,
        "scope": scope,
        "target": target,
        "actor": actor,
        "timestamp": ts,
    }
    if standing is not None:
        body.update(
            {
                k: v
                for k, v in standing.to_json().items()
                if k
                in (
                    "sends",
                    "bounces",
                    "complaints",
                    "softBounces",
                    "unsubscribes",
                    "bounceRate",
                    "complaintRate",
                )
            }
        )
        body["reason"] = standing.reason
    return {
        "eventType": EVENT_TYPE,
        "mailqueue": {
            "eventId": event_id("reputation", scope, target, action, ts),
            "reputation": body,
        },
    }


def to_iso_epoch(t: float) -> str:
    from datetime import UTC, datetime

    return to_iso(datetime.fromtimestamp(t, UTC)) or ""


@dataclass
class ReputationGuard:
    """Per container: sums counts, writes them per invocation, judges and pauses."""

    store: ReputationStore
    suspensions: SuspensionStore
    thresholds: Thresholds = field(default_factory=Thresholds)
    events: ReputationEvents | None = None
    clock: Callable[[], float] = time.time
    rng: random.Random = field(default_factory=random.Random)
    # keep finished mails' origins for feedback (delivery: on when its mail can bring any)
    remember: bool = False
    # off: guards are off (no counts, no verdicts); the guard only keeps and finds origins,
    # which late events need for their `mail` (sender, arrival) whatever the guards say
    counting: bool = True
    # the scopes counted (a guard kept only for the pools' warm-up counts: ("pool",))
    scopes: tuple[RepScope, ...] = REP_SCOPES
    _pending: dict[tuple[RepScope, str], Counts] = field(default_factory=dict)
    _origins: list[Origin] = field(default_factory=list)
    _judged_at: dict[tuple[RepScope, str], float] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def note(
        self,
        principal: str,
        sender: str,
        counts: Counts,
        pool: str = "",
        *,
        origin: Origin | None = None,
    ) -> None:
        """Count a group's results (written by flush) under the scopes kept; with `origin`
        and `remember`, keep the finished mail's origin for the feedback that may come
        later."""
        with self._lock:
            if origin is not None and self.remember:
                self._origins.append(origin)
            if not counts or not self.counting:
                return
            for k in targets(principal, sender, pool):
                if k[0] not in self.scopes:
                    continue
                self._pending.setdefault(k, Counts()).add(counts)

    def bucket(self, now: float) -> int:
        return int(now // self.thresholds.bucket_seconds)

    def flush(self) -> list[Standing]:
        """Write the summed counts (one ADD per key), then judge the keys written (at most
        every evaluate_seconds each). Returns the standings judged."""
        with self._lock:
            pending, self._pending = self._pending, {}
            origins, self._origins = self._origins, []
        now = self.clock()
        t = self.thresholds
        b = self.bucket(now)
        expires = int((b + 1 + t.max_age_buckets) * t.bucket_seconds)
        judged: list[Standing] = []
        for (scope, target), c in pending.items():
            self.store.add(rep_key(scope, target), self.rng.randrange(t.shards), b, c, expires)
            last = self._judged_at.get((scope, target), -math.inf)
            if now - last >= t.evaluate_seconds:
                self._judged_at[(scope, target)] = now
                judged.append(self.evaluate(scope, target))
        if origins:
            # one BatchWriteItem per 25 mails; not written, only these mails' later
            # feedback goes uncounted (and is counted as unattributed), never a result
            try:
                self.store.remember(origins, int(now + t.feedback_days * 86400))
            except MailqueueError:
                log.warning("reputation origins not written", extra={"n": len(origins)})
        return judged

    def origin(self, mail_id: str) -> Origin | None:
        return self.store.origin(mail_id)

    def standing(self, scope: RepScope, target: str) -> Standing:
        t = self.thresholds
        key = rep_key(scope, target)
        since = max(self.bucket(self.clock()) - t.max_age_buckets, self.store.baseline(key))
        return judge(scope, target, window(self.store.buckets(key, t.shards, since), t), t)

    def evaluate(self, scope: RepScope, target: str) -> Standing:
        """Judge one key; pause it (a suspension) or flag it for review (an event)."""
        s = self.standing(scope, target)
        now = self.clock()
        if s.verdict == "pause" and scope not in PAUSE_SCOPES:
            log.warning("reputation review", extra={"scope": scope, "reason": s.reason})
            self._emit(reputation_event("review", scope, target, now, standing=s))
        elif s.verdict == "pause":
            held = [
                x
                for x in self.suspensions.all()
                if x.scope == scope and same_target(scope, x.target, target) and x.active(now)
            ]
            if not held:
                self.suspensions.put(
                    Suspension(
                        scope, target, now + MAX_SECONDS, f"reputation: {s.reason}", ACTOR, now
                    )
                )
                log.warning("reputation pause", extra={"scope": scope, "reason": s.reason})
                self._emit(reputation_event("paused", scope, target, now, standing=s))
        elif s.verdict == "review":
            log.warning("reputation review", extra={"scope": scope, "reason": s.reason})
            self._emit(reputation_event("review", scope, target, now, standing=s))
        return s

    def resume(self, scope: RepScope, target: str, actor: str) -> Suspension | None:
        """An operator's resume: the pause ends and counting restarts after now."""
        now = self.clock()
        old = self.suspensions.delete(scope, target)
        self.store.set_baseline(rep_key(scope, target), self.bucket(now) + 1)
        self._emit(reputation_event("resumed", scope, target, now, actor=actor))
        log.warning("reputation resume", extra={"scope": scope})
        return old

    def _emit(self, record: dict[str, Any]) -> None:
        if self.events is not None:
            self.events(record)


FEEDBACK_COUNTS: Mapping[FeedbackKind, Counts] = {
    "bounce": Counts(bounces=1),
    "soft_bounce": Counts(soft_bounces=1),
    "complaint": Counts(complaints=1),
    "unsubscribe": Counts(unsubscribes=1),
}


def feedback_counts(kinds: Sequence[FeedbackKind]) -> Counts:
    """Late feedback as counts (a hard late bounce is a bounce, as delivery's; never a
    send: the send was counted when the mail was delivered)."""
    c = Counts()
    for kind in kinds:
        if kind not in FEEDBACK_COUNTS:
            raise ValueError(f"unknown feedback kind {kind!r}")
        c.add(FEEDBACK_COUNTS[kind])
    return c


def record_feedback(
    guard: ReputationGuard,
    principal: str,
    sender_domain: str,
    kind: FeedbackKind,
    n: int = 1,
    pool: str = "",
) -> list[Standing]:
    """Feedback that arrives after delivery: counted against the principal and the sender
    domain at once, and the egress pool that sent the mail (`pool`: its attempt's, else its
    `mailqueue:pool` tag) so a warming pool's ramp holds on it; written and judged now (a
    report is its own invocation)."""
    guard.note(principal, f"@{sender_domain}", feedback_counts([kind] * n), pool)
    return guard.flush()


class MemoryReputationStore:
    """In-process counters (tests, the fs backend, the local stack's in-process mode)."""

    def __init__(self) -> None:
        self.requests = 0
        self._items: dict[tuple[str, int, int], Counts] = {}
        self._base: dict[str, int] = {}
        self._origins: dict[str, tuple[Origin, int]] = {}
        self.clock: Callable[[], float] = time.time
        self._lock = threading.Lock()

    def add(self, key: str, shard: int, bucket: int, counts: Counts, expires_at: int) -> None:
        with self._lock:
            self.requests += 1
            self._items.setdefault((key, shard, bucket), Counts()).add(counts)

    def buckets(self, key: str, shards: int, since: int) -> dict[int, Counts]:
        out: dict[int, Counts] = {}
        with self._lock:
            self.requests += shards
            for (k, _, b), c in self._items.items():
                if k == key and b >= since:
                    out.setdefault(b, Counts()).add(c)
        return out

    def set_baseline(self, key: str, bucket: int) -> None:
        with self._lock:
            self.requests += 1
            self._base[key] = bucket

    def baseline(self, key: str) -> int:
        with self._lock:
            return self._base.get(key, 0)

    def remember(self, origins: Sequence[Origin], expires_at: int) -> None:
        with self._lock:
            self.requests += -(-len(origins) // 25)
            for o in origins:
                self._origins[o.mail_id] = (o, expires_at)

    def origin(self, mail_id: str) -> Origin | None:
        with self._lock:
            self.requests += 1
            got = self._origins.get(mail_id)
        return got[0] if got is not None and got[1] > self.clock() else None


def parse_rep_scope(value: Any) -> RepScope:
    from mailqueue.core.errors import InvalidInput

    if value not in REP_SCOPES:
        raise InvalidInput("invalid_scope", "scope must be principal|sender_domain|pool", "scope")
    return value  # type: ignore[no-any-return]


__all__: Sequence[str] = (
    "Counts",
    "MemoryReputationStore",
    "Origin",
    "ReputationGuard",
    "ReputationStore",
    "Standing",
    "Thresholds",
    "feedback_counts",
    "judge",
    "same_target",
    "record_feedback",
    "window",
)
