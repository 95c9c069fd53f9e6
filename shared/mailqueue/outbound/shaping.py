"""Traffic shaping: sites (MX rollup), per-site limits shared by every worker, backoff.

Why: with up to 20 delivery invocations at once, a queue that sends as fast as Lambda
scales gets throttled, then blocked, by the big mailbox providers. Every worker shares
one state item per *site* (a set of recipient domains served by the same MX hosts, or a
named provider) through a small port (:class:`ShapingStore`); the DynamoDB adapter is
``mailqueue.backends.aws.shaping_store``. Decisions are pure functions (:func:`gcra`,
:func:`admit`, :func:`apply_action`) so they can be property-tested; :class:`Shaper`
holds the per-container caches (sites, token blocks, known suspensions) and does the
read-modify-write loop with conditional writes.

Rules are data: ``data/shaping.json`` (providers, limits) and ``data/backoff.json``
(reply rules), overridable per deployment (see docs/operations.md, "Traffic shaping").

One piece (~1,150 lines): the rules' types (Limits, Rate) are what the pure decisions
(GCRA, admission, booked slots, backoff actions) compute with and what the Shaper's
read-modify-write loop applies to one shared state item; split, each part would import
the others' internals.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import logging
import math
import random
import re
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any, Literal, Protocol

from mailqueue.core.config import ConfigError
from mailqueue.core.model import Result

log = logging.getLogger(__name__)

_EPS = 1e-6  # a microsecond: float rounding at epoch-second magnitudes is ~1e-7


class RulesError(ConfigError):
    """A shaping or backoff rules file is invalid: the function refuses to start."""


# ----------------------------------------------------------------------------- durations

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(value: Any, where: str) -> float:
    """Seconds from a number or a string such as "500ms", "10s", "5m", "1h", "1d"."""
    if isinstance(value, bool):
        raise RulesError(f"{where}: expected a duration, got {value!r}")
    if isinstance(value, int | float):
        try:
            seconds = float(value)
        except OverflowError:  # an int past a float's range (JSON has no bound on digits)
            raise RulesError(f"{where}: a duration must be finite") from None
    elif isinstance(value, str):
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*", value)
        if not m:
            raise RulesError(f"{where}: {value!r} is not a duration (e.g. 30s, 5m, 1h)")
        seconds = float(m.group(1)) * _UNITS[m.group(2) or "s"]
    else:
        raise RulesError(f"{where}: expected a duration, got {type(value).__name__}")
    if not math.isfinite(seconds) or seconds <= 0:
        raise RulesError(f"{where}: a duration must be positive")
    return seconds


def _int(d: Mapping[str, Any], key: str, where: str, lo: int, hi: int) -> int | None:
    v = d.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise RulesError(f"{where}.{key}: expected an integer within {lo}..{hi}, got {v!r}")
    return v


def _number(d: Mapping[str, Any], key: str, where: str, lo: float, hi: float) -> float | None:
    v = d.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float) or not lo <= v <= hi:
        raise RulesError(f"{where}.{key}: expected a number within {lo}..{hi}, got {v!r}")
    return float(v)


def _only(d: Any, allowed: Iterable[str], where: str) -> Mapping[str, Any]:
    if not isinstance(d, dict):
        raise RulesError(f"{where}: expected an object")
    unknown = set(d) - set(allowed)
    if unknown:
        raise RulesError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
    return d


# ----------------------------------------------------------------------------- limits


@dataclass(frozen=True, slots=True)
class Rate:
    """At most `messages` per `per` seconds on average, `burst` of them at once (GCRA)."""

    messages: int
    per: float
    burst: int

    @property
    def key(self) -> str:
        return f"{self.messages}/{self.per:g}"

    def interval(self, scale: float = 1.0) -> float:
        """Seconds between two messages at this rate, scaled down by `scale` (0 < s <= 1)."""
        return self.per / (self.messages * scale)


@dataclass(frozen=True, slots=True)
class Limits:
    """What one site may take, shared by every worker. None: no limit of that kind."""

    max_connections: int | None = None
    rates: tuple[Rate, ...] = ()
    max_recipients_per_transaction: int | None = None
    max_messages_per_connection: int | None = None
    block: int = 5  # tokens taken per write; capped at half the smallest burst
    connection_wait: float = 5.0  # re-arm after this when every connection slot is taken
    slowdown_floor: float = 0.05  # a slowdown never scales the rates below this
    recover_after: float = 300.0  # quiet seconds before each step back up
    recover_step: float = 2.0  # each step multiplies the scale by this (up to 1)

    @property
    def limited(self) -> bool:
        return bool(self.rates) or self.max_connections is not None

    @property
    def block_size(self) -> int:
        """At most half the smallest burst: a block needs that much room in the bucket,
        and with no slack left every moment between refill and take would be lost."""
        return max(1, min([self.block, *(r.burst // 2 for r in self.rates)]))

    @property
    def block_ttl(self) -> float:
        """Tokens of a block not used within this long are dropped: it bounds the excess
        over the GCRA guarantee to one block whatever the number of workers."""
        if not self.rates:
            return 0.0
        return min(r.interval() for r in self.rates) * self.block_size


_LIMIT_FIELDS = (
    "max_connections",
    "rates",
    "max_recipients_per_transaction",
    "max_messages_per_connection",
    "block",
    "connection_wait",
    "slowdown_floor",
    "recover_after",
    "recover_step",
)


def _limits(d: Any, where: str, base: Limits | None = None) -> Limits:
    d = _only(d, _LIMIT_FIELDS, where)
    out = base or Limits()
    kw: dict[str, Any] = {}
    for name, lo, hi in (
        ("max_connections", 1, 10_000),
        ("max_recipients_per_transaction", 1, 1000),
        ("max_messages_per_connection", 1, 100_000),
        ("block", 1, 1000),
    ):
        v = _int(d, name, where, lo, hi)
        if v is not None:
            kw[name] = v
    for name in ("connection_wait", "recover_after"):
        if name in d:
            kw[name] = parse_duration(d[name], f"{where}.{name}")
    floor = _number(d, "slowdown_floor", where, 0.001, 1.0)
    if floor is not None:
        kw["slowdown_floor"] = floor
    step = _number(d, "recover_step", where, 1.01, 100.0)
    if step is not None:
        kw["recover_step"] = step
    if "rates" in d:
        if not isinstance(d["rates"], list):
            raise RulesError(f"{where}.rates: expected a list")
        rates = []
        for i, r in enumerate(d["rates"]):
            w = f"{where}.rates[{i}]"
            r = _only(r, ("messages", "per", "burst"), w)
            messages = _int(r, "messages", w, 1, 10_000_000)
            if messages is None or "per" not in r:
                raise RulesError(f"{w}: needs messages and per (e.g. 20 per 1s)")
            burst = _int(r, "burst", w, 1, 100_000) or 1
            rates.append(Rate(messages, parse_duration(r["per"], f"{w}.per"), burst))
        if len({r.key for r in rates}) != len(rates):
            raise RulesError(f"{where}.rates: two rates over the same period and count")
        kw["rates"] = tuple(rates)
    return replace(out, **kw)


@dataclass(frozen=True, slots=True)
class Provider:
    site: str
    patterns: tuple[str, ...]

    def matches(self, host: str) -> bool:
        h = host.lower().rstrip(".")
        return any(fnmatch.fnmatchcase(h, p) for p in self.patterns)


_SITE_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")


@dataclass(frozen=True, slots=True)
class ShapingRules:
    """Providers by MX pattern, default limits, limits per site, site cache TTL."""

    providers: tuple[Provider, ...] = ()
    default: Limits = Limits()
    sites: Mapping[str, Limits] = field(default_factory=dict)
    site_ttl: float = 3600.0

    def limits_for(self, site: str) -> Limits:
        return self.sites.get(site, self.default)

    @classmethod
    def from_json(cls, text: str, source: str = "shaping rules") -> ShapingRules:
        try:
            doc = json.loads(text)
        except ValueError as e:
            raise RulesError(f"{source}: not JSON: {e}") from e
        doc = _only(doc, ("version", "site_ttl", "providers", "default", "sites"), source)
        if doc.get("version") != 1:
            raise RulesError(f"{source}.version: must be 1")
        providers = []
        seen: set[str] = set()
        for i, p in enumerate(doc.get("providers") or []):
            w = f"{source}.providers[{i}]"
            p = _only(p, ("site", "mx"), w)
            site = p.get("site")
            if not isinstance(site, str) or not _SITE_NAME.match(site):
                raise RulesError(f"{w}.site: a lower-case name ([a-z0-9._-], up to 63)")
            if site in seen:
                raise RulesError(f"{w}.site: {site!r} is named twice")
            seen.add(site)
            mx = p.get("mx")
            if not isinstance(mx, list) or not mx or not all(isinstance(x, str) for x in mx):
                raise RulesError(f"{w}.mx: a non-empty list of host patterns")
            providers.append(Provider(site, tuple(x.lower().rstrip(".") for x in mx)))
        default = _limits(doc.get("default") or {}, f"{source}.default")
        sites: dict[str, Limits] = {}
        raw_sites = doc.get("sites") or {}
        if not isinstance(raw_sites, dict):
            raise RulesError(f"{source}.sites: expected an object")
        for name, d in raw_sites.items():
            sites[name] = _limits(d, f"{source}.sites.{name}", default)
        ttl = parse_duration(doc.get("site_ttl", 3600), f"{source}.site_ttl")
        return cls(tuple(providers), default, sites, ttl)

    def site_of(self, hosts: Iterable[str]) -> str:
        """The site of a destination from its MX (or relay) host names: the first
        provider one of them matches, else the set of hosts itself (same MX set, same
        site). Long sets are hashed to keep the key short."""
        names = sorted({h.lower().rstrip(".") for h in hosts if h})
        for p in self.providers:
            if any(p.matches(h) for h in names):
                return p.site
        joined = ",".join(names)
        if len(joined) <= 120:
            return "mx:" + joined
        return "mx:" + hashlib.sha256(joined.encode()).hexdigest()[:24]


# ----------------------------------------------------------------------------- backoff rules

ActionKind = Literal["suspend", "slowdown", "reclassify"]


@dataclass(frozen=True, slots=True)
class BackoffRule:
    """Match an SMTP reply (code, enhanced status, text) at some sites; act on the site."""

    id: str
    sites: tuple[str, ...]  # empty: every site
    codes: tuple[int, ...]  # empty: any code
    status: re.Pattern[str] | None
    text: re.Pattern[str] | None
    suspend: float | None = None  # seconds
    slowdown: float | None = None  # multiply the site's rates by this (0 < f < 1)
    reclassify: str | None = None  # a permanent reply becomes this temporary status

    def matches(self, site: str, r: Result) -> bool:
        if r.code == 0:  # our own verdicts (connect failures...) are not replies
            return False
        if self.sites and not any(fnmatch.fnmatchcase(site, s) for s in self.sites):
            return False
        if self.codes and r.code not in self.codes:
            return False
        if self.status is not None and not self.status.fullmatch(r.status):
            return False
        return not (self.text is not None and not self.text.search(r.text))

    @property
    def actions(self) -> tuple[ActionKind, ...]:
        out: list[ActionKind] = []
        if self.suspend:
            out.append("suspend")
        if self.slowdown:
            out.append("slowdown")
        if self.reclassify:
            out.append("reclassify")
        return tuple(out)


def _regex(d: Mapping[str, Any], key: str, where: str) -> re.Pattern[str] | None:
    v = d.get(key)
    if v is None:
        return None
    if not isinstance(v, str):
        raise RulesError(f"{where}.{key}: expected a regular expression string")
    try:
        return re.compile(v)
    except re.error as e:
        raise RulesError(f"{where}.{key}: bad regular expression: {e}") from e


@dataclass(frozen=True, slots=True)
class BackoffRules:
    rules: tuple[BackoffRule, ...] = ()

    def match(self, site: str, r: Result) -> BackoffRule | None:
        return next((rule for rule in self.rules if rule.matches(site, r)), None)

    @classmethod
    def from_json(cls, text: str, source: str = "backoff rules") -> BackoffRules:
        try:
            doc = json.loads(text)
        except ValueError as e:
            raise RulesError(f"{source}: not JSON: {e}") from e
        doc = _only(doc, ("version", "rules"), source)
        if doc.get("version") != 1:
            raise RulesError(f"{source}.version: must be 1")
        rules = []
        ids: set[str] = set()
        raw = doc.get("rules") or []
        if not isinstance(raw, list):
            raise RulesError(f"{source}.rules: expected a list")
        for i, d in enumerate(raw):
            w = f"{source}.rules[{i}]"
            d = _only(
                d,
                ("id", "comment", "sites", "code", "status", "text", "action"),
                w,
            )
            rid = d.get("id")
            if not isinstance(rid, str) or not _SITE_NAME.match(rid) or rid in ids:
                raise RulesError(f"{w}.id: a unique lower-case name ([a-z0-9._-])")
            ids.add(rid)
            sites = d.get("sites") or []
            if not isinstance(sites, list) or not all(isinstance(s, str) for s in sites):
                raise RulesError(f"{w}.sites: a list of site names or patterns")
            code = d.get("code")
            codes = [code] if isinstance(code, int) else (code or [])
            if not isinstance(codes, list) or not all(
                isinstance(c, int) and not isinstance(c, bool) and 200 <= c <= 599 for c in codes
            ):
                raise RulesError(f"{w}.code: an SMTP code or a list of them (200..599)")
            status, text_re = _regex(d, "status", w), _regex(d, "text", w)
            if not codes and status is None and text_re is None:
                raise RulesError(f"{w}: match on at least one of code, status, text")
            a = _only(d.get("action"), ("suspend", "slowdown", "reclassify"), f"{w}.action")
            suspend = (
                parse_duration(a["suspend"], f"{w}.action.suspend") if "suspend" in a else None
            )
            slowdown = _number(a, "slowdown", f"{w}.action", 0.001, 0.999)
            reclassify = a.get("reclassify")
            if reclassify is not None and (
                not isinstance(reclassify, str)
                or not re.fullmatch(r"4\.\d{1,3}\.\d{1,3}", reclassify)
            ):
                raise RulesError(f"{w}.action.reclassify: a temporary status such as 4.7.0")
            if suspend is None and slowdown is None and reclassify is None:
                raise RulesError(f"{w}.action: one of suspend, slowdown, reclassify")
            rules.append(
                BackoffRule(
                    rid, tuple(sites), tuple(codes), status, text_re, suspend, slowdown, reclassify
                )
            )
        return cls(tuple(rules))


def reclassified(r: Result, rule: BackoffRule) -> Result:
    """A permanent reply a rule knows to be temporary, as a deferral (text kept)."""
    if not rule.reclassify or not r.permanent:
        return r
    return Result(r.code, rule.reclassify, r.text, r.remote_mta)


def _read(value: str, default: str, kind: str) -> tuple[str, str]:
    """Rules from a setting: empty -> packaged default, '{...}' -> inline, else a path."""
    if not value.strip():
        return resources.files("mailqueue").joinpath("data", default).read_text(), default
    if value.lstrip().startswith("{"):
        return value, f"{kind} (inline)"
    try:
        return Path(value).read_text(), value
    except OSError as e:
        raise RulesError(f"{kind}: cannot read {value}: {e.strerror or e}") from e


def load_rules(shaping: str = "", backoff: str = "") -> tuple[ShapingRules, BackoffRules]:
    """Both rules files, validated; every site named in backoff rules is checked too."""
    text, src = _read(shaping, "shaping.json", "shaping rules")
    s = ShapingRules.from_json(text, src)
    text, src = _read(backoff, "backoff.json", "backoff rules")
    b = BackoffRules.from_json(text, src)
    return s, b


def check_transaction_limits(rules: ShapingRules, group_recipient_limit: int) -> None:
    """Recipients per transaction are bounded where groups are made (at enqueue, by
    MQ_GROUP_RECIPIENT_LIMIT): a site limit below that cannot be honoured by delivery, so
    the function refuses to start rather than silently exceed it."""
    for name, limits in [("default", rules.default), *rules.sites.items()]:
        m = limits.max_recipients_per_transaction
        if m is not None and m < group_recipient_limit:
            raise RulesError(
                f"shaping rules: {name}.max_recipients_per_transaction is {m}, below "
                f"MQ_GROUP_RECIPIENT_LIMIT ({group_recipient_limit}) that groups are made "
                "with; lower that setting (delivery does not split groups)"
            )


# ----------------------------------------------------------------------------- pure decisions


def gcra(tat: float, now: float, n: int, interval: float, burst: int) -> tuple[bool, float, float]:
    """Generic cell rate algorithm for `n` tokens: (allowed, new TAT, wait seconds).

    `tat` is the theoretical arrival time; n tokens conform when the new TAT is no more
    than `burst` intervals ahead of now. So over any span L, at most burst + L/interval
    tokens are granted, and a refusal says exactly how long to wait.
    """
    new = max(tat, now) + n * interval
    excess = new - now - burst * interval
    if excess <= _EPS:
        return True, new, 0.0
    return False, tat, excess


@dataclass(frozen=True, slots=True)
class SiteState:
    """The shared state of one site (one DynamoDB item); `version` guards every write."""

    tats: Mapping[str, float] = field(default_factory=dict)
    slots: Mapping[str, float] = field(default_factory=dict)  # holder -> lease end (epoch s)
    suspended_until: float = 0.0
    suspended_by: str = ""
    scale: float = 1.0
    scaled_at: float = 0.0
    version: int = 0


def effective_scale(state: SiteState, now: float, limits: Limits) -> tuple[float, float]:
    """(scale now, when it last stepped): back up by `recover_step` per quiet period."""
    if state.scale >= 1.0:
        return 1.0, state.scaled_at
    steps = int(max(0.0, now - state.scaled_at) // limits.recover_after)
    if steps <= 0:
        return state.scale, state.scaled_at
    scale = min(1.0, state.scale * limits.recover_step**steps)
    return scale, state.scaled_at + steps * limits.recover_after


def scaled_burst(rate: Rate, scale: float) -> int:
    """A slowed-down site's burst shrinks with its rate: after a suspension the bucket is
    full, and an unscaled burst would send the provider the same spike that made it
    push back (a burst of 20 against a peer that takes 10 a second: a 421 every time)."""
    return max(1, math.floor(rate.burst * scale + _EPS))


@dataclass(frozen=True, slots=True)
class Admission:
    allowed: bool
    state: SiteState
    wait: float = 0.0
    reason: str = ""  # suspended | connections | rate
    tokens: int = 0


def admit(
    state: SiteState,
    now: float,
    limits: Limits,
    *,
    holder: str,
    tokens: int,
    slot_lease: float,
    need_slot: bool,
) -> Admission:
    """May `holder` send `tokens` messages to the site now? Pure; returns the new state."""
    if state.suspended_until > now:
        return Admission(False, state, state.suspended_until - now, "suspended")
    slots = {h: t for h, t in state.slots.items() if t > now}
    if need_slot and limits.max_connections is not None:
        if holder not in slots and len(slots) >= limits.max_connections:
            soonest = min(slots.values()) - now
            return Admission(False, state, min(limits.connection_wait, soonest), "connections")
        slots[holder] = now + slot_lease
    scale, scaled_at = effective_scale(state, now, limits)
    if limits.rates:  # a block never larger than half the (scaled) burst: see Limits
        tokens = max(1, min(tokens, *(scaled_burst(r, scale) // 2 for r in limits.rates)))
    tats = dict(state.tats)
    wait = 0.0
    for rate in limits.rates:
        ok, new, w = gcra(
            tats.get(rate.key, 0.0), now, tokens, rate.interval(scale), scaled_burst(rate, scale)
        )
        if not ok:
            wait = max(wait, w)
        tats[rate.key] = new
    if wait > 0:
        return Admission(False, state, wait, "rate")
    for key in list(tats):  # rates removed from the rules: forget them
        if key not in {r.key for r in limits.rates}:
            del tats[key]
    new_state = replace(state, tats=tats, slots=slots, scale=scale, scaled_at=scaled_at)
    return Admission(True, new_state, 0.0, "", tokens)


def reserve(state: SiteState, now: float, limits: Limits, tokens: int) -> tuple[SiteState, float]:
    """Book `tokens` messages at the earliest time every rate allows them: (the state
    with the booking in its TATs, that time). Pure. What a refused sender gets instead of
    a "try again in w": its own future slot, so it waits once and sends then without
    asking again; later refusals book after it, so the waiting senders never collide.

    For each rate the booking conforms at `slot` (GCRA: new TAT - slot <= burst x
    interval), and the slot is the latest of the rates' earliest conforming times."""
    scale, scaled_at = effective_scale(state, now, limits)
    tats = dict(state.tats)
    slot = now
    for rate in limits.rates:
        i, b = rate.interval(scale), scaled_burst(rate, scale)
        n = max(1, min(tokens, b))
        slot = max(slot, max(tats.get(rate.key, 0.0), now) + n * i - b * i)
    for rate in limits.rates:
        i, b = rate.interval(scale), scaled_burst(rate, scale)
        n = max(1, min(tokens, b))
        tats[rate.key] = max(tats.get(rate.key, 0.0), slot) + n * i
    return replace(state, tats=tats, scale=scale, scaled_at=scaled_at), slot


