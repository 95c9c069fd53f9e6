"""`make bench` (DNS, issue 40): DNS queries per delivered mail, cold, warm and steady.

    .venv/bin/python -m bench.dns [--domains 1000] [--mails 1000] [--zipf 1.0]
                                  [--seed 40] [--stack inprocess|local] [--steady 5]
                                  [--no-write]

Delivery by MX in direct mode (egress guard on, 127.0.0.1 allowed), MTA-STS discovery on,
to an aiosmtpd sink that every MX host's address points at. The resolver is a loopback
authoritative server (tests/support/dns_peer.py) holding ``--domains`` recipient domains
with realistic TTLs: MX 300 s (``10 mx.<domain>``), the MX host's A 3,600 s, no AAAA and
no ``_mta-sts`` record (NODATA / NXDOMAIN carrying the zone's SOA: TTL 3,600 s, MINIMUM
300 s, so a negative answer is cached 300 s per RFC 2308). Every domain has its own MX
host (no shared provider hosts: the most queries a new domain can cost).

``--stack inprocess`` (default): the real `DeliveryService` as one container (its DNS
cache from its settings) on FsStorage and the in-process queue, one invocation at a time;
``--stack local``: one container of the local stack (the real handler, moto, SQS; its
DnsCacheHits/DnsCacheMisses read from its EMF lines). The local stack delivers ~3-5
mails/s on this machine, so a run of a few thousand mails outlives the MX TTL there and
measures expiry as much as the cache; in process a run stays within the TTL, as the first
minutes of a busy container do.

Mails are spread over the domains Zipf-like (weight 1/k^s, seeded), one recipient each,
in three phases: **cold** (``--mails`` mails, an empty cache), a top-up that is not
counted (one mail to each domain the cold phase did not reach: the cache then holds the
whole mix, as a container at high volume does within one TTL), **warm** (``--mails``
more). Counted: the queries the server received per mail the sink received, by type.

Past the first TTL a container's cache refetches: ``steady_queries_per_mail`` models
that (a renewal process per name) by the container's mails/s, and ``simulate_steady``
measures it for the rates of ``--steady`` with the real cache on a simulated clock.

Written to bench/measured/dns.json (the scale model's DNS row reads it) and the section
"## DNS cache (issue 40)" of docs/benchmarks.md, unless --no-write.
"""

from __future__ import annotations

import argparse
import itertools
import json
import platform
import random
import sys
import tempfile
import threading
import time
import tracemalloc
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.sections import write_section as _write_section

ROOT = Path(__file__).resolve().parent.parent
SECTION = "## DNS cache (issue 40)"
MEASURED = ROOT / "bench" / "measured" / "dns.json"
TTL = {"MX": 300, "A": 3600}
SOA = (3600, 300)  # the zones' SOA TTL and MINIMUM: negative answers live 300 s
#: "DNS quotas", Amazon VPC User Guide: 1,024 packets per second per network interface
VPC_RESOLVER_PPS = 1024
VPC_DOC = "https://docs.aws.amazon.com/vpc/latest/userguide/AmazonDNS-concepts.html#vpc-dns-limits"
WHITEPAPER = (
    "https://docs.aws.amazon.com/whitepapers/latest/hybrid-cloud-dns-options-for-vpc/"
    "constraints.html"
)
#: what a new domain costs at most: MX, the MX host's A and AAAA, the _mta-sts TXT
NAMES_PER_DOMAIN = {"MX": TTL["MX"], "A": TTL["A"], "AAAA": SOA[1], "TXT": SOA[1]}
Counts = Callable[[], tuple[int, int]]  # the container's DNS cache hits and misses so far


def domain(k: int) -> str:
    return f"d{k:04d}.example"


def zone(domains: int) -> dict[str, dict[str, list[str]]]:
    z: dict[str, dict[str, list[str]]] = {}
    for k in range(domains):
        z[domain(k)] = {"MX": [f"10 mx.{domain(k)}."]}
        z[f"mx.{domain(k)}"] = {"A": ["127.0.0.1"]}
    return z


