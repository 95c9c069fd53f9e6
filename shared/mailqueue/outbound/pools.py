"""Egress pools: which sending addresses a mail leaves from, and the routing policy.

Why: receivers judge reputation per sending IP. Transactional mail should not share
addresses with bulk, one customer's mail not with another's, and a new address must be
warmed up (warmup.py). A *pool* is a name, its sending addresses, its EHLO/PTR name, its
limits per site and an optional warm-up schedule; on AWS it is a set of subnets routed
through the pool's own NAT gateways (carrying its Elastic IPs) with a delivery queue and
function of its own (template.yaml, docs/deploy.md "Egress pools"); locally each pool's
delivery binds its own loopback source address.

Policy as data: ``data/pools.json`` (the packaged default is one pool, ``default``: the
VPC's NAT addresses and the delivery hostname, i.e. the behaviour before pools), or a
deployment's own file. Bad input is refused at start with the file, the place (a JSON
path) and the reason. The routing policy maps a mail to a pool at enqueue (priority
class, principal, sender domain or a message tag; the first rule that matches wins, else
the default) and the choice is recorded on the mail as its `mailqueue:pool` tag
(core/model.py), which every event's ``mail.tags`` carries.

Shaping per (pool, site) without touching the Shaper: a pool other than ``default``
passes the key ``"<pool>|<site>"`` to it; :func:`pool_rules` gives the Shaper a limits
lookup that answers those keys with the pool's own limits (KumoMTA keeps its ready
queues per (source, site) the same way), and :func:`pool_backoff` lets the backoff
rules written for a site match it in every pool.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Any

from mailqueue.core.config import ConfigError
from mailqueue.core.model import Priority
from mailqueue.outbound.shaping import BackoffRules, Limits, Rate, ShapingRules

DEFAULT_POOL = "default"
NAT = "@nat"  # the pool's own NAT gateways' addresses (known to the stack, not the file)
HOSTNAME = "@hostname"  # the delivery function's `hostname` setting
SEPARATOR = "|"  # "<pool>|<site>": the shaping key of a site in a pool
TOTAL = "*"  # "<pool>|*": the limiter's key of a pool's total over every site
_NAME = re.compile(r"^[a-z][a-z0-9-]{0,30}$")
_HOST = re.compile(r"^(?=.{1,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]{2,63}$")
_TAG = re.compile(r"^[A-Za-z0-9_:.-]{1,128}$")


class PoolsError(ConfigError):
    """The pools file is invalid: the service refuses to start."""


# ----------------------------------------------------------------------------- types


@dataclass(frozen=True, slots=True)
class WarmupStep:
    """From ramp step `step` on: at most `total` mails a day from the pool, and at most
    `per_site` to each of the schedule's big receivers."""

    step: int
    total: int
    per_site: int


@dataclass(frozen=True, slots=True)
class Warmup:
    """A pool's ramp: one step a UTC day the pool sends on and stays inside the
    reputation band (warmup.py); past the last step the pool is warm (no cap)."""

    steps: tuple[WarmupStep, ...]
    sites: tuple[str, ...]  # the big receivers the per-site cap applies to
    overflow: str | None = None  # a pool that takes the mail once the day is spent
    source: str = ""  # where the ramp comes from (a citation)

    @property
    def last_step(self) -> int:
        return self.steps[-1].step

    def budget(self, step: int) -> WarmupStep | None:
        """The caps of ramp step `step` (1-based); None: past the ramp, warm."""
        if step > self.last_step:
            return None
        return next(s for s in reversed(self.steps) if s.step <= max(1, step))