def take_slot(
    state: SiteState, now: float, limits: Limits, *, holder: str, slot_lease: float
) -> Admission:
    """A connection slot alone (a booked message's sender: its tokens are paid)."""
    if state.suspended_until > now:
        return Admission(False, state, state.suspended_until - now, "suspended")
    slots = {h: t for h, t in state.slots.items() if t > now}
    if limits.max_connections is not None:
        if holder not in slots and len(slots) >= limits.max_connections:
            soonest = min(slots.values()) - now
            return Admission(False, state, min(limits.connection_wait, soonest), "connections")
        slots[holder] = now + slot_lease
    return Admission(True, replace(state, slots=slots))


@dataclass(frozen=True, slots=True)
class Reservation:
    """A booked slot as it travels with a postponed group (`Group.reservation`): the
    site, the time, and the group's attempt count when booked (a later attempt, after a
    temporary failure, must book again)."""

    site: str
    at: float
    attempts: int

    def encode(self) -> str:
        return f"{self.at:.3f}|{self.attempts}|{self.site}"

    @classmethod
    def decode(cls, value: str | None) -> Reservation | None:
        if not value:
            return None
        at, _, rest = value.partition("|")
        attempts, _, site = rest.partition("|")
        try:
            return cls(site, float(at), int(attempts))
        except ValueError:
            return None


