"""The delivery DNS cache (outbound/dnscache.py) against a real DNS server on loopback.

The authoritative server is tests/support/dns_peer.py (dnspython's message API on a UDP
socket: what it received is what the cache did not answer); the DNSSEC case also runs
against the signed zone behind Debian's unbound (tests/support/dnssec_peer.py). Time is
the cache's injectable clock, so expiry is exact and no test sleeps.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import dns.flags
import dns.resolver
import pytest
from mailqueue.core.config import ConfigError
from mailqueue.outbound import dane
from mailqueue.outbound.dnscache import DnsCache
from mailqueue.outbound.routing import NextHopError, resolve_next_hops
from mailqueue.services.delivery import DeliverySettings

from functions.delivery import app as delivery_app
from tests.support import factories as f
from tests.support.dns_peer import DnsPeer, dns_server
from tests.support.dnssec_peer import missing as dnssec_missing
from tests.support.dnssec_peer import signed_dns
from tests.support.rigs import RigFactory
from tests.support.smtp_peers import smtp_sink

# a loaded machine must not make a slow reply a retransmission (a second query counted)
PATIENT = {"timeout": 5.0, "lifetime": 15.0}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


ZONE = {
    "x.example": {"MX": ["10 mx.x.example."]},
    "mx.x.example": {"A": ["127.0.0.1"]},  # no AAAA: NODATA
    "short.example": {"MX": ["10 mx.x.example."]},
    "long.example": {"A": ["127.0.0.2"]},
}
TTLS = {"MX": 300, "A": 3600, "*": 60}
SOAS = {"x.example": (3600, 120), "short.example": (60, 60), "long.example": (60, 60)}


@pytest.fixture()
def server() -> Iterator[DnsPeer]:
    with dns_server(ZONE, ttl=TTLS, soa=SOAS | {"nosuch.example": (3600, 120)}) as peer:
        yield peer


def since(peer: DnsPeer, before: int) -> list[tuple[str, str]]:
    return peer.queries[before:]


def hops(resolver: dns.resolver.Resolver, domain: str = "x.example") -> list[str]:
    found = resolve_next_hops(domain, None, resolver, rng=random.Random(1), families=(4, 6))
    return [h.address for h in found]


def test_dns_cache_answers_from_memory_within_ttl(server: DnsPeer) -> None:
    clock = Clock()
    cache = DnsCache(clock=clock)
    r = cache.bind(server.resolver(**PATIENT))
    assert hops(r) == ["127.0.0.1"]
    first = server.queries
    assert sorted(first) == [
        ("mx.x.example.", "A"), ("mx.x.example.", "AAAA"), ("x.example.", "MX")
    ]  # fmt: skip
    clock.now += 119  # inside every TTL (the AAAA NODATA's is the SOA minimum, 120 s)
    assert hops(r) == ["127.0.0.1"]
    assert server.queries == first  # the server saw no second query
    counts = cache.counts()
    assert (counts.hits, counts.misses) == (3, 3)
    # the original resolver was not changed: it still asks the server every time
    plain = server.resolver(**PATIENT)
    assert plain.cache is None
    hops(plain)
    assert len(server.queries) == 6


def test_dns_cache_expires_after_ttl(server: DnsPeer) -> None:
    clock = Clock()
    r = DnsCache(clock=clock).bind(server.resolver(**PATIENT))
    hops(r)
    n = len(server.queries)
    clock.now += 299  # MX (300 s) still fresh; the AAAA NODATA (120 s) is not
    hops(r)
    assert since(server, n) == [("mx.x.example.", "AAAA")]
    n = len(server.queries)
    clock.now += 2  # 301 s: the MX has expired, the A (3,600 s) and new AAAA have not
    hops(r)
    assert since(server, n) == [("x.example.", "MX")]
    n = len(server.queries)
    clock.now += 3600
    hops(r)
    assert ("mx.x.example.", "A") in since(server, n)


def test_dns_cache_floor_and_ceiling(server: DnsPeer) -> None:
    clock = Clock()
    server.ttls = {"MX": 1, "A": 86400, "*": 60}
    r = DnsCache(min_ttl=30, max_ttl=600, clock=clock).bind(server.resolver(**PATIENT))
    hops(r, "short.example")
    n = len(server.queries)
    clock.now += 29  # the MX's TTL is 1 s, held for the 30 s floor
    hops(r, "short.example")
    assert ("short.example.", "MX") not in since(server, n)
    clock.now += 2
    hops(r, "short.example")
    assert ("short.example.", "MX") in since(server, n)
    n = len(server.queries)
    clock.now += 560  # the A's 86,400 s, held at most the 600 s ceiling (591 s so far)
    hops(r, "short.example")
    assert ("mx.x.example.", "A") not in since(server, n)
    clock.now += 10
    hops(r, "short.example")
    assert ("mx.x.example.", "A") in since(server, n)


def test_dns_cache_caches_nxdomain(server: DnsPeer) -> None:
    """RFC 2308: NXDOMAIN for min(SOA TTL, SOA MINIMUM), for every type of the name."""
    clock = Clock()
    cache = DnsCache(clock=clock)
    r = cache.bind(server.resolver(**PATIENT))
    for _ in range(2):
        with pytest.raises(NextHopError) as e:
            hops(r, "nosuch.example")
        assert e.value.result.status == "5.1.2"
    assert server.queries == [("nosuch.example.", "MX")]
    with pytest.raises(dns.resolver.NXDOMAIN):  # another type of the same name: no query
        r.resolve("nosuch.example.", "TXT")
    assert len(server.queries) == 1
    clock.now += 119
    with pytest.raises(NextHopError):
        hops(r, "nosuch.example")
    assert len(server.queries) == 1
    clock.now += 2  # the SOA's MINIMUM (120 s) has run out
    with pytest.raises(NextHopError):
        hops(r, "nosuch.example")
    assert server.queries == [("nosuch.example.", "MX")] * 2


def test_dns_cache_caches_nodata(server: DnsPeer) -> None:
    clock = Clock()
    r = DnsCache(clock=clock).bind(server.resolver(**PATIENT))
    assert r.resolve("mx.x.example.", "AAAA", raise_on_no_answer=False).rrset is None
    with pytest.raises(dns.resolver.NoAnswer):  # from the cache, as dnspython raises it
        r.resolve("mx.x.example.", "AAAA")
    assert server.queries == [("mx.x.example.", "AAAA")]
    clock.now += 121
    r.resolve("mx.x.example.", "AAAA", raise_on_no_answer=False)
    assert server.queries == [("mx.x.example.", "AAAA")] * 2


def test_dns_cache_keeps_no_negative_answer_without_soa() -> None:
    """RFC 2308 §5: a negative answer without an SOA SHOULD NOT be cached."""
    with dns_server(ZONE) as peer:  # no SOA in its negative answers
        r = DnsCache(clock=Clock()).bind(peer.resolver(**PATIENT))
        for _ in range(2):
            with pytest.raises(dns.resolver.NXDOMAIN):
                r.resolve("nosuch.example.", "MX")
            r.resolve("mx.x.example.", "AAAA", raise_on_no_answer=False)
        assert len(peer.queries) == 4


def test_dns_cache_never_marks_an_insecure_answer_secure() -> None:
    """A TLSA answer without AD (an unsigned zone) is cached, and DANE still finds it
    insecure from the cache; an MX the plain path cached (no DO, no AD) is not what DANE's
    validating query gets: it asks, and sees the AD bit the resolver sets."""
    tlsa = ["3 1 1 " + "ab" * 32]
    zone = {
        "signed.example": {"MX": ["10 mx.signed.example."]},
        "mx.signed.example": {"A": ["127.0.0.1"]},
        "_25._tcp.mx.signed.example": {"TLSA": tlsa},
        "_25._tcp.mx.unsigned.example": {"TLSA": tlsa},
    }
    secure = ["signed.example", "_25._tcp.mx.signed.example"]
    with dns_server(zone, secure=secure) as peer:
        clock = Clock()
        cache = DnsCache(clock=clock)
        plain = cache.bind(peer.resolver(**PATIENT))
        validating = cache.bind(dane.validating(peer.resolver(**PATIENT)))
        # the insecure TLSA, twice: the second from the cache, still insecure
        assert dane.lookup(validating, "mx.unsigned.example") is None
        assert dane.lookup(validating, "mx.unsigned.example") is None
        assert peer.queries.count(("_25._tcp.mx.unsigned.example.", "TLSA")) == 1
        assert cache.counts().hits == 1
        # the plain path's MX (asked without DO/AD: no AD) does not answer DANE's query
        plain.resolve("signed.example.", "MX")
        assert dane.mx_secure(validating, "signed.example")
        assert peer.queries.count(("signed.example.", "MX")) == 2
        # and a validated answer served from the cache keeps its AD bit
        first = dane.lookup(validating, "mx.signed.example")
        again = dane.lookup(validating, "mx.signed.example")
        assert first is not None and again == first and len(first.records) == 1
        assert peer.queries.count(("_25._tcp.mx.signed.example.", "TLSA")) == 1
        # nor does DANE's validated MX answer the plain path (its own entry, its own flags)
        answer = plain.resolve("signed.example.", "MX")
        assert not answer.response.flags & dns.flags.AD
        assert peer.queries.count(("signed.example.", "MX")) == 2


@pytest.mark.skipif(dnssec_missing() is not None, reason=dnssec_missing() or "")
def test_dns_cache_keeps_unbounds_ad_bit_and_its_absence() -> None:
    """Against a real validating resolver (unbound over nsd, a signed zone): the TLSA
    validated there stays secure from the cache, and the same records asked without
    DNSSEC (no AD) never become DANE's."""
    cert_hash = "cd" * 32
    records = ["@ IN MX 10 mx", "mx IN A 127.0.0.1", f"_25._tcp.mx IN TLSA 3 1 1 {cert_hash}"]
    with signed_dns("dnscache.example", records) as signed:
        cache = DnsCache(clock=Clock())
        validating = cache.bind(dane.validating(signed.resolver()))
        plain = cache.bind(signed.resolver())
        # the plain path first: unbound answers without AD (nobody asked for DNSSEC)
        answer = plain.resolve("_25._tcp.mx.dnscache.example.", "TLSA")
        assert not answer.response.flags & dns.flags.AD
        before = cache.counts()
        policy = dane.lookup(validating, "mx.dnscache.example")
        assert policy is not None and policy.records[0].data == bytes.fromhex(cert_hash)
        assert cache.counts().misses == before.misses + 1  # not answered by the plain entry
        assert dane.lookup(validating, "mx.dnscache.example") == policy  # from the cache: still AD
        assert cache.counts().hits == before.hits + 1
        assert dane.mx_secure(validating, "dnscache.example")