def zipf(domains: int, mails: int, s: float, rng: random.Random) -> list[int]:
    weights = [1.0 / (k + 1) ** s for k in range(domains)]
    return rng.choices(range(domains), weights=weights, k=mails)


@dataclass
class Phase:
    mails: int = 0
    delivered: int = 0
    queries: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0
    new_domains: int = 0  # domains this phase reached first

    @property
    def per_mail(self) -> float:
        return sum(self.queries.values()) / max(1, self.delivered)


@dataclass
class Result:
    domains: int
    mails: int
    zipf: float
    seed: int
    stack: str = "inprocess"
    cold: Phase = field(default_factory=Phase)
    topup: Phase = field(default_factory=Phase)
    warm: Phase = field(default_factory=Phase)
    hits: int = 0
    misses: int = 0
    server_queries: int = 0
    bytes_per_entry: float = 0.0
    # the steady state measured with the cache's clock simulated: rate -> (queries per
    # mail, mails counted), against steady_queries_per_mail
    steady: dict[float, tuple[float, int]] = field(default_factory=dict)


def _emf_counts(log: Path) -> tuple[int, int]:
    """DnsCacheHits / DnsCacheMisses summed over the delivery function's EMF lines."""
    hits = misses = 0
    if not log.exists():
        return 0, 0
    for line in log.read_text(errors="replace").splitlines():
        start = line.find("{")
        if start < 0 or "DnsCache" not in line:
            continue
        try:
            doc = json.loads(line[start:])
        except ValueError:
            continue
        hits += int(sum(_values(doc.get("DnsCacheHits"))))
        misses += int(sum(_values(doc.get("DnsCacheMisses"))))
    return hits, misses


def _values(v: Any) -> list[float]:
    if v is None:
        return []
    return [float(x) for x in v] if isinstance(v, list) else [float(v)]


def bytes_per_entry(domains: int = 500) -> float:
    """Memory a cached answer costs (tracemalloc): a cache filled with MX and A answers
    from the same kind of server, in this process."""
    from mailqueue.outbound.dnscache import DnsCache

    from tests.support.dns_peer import dns_server

    with dns_server(zone(domains), ttl=TTL, soa={domain(k): SOA for k in range(domains)}) as peer:
        cache = DnsCache(max_entries=4 * domains)
        r = cache.bind(peer.resolver())
        tracemalloc.start()
        before = tracemalloc.take_snapshot()
        for k in range(domains):
            r.resolve(f"{domain(k)}.", "MX")
            r.resolve(f"mx.{domain(k)}.", "A")
            r.resolve(f"mx.{domain(k)}.", "AAAA", raise_on_no_answer=False)
        after = tracemalloc.take_snapshot()
        tracemalloc.stop()
        grown = sum(s.size_diff for s in after.compare_to(before, "filename"))
        return grown / max(1, len(cache))


Enqueue = Callable[[Any, bytes], Any]


@contextmanager
def _inprocess(dns_port: int, mx_port: int, tmp: Path) -> Iterator[tuple[Enqueue, Counts]]:
    """One delivery container in this process: the real `DeliveryService` (its DNS cache
    from its settings, as the composition root builds it) on FsStorage and the in-process
    queue, one invocation at a time (a batch of 10 on its lanes), as a Lambda container."""
    from mailqueue.backends.fs import FsStorage
    from mailqueue.backends.inprocess import InProcess, Worker, delivery_handler
    from mailqueue.services.delivery import DeliveryService, DeliverySettings

    ip = InProcess.new(visibility_timeout=60)
    st = FsStorage(tmp / "queue", triggers=ip.triggers, bounces=ip.bounces)
    settings = DeliverySettings(
        hostname="bench.test",
        routes="{}",
        dns_nameservers=f"127.0.0.1:{dns_port}",
        mx_port=mx_port,
        egress_mode="direct",
        egress_allow="127.0.0.1",
        mta_sts=True,
        dns_timeout_seconds=30.0,  # a loaded machine: a slow reply is not a deferral here
    )
    svc = DeliveryService(settings, st, ports=ip.delivery_ports(), dns_cache=settings.dns_cache())
    worker = Worker(ip.delivery, delivery_handler(svc), timeout_seconds=60)
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            if worker.poll_once().received == 0:
                time.sleep(0.02)

    t = threading.Thread(target=loop, name="bench-dns-delivery", daemon=True)
    t.start()
    try:
        yield st.enqueue, lambda: (svc.dns_cache.counts().hits, svc.dns_cache.counts().misses)
    finally:
        stop.set()
        t.join(60)