def release_slot(state: SiteState, now: float, holder: str) -> SiteState:
    slots = {h: t for h, t in state.slots.items() if t > now and h != holder}
    return replace(state, slots=slots)


def apply_action(state: SiteState, now: float, limits: Limits, rule: BackoffRule) -> SiteState:
    """What a matched backoff rule does to the site: suspend it, scale its rates down."""
    if rule.suspend and now + rule.suspend > state.suspended_until:
        state = replace(state, suspended_until=now + rule.suspend, suspended_by=rule.id)
    if rule.slowdown:
        scale, _ = effective_scale(state, now, limits)
        state = replace(
            state, scale=max(limits.slowdown_floor, scale * rule.slowdown), scaled_at=now
        )
    return state


# ----------------------------------------------------------------------------- site shards

# Grants a second one shard item of a site takes (issue 40). DynamoDB serves one partition
# key value at most 1,000 write units a second ("Quotas in Amazon DynamoDB", Read/write
# throughput: "1,000 WCU per partition"; "Best practices for designing and using
# partition keys effectively": one key value is served by one partition). A grant is one
# write (booking or compare-and-set); 200 a second is 20 % of that, leaving room for
# refused writes, re-arms' give-backs, connection takes and the backoff writes on shard 0.
# bench/model/limits.py uses the same constant.
SITE_SHARD_MAX_RATE = 200.0
SITE_SHARDS_MAX = 64