def test_dns_cache_is_bounded_lru(server: DnsPeer) -> None:
    for i in range(4):
        server.set(f"h{i}.x.example", "A", [f"127.0.0.{i + 1}"])
    cache = DnsCache(max_entries=3, clock=Clock())
    r = cache.bind(server.resolver(**PATIENT))
    for i in range(3):
        r.resolve(f"h{i}.x.example.", "A")
    r.resolve("h0.x.example.", "A")  # h0 used last: h1 is now the least recently used
    r.resolve("h3.x.example.", "A")  # a fourth entry evicts h1
    assert len(cache) == 3 and cache.evictions == 1
    n = len(server.queries)
    for name in ("h0", "h2", "h3"):
        r.resolve(f"{name}.x.example.", "A")
    assert since(server, n) == []
    r.resolve("h1.x.example.", "A")
    assert since(server, n) == [("h1.x.example.", "A")]


def test_dns_cache_shared_by_threads(server: DnsPeer) -> None:
    """The lanes of an invocation share one cache: each name is asked once, then every
    thread's lookups are hits, counted exactly."""
    cache = DnsCache(clock=Clock())
    r = cache.bind(server.resolver(**PATIENT))
    hops(r)
    cache.take_counts()
    n = len(server.queries)
    start = threading.Barrier(8)

    def lane(_: int) -> list[list[str]]:
        start.wait(30)
        return [hops(r) for _ in range(50)]

    with ThreadPoolExecutor(8) as lanes:  # a lane's exception is raised here
        results = [x for one in lanes.map(lane, range(8)) for x in one]
    assert results == [["127.0.0.1"]] * 400
    assert since(server, n) == []
    counts = cache.take_counts()
    assert (counts.hits, counts.misses) == (8 * 50 * 3, 0)
    assert cache.take_counts().hits == 0  # drained