@contextmanager
def _local(dns_port: int, mx_port: int, tmp: Path) -> Iterator[tuple[Enqueue, Counts]]:
    """One delivery container of the local stack: the real handler, moto, SQS; the
    container's DnsCacheHits/DnsCacheMisses read from its EMF metric lines."""
    from mailqueue.backends.aws.backend import AwsStorage
    from mailqueue.backends.aws.clients import make_clients
    from mailqueue.core.config import StorageSettings, settings_from_env
    from mailqueue_local.stack import LocalStack, StackOptions

    options = StackOptions(
        var_dir=tmp,
        api_port=0,
        relay=f"127.0.0.1:{mx_port}",  # no stack sink: the MX hosts' port is this
        deploy="direct",
        sweep_interval=3600.0,
        concurrency={"delivery": 1},  # one container: one cache, measured
        smtpd=False,
        dkim=False,
        settings={
            "MQ_ROUTES": "{}",  # by MX, not through a relay
            "MQ_DNS_NAMESERVERS": f"127.0.0.1:{dns_port}",
            "MQ_MX_PORT": str(mx_port),
            "MQ_EGRESS_MODE": "direct",
            "MQ_EGRESS_ALLOW": "127.0.0.1",
            "MQ_MTA_STS": "true",
            "MQ_DKIM_DOMAINS": "{}",
            "MQ_DNS_TIMEOUT_SECONDS": "30",
        },
    )
    with LocalStack(options) as stack:
        ss = settings_from_env(StorageSettings)
        storage = AwsStorage(ss, make_clients(region=ss.region, endpoint_url=ss.endpoint_url))
        yield storage.enqueue, lambda: _emf_counts(stack.log_dir / "delivery.log")


def measure(
    domains: int = 1000,
    mails: int = 1000,
    s: float = 1.0,
    seed: int = 40,
    stack: str = "inprocess",
    timeout: float = 1800.0,
) -> Result:
    from mailqueue.core.model import Envelope, Recipient

    from tests.support.dns_peer import dns_server
    from tests.support.smtp_peers import smtp_sink

    rng = random.Random(seed)
    res = Result(domains, mails, s, seed, stack)
    cold = zipf(domains, mails, s, rng)
    seen = set(cold)
    topup = [k for k in range(domains) if k not in seen]
    warm = zipf(domains, mails, s, rng)
    soas = {domain(k): SOA for k in range(domains)}
    run = _local if stack == "local" else _inprocess
    with (
        tempfile.TemporaryDirectory(prefix="mq-dns-") as tmp,
        smtp_sink() as peer,
        dns_server(zone(domains), ttl=TTL, soa=soas) as dnsx,
        run(dnsx.port, peer.port, Path(tmp)) as (enqueue_raw, counts),
    ):
        counter = itertools.count()

        def enqueue(k: int) -> None:
            i = next(counter)
            env = Envelope("bench@example.org", (Recipient("r0", f"u{i}@{domain(k)}"),))
            body = (
                (
                    f"From: bench@example.org\r\nTo: u{i}@{domain(k)}\r\nSubject: dns {i}\r\n"
                    f"Message-ID: <dns-{i}-{time.time_ns()}@example.org>\r\n\r\n"
                ).encode()
                + b"x" * 900
                + b"\r\n"
            )
            enqueue_raw(env, body)

        def phase(ks: list[int], into: Phase, known: set[int]) -> None:
            into.mails = len(ks)
            into.new_domains = len(set(ks) - known)
            known.update(ks)
            q0, d0, t0 = len(dnsx.queries), len(peer.messages), time.monotonic()
            with ThreadPoolExecutor(8) as pool:
                list(pool.map(enqueue, ks))
            deadline = t0 + timeout
            while len(peer.messages) < d0 + len(ks) and time.monotonic() < deadline:
                time.sleep(0.1)
            into.seconds = time.monotonic() - t0
            into.delivered = len(peer.messages) - d0
            into.queries = Counter(t for _, t in dnsx.queries[q0:])

        known: set[int] = set()
        phase(cold, res.cold, known)
        phase(topup, res.topup, known)
        phase(warm, res.warm, known)
        time.sleep(1.5)  # the last invocation's end (its metrics)
        res.hits, res.misses = counts()
        res.server_queries = len(dnsx.queries)
    return res