@dataclass(frozen=True, slots=True)
class Pool:
    name: str
    addresses: tuple[str, ...]  # networks (a host is a /32 or /128), or (NAT,)
    ehlo: str  # EHLO name = every address's PTR (or HOSTNAME)
    bind: str | None = None  # the local source address delivery binds (the local stack)
    limits: ShapingRules | None = None  # the pool's limits per site (None: the site rules')
    max_per_second: float | None = None  # the pool's total, over every site
    warmup: Warmup | None = None
    paused: bool = False  # mail waits (an event and a metric say so), nothing refused

    def ehlo_name(self, hostname: str) -> str:
        return hostname if self.ehlo == HOSTNAME else self.ehlo

    def networks(self) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
        return [] if self.addresses == (NAT,) else [ipaddress.ip_network(a) for a in self.addresses]

    def address_count(self) -> int:
        return sum(n.num_addresses for n in self.networks())


@dataclass(frozen=True, slots=True)
class Rule:
    """One routing rule: every field given must match (None: any)."""

    pool: str
    priority: Priority | None = None
    principal: str | None = None
    sender_domain: str | None = None
    tag: tuple[str, str] | None = None

    def matches(
        self, priority: Priority, principal: str, sender_domain: str, tags: Mapping[str, str]
    ) -> bool:
        return (
            (self.priority is None or self.priority == priority)
            and (self.principal is None or self.principal == principal)
            and (self.sender_domain is None or self.sender_domain == sender_domain.lower())
            and (self.tag is None or tags.get(self.tag[0]) == self.tag[1])
        )


@dataclass(frozen=True, slots=True)
class PoolConfig:
    pools: Mapping[str, Pool]
    rules: tuple[Rule, ...] = ()
    default: str = DEFAULT_POOL
    source: str = "pools.json"

    @property
    def single(self) -> bool:
        """One pool only: today's behaviour (no pool tag, no pool keys)."""
        return len(self.pools) == 1 and not self.rules

    def choose(
        self,
        *,
        priority: Priority,
        principal: str,
        sender: str,
        tags: Mapping[str, str] | None = None,
    ) -> str:
        """The pool of a new mail: the first matching rule's, else the default (pure)."""
        domain = sender.rpartition("@")[2].lower()
        t = tags or {}
        for r in self.rules:
            if r.matches(priority, principal, domain, t):
                return r.pool
        return self.default

    def get(self, name: str) -> Pool | None:
        return self.pools.get(name or self.default)


# ----------------------------------------------------------------------------- shaping keys


def shaping_key(pool: str, site: str) -> str:
    """The limiter's key of `site` for mail of `pool` (the default pool keeps the bare
    site: its state items and limits are what they were before pools)."""
    return site if not pool or pool == DEFAULT_POOL else f"{pool}{SEPARATOR}{site}"


def total_key(pool: str) -> str:
    """The limiter's key of `pool`'s `max_per_second` (every site's mail together; the
    default pool names itself here, since a bare "*" could be a site's name)."""
    return f"{pool or DEFAULT_POOL}{SEPARATOR}{TOTAL}"


def total_limits(max_per_second: float) -> Limits:
    """A pool's total as limiter limits: the rate, a burst of one (in any second at
    most one more than the rate), no connection limit (the sites have theirs)."""
    per = 1.0
    while abs(max_per_second * per - round(max_per_second * per)) > 1e-9 and per < 1000:
        per *= 10  # 2.5/s is 25 per 10 s
    return Limits(rates=(Rate(max(1, round(max_per_second * per)), per, 1),), block=1)


def split_key(key: str) -> tuple[str, str]:
    """(pool, site) of a shaping key."""
    pool, sep, site = key.partition(SEPARATOR)
    return (pool, site) if sep else (DEFAULT_POOL, key)


class PoolSiteLimits(Mapping[str, Limits]):
    """The Shaper's site -> limits lookup with pools: `"<pool>|<site>"` is answered from
    the pool's own limits (its site entry, else its default), else the site rules'."""

    def __init__(self, base: ShapingRules, pools: Mapping[str, Pool]) -> None:
        self.base = base
        self.pools = pools
        self._keys = dict(base.sites)
        for p in pools.values():
            if p.limits is not None:
                for site, lim in p.limits.sites.items():
                    self._keys[shaping_key(p.name, site)] = lim

    def __getitem__(self, key: str) -> Limits:
        pool, site = split_key(key)
        p = self.pools.get(pool)
        if site == TOTAL and p is not None and p.max_per_second is not None:
            return total_limits(p.max_per_second)
        if p is not None and p.name != DEFAULT_POOL and p.limits is not None:
            return p.limits.limits_for(site)
        if p is not None and p.name != DEFAULT_POOL:
            return self.base.limits_for(site)
        if key in self.base.sites:
            return self.base.sites[key]
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)