def test_dns_cache_settings_are_validated() -> None:
    cases: list[dict[str, Any]] = [
        {"dns_cache_max_entries": -1},
        {"dns_cache_min_ttl_seconds": 700, "dns_cache_max_ttl_seconds": 600},
        {"dns_cache_max_ttl_seconds": 0},
    ]
    for bad in cases:
        with pytest.raises(ConfigError):
            DeliverySettings(**bad)
    off = DeliverySettings(dns_cache_max_entries=0).dns_cache()
    assert not off.enabled and off.bind(dns.resolver.Resolver(configure=False)).cache is None


def _metric(name: str) -> float:
    entry: Any = delivery_app.metrics.metric_set.get(name)
    return sum(entry["Value"]) if entry else 0


def test_dns_cache_in_delivery_across_invocations(rig: RigFactory) -> None:
    """End to end: the real handler, three invocations of one container delivering to
    one domain by MX (and MTA-STS discovery): the server is asked once for each name, and
    the invocations publish DnsCacheHits / DnsCacheMisses."""
    with smtp_sink() as peer:
        with dns_server(ZONE, ttl=TTLS, soa=SOAS) as dnsx:
            r = rig(resolver=dnsx.resolver(**PATIENT), mx_port=peer.port, mta_sts=True)
            delivery_app.metrics.clear_metrics()
            for n in range(3):
                r.storage().enqueue(f.envelope(f"m{n}@x.example"), f.content())
                assert r.poll().failed == 0
            hits, misses = _metric("DnsCacheHits"), _metric("DnsCacheMisses")
            delivery_app.metrics.clear_metrics()
            asked = dnsx.queries
        assert len(peer.messages) == 3
    assert sorted(set(asked)) == sorted(asked)  # no name asked twice
    assert ("x.example.", "MX") in asked and ("_mta-sts.x.example.", "TXT") in asked
    assert misses == len(asked) and hits == 2 * len(asked)


def test_dns_cache_bench_slice_cold_and_warm() -> None:
    """bench/dns.py in small (derandomised: its seed): the real delivery service, the
    sink and the loopback server; every mail delivered, the warm phase answered from the
    cache, the cold one not."""
    from bench import dns as bench_dns

    r = bench_dns.measure(domains=30, mails=40, seed=7)
    assert (r.cold.delivered, r.warm.delivered) == (40, 40)
    assert r.cold.per_mail >= 4 * r.cold.new_domains / 40 * 0.9  # each new domain: 4 names
    assert r.warm.per_mail <= 0.1
    assert r.misses == r.server_queries  # the cache's own count is the server's


def test_dns_cache_steady_state_follows_the_renewal_model() -> None:
    """Past the first TTL, the real cache on a simulated clock asks what the bench's
    model says (per name λ/(1+λT)): the DNS row of the scale model stands on it."""
    from bench import dns as bench_dns

    measured, mails = bench_dns.simulate_steady(2.0, seconds=1200, skip=600, domains=50)
    model = bench_dns.steady_queries_per_mail(2.0, domains=50)
    assert mails > 1000
    assert abs(measured - model) <= 0.15 * model, (measured, model)