def steady_queries_per_mail(rate: float, domains: int = 1000, s: float = 1.0) -> float:
    """The model for a container past its first TTL: each cached name is fetched again
    when the first mail after its expiry comes (a renewal process: per name, λ/(1+λT)
    fetches a second for a domain seen λ times a second), summed over the names a
    domain costs, per mail of a container that delivers ``rate`` mails/s."""
    h = sum(1.0 / (k + 1) ** s for k in range(domains))
    total = 0.0
    for k in range(domains):
        p = 1.0 / (k + 1) ** s / h
        for ttl in NAMES_PER_DOMAIN.values():
            total += p / (1 + rate * p * ttl)
    return total


#: the same phases on the local stack, a separate run (2026-12-02 10:47 UTC, load ~10):
#: the real handler in its container, moto, SQS, the metrics from its EMF lines
LOCAL_CHECK = (
    "**On the local stack** (a separate, smaller run: `python -m bench.dns --stack local "
    "--domains 100 --mails 100 --steady '' --no-write`, 2026-12-02 10:47 UTC; the real "
    "delivery handler in one container, moto, SQS): cold 172 queries for 100 mails "
    "(**1.720** a mail, 43 domains reached, 4.00 queries each), top-up 228 for 57, warm "
    "**0** for 100 (**0.000**); the container's EMF metrics over the run said 604 "
    "DnsCacheHits and 400 DnsCacheMisses, and the server received 400 queries: the "
    "deployed handler's path and its metric agree with the in-process measure."
)


def _stack_text(r: Result) -> str:
    if r.stack == "local":
        return "on the local stack (the real delivery handler in one warm container, moto, SQS)"
    return (
        "in process (the real delivery service as one container: one invocation at a "
        "time, a batch of 10 on its lanes, FsStorage and the in-process queue; the local "
        "stack's moto delivers ~3–5 mails/s here, so a run there outlives the MX TTL and "
        "measures expiry, not the cache: `--stack local` runs it)"
    )


def simulate_steady(
    rate: float,
    seconds: float = 5400.0,
    skip: float = 3600.0,
    domains: int = 1000,
    s: float = 1.0,
    seed: int = 40,
) -> tuple[float, int]:
    """The steady state measured: the real cache (the delivery defaults: 5 s floor,
    3,600 s ceiling), its clock simulated, in front of the same loopback server, asked
    what delivery asks per mail (MX, the MX host's A and AAAA, the ``_mta-sts`` TXT) for
    mails arriving Poisson at ``rate`` a second; queries per mail after ``skip`` seconds
    (the A's TTL: the cache's first fill behind it), and the mails that counted."""
    import dns.resolver
    from mailqueue.outbound.dnscache import DnsCache

    from tests.support.dns_peer import dns_server

    rng = random.Random(seed)
    soas = {domain(k): SOA for k in range(domains)}
    with dns_server(zone(domains), ttl=TTL, soa=soas) as dnsx:
        now = [0.0]
        # generous timeouts: a loaded machine must not turn a slow reply into a failure
        r = DnsCache(clock=lambda: now[0]).bind(dnsx.resolver(timeout=5.0, lifetime=30.0))
        draws = zipf(domains, int(rate * seconds * 1.2) + 10, s, rng)
        q_skip, counted = -1, 0
        for k in draws:
            now[0] += rng.expovariate(rate)
            if now[0] >= seconds:
                break
            if now[0] >= skip and q_skip < 0:
                q_skip = len(dnsx.queries)
            d = domain(k)
            r.resolve(f"{d}.", "MX", search=False)
            r.resolve(f"mx.{d}.", "A", search=False)
            r.resolve(f"mx.{d}.", "AAAA", search=False, raise_on_no_answer=False)
            try:
                r.resolve(f"_mta-sts.{d}.", "TXT", search=False, raise_on_no_answer=False)
            except dns.resolver.NXDOMAIN:
                pass  # no policy: what delivery finds for every domain here
            counted += now[0] >= skip
        return (len(dnsx.queries) - q_skip) / max(1, counted), counted