def _per_second(limits: Limits) -> float:
    """The long-run rate the site may be sent at: its slowest rate (all must hold)."""
    return min((r.messages / r.per for r in limits.rates), default=0.0)


def site_shards(limits: Limits, max_rate: float = SITE_SHARD_MAX_RATE) -> int:
    """How many items a site's GCRA state is spread over: N = min(64, max(1,
    ceil(rate / max_rate))). A site of 200 grants/s or less keeps its one item."""
    rate = _per_second(limits)
    if rate <= 0 or max_rate <= 0:
        return 1
    return min(SITE_SHARDS_MAX, max(1, math.ceil(rate / max_rate - _EPS)))


def shard_limits(limits: Limits, n: int) -> Limits:
    """What one of n shards of a site holds: each rate at 1/n (the same messages over n
    times the period, so its interval is n times the site's) and burst // n (at least 1);
    no connection limit (connections are counted on the site's own item, shard 0). The
    shards' rates add up to the site's; their bursts to at most the site's (more only
    where a burst is smaller than n: one each)."""
    if n <= 1:
        return limits
    rates = tuple(Rate(r.messages, r.per * n, max(1, r.burst // n)) for r in limits.rates)
    return replace(limits, rates=rates, max_connections=None)


def shard_key(site: str, i: int) -> str:
    """The store key of shard i of `site` (an opaque string: a pool-scoped "pool|site"
    works alike): shard 0 is the site's own item (connection slots live there), the
    others `<site>#<i>`."""
    return site if i == 0 else f"{site}#{i}"


def shard_of(record: str, n: int) -> int:
    """The shard a record hashes to (stable: a record asks the same item every time)."""
    if n <= 1:
        return 0
    return int.from_bytes(hashlib.blake2b(record.encode(), digest_size=8).digest(), "big") % n


# ----------------------------------------------------------------------------- timed connections

# A site of fewer than this many connections counts them by time, not by holders (issue
# 40), where its rate allows it (`timed_connections`). Such a site keeps no slot between
# invocations (Shaper.release: a kept slot there starves the other containers), so every
# mail paid a booking, a connection take and a give-back: ~2.5 limiter requests a mail.
TIMED_CONNECTIONS_BELOW = 3
# The shortest lane a timed connection is given (H's floor, seconds): connect, greeting,
# EHLO, MAIL FROM by the middle of it (`TimedConnections.send_by`), the transaction and
# QUIT in the rest. A site whose rate would give a shorter lane (C x interval < this)
# keeps counting holders: its rate is never capped by the lane.
TIMED_CONNECTION_FLOOR = 1.0


@dataclass(frozen=True, slots=True)
class TimedConnections:
    """A site's connection limit counted by time. Every send at the site is one
    connection of one transaction (delivery closes it after its transaction), opened at
    or after its GCRA slot; with the site's burst cut to `burst` (at most its
    connections), slots are such that any half-open span of `lane` = (C - burst + 1) x
    interval holds at most C of them. So while each connection is closed within `lane`
    of its slot, at most C are open at once, and no slot is taken or given back: the
    booking's one write is all. The SMTP client starts no transaction after
    `send_by` past the slot (the late check before MAIL FROM), leaving the rest of the
    lane to the transaction; a transaction that ends later overruns its lane by what it
    takes past `lane`, and a receiver may then see C + ceil(overrun / interval)
    connections at once (tests/shaping/test_timed_connections.py)."""

    limits: Limits  # the site's limits, its connection limit folded into its rate
    lane: float  # H: how long a connection may live after its slot (seconds)
    send_by: float  # MAIL FROM no later than this after the slot (seconds)


def timed_connections(
    limits: Limits, floor: float = TIMED_CONNECTION_FLOOR
) -> TimedConnections | None:
    """The site's connections counted by time, or None (counted by holders: a site of
    TIMED_CONNECTIONS_BELOW connections or more, or without one rate, or whose rate is
    too fast for a lane of `floor` at its connections: C x interval < floor).

    The burst is the largest b <= min(burst, C) whose lane (C - b + 1) x interval is at
    least `floor`; the rate itself is unchanged (same messages, period and TAT key)."""
    c = limits.max_connections
    if c is None or c >= TIMED_CONNECTIONS_BELOW or len(limits.rates) != 1:
        return None
    rate = limits.rates[0]
    i = rate.interval()
    if c * i < floor - _EPS:
        return None
    burst = min(rate.burst, c)
    while burst > 1 and (c - burst + 1) * i < floor - _EPS:
        burst -= 1
    lane = (c - burst + 1) * i
    paced = replace(limits, rates=(Rate(rate.messages, rate.per, burst),), max_connections=None)
    return TimedConnections(paced, lane, lane / 2)


# ----------------------------------------------------------------------------- the port


@dataclass(frozen=True, slots=True)
class SlotTake:
    """A connection slot to take in the same write as a booking (`ShapingStore.take`'s
    arguments): `holder` until `until`, if it has one or fewer than `max_connections`
    are stored."""

    holder: str
    until: float
    max_connections: int


class ShapingStore(Protocol):
    """Where site states live, shared by every worker (DynamoDB in AWS)."""

    requests: int  # requests made so far (cost accounting)

    def load(self, site: str) -> SiteState:
        """The current state (a fresh one, version 0, if none is stored)."""
        ...

    def save(self, site: str, state: SiteState, expected_version: int) -> SiteState | None:
        """Write `state` as version expected+1 if the stored one is still `expected`;
        else return the stored state (the caller retries on it)."""
        ...

    def advance(
        self,
        site: str,
        key: str,
        delta: float,
        floor: float,
        guard: SiteState,
        slot: SlotTake | None = None,
    ) -> tuple[bool, SiteState]:
        """Add `delta` to the TAT `key` in one atomic write (and bump the version) if that
        TAT is at least `floor` and the stored suspension, scale and scaled_at are
        `guard`'s; (True, the state written) or (False, the stored state). No version
        condition: concurrent bookings of a site whose limit binds all succeed. `slot`:
        take that connection slot in the same write, under `take`'s condition too."""
        ...

    def restart(
        self,
        site: str,
        key: str,
        value: float,
        before: float,
        guard: SiteState,
        slot: SlotTake | None = None,
    ) -> tuple[bool, SiteState]:
        """Set the TAT `key` to `value` in one write (and bump the version) if it is
        missing or before `before` (the site is idle: GCRA restarts from now) and the
        stored suspension, scale and scaled_at are `guard`'s; as `advance` returns."""
        ...

    def take(
        self, site: str, holder: str, until: float, max_connections: int, now: float
    ) -> tuple[bool, SiteState]:
        """Hold a connection slot for `holder` until `until` in one atomic write, if the
        holder has one already or fewer than `max_connections` slots are stored (expired
        ones count: the caller's compare-and-set write clears them) and the site is not
        suspended; (True, the state written) or (False, the stored state)."""
        ...

    def give_back(self, site: str, holder: str) -> SiteState | None:
        """Remove `holder`'s slot in one atomic write; the state written, None if the
        holder had no slot (expired and cleared, or never taken)."""
        ...


# ----------------------------------------------------------------------------- the shaper


@dataclass(frozen=True, slots=True)
class Permit:
    site: str
    limits: Limits


@dataclass(frozen=True, slots=True)
class Wait:
    site: str
    seconds: float
    reason: str
    slot: float = 0.0  # > 0: a booked slot (epoch s): send then, without asking again


@dataclass
class _Block:
    tokens: int
    expires: float


_WRITE_RETRIES = 8
# A connection slot kept by a container between invocations (see Shaper.release): kept
# only at a site of at least this many connections, only while at most half of them are
# held (as this container last saw), and reused only with this much lease left.
_KEEP_MIN_CONNECTIONS = 3
_KEEP_MIN_LEASE = 60.0
_READ_FIRST = 10.0  # seconds after a refused write during which a write is preceded by a read
# A booked slot is sent on up to late_tolerance after its time, or one interval of the
# site's fastest rate where that is shorter (but never less than LATE_FLOOR): a send late
# by d bunches with the on-time ones after it, d / interval more in a window than GCRA
# allows (issue 40: a 450 from Postfix's anvil at load 36, when the grace was 10 s).
# Later, the group books a fresh slot. The floor is 1 s, not a fraction of a fast site's
# interval: at 50/s a floor of 50 ms had most woken groups miss their slots on a loaded
# machine and book again, round after round (24 and 29 of 30 delivered in 90 s at load
# ~4, against 30 of 30 with 1 s: tests/shaping/test_local_stack.py), while one second's
# late sends at a fast site are one second's worth more in a receiver's window of a
# minute or an hour.
LATE_TOLERANCE = 1.0
LATE_FLOOR = 1.0
LATE_GRACE_OFF = 10.0  # late_tolerance 0: a slot is sent on up to 10 s late, as before


class Shaper:
    """Per container: site cache, token blocks, known suspensions; shared state in `store`."""

    def __init__(
        self,
        rules: ShapingRules,
        backoff: BackoffRules,
        store: ShapingStore,
        *,
        slot_lease: float = 360.0,
        clock: Callable[[], float] = time.time,
        inline_wait: float = 2.0,
        shard_max_rate: float = SITE_SHARD_MAX_RATE,
        late_tolerance: float = LATE_TOLERANCE,
        timed_floor: float = TIMED_CONNECTION_FLOOR,
    ) -> None:
        self.shard_max_rate = shard_max_rate  # a setting only so tests can scale it down
        self.timed_floor = timed_floor  # 0: every connection limit counted by holders
        self.late_tolerance = late_tolerance  # see late_by
        self.rules = rules
        self.backoff = backoff
        self.store = store
        self.slot_lease = slot_lease
        self.inline_wait = inline_wait  # waits up to this are slept by the caller
        self.clock = clock
        self._sites: dict[str, tuple[str, float]] = {}
        self._blocks: dict[str, _Block] = {}
        self._suspended: dict[str, float] = {}
        self._slots: dict[tuple[str, str], float] = {}  # (site, holder) -> lease end
        self._known: dict[str, SiteState] = {}  # last state seen: the next write tries it
        self._conflict_at: dict[str, float] = {}  # last refused write per site
        self._pace: dict[str, tuple[float, float]] = {}  # site -> (last, mean use time)
        self._permit_at: dict[str, float] = {}  # site -> when the last permit was given
        self._rng = random.Random()
        # the records of one invocation run at once (delivery's lanes): one limiter
        # decision at a time per container, so its caches and blocks stay consistent
        self._lock = threading.RLock()
        self._demand_lock = threading.Lock()
        self._demand: dict[str, int] = {}  # site -> records waiting to ask for it
        self._spare: dict[str, list[float]] = {}  # site -> slots booked for those records
        self._kept: dict[str, list[str]] = {}  # site -> holders kept between invocations

    @staticmethod
    def new_holder() -> str:
        return secrets.token_hex(6)

    # -- sites
    def site_for(self, domain: str, hosts: Callable[[], Sequence[str]]) -> str:
        """The domain's site, cached per container for `site_ttl`."""
        now = self.clock()
        hit = self._sites.get(domain)
        if hit is not None and hit[1] > now:
            return hit[0]
        site = self.rules.site_of(hosts())
        self._sites[domain] = (site, now + self.rules.site_ttl)
        return site

    def limits(self, site: str) -> Limits:
        """The site's limits as its rules give them (delivery decides from these how it
        uses connections: `max_connections`, messages per connection)."""
        return self.rules.limits_for(site)

    def timed(self, site: str) -> TimedConnections | None:
        """The site's connections counted by time (`timed_connections`), or None: also
        with the late tolerance off (a send up to 10 s late would outlive its lane)."""
        if self.timed_floor <= 0 or self.late_tolerance <= 0:
            return None
        return timed_connections(self.limits(site), self.timed_floor)

    def _pacing(self, site: str) -> Limits:
        """What the limiter admits with: the site's limits, a connection limit counted
        by time folded into its rate (no slot to take or give back)."""
        timed = self.timed(site)
        return timed.limits if timed is not None else self.limits(site)

    def _note_pace(self, site: str, now: float) -> None:
        """This container's mean time from a permit to its next request for the site:
        how long it takes to use a token (waiting for budget does not count)."""
        permitted = self._permit_at.pop(site, None)
        if permitted is None:
            return
        step = min(now - permitted, 3600.0)
        gap = self._pace.get(site, (0.0, 0.0))[1]
        self._pace[site] = (now, step if not gap else 0.7 * gap + 0.3 * step)

    def _want(self, site: str, limits: Limits, messages: int, now: float) -> int:
        """Tokens to take in one write: a block, but no more than this container uses
        before the block expires (block_ttl). A worker that sends one message a second
        against a 20/s site would otherwise drop most of every block: a write per
        message anyway, and the dropped tokens hold the whole site below its rate."""
        if not limits.rates:
            return 0
        gap = self._pace.get(site, (0.0, 0.0))[1]
        usable = int(limits.block_ttl / gap) if gap > 0 else limits.block_size
        return max(messages, min(limits.block_size, usable))

    # -- admission
    def announce(self, site: str) -> None:
        """A record of this container will ask `admit(reserve=True, announced=True)` for
        `site` soon (it is waiting for a connection holder first): the record that asks
        before it books its slot too, in the same write (`extra`). Every announce is
        followed by that admit, or by `withdraw`."""
        with self._demand_lock:
            self._demand[site] = self._demand.get(site, 0) + 1

    def withdraw(self, site: str) -> None:
        """An announced record will not ask after all."""
        with self._demand_lock:
            self._demand[site] = max(0, self._demand.get(site, 0) - 1)

    def admit(
        self,
        site: str,
        holder: str,
        messages: int,
        *,
        reserve: bool = False,
        announced: bool = False,
        record: str = "",
    ) -> Permit | Wait:
        """Permit, or how long to wait. `reserve`: a refusal for the rate books the
        earliest slot instead (`Wait.slot`, in the same conditional write a grant would
        be), and the caller sends then with `redeem`, no further request. `announced`:
        the caller announced itself (`announce`) while it waited to ask. `record`: what
        the asking record is (its mail and group): at a site spread over shards
        (`site_shards`), the shard it asks first."""
        if reserve and not announced:
            self.announce(site)  # records of this container about to ask for the site
        with self._lock:
            extra = 0
            if reserve:
                with self._demand_lock:
                    self._demand[site] -= 1
                    extra = self._demand[site]
                spare = self._spare.get(site)
                if spare:  # booked by another record's write a moment ago, for us
                    slot = spare.pop(0)
                    return Wait(site, max(0.0, slot - self.clock()), "rate", slot)
            limits = self._pacing(site)
            n = site_shards(limits, self.shard_max_rate)
            if n == 1:
                got = self._admit(site, holder, messages, reserve, extra)
            else:
                got = self._admit_sharded(site, holder, messages, reserve, extra, record, n)
            if isinstance(got, Permit):
                self._permit_at[site] = self.clock()
            return got

    def shards(self, site: str) -> int:
        """How many items the site's state is spread over (1: its own item only)."""
        return site_shards(self.limits(site), self.shard_max_rate)

    def _shard_order(self, site: str, first: int, n: int) -> list[int]:
        """The record's own shard and one other, the one this container last saw less
        booked ahead first (two random choices: the shards' loads stay even, so the
        site's total is its limit when demand is above it, whatever the hash's luck).
        A shard never seen counts as idle."""
        other = (first + 1 + self._rng.randrange(n - 1)) % n

        def ahead(i: int) -> float:
            state = self._known.get(shard_key(site, i))
            return max(state.tats.values(), default=0.0) if state is not None else 0.0

        return [first, other] if ahead(first) <= ahead(other) else [other, first]

    def _admit_sharded(
        self, site: str, holder: str, messages: int, book: bool, extra: int, record: str, n: int
    ) -> Permit | Wait:
        """`_admit` at a site spread over n shard items, each holding 1/n of its rates
        (`shard_limits`). The rate is taken from one shard: a booking books on the
        record's shard or the other choice (`_shard_order`); a grant without booking
        asks the first and, refused for the rate, borrows from the second. Connection
        slots stay site-wide on shard 0 (the site's own item: `redeem`, `release`,
        `reuse_kept` use it as at a site of one item); a booking takes none (its sender
        takes one with `redeem` when its slot comes), a grant takes one after its tokens
        (refused a connection, the tokens are lost: the site under its rate, never over;
        a slot taken first would be held with no grant to use it). Suspensions and slowdowns
        are written to every shard (`on_reply`), so each shard's own conditions see them.
        """
        limits = self._pacing(site)
        now = self.clock()
        until = max(
            self._suspended.get(site, 0.0),
            *(self._suspended.get(shard_key(site, i), 0.0) for i in range(1, n)),
        )
        if until > now:
            self._suspended[site] = until
            return Wait(site, until - now, "suspended")
        has_slot = limits.max_connections is None or self._slots.get((site, holder), 0.0) > now + 5
        part = shard_limits(limits, n)
        first = shard_of(record, n) if record else self._rng.randrange(n)
        got: Permit | Wait = Wait(site, limits.connection_wait, "contention")
        for i in self._shard_order(site, first, n)[: 1 if book else 2]:
            key = shard_key(site, i)
            # no booking for the container's other waiting records (`extra`) in this
            # write: they would all be paced by this one shard's 1/n of the rate while
            # the others idle; each books its own shard (one write a record, spread)
            got = self._admit(key, holder, messages, book, 0, part)
            if key != site and self._spare.get(key):  # booked for this container's records
                self._spare.setdefault(site, []).extend(self._spare.pop(key))
            if isinstance(got, Wait) and got.reason == "suspended":
                self._suspended[site] = max(self._suspended.get(site, 0.0), now + got.seconds)
            if isinstance(got, Permit) or got.reason != "rate":
                break
        if isinstance(got, Wait):
            return Wait(site, got.seconds, got.reason, got.slot)
        if not has_slot:  # a grant (not a booking): its connection now
            return self._connect(site, holder, limits, 0.0)
        return Permit(site, limits)

    def late_by(self, site: str, slot: float) -> bool:
        """A booked slot is missed: now is past it by more than the tolerance (the
        smaller of `late_tolerance` and the longer of LATE_FLOOR and one interval of the
        site's fastest rate). The group books a fresh slot instead of sending late."""
        if self.late_tolerance <= 0:  # off: the grace before issue 40
            return self.clock() > slot + LATE_GRACE_OFF
        limits = self.limits(site)
        interval = min((r.interval() for r in limits.rates), default=self.late_tolerance)
        tolerance = min(self.late_tolerance, max(LATE_FLOOR, interval))
        timed = self.timed(site)
        if timed is not None:  # the rest of the lane is the transaction's
            tolerance = min(tolerance, timed.send_by)
        return self.clock() > slot + tolerance

    def holds_slot(self, site: str, holder: str) -> bool:
        """Whether `holder` has a connection slot at `site` (to give back at the end)."""
        with self._lock:
            return (site, holder) in self._slots

    def redeem(self, site: str, holder: str, slot: float) -> Permit | Wait:
        """Send on a slot booked by `admit(reserve=True)`. No request unless a connection
        slot must be taken; a suspension this container knows of still holds (the booking
        is then given up: the caller waits it out and asks afresh); a slot missed by more
        than the tolerance (`late_by`) is given up too: Wait(0, "late"), the caller books
        again (sent now it would bunch with the on-time sends after it)."""
        with self._lock:
            limits = self._pacing(site)
            now = self.clock()
            until = self._suspended.get(site, 0.0)
            if until > now:
                return Wait(site, until - now, "suspended")
            if slot > now + _EPS:
                return Wait(site, slot - now, "reserved", slot)
            if self.late_by(site, slot):
                return Wait(site, 0.0, "late")
            return self._connect(site, holder, limits, slot)

    def _connect(self, site: str, holder: str, limits: Limits, slot: float) -> Permit | Wait:
        """A connection slot for `holder` at the site (on its own item, shard 0), unless
        it has one or the site has no connection limit. Refused, the Wait keeps `slot`
        (a booking stands: a connection frees within connection_wait)."""
        now = self.clock()
        if limits.max_connections is None or self._slots.get((site, holder), 0.0) > now + 5:
            return Permit(site, limits)
        state = self._known.get(site)
        if state is not None and state.version > 0:
            # one write that cannot conflict with other takers (only a full site or
            # a suspension refuses it); refused, decide on the state it returns
            ok, state = self.store.take(
                site, holder, now + self.slot_lease, limits.max_connections, now
            )
            if ok:
                self._known[site] = state
                self._slots[(site, holder)] = state.slots.get(holder, 0.0)
                return Permit(site, limits)
        else:
            state = self.store.load(site)
        for _ in range(_WRITE_RETRIES):
            a = take_slot(state, self.clock(), limits, holder=holder, slot_lease=self.slot_lease)
            if not a.allowed:
                if a.reason == "suspended":
                    self._suspended[site] = state.suspended_until
                # the booking stands: a connection frees within connection_wait
                return Wait(site, a.wait, a.reason, slot if a.reason != "suspended" else 0.0)
            current = self.store.save(site, a.state, state.version)
            if current is None:
                stored = replace(a.state, version=state.version + 1)
                self._known[site] = stored
                self._slots[(site, holder)] = stored.slots.get(holder, 0.0)
                return Permit(site, limits)
            state = current
        return Wait(site, limits.connection_wait, "contention", slot)

    def _admit(
        self,
        site: str,
        holder: str,
        messages: int,
        book: bool = False,
        extra: int = 0,
        limits: Limits | None = None,
    ) -> Permit | Wait:
        """`extra`: records of this container waiting to ask the same (booking for them
        too, in the same write, saves their writes and the conflicts between them).
        `limits`: a shard's (`shard_limits`), else the site's own."""
        limits = limits or self._pacing(site)
        now = self.clock()
        until = self._suspended.get(site, 0.0)
        if until > now:
            return Wait(site, until - now, "suspended")
        if not limits.limited:
            return Permit(site, limits)
        messages = max(1, min(messages, limits.block_size if limits.rates else messages))
        has_slot = limits.max_connections is None or self._slots.get((site, holder), 0.0) > now + 5
        slot_for = None if has_slot else holder  # a booking may take the slot in its write
        self._note_pace(site, now)
        block = self._blocks.get(site)
        if block is not None and block.expires <= now:
            block = self._blocks.pop(site)
            block = None
        if has_slot and (not limits.rates or (block is not None and block.tokens >= messages)):
            if block is not None:
                block.tokens -= messages
            return Permit(site, limits)
        # a booking sender takes what it sends: a block's unused tokens would be slots
        # lost to everyone booked after them
        want = messages if book else self._want(site, limits, messages, now)
        cached = self._known.get(site)
        # others write this site: before writing, a read (1 RRU) beats a refused write (1 WRU)
        read_first = now - self._conflict_at.get(site, -1e18) < _READ_FIRST
        fresh = cached is None
        state = cached or self.store.load(site)
        if book:  # a booking whose slot is now is a grant: one atomic write either way
            for _ in range(2):  # a stale idle/binding guess costs one more, then CAS
                fast = self._book_binding(site, limits, state, now, messages, extra, slot_for)
                if isinstance(fast, Wait):
                    return fast
                if fast is None:
                    break
                state, fresh = fast, True
        for _ in range(_WRITE_RETRIES):
            now = self.clock()
            a = admit(
                state,
                now,
                limits,
                holder=holder,
                tokens=want,
                slot_lease=self.slot_lease,
                need_slot=not has_slot,
            )
            if a.allowed and not fresh and read_first:
                state, fresh = self.store.load(site), True
                continue
            if not a.allowed and not fresh and a.reason == "connections":
                # never refuse a slot on what we saw last time (one may be free by now);
                # a stale TAT or suspension only errs towards allowing, the write decides
                state, fresh = self.store.load(site), True
                continue
            if not a.allowed and book and a.reason == "rate":
                fast = self._book_binding(site, limits, state, now, messages, extra, slot_for)
                if isinstance(fast, Wait):
                    return fast
                if fast is not None:  # the atomic booking found another state: decide on it
                    state, fresh = fast, True
                    continue
                # book the earliest slot (a conditional write, as a grant): the sender
                # waits once for its own slot instead of asking again at random
                booked, slot = reserve(state, now, limits, messages)
                spares = []
                for _ in range(min(extra, 9)):
                    booked, more = reserve(booked, now, limits, messages)
                    spares.append(more)
                if (
                    not has_slot
                    and limits.max_connections is not None
                    and slot - now <= self.inline_wait
                ):
                    # the connection slot too, if one is free and the sender waits for
                    # its slot here (a re-armed one would hold it for nothing): same write
                    took = take_slot(booked, now, limits, holder=holder, slot_lease=self.slot_lease)
                    booked = took.state if took.allowed else booked
                current = self.store.save(site, booked, state.version)
                if current is None:
                    self._known[site] = replace(booked, version=state.version + 1)
                    self._spare.setdefault(site, []).extend(spares)
                    if holder in booked.slots and limits.max_connections is not None:
                        self._slots[(site, holder)] = booked.slots[holder]
                    return Wait(site, slot - now, "rate", slot)
                state, fresh = current, True
                self._conflict_at[site] = now
                continue
            if not a.allowed:
                if a.reason == "suspended":
                    self._suspended[site] = state.suspended_until
                self._known[site] = state
                wait = a.wait
                if a.reason == "rate":  # spread the waiting workers: fewer write conflicts
                    wait += self._rng.uniform(0, limits.block_ttl)
                return Wait(site, wait, a.reason)
            current = self.store.save(site, a.state, state.version)
            if current is None:
                stored = replace(a.state, version=state.version + 1)
                self._known[site] = stored
                if limits.max_connections is not None:
                    self._slots[(site, holder)] = stored.slots.get(holder, 0.0)
                if limits.rates:  # admit() may grant fewer than asked (a scaled burst)
                    self._blocks[site] = _Block(max(0, a.tokens - messages), now + limits.block_ttl)
                return Permit(site, limits)
            state, fresh = current, True  # someone else wrote: decide again on theirs
            self._conflict_at[site] = now
        return Wait(site, limits.connection_wait, "contention")

    def _book_binding(
        self,
        site: str,
        limits: Limits,
        state: SiteState,
        now: float,
        messages: int,
        extra: int,
        holder: str | None = None,
    ) -> Wait | SiteState | None:
        """Book in one write that cannot conflict with other containers' bookings.

        For a site of one rate, `reserve` is an addition while the rate binds (its TAT
        at or after now; n <= burst, so the slot is never after the TAT, and the TAT
        only grows by n x interval), and a restart at now + n x interval while the site
        is idle (TAT before now). DynamoDB applies either atomically under a condition
        on the TAT (and on the suspension and scale the booking was computed with), not
        on the item's version, so containers booking one site at once all succeed where
        compare-and-set writes refuse all but one (measured 1.6-2.4 limiter requests a
        mail with three containers before; issue 25 item 6). A booking whose slot is now
        is a grant: the caller redeems it at once. Returns the Wait (booked), the stored
        state (the condition failed: the caller decides on it, no extra read), or None
        (not applicable: not one rate, or nothing known of the site, or suspended).

        `holder` (one without a connection slot, at a site with a connection limit): if
        the booking is a grant as far as `state` tells (its slot is now) and the site has
        room, the connection slot is taken in the same write (a separate take was one
        more request); a sender that must wait for its slot takes none (it waits without
        one, then uses one its invocation has finished with: Invocation._held).
        """
        if len(limits.rates) != 1 or state.version == 0 or state.suspended_until > now:
            return None
        rate = limits.rates[0]
        tat = state.tats.get(rate.key, 0.0)
        scale, _ = effective_scale(state, now, limits)
        i, b = rate.interval(scale), scaled_burst(rate, scale)
        n = max(1, min(messages, b))
        count = 1 + min(extra, 9)
        take: SlotTake | None = None
        if (
            holder is not None
            and limits.max_connections is not None
            and len(state.slots) < limits.max_connections  # room, expired ones counted
            and tat + n * i - b * i <= now + _EPS
        ):
            take = SlotTake(holder, now + self.slot_lease, limits.max_connections)
        if tat >= now:
            ok, stored = self.store.advance(site, rate.key, count * n * i, now, state, take)
        else:
            ok, stored = self.store.restart(site, rate.key, now + count * n * i, now, state, take)
        if not ok:
            self._conflict_at[site] = now
            return stored
        self._known[site] = stored
        if take is not None and take.holder in stored.slots:
            self._slots[(site, take.holder)] = stored.slots[take.holder]
        old = stored.tats.get(rate.key, 0.0) - count * n * i
        slots = [max(now, old + (j + 1) * n * i - b * i) for j in range(count)]
        self._spare.setdefault(site, []).extend(slots[1:])
        return Wait(site, slots[0] - now, "rate", slots[0])

    def release(self, site: str, holder: str, *, keep: bool = False) -> None:
        """Give back a connection slot (end of invocation); a dead worker's slot expires.

        `keep`: the caller would keep the slot for its next invocation if the site can
        spare it. A binding rate re-arms every group to come back alone, so a slot taken
        and given back per invocation was two limiter requests a mail on top of the
        booking (issue 25 item 6: ~3 a mail at a site of 10 connections). A kept slot is
        a real slot in the store until its lease ends (never more connections than the
        limit), so it is kept only where that costs the others little: at a site of 3
        connections or more, while 2 of them (a quarter of a larger limit) are free as
        this container last saw the site; else (and at a site that refused us a slot:
        `keep` False) it is given back.
        """
        with self._lock:
            if keep and self._may_keep(site, holder):
                self._kept.setdefault(site, []).append(holder)
                return
            self._release(site, holder)

    def _may_keep(self, site: str, holder: str) -> bool:
        limits = self.limits(site)
        now = self.clock()
        if (
            limits.max_connections is None
            or limits.max_connections < _KEEP_MIN_CONNECTIONS
            or self._slots.get((site, holder), 0.0) <= now + _KEEP_MIN_LEASE
            or self._suspended.get(site, 0.0) > now
        ):
            return False
        state = self._known.get(site)
        if state is None:
            return False
        held = sum(1 for t in state.slots.values() if t > now)
        return limits.max_connections - held >= max(2, limits.max_connections // 4)

    def reuse_kept(self, site: str, min_lease: float) -> str | None:
        """A holder this container kept from an earlier invocation, its slot leased for
        `min_lease` seconds more at least (the caller's time left: a connection never
        outlives the slot it counts against); the caller uses it as its own. No request
        while the lease is long enough, else one to renew it (the store's atomic take,
        which never refuses a holder its own live slot). None if there is none."""
        with self._lock:
            now = self.clock()
            holders = self._kept.get(site) or []
            limits = self.limits(site)
            while holders:
                holder = holders.pop()
                lease = self._slots.get((site, holder), 0.0)
                if lease > now + max(min_lease, _KEEP_MIN_LEASE):
                    return holder
                if lease <= now + 5 or limits.max_connections is None:
                    self._slots.pop((site, holder), None)  # ended: nothing to give back
                    continue
                ok, state = self.store.take(
                    site, holder, now + self.slot_lease, limits.max_connections, now
                )
                self._known[site] = state
                if ok:
                    self._slots[(site, holder)] = state.slots.get(holder, 0.0)
                    return holder
                self._slots.pop((site, holder), None)
                if state.suspended_until > now:
                    self._suspended[site] = state.suspended_until
            return None

    def _release(self, site: str, holder: str) -> None:
        # one atomic removal: concurrent releases and takes of the site never conflict
        if self._slots.pop((site, holder), None) is None:
            return
        state = self.store.give_back(site, holder)
        if state is not None:
            self._known[site] = state

    # -- backoff
    def on_reply(self, site: str, reply: Result) -> BackoffRule | None:
        """Match a reply against the backoff rules; apply the rule's site actions."""
        with self._lock:
            return self._on_reply(site, reply)

    def _on_reply(self, site: str, reply: Result) -> BackoffRule | None:
        rule = self.backoff.match(site, reply)
        if rule is None:
            return None
        if rule.suspend or rule.slowdown:
            # the whole site: every shard item (each shard's own writes are conditioned
            # on its suspension and scale), all from the same moment
            limits = self.limits(site)
            n = site_shards(limits, self.shard_max_rate)
            at = self.clock()
            for key in (shard_key(site, i) for i in range(n)):
                self._apply(key, site, shard_limits(limits, n) if key != site else limits, rule, at)
        log.warning(
            "backoff rule matched",
            extra={
                "site": site,
                "rule": rule.id,
                "actions": list(rule.actions),
                "status": reply.status,
            },
        )
        return rule

    def _apply(self, key: str, site: str, limits: Limits, rule: BackoffRule, at: float) -> None:
        """A backoff rule's action on one item of the site (compare-and-set)."""
        self._blocks.pop(key, None)  # tokens taken before the push-back: drop them
        state = self._known.get(key) or self.store.load(key)
        for _ in range(_WRITE_RETRIES):
            new = apply_action(state, at, limits, rule)
            current = self.store.save(key, new, state.version)
            if current is None:
                self._known[key] = replace(new, version=state.version + 1)
                if new.suspended_until > self.clock():
                    self._suspended[key] = new.suspended_until
                    self._suspended[site] = max(self._suspended.get(site, 0.0), new.suspended_until)
                break
            state = current