def pool_rules(base: ShapingRules, config: PoolConfig) -> ShapingRules:
    """The site rules with the pools' limits behind `"<pool>|<site>"` keys."""
    if (
        all(p.limits is None and p.max_per_second is None for p in config.pools.values())
        and config.single
    ):
        return base
    return replace(base, sites=PoolSiteLimits(base, config.pools))


def pool_backoff(base: BackoffRules) -> BackoffRules:
    """Backoff rules naming sites also match those sites in every pool ("*|<site>")."""
    return BackoffRules(
        tuple(
            replace(r, sites=(*r.sites, *(f"*{SEPARATOR}{s}" for s in r.sites))) for r in base.rules
        )
    )


# ----------------------------------------------------------------------------- loading


def _only(d: Any, allowed: tuple[str, ...], where: str) -> Mapping[str, Any]:
    if not isinstance(d, dict):
        raise PoolsError(f"{where}: expected an object")
    extra = sorted(set(d) - set(allowed))
    if extra:
        raise PoolsError(f"{where}: unknown field {extra[0]!r} (allowed: {', '.join(allowed)})")
    return d


def _pos_int(v: Any, where: str, hi: int = 10**9) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= hi:
        raise PoolsError(f"{where}: a whole number within 1..{hi}")
    return v


def _warmup(d: Any, where: str, ramps: Mapping[str, Any]) -> Warmup:
    d = _only(d, ("ramp", "steps", "sites", "overflow", "source"), where)
    if ("ramp" in d) == ("steps" in d):
        raise PoolsError(f"{where}: give either ramp (a name from ramps) or steps")
    raw: Any = d.get("steps")
    source = str(d.get("source") or "")
    if "ramp" in d:
        r = ramps.get(d["ramp"]) if isinstance(d["ramp"], str) else None
        if r is None:
            raise PoolsError(f"{where}.ramp: no ramp named {d['ramp']!r} in ramps")
        raw, source = r.get("steps"), source or str(r.get("source") or "")
        where = f"ramps.{d['ramp']}"
    if not isinstance(raw, list) or not raw:
        raise PoolsError(f"{where}.steps: a non-empty list of {{step, total, per_site}}")
    steps: list[WarmupStep] = []
    for i, s in enumerate(raw):
        w = f"{where}.steps[{i}]"
        s = _only(s, ("step", "total", "per_site"), w)
        step = WarmupStep(
            _pos_int(s.get("step"), f"{w}.step", 1000),
            _pos_int(s.get("total"), f"{w}.total"),
            _pos_int(s.get("per_site"), f"{w}.per_site"),
        )
        if step.per_site > step.total:
            raise PoolsError(
                f"{w}.per_site: {step.per_site} is above the step's total {step.total}"
            )
        if steps and not (
            step.step > steps[-1].step
            and step.total > steps[-1].total
            and step.per_site >= steps[-1].per_site
        ):
            raise PoolsError(
                f"{w}: the schedule is not increasing (step and total must grow, per_site "
                f"must not shrink: {steps[-1].step}/{steps[-1].total}/{steps[-1].per_site} "
                f"then {step.step}/{step.total}/{step.per_site})"
            )
        steps.append(step)
    if steps[0].step != 1:
        raise PoolsError(f"{where}.steps[0].step: the ramp starts at step 1")
    sites = d.get("sites", ["google", "microsoft", "yahoo", "apple"])
    if not isinstance(sites, list) or not all(isinstance(x, str) and x for x in sites):
        raise PoolsError(f"{where}.sites: a list of shaping site names")
    overflow = d.get("overflow")
    if overflow is not None and not isinstance(overflow, str):
        raise PoolsError(f"{where}.overflow: a pool name")
    return Warmup(tuple(steps), tuple(sites), overflow, source)