def markdown(r: Result, command: str) -> list[str]:
    rates = (5, 20, 50, 100, 200)
    steady = {x: steady_queries_per_mail(x, r.domains, r.zipf) for x in rates}
    warm, cold = r.warm.per_mail, r.cold.per_mail
    interfaces = (2, 3)

    def types(p: Phase) -> str:
        return ", ".join(f"{t} {n}" for t, n in sorted(p.queries.items())) or "none"

    def share(q_per_mail: float, n: int) -> float:
        return 10_000 * q_per_mail / n / VPC_RESOLVER_PPS

    need = 10_000 * warm
    ok_rates = [x for x in rates if share(steady[x], 2) <= 0.5]
    counted = sum(sum(p.queries.values()) for p in (r.cold, r.topup, r.warm))
    lines = [
        SECTION,
        "",
        f"Direct delivery by MX {_stack_text(r)}, MTA-STS discovery on, egress guard on, to "
        f"{r.domains:,} recipient domains on a loopback authoritative DNS server "
        "(tests/support/dns_peer.py) and an aiosmtpd sink: MX 300 s, the MX host's A "
        "3,600 s, no AAAA and no `_mta-sts` TXT (NODATA / NXDOMAIN with the zone's SOA, "
        "MINIMUM 300 s: cached 300 s, RFC 2308), one MX host per domain (no shared provider "
        f"hosts: the most a new domain can cost). One-recipient mails spread Zipf-like "
        f"(weight 1/k^{r.zipf:g}, seed {r.seed}). Queries are what the server received, "
        "mails what the sink received.",
        "",
        "| phase | mails delivered | domains reached first | DNS queries (by type) | "
        "queries per mail | wall |",
        "|---|---|---|---|---|---|",
        f"| cold (empty cache) | {r.cold.delivered:,}/{r.cold.mails:,} | {r.cold.new_domains} "
        f"| {sum(r.cold.queries.values()):,} ({types(r.cold)}) | **{cold:.3f}** | "
        f"{r.cold.seconds:.0f} s |",
        f"| top-up: one mail to each domain not yet reached (not counted) | "
        f"{r.topup.delivered:,}/{r.topup.mails:,} | {r.topup.new_domains} | "
        f"{sum(r.topup.queries.values()):,} ({types(r.topup)}) | {r.topup.per_mail:.3f} | "
        f"{r.topup.seconds:.0f} s |",
        f"| warm (the cache holds the mix) | {r.warm.delivered:,}/{r.warm.mails:,} | "
        f"{r.warm.new_domains} | {sum(r.warm.queries.values()):,} ({types(r.warm)}) | "
        f"**{warm:.3f}** | {r.warm.seconds:.0f} s |",
        "",
        f"Floor: ≤ 0.1 queries a mail warm: **{'met' if warm <= 0.1 else 'NOT met'}** "
        f"({warm:.3f}). Without the cache every mail cost its MX, A, AAAA and `_mta-sts` "
        "TXT, 4 queries, whatever the phase (the cold phase here: "
        f"{sum(r.cold.queries.values()) / max(1, r.cold.new_domains):.2f} queries per "
        f"domain reached; {max(0, r.cold.queries['MX'] - r.cold.new_domains)} MX "
        "queries more than domains: lanes of one batch that miss on one name at once each "
        "ask, the cache does not make one wait for another's lookup). The container's own "
        f"count over the run: {r.hits:,} hits, "
        f"{r.misses:,} misses (the server received {r.server_queries:,} queries, "
        f"{counted:,} of them in the phases). A cached answer costs "
        f"~{r.bytes_per_entry / 1024:.1f} KiB (tracemalloc, in process): the default bound "
        f"of 10,000 entries is ~{r.bytes_per_entry * 10_000 / 2**20:.0f} MiB at most.",
        "",
        *([LOCAL_CHECK, ""] if r.stack != "local" else []),
        "**At 10,000 mails/s.** The VPC resolver takes at most 1,024 packets per second "
        "from each network interface, a hard limit, not a quota to raise ([Understanding "
        f"Amazon DNS: DNS quotas, Amazon VPC User Guide]({VPC_DOC}); the whitepaper "
        f"[Hybrid Cloud DNS Options for Amazon VPC: Constraints]({WHITEPAPER}) names Lambda "
        "functions); a Lambda function in a VPC sends from the Hyperplane ENIs of its "
        "subnets (one per subnet and security group combination: 2–3 with the template's "
        "subnets), one packet a query (UDP, retries are more). Queries per mail × "
        "mails/s ÷ interfaces: warm, 10,000 × "
        f"{warm:.3f} = {need:,.0f} queries/s, "
        + ", ".join(
            f"{need / n:,.0f} per interface at {n} ({share(warm, n):.0%})" for n in interfaces
        )
        + "; cold, 10,000 × "
        f"{cold:.3f} = {10_000 * cold:,.0f} queries/s ("
        + ", ".join(f"{share(cold, n):.0%} at {n}" for n in interfaces)
        + "); without the cache 10,000 × 4 = 40,000 queries/s ("
        + ", ".join(f"{share(4, n):.0%} at {n}" for n in interfaces)
        + ": a cap near "
        + "–".join(f"{n * VPC_RESOLVER_PPS / 4:,.0f}" for n in interfaces)
        + " mails/s at 2–3 interfaces; the issue's 700–1,000 counted 3 queries a mail).",
        "",
        "**Past the first TTL** the warm figure is a floor, not the steady state: the cache "
        "is per container, and a name is fetched again after its TTL when the next mail "
        "for it comes. A domain a container sees λ times a second costs λ/(1+λT) fetches "
        "a second per name (T: that name's TTL; a renewal process); summed over a domain's "
        "four names and the mix, the queries per mail of a container delivering R mails/s "
        "(`steady_queries_per_mail` in bench/dns.py) and what they are at 10,000 mails/s:",
        "",
        "| R (mails/s a container) | containers at 10,000/s | queries per mail | queries/s | "
        + " | ".join(f"share at {n} interfaces" for n in interfaces)
        + " |",
        "|---|---|---|---|" + "---|" * len(interfaces),
        *(
            f"| {x} | {10_000 // x:,} | {steady[x]:.3f} | {10_000 * steady[x]:,.0f} | "
            + " | ".join(f"{share(steady[x], n):.0%}" for n in interfaces)
            + " |"
            for x in rates
        ),
        "",
        *(
            [
                "Measured against the model (`simulate_steady`: the real cache, its clock "
                "simulated, in front of the same server, mails arriving Poisson, counted "
                "after the first 3,600 s): "
                + "; ".join(
                    f"R = {x:g}/s: **{q:.3f}** queries per mail measured over {n:,} mails, "
                    f"{steady_queries_per_mail(x, r.domains, r.zipf):.3f} modelled"
                    for x, (q, n) in sorted(r.steady.items())
                )
                + ".",
                "",
            ]
            if r.steady
            else []
        ),
        "So with a cache per container, the mails each container delivers a second decide "
        "whether DNS binds: "
        + (
            f"at R ≥ {ok_rates[0]}/s the resolver is at most half used with 2 interfaces, "
            f"below it more (at R = {rates[0]}/s: {share(steady[rates[0]], 2):.0%})."
            if ok_rates
            else "at every R above the resolver is more than half used with 2 interfaces."
        )
        + " Levers where a container delivers few mails a second: more records per "
        "invocation at once (`batch_concurrency`, larger batches), so fewer containers "
        "carry the rate; more subnets (interfaces); AAAA lookups skipped where the egress "
        "has no IPv6 (not done: a quarter of a new domain's names)."
        + " The scale model's DNS row should take the steady figure at its own mails per "
        "delivery container (bench/measured/dns.json: "
        "`steady_queries_per_mail_by_container_rate`); the warm figure holds for a "
        "container within a TTL of having seen the mix.",
        "",
        f"_Run {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {platform.machine()}, "
        f"{platform.python_version()}: `{command}`._",
        "",
    ]
    return lines


