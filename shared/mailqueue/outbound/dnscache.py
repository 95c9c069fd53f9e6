"""A DNS answer cache for delivery: one per container, shared by the invocation's lanes.

Why: dnspython caches nothing unless told, so without this every mail cost its MX, A,
AAAA and ``_mta-sts`` TXT lookups (and DANE's MX and TLSA), and the VPC resolver takes
at most 1,024 packets per second from each network interface, a hard limit ("Understanding
Amazon DNS", section "DNS quotas", Amazon VPC User Guide,
https://docs.aws.amazon.com/vpc/latest/userguide/AmazonDNS-concepts.html#vpc-dns-limits;
the whitepaper "Hybrid Cloud DNS Options for Amazon VPC", "Constraints", names Lambda
functions): at 2-3 interfaces that capped direct delivery near 500-800 mails/s.
docs/benchmarks.md ("DNS cache (issue 40)") has the measure.

How: dnspython's own hook (``Resolver.cache``: ``get``/``put`` of
:class:`dns.resolver.Answer` under ``(qname, rdtype, rdclass)``, NXDOMAIN under the ANY
type), so dnspython stays the protocol library and every lookup through a bound resolver
is cached whatever module makes it (routing, MTA-STS, DANE, the doctor). What this adds:

* TTLs from the answer (the smallest TTL of its CNAME chain and RRset), clamped to
  ``[min_ttl, max_ttl]``, measured on an injectable clock;
* negative caching per RFC 2308: NXDOMAIN (§5, for every type of the name, as dnspython
  keys it) and NODATA (§5) for ``min(SOA TTL, SOA MINIMUM)`` of the SOA in the authority
  section; a negative answer without an SOA is not cached (§5: "SHOULD NOT be cached");
  SERVFAIL and timeouts never are (they are retried);
* the DNSSEC AD bit stays with the answer (the cached Answer keeps its response and its
  flags), and every entry is keyed by the shape of the query that fetched it: the
  nameservers and port asked, the header flags (AD, CD) and the EDNS DO bit. A query that
  asks for validation (DANE) and one that does not can never be answered from each
  other's entries, so an answer that was not validated is never served to DANE as if it
  had been, and a validated one never leaks into the plain path;
* a bound on memory: at most ``max_entries`` answers, least recently used evicted first;
* hit and miss counts, drained per invocation into the delivery metrics
  (``DnsCacheHits``/``DnsCacheMisses``).

Thread-safe: one lock around the map; the cached Answer objects are only read.
"""

from __future__ import annotations

import copy
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mailqueue.core.config import ConfigError

if TYPE_CHECKING:
    import dns.resolver

__all__ = [
    "DEFAULT_MAX_ENTRIES",
    "DEFAULT_MAX_TTL",
    "DEFAULT_MIN_TTL",
    "CacheCounts",
    "DnsCache",
    "check_limits",
]

#: Answers held per container. An entry is one dnspython Answer with its response message
#: (~2-4 KB with Python's overhead, measured by bench/dns.py): 10,000 is ~30 MB at most.
DEFAULT_MAX_ENTRIES = 10_000
#: The floor: a record published with TTL 0 (or 1) still answers a burst of mails once.
DEFAULT_MIN_TTL = 5
#: The ceiling: nothing is believed longer than an hour (RFC 2308 §5 finds one to three
#: hours sensible for negative answers; an hour bounds how stale a moved MX can be).
DEFAULT_MAX_TTL = 3600


def check_limits(max_entries: int, min_ttl: int, max_ttl: int) -> None:
    """ConfigError unless the settings make a sane cache (0 entries: the cache is off)."""
    if not 0 <= max_entries <= 1_000_000:
        raise ConfigError("dns_cache_max_entries must be within 0..1000000 (0: no cache)")
    if not 0 <= min_ttl <= 3600:
        raise ConfigError("dns_cache_min_ttl_seconds must be within 0..3600")
    if not 1 <= max_ttl <= 86400:
        raise ConfigError("dns_cache_max_ttl_seconds must be within 1..86400")
    if min_ttl > max_ttl:
        raise ConfigError("dns_cache_min_ttl_seconds must not exceed dns_cache_max_ttl_seconds")


@dataclass(frozen=True, slots=True)
class CacheCounts:
    hits: int = 0
    misses: int = 0


@dataclass(slots=True)
class _Entry:
    answer: Any  # dns.resolver.Answer
    expires: float


def _ttl(answer: Any) -> int | None:
    """The answer's own TTL (RFC 2308 for negative ones); None: must not be cached."""
    import dns.rdatatype

    chain = answer.chaining_result
    if answer.rrset is not None:
        return int(chain.minimum_ttl)
    # NXDOMAIN or NODATA: cacheable only with an SOA of an enclosing zone in the authority
    # section (RFC 2308 §5); chaining_result.minimum_ttl already is min(SOA TTL, MINIMUM)
    # then, and dnspython's 300 s default otherwise, which RFC 2308 says not to use
    name = chain.canonical_name
    response = answer.response
    for rrset in response.authority:
        if rrset.rdtype == dns.rdatatype.SOA and (
            name == rrset.name or name.is_subdomain(rrset.name)
        ):
            return int(chain.minimum_ttl)
    return None