def _per_second(lim: Limits) -> float | None:
    rates = [r.messages / r.per for r in lim.rates]
    return min(rates) if rates else None


def _pool(name: str, d: Any, where: str, ramps: Mapping[str, Any]) -> Pool:
    d = _only(
        d, ("addresses", "ehlo", "bind", "limits", "max_per_second", "warmup", "paused"), where
    )
    if not _NAME.match(name):
        raise PoolsError(f"{where}: a pool name is [a-z][a-z0-9-], up to 31 characters")
    addrs = d.get("addresses")
    if addrs == NAT:
        addresses: tuple[str, ...] = (NAT,)
    else:
        if not isinstance(addrs, list) or not addrs:
            raise PoolsError(f"{where}.addresses: a pool needs its sending addresses (or {NAT!r})")
        nets = []
        for i, a in enumerate(addrs):
            try:
                nets.append(ipaddress.ip_network(str(a), strict=True))
            except ValueError as e:
                raise PoolsError(f"{where}.addresses[{i}]: {e}") from e
        addresses = tuple(str(n) for n in nets)
    ehlo = d.get("ehlo")
    if not isinstance(ehlo, str) or not (ehlo == HOSTNAME or _HOST.match(ehlo)):
        raise PoolsError(f"{where}.ehlo: a pool needs its EHLO/PTR name (a host name, or "
                         f"{HOSTNAME!r})")  # fmt: skip
    bind = d.get("bind")
    if bind is not None:
        try:
            b = ipaddress.ip_address(bind)
        except ValueError as e:
            raise PoolsError(f"{where}.bind: {e}") from e
        if addresses != (NAT,) and not any(b in ipaddress.ip_network(a) for a in addresses):
            raise PoolsError(f"{where}.bind: {bind} is not one of the pool's addresses")
    total = d.get("max_per_second")
    if total is not None and (isinstance(total, bool) or not isinstance(total, int | float)
                              or total <= 0):  # fmt: skip
        raise PoolsError(f"{where}.max_per_second: a positive number")
    limits = None
    if "limits" in d:
        raw = _only(d["limits"], ("default", "sites"), f"{where}.limits")
        try:
            limits = ShapingRules.from_json(json.dumps({"version": 1, **raw}), f"{where}.limits")
        except ConfigError as e:
            raise PoolsError(str(e)) from e
        if total is not None:
            for site, lim in [("default", limits.default), *limits.sites.items()]:
                rate = _per_second(lim)
                if rate is not None and rate > total:
                    raise PoolsError(
                        f"{where}.limits.{'sites.' + site if site != 'default' else site}: "
                        f"{rate:g}/s is above the pool's max_per_second {total:g}"
                    )
    warmup = _warmup(d["warmup"], f"{where}.warmup", ramps) if "warmup" in d else None
    paused = d.get("paused", False)
    if not isinstance(paused, bool):
        raise PoolsError(f"{where}.paused: true or false")
    return Pool(name, addresses, ehlo, bind, limits, total, warmup, paused)