def write_section(lines: list[str], section: str = SECTION) -> None:
    _write_section(lines, section)


def to_json(r: Result, command: str) -> dict[str, Any]:
    return {
        "cold_queries_per_mail": round(r.cold.per_mail, 4),
        "warm_queries_per_mail": round(r.warm.per_mail, 4),
        "mails": r.cold.delivered + r.warm.delivered,
        "domains": r.domains,
        "command": command,
        "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        # the model past the first TTL (steady_queries_per_mail), by a container's mails/s
        "steady_queries_per_mail_by_container_rate": {
            str(x): round(steady_queries_per_mail(x, r.domains, r.zipf), 4)
            for x in (5, 10, 20, 50, 100, 200)
        },
        "vpc_resolver_packets_per_second_per_interface": VPC_RESOLVER_PPS,
        "vpc_resolver_doc": VPC_DOC,
        "vpc_resolver_doc_lambda": WHITEPAPER,
        "detail": {
            "zipf": r.zipf,
            "seed": r.seed,
            "ttl": {**TTL, "negative (SOA MINIMUM)": SOA[1]},
            "phases": {
                name: {**asdict(p), "queries": dict(p.queries), "per_mail": round(p.per_mail, 4)}
                for name, p in (("cold", r.cold), ("topup", r.topup), ("warm", r.warm))
            },
            "steady_measured": {
                f"{x:g}": {"queries_per_mail": round(q, 4), "mails": n}
                for x, (q, n) in sorted(r.steady.items())
            },
            "dns_cache_hits": r.hits,
            "dns_cache_misses": r.misses,
            "bytes_per_entry": round(r.bytes_per_entry),
        },
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.dns", description=__doc__.split("\n")[0])
    p.add_argument("--domains", type=int, default=1000)
    p.add_argument("--mails", type=int, default=1000)
    p.add_argument("--zipf", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=40)
    p.add_argument(
        "--stack",
        choices=("inprocess", "local"),
        default="inprocess",
        help="inprocess: the delivery service on FsStorage (fast enough that a run stays "
        "within the MX TTL, as a busy container does); local: the local stack's handler",
    )
    p.add_argument(
        "--steady",
        default="5",
        help="container rates (mails/s, comma list) whose steady state is measured with "
        "the cache's clock simulated ('' for none; each takes ~rate × 5,400 mails)",
    )
    p.add_argument("--no-write", action="store_true")
    ns = p.parse_args(argv)
    r = measure(ns.domains, ns.mails, ns.zipf, ns.seed, ns.stack)
    r.bytes_per_entry = bytes_per_entry()
    for rate in (float(x) for x in ns.steady.split(",") if x.strip()):
        r.steady[rate] = simulate_steady(rate, domains=ns.domains, s=ns.zipf, seed=ns.seed)
    command = "python -m bench.dns " + " ".join(argv if argv is not None else sys.argv[1:])
    lines = markdown(r, command.strip())
    print("\n".join(lines))
    failed = r.cold.delivered < r.cold.mails or r.warm.delivered < r.warm.mails
    if not ns.no_write:
        MEASURED.parent.mkdir(parents=True, exist_ok=True)
        MEASURED.write_text(json.dumps(to_json(r, command.strip()), indent=2) + "\n")
        write_section(lines)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