class DnsCache:
    """TTL-honouring, AD-preserving, bounded LRU of DNS answers (see the module doc).

    ``bind(resolver)`` gives a copy of a dnspython resolver whose lookups go through this
    cache; every resolver bound to one cache shares its entries, bound and counts."""

    def __init__(
        self,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        min_ttl: int = DEFAULT_MIN_TTL,
        max_ttl: int = DEFAULT_MAX_TTL,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        check_limits(max_entries, min_ttl, max_ttl)
        self.max_entries = max_entries
        self.min_ttl = min_ttl
        self.max_ttl = max_ttl
        self.clock = clock
        self._entries: OrderedDict[Hashable, _Entry] = OrderedDict()
        self._lock = threading.Lock()
        self._hits = self._misses = 0  # since the last take_counts
        self._total = [0, 0]  # hits, misses since the start
        self._evictions = 0

    @property
    def enabled(self) -> bool:
        return self.max_entries > 0

    def bind(self, resolver: dns.resolver.Resolver) -> dns.resolver.Resolver:
        """A copy of ``resolver`` that looks up through this cache (the original is left
        as it was: a resolver handed to two services gets one cache in each)."""
        bound = copy.copy(resolver)
        bound.cache = _View(self, bound) if self.enabled else None
        return bound

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    @property
    def evictions(self) -> int:
        with self._lock:
            return self._evictions

    def counts(self) -> CacheCounts:
        """Hits and misses since the cache was made."""
        with self._lock:
            return CacheCounts(*self._total)

    def take_counts(self) -> CacheCounts:
        """Hits and misses since the last call (each lookup counted once, by one caller)."""
        with self._lock:
            out = CacheCounts(self._hits, self._misses)
            self._hits = self._misses = 0
            return out

    def flush(self) -> None:
        with self._lock:
            self._entries.clear()

    def _drop(self, key: Hashable) -> None:
        with self._lock:
            self._entries.pop(key, None)

    # -------------------------------------------------------------- dnspython's hook
    def _get(self, key: Hashable, count: bool | None) -> Any:
        """The live answer under ``key`` or None. ``count``: True counts a hit or a
        miss, None counts a hit only (the first of dnspython's two probes of a lookup)."""
        now = self.clock()
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry.expires <= now:
                del self._entries[key]
                entry = None
            if entry is not None:
                self._entries.move_to_end(key)
                self._hits += 1
                self._total[0] += 1
                return entry.answer
            if count:
                self._misses += 1
                self._total[1] += 1
            return None

    def _put(self, key: Hashable, answer: Any) -> None:
        ttl = _ttl(answer)
        if ttl is None:
            return
        ttl = min(max(ttl, self.min_ttl), self.max_ttl)
        if ttl <= 0:
            return
        expires = self.clock() + ttl
        with self._lock:
            self._entries[key] = _Entry(answer, expires)
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)
                self._evictions += 1


class _View:
    """What a bound resolver sees as its ``cache``: dnspython's keys, tagged with the
    shape of that resolver's queries (who is asked, AD/CD, the DO bit)."""

    def __init__(self, cache: DnsCache, resolver: dns.resolver.Resolver) -> None:
        self._cache = cache
        self._resolver = resolver

    def _shape(self) -> tuple[Any, ...]:
        import dns.flags

        r = self._resolver
        flags = int(r.flags) if r.flags is not None else int(dns.flags.RD)
        do = bool(r.edns >= 0 and int(r.ednsflags) & int(dns.flags.DO))
        servers = tuple(str(ns) for ns in r.nameservers)
        return (servers, r.port, flags & int(dns.flags.AD | dns.flags.CD), do)

    def get(self, key: tuple[Any, Any, Any]) -> Any:
        import dns.rdatatype

        # dnspython asks (name, type) and, on a miss, (name, ANY) for a cached NXDOMAIN:
        # one lookup, so the first probe counts only a hit and the second a hit or a miss
        # (only NXDOMAIN answers are put under ANY: queries of meta-types are refused)
        nx_probe = key[1] == dns.rdatatype.ANY
        return self._cache._get((self._shape(), *key), True if nx_probe else None)

    def put(self, key: tuple[Any, Any, Any], answer: Any) -> None:
        self._cache._put((self._shape(), *key), answer)

    def flush(self, key: tuple[Any, Any, Any] | None = None) -> None:
        """dnspython's cache interface: one entry of this view, or the whole cache."""
        if key is None:
            self._cache.flush()
        else:
            self._cache._drop((self._shape(), *key))