def _rule(d: Any, where: str, pools: Mapping[str, Pool]) -> Rule:
    d = _only(d, ("pool", "priority", "principal", "sender_domain", "tag"), where)
    pool = d.get("pool")
    if pool not in pools:
        raise PoolsError(f"{where}.pool: names an unknown pool {pool!r} "
                         f"(pools: {', '.join(sorted(pools))})")  # fmt: skip
    if len(d) < 2:
        raise PoolsError(f"{where}: a rule needs a condition (priority, principal, "
                         "sender_domain or tag); the default is routing.default")  # fmt: skip
    prio = d.get("priority")
    if prio is not None and prio not in {p.value for p in Priority}:
        raise PoolsError(f"{where}.priority: one of {', '.join(p.value for p in Priority)}")
    for k in ("principal", "sender_domain"):
        if k in d and not (isinstance(d[k], str) and d[k]):
            raise PoolsError(f"{where}.{k}: a non-empty string")
    tag = None
    if "tag" in d:
        t = _only(d["tag"], ("name", "value"), f"{where}.tag")
        if not all(isinstance(t.get(k), str) and _TAG.match(t[k]) for k in ("name", "value")):
            raise PoolsError(f"{where}.tag: name and value, [A-Za-z0-9_:.-] up to 128")
        tag = (t["name"], t["value"])
    return Rule(
        str(pool),
        Priority(prio) if prio else None,
        d.get("principal"),
        d["sender_domain"].lower() if "sender_domain" in d else None,
        tag,
    )


def parse_pools(text: str, source: str = "pools.json") -> PoolConfig:
    """The pools file, validated whole (pure: no DNS, no clock)."""
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise PoolsError(f"{source}: not JSON: {e}") from e
    doc = _only(doc, ("version", "pools", "routing", "ramps", "comment"), source)
    if doc.get("version") != 1:
        raise PoolsError(f"{source}.version: must be 1")
    ramps = doc.get("ramps") or {}
    if not isinstance(ramps, dict):
        raise PoolsError(f"{source}.ramps: expected an object")
    raw = doc.get("pools")
    if not isinstance(raw, dict) or not raw:
        raise PoolsError(f"{source}.pools: at least one pool")
    pools = {n: _pool(n, d, f"{source}.pools.{n}", ramps) for n, d in raw.items()}
    seen: list[tuple[str, ipaddress.IPv4Network | ipaddress.IPv6Network]] = []
    for p in pools.values():
        for net in p.networks():
            for other, onet in seen:
                if net.version == onet.version and net.overlaps(onet):
                    raise PoolsError(
                        f"{source}.pools.{p.name}.addresses: {net} overlaps {onet} of "
                        f"pool {other!r} (a sending address belongs to one pool)"
                    )
            seen.append((p.name, net))
    for p in pools.values():
        if p.warmup is not None and p.warmup.overflow is not None:
            if p.warmup.overflow not in pools or p.warmup.overflow == p.name:
                raise PoolsError(f"{source}.pools.{p.name}.warmup.overflow: names an unknown "
                                 f"pool {p.warmup.overflow!r}")  # fmt: skip
    routing = _only(doc.get("routing") or {}, ("default", "rules"), f"{source}.routing")
    default = routing.get("default", DEFAULT_POOL if DEFAULT_POOL in pools else None)
    if default not in pools:
        raise PoolsError(f"{source}.routing.default: names an unknown pool {default!r}")
    rules_raw = routing.get("rules") or []
    if not isinstance(rules_raw, list):
        raise PoolsError(f"{source}.routing.rules: expected a list")
    rules = tuple(_rule(r, f"{source}.routing.rules[{i}]", pools) for i, r in enumerate(rules_raw))
    return PoolConfig(pools, rules, str(default), source)


def load_pools(value: str = "") -> PoolConfig:
    """From a setting: empty -> the packaged ``data/pools.json``, '{...}' -> inline, else
    a path."""
    if not value.strip():
        text = resources.files("mailqueue").joinpath("data", "pools.json").read_text()
        return parse_pools(text, "pools.json")
    if value.lstrip().startswith("{"):
        return parse_pools(value, "pools (inline)")
    try:
        return parse_pools(Path(value).read_text(), value)
    except OSError as e:
        raise PoolsError(f"pools: cannot read {value}: {e.strerror or e}") from e


__all__ = [
    "DEFAULT_POOL",
    "Pool",
    "PoolConfig",
    "PoolSiteLimits",
    "PoolsError",
    "Rule",
    "Warmup",
    "WarmupStep",
    "load_pools",
    "parse_pools",
    "pool_backoff",
    "pool_rules",
    "shaping_key",
    "split_key",
    "total_key",
    "total_limits",
]
