"""Delivery: one SQS record → claim → route → SMTP → per-recipient results.

The handler calls `DeliveryService.invocation(...)` once per Lambda invocation (one SMTP
connection pool for the whole batch) and `Invocation.handle(body, receipt_handle)` per
record. A record that must come back later (not yet due, temporary failure, handed back
before the deadline) raises `KeepMessage`, so the batch reports it as a failure and SQS
keeps it with the visibility we set; everything else completes and the message is deleted.
One piece (~850 lines): a record's claim, shaping, SMTP and result recording share the
invocation's lanes, connection slots and counters.
"""

from __future__ import annotations

import asyncio
import contextvars
import io
import json
import logging
import math
import random
import threading
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, BinaryIO, cast

from mailqueue.core.config import ConfigError, settings_from_env
from mailqueue.core.errors import LeaseLost, MailqueueError, NotFound, PoisonMessage
from mailqueue.core.model import Claim, Group, MailRef, Result, utcnow
from mailqueue.core.policy import RetryPolicy, backoff, delay_warning_due, expired
from mailqueue.core.ports import Triggers
from mailqueue.core.storage import QueueStorage
from mailqueue.core.trace import (
    HEADER_SCAN_LIMIT,
    HOPCOUNT_LIMIT,
    HeaderPeek,
    count_received,
    peek_header,
)
from mailqueue.core.verp import ReturnPathPolicy
from mailqueue.outbound import unsubscribe as unsub
from mailqueue.outbound.dkim import (
    DkimConfig,
    DkimError,
    DkimSigner,
    KeySource,
    KeyUnavailable,
    Unsignable,
    header_section,
    wire_form,
)
from mailqueue.outbound.dkim import header_from_domain as dkim_from_domain
from mailqueue.outbound.dnscache import DEFAULT_MAX_ENTRIES as DNS_CACHE_MAX_ENTRIES
from mailqueue.outbound.dnscache import DEFAULT_MAX_TTL as DNS_CACHE_MAX_TTL
from mailqueue.outbound.dnscache import DEFAULT_MIN_TTL as DNS_CACHE_MIN_TTL
from mailqueue.outbound.dnscache import DnsCache
from mailqueue.outbound.dnscache import check_limits as check_dns_cache
from mailqueue.outbound.mtasts import Mode, MtaSts, PolicyCache, explain
from mailqueue.outbound.pools import (
    PoolConfig,
    load_pools,
    pool_backoff,
    pool_rules,
    shaping_key,
    split_key,
    total_key,
)
from mailqueue.outbound.reputation import (
    REP_SCOPES,
    Origin,
    ReputationEvents,
    ReputationGuard,
    ReputationStore,
    Thresholds,
    counts_of,
)
from mailqueue.outbound.returnpath import KeysUnavailable, ReturnPaths, SecretSource
from mailqueue.outbound.routing import (
    CredentialsProvider,
    EgressGuard,
    Hop,
    NextHopError,
    RoutingTable,
    check_receiving_routes,
    make_resolver,
    resolve_next_hops,
    with_dane,
)
from mailqueue.outbound.shaping import (
    SITE_SHARD_MAX_RATE,
    TIMED_CONNECTION_FLOOR,
    Limits,
    Permit,
    Reservation,
    Shaper,
    ShapingStore,
    Wait,
    check_transaction_limits,
    load_rules,
    reclassified,
)
from mailqueue.outbound.smtp import (
    CachedTlsContexts,
    ConnectionPool,
    DeliveryOutcome,
    SmtpClient,
    Timeouts,
)
from mailqueue.outbound.suppression import (
    DEFAULT_STATUSES,
    DEFAULT_TTL_DAYS,
    SuppressionStore,
    from_bounces,
    parse_statuses,
)
from mailqueue.outbound.suspensions import SuspensionCache, SuspensionStore
from mailqueue.outbound.warmup import BudgetCounters, WarmupGate

if TYPE_CHECKING:
    import dns.resolver

log = logging.getLogger(__name__)


_CONNECTION_RETRY = 0.1  # seconds between a booked sender's takes at a 1-2 connection site


def _at_once(limits: Limits) -> bool:
    """A site of one or two connections: a record's connection is closed after its
    transaction and its slot given back at once, not at the end of the invocation. There
    a slot held by an invocation whose other records sleep for their booked slots kept
    other containers' booked groups from connecting in time: they missed their slots and
    booked again, over and over (issue 40: 0.23/s of a 2/s site, 4 re-arms a mail)."""
    return limits.max_connections is not None and limits.max_connections < 3


class KeepMessage(MailqueueError):
    """The record must stay on the queue (its visibility is already set as intended)."""


@dataclass(frozen=True, slots=True)
class DeliverySettings:
    hostname: str = "mailqueue.invalid"  # EHLO name and Reporting-MTA
    routes: str = "{}"  # routing table JSON (see routing.py)
    lease_seconds: int = 360
    min_time_left_seconds: float = 20.0  # below this, hand the group back
    retry_min_backoff_seconds: int = 300
    retry_max_backoff_seconds: int = 4 * 3600
    max_queue_lifetime_seconds: int = 5 * 86400
    delay_warning_seconds: int = 4 * 3600  # 0 turns delay warnings off
    dns_nameservers: str = ""  # "127.0.0.1:5353,..." for local runs; empty: system resolver
    dns_timeout_seconds: float = 5.0
    # the container's DNS cache (outbound/dnscache.py): answers kept for their TTL within
    # [min, max] seconds, negative ones per RFC 2308, at most max_entries (0: no cache)
    dns_cache_max_entries: int = DNS_CACHE_MAX_ENTRIES
    dns_cache_min_ttl_seconds: int = DNS_CACHE_MIN_TTL
    dns_cache_max_ttl_seconds: int = DNS_CACHE_MAX_TTL
    mx_port: int = 25  # tests and the local stack use unprivileged ports
    smtp_max_sessions: int = 2
    # records of one SQS batch delivered at once (threads sharing the invocation's
    # connection cache); 1: one after another. Default: the batch size (BatchSize 10)
    batch_concurrency: int = 10
    # more `Received:` fields than this: a mail loop, bounced 5.4.6 (Postfix's hopcount_limit)
    hopcount_limit: int = HOPCOUNT_LIMIT
    # SES receiving domains: each needs an explicit route (its MX is SES, i.e. us: a loop)
    receiving_domains: str = ""
    # MTA-STS (RFC 8461) for MX delivery; a CA bundle and HTTPS port only tests change
    mta_sts: bool = True
    mta_sts_ca_file: str = ""
    mta_sts_port: int = 443
    # DANE (RFC 7672, outbound/dane.py) for MX delivery: TLSA records through a validating
    # resolver ("host:port,..."; only its AD bit is trusted); takes precedence over MTA-STS
    dane: bool = False
    dane_nameservers: str = ""
    # "relay" (Lambda outside a VPC) or "direct" (in a VPC, to MX hosts through NAT): direct
    # turns on the egress guard, which refuses non-public MX/literal addresses but these
    egress_mode: str = "relay"
    egress_allow: str = ""  # "127.0.0.1,10.1.0.0/16": addresses/networks the guard lets by
    # DKIM (see dkim.py): {"domain": ["selector", ...]}; keys under <dkim_key_prefix>dkim/
    dkim_domains: str = "{}"
    dkim_unsigned_policy: str = "send"  # enforced at ingress; delivery signs or sends
    dkim_host_domain: str = ""  # signs DSNs and delay warnings; empty: the hostname
    dkim_key_store: str = "secretsmanager"  # or "ssm" (SecureString)
    dkim_key_prefix: str = "mailqueue/"  # the template's SecretsPrefix
    # traffic shaping (shaping.py): off by default; rules files empty = the packaged ones
    shaping: bool = False
    shaping_rules: str = ""  # path, or the JSON itself
    backoff_rules: str = ""  # path, or the JSON itself
    shaping_inline_wait_seconds: float = 2.0  # waits up to this are slept, longer re-armed
    # a group refused for a site's rate books its own slot and waits once (issue 25 item
    # 6): on by default since bookings and connection slots are atomic writes (fewer
    # limiter requests and the limit's rate at every burst: docs/benchmarks.md)
    shaping_book_slots: bool = True
    # a booked slot missed by more than this (and than one interval of the site's rate,
    # at least 1 s: shaping.LATE_FLOOR) is booked afresh: a late send would bunch with the
    # on-time ones (issue 40). 0 turns it off: sent up to 10 s late, as before issue 40
    shaping_late_tolerance_seconds: float = 1.0
    # a site of 1-2 connections counts them by time where its rate allows a connection
    # this long at least (shaping.timed_connections: no slot taken or given back, MAIL
    # FROM by the middle of the lane); 0: counted by holders, as before
    shaping_timed_connection_seconds: float = TIMED_CONNECTION_FLOOR
    # grants a second per item of a site's state (shaping.site_shards: a faster site is
    # spread over more items); DynamoDB's per-key share, scaled down only by tests
    shaping_shard_max_rate: float = SITE_SHARD_MAX_RATE
    # suppression list (suppression.py): a remote 5xx with one of these statuses puts the
    # recipient on the list for suppression_ttl_days; "" turns the additions off
    suppression_statuses: str = DEFAULT_STATUSES
    suppression_ttl_days: int = DEFAULT_TTL_DAYS
    # operator suspensions (suspensions.py): read every this often per container; a held
    # group comes back after at most suspension_recheck_seconds (so a resume takes effect)
    suspension_refresh_seconds: float = 30.0
    suspension_recheck_seconds: int = 300
    # VERP return path (core/verp.py, outbound/returnpath.py): {"sender domain, * or
    # principal ARN": "bounce domain"}; empty: MAIL FROM is the sender, as before
    return_path_policy: str = ""
    return_path_keys: str = ""  # secretsmanager:<id> | ssm:<name> | file:<path> | the JSON
    # reputation guards (reputation.py): rates per principal / sender domain, auto pause;
    # thresholds as JSON ("" = SES's: bounces 5 % review, 10 % pause; complaints 0.1/0.5 %)
    reputation: bool = False
    reputation_thresholds: str = ""
    # one-click unsubscribe (unsubscribe.py): the public base URL ("" = off), the HMAC
    # keys {"kid": "<base64>"} and the current kid, an optional mailto address
    list_unsubscribe_url: str = ""
    list_unsubscribe_keys: str = ""  # inline (tests, the local stack); else the secret:
    list_unsubscribe_kid: str = ""
    list_unsubscribe_key_name: str = ""  # Secrets Manager name (unsubscribe.keys_from_secret)
    list_unsubscribe_mailto: str = ""
    # egress pools (outbound/pools.py, warmup.py): the pools file (path, inline JSON, ""
    # = the packaged one pool) and the pool this function sends for (its EHLO name, its
    # source address, its (pool, site) limits, its warm-up budget)
    pools: str = ""
    pool: str = "default"

    def __post_init__(self) -> None:
        if not self.hostname or " " in self.hostname:
            raise ConfigError("hostname must be a host name")
        if not 1 <= self.hopcount_limit <= 1000:
            raise ConfigError("hopcount_limit must be within 1..1000")
        if self.lease_seconds < 30:
            raise ConfigError("lease_seconds must be at least 30")
        if not 0 <= self.suspension_refresh_seconds <= 3600:
            raise ConfigError("suspension_refresh_seconds must be within 0..3600")
        if not 1 <= self.suspension_recheck_seconds <= 43200:
            raise ConfigError("suspension_recheck_seconds must be within 1..43200")
        if not 1 <= self.suppression_ttl_days <= 3650:
            raise ConfigError("suppression_ttl_days must be within 1..3650")
        if not 1 <= self.batch_concurrency <= 100:
            raise ConfigError("batch_concurrency must be within 1..100")
        if not 0 <= self.shaping_late_tolerance_seconds <= 60:
            raise ConfigError("shaping_late_tolerance_seconds must be within 0..60")
        if not 0 <= self.shaping_timed_connection_seconds <= 60:
            raise ConfigError("shaping_timed_connection_seconds must be within 0..60")
        if not 0 < self.shaping_shard_max_rate <= 1000:
            raise ConfigError("shaping_shard_max_rate must be within 0..1000 (above 0)")
        if self.egress_mode not in ("relay", "direct"):
            raise ConfigError("egress_mode must be 'relay' or 'direct'")
        check_dns_cache(
            self.dns_cache_max_entries,
            self.dns_cache_min_ttl_seconds,
            self.dns_cache_max_ttl_seconds,
        )
        try:
            check_receiving_routes(self.routing_table(), self.receiving_domains)
            self.retry_policy()
            self.egress_guard()
            self.dkim_config()
            parse_statuses(self.suppression_statuses)
            if ReturnPathPolicy.parse(self.return_path_policy).enabled and not (
                self.return_path_keys
            ):
                raise ConfigError("return_path_policy is set but return_path_keys is empty")
            Thresholds.parse(self.reputation_thresholds)
            if self.list_unsubscribe_url:
                if not self.list_unsubscribe_url.startswith("https://"):
                    raise ConfigError("list_unsubscribe_url must be an https:// URL")
                inline = unsub.UnsubscribeKeys.parse(
                    self.list_unsubscribe_keys, self.list_unsubscribe_kid
                )
                if not inline.keys and not self.list_unsubscribe_key_name:
                    raise ConfigError("list_unsubscribe_url is set but no keys are")
            if self.shaping:
                load_rules(self.shaping_rules, self.backoff_rules)
            if self.pool_config().get(self.pool) is None:
                raise ConfigError(f"pool {self.pool!r} is not in the pools file")
            capped = [p.name for p in self.pool_config().pools.values() if p.max_per_second]
            if capped and not self.shaping:
                raise ConfigError(
                    f"pool {capped[0]!r} has max_per_second: shaping must be on (the limiter "
                    "keeps each pool's total over its sites)"
                )
        except (ValueError, MailqueueError) as e:
            raise ConfigError(str(e)) from e

    def pool_config(self) -> PoolConfig:
        return load_pools(self.pools)

    def routing_table(self) -> RoutingTable:
        return RoutingTable.from_json(self.routes or "{}")

    def egress_guard(self) -> EgressGuard | None:
        """The SSRF guard in direct mode; relay mode leaves the VPC-less Lambda unfiltered."""
        return EgressGuard.from_setting(self.egress_allow) if self.egress_mode == "direct" else None

    def dkim_config(self) -> DkimConfig:
        if self.dkim_key_store not in ("secretsmanager", "ssm"):
            raise DkimError("dkim_key_store must be 'secretsmanager' or 'ssm'")
        return DkimConfig.parse(
            self.dkim_domains, self.dkim_unsigned_policy, self.dkim_host_domain or self.hostname
        )

    def retry_policy(self) -> RetryPolicy:
        return RetryPolicy(
            minimal_backoff=timedelta(seconds=self.retry_min_backoff_seconds),
            maximal_backoff=timedelta(seconds=self.retry_max_backoff_seconds),
            maximal_queue_lifetime=timedelta(seconds=self.max_queue_lifetime_seconds),
            delay_warning=(
                timedelta(seconds=self.delay_warning_seconds)
                if self.delay_warning_seconds > 0
                else None
            ),
        )

    def resolver(self) -> dns.resolver.Resolver:
        r = make_resolver(self.dns_nameservers)
        r.lifetime = self.dns_timeout_seconds
        return r

    def dns_cache(self) -> DnsCache:
        """A new cache as these settings say: one per container (the composition root)."""
        return DnsCache(
            self.dns_cache_max_entries,
            self.dns_cache_min_ttl_seconds,
            self.dns_cache_max_ttl_seconds,
        )

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None, **explicit: Any) -> DeliverySettings:
        return settings_from_env(cls, env=env, **explicit)


@dataclass
class Stats:
    """Per-invocation counters, published as metrics by the handler. The records of a
    batch run at once (`batch_concurrency`): every change goes through `add` under a lock,
    so the counts stay exact."""

    delivered: int = 0
    bounced: int = 0
    deferred: int = 0
    lost_claims: int = 0
    rearmed: int = 0
    handed_back: int = 0
    groups: int = 0
    throttled: int = 0  # out of the site's budget: re-armed, not attempted
    extra: dict[str, int] = field(default_factory=dict)
    rates: dict[str, float] = field(default_factory=dict)  # percent gauges (reputation)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, name: str, n: int = 1) -> None:
        with self._lock:
            setattr(self, name, getattr(self, name) + n)

    def add_extra(self, key: str, n: int = 1) -> None:
        with self._lock:
            self.extra[key] = self.extra.get(key, 0) + n


@dataclass(frozen=True)
class DeliveryPorts:
    """What delivery needs besides the storage; each store is the protocol of the outbound
    module that owns it (which is why this lives here, not in core).

    `suppression` is needed when suppression statuses are set, `mta_sts_cache` when
    MTA-STS is on, `shaping` when traffic shaping is on (the service refuses to start
    otherwise, so a missing adapter is a configuration error, not a silent fallback).
    """

    triggers: Triggers
    suspensions: SuspensionStore
    suppression: SuppressionStore | None = None
    mta_sts_cache: PolicyCache | None = None
    shaping: ShapingStore | None = None
    reputation: ReputationStore | None = None  # needed when reputation guards are on
    reputation_events: ReputationEvents | None = None  # where pause/review events go
    budgets: BudgetCounters | None = None  # warm-up counters: needed when a pool warms up


class DeliveryService:
    """Built once per container: settings, storage, routing table, resolver, DNS cache.

    Stands on the storage protocol and `ports` (triggers and the stores below); the
    composition roots choose the adapters (`mailqueue.compose.aws` on AWS,
    `mailqueue.backends.inprocess` in one process)."""

    def __init__(
        self,
        settings: DeliverySettings,
        storage: QueueStorage,
        *,
        ports: DeliveryPorts,
        resolver: dns.resolver.Resolver | None = None,
        credentials: CredentialsProvider | None = None,
        dkim_keys: KeySource | None = None,
        clock: Callable[[], datetime] = utcnow,
        rng: random.Random | None = None,
        timeouts: Timeouts | None = None,
        return_path_keys: SecretSource | None = None,
        pool_queues: Collection[str] = (),
        dns_cache: DnsCache | None = None,
    ) -> None:
        self.settings = settings
        # the egress pools with a delivery queue of their own (StorageSettings'
        # pool_queue_urls): a group of one of them is handed to its queue
        self.pool_queues = frozenset(pool_queues)
        self.return_paths = ReturnPaths.from_settings(
            settings.return_path_policy, settings.return_path_keys, return_path_keys
        )
        dkim = settings.dkim_config()
        if dkim.enabled and dkim_keys is None:
            raise ConfigError("dkim_domains is set but no DKIM key source was given")
        self.signer = (
            DkimSigner(
                dkim, dkim_keys, prefix=settings.dkim_key_prefix, store=settings.dkim_key_store
            )
            if dkim.enabled and dkim_keys is not None
            else None
        )
        self.storage = storage
        self.ports = ports
        self.triggers = ports.triggers
        self.pools = settings.pool_config()
        pool = self.pools.get(settings.pool)
        if pool is None:
            raise ConfigError(f"pool {settings.pool!r} is not in the pools file")
        self.pool = pool
        self.warmup: WarmupGate | None = None
        # warm-up caps per big receiver name shaping sites: their names even with the
        # limiter off (the site rules' MX rollup)
        self.site_rules = load_rules(settings.shaping_rules, settings.backoff_rules)[0]
        self.routes = settings.routing_table()
        self.policy = settings.retry_policy()
        # every lookup of delivery (MX, A, AAAA, MTA-STS, DANE) through the container's
        # cache, shared by the lanes (dnscache.py); the composition root passes it
        self.dns_cache = dns_cache if dns_cache is not None else settings.dns_cache()
        self.resolver = self.dns_cache.bind(resolver or settings.resolver())
        self.guard = settings.egress_guard()
        self.credentials = credentials
        self.clock = clock
        self.rng = rng or random.Random()
        self.timeouts = timeouts
        # TLS contexts per container, not per invocation's client (smtp.CachedTlsContexts)
        self.tls_contexts = CachedTlsContexts()
        self.mta_sts: MtaSts | None = None
        if settings.mta_sts:
            if ports.mta_sts_cache is None:
                raise ConfigError("mta_sts is on but no MTA-STS policy cache was given")
            self.mta_sts = MtaSts(
                self.resolver,
                ports.mta_sts_cache,
                ca_file=settings.mta_sts_ca_file or None,
                https_port=settings.mta_sts_port,
                clock=clock,
                refuse=self.guard.refusal if self.guard is not None else None,
            )
        self.dane_resolver: dns.resolver.Resolver | None = None
        if settings.dane:
            from mailqueue.outbound.dane import validating

            dane = make_resolver(settings.dane_nameservers)
            dane.lifetime = settings.dns_timeout_seconds
            # its queries ask for validation (DO, AD): cached apart from the plain ones
            self.dane_resolver = self.dns_cache.bind(validating(dane))
        self.suppress_statuses = parse_statuses(settings.suppression_statuses)
        self.suppression: SuppressionStore | None = None
        if self.suppress_statuses:
            if ports.suppression is None:
                raise ConfigError("suppression_statuses are set but no suppression store given")
            self.suppression = ports.suppression
        self.suspensions = SuspensionCache(
            ports.suspensions,
            settings.suspension_refresh_seconds,
            clock=lambda: self.clock().timestamp(),
        )
        self.unsub_keys: unsub.UnsubscribeKeys | None = None
        if settings.list_unsubscribe_url:  # read once per container (cold start)
            self.unsub_keys = unsub.UnsubscribeKeys.parse(
                settings.list_unsubscribe_keys, settings.list_unsubscribe_kid
            )
            if not self.unsub_keys.keys:
                if dkim_keys is None:
                    raise ConfigError("list_unsubscribe_key_name needs a key source")
                ref = f"secretsmanager:{settings.list_unsubscribe_key_name}"
                self.unsub_keys = unsub.keys_from_secret(dkim_keys(ref) or "")
        self.reputation: ReputationGuard | None = None
        # feedback can come back only through a VERP return path or a one-click link:
        # then finished mails leave their origin for it (reputation.Origin), guards or not
        remember = self.return_paths.policy.enabled or self.unsub_keys is not None
        warming = any(p.warmup is not None for p in self.pools.pools.values())
        if settings.reputation or warming or (remember and ports.reputation is not None):
            if ports.reputation is None:
                raise ConfigError(
                    "reputation is on (or a pool warms up) but no reputation store was given"
                )
            self.reputation = ReputationGuard(
                ports.reputation,
                ports.suspensions,
                Thresholds.parse(settings.reputation_thresholds),
                events=ports.reputation_events,
                clock=lambda: self.clock().timestamp(),
                remember=remember,
                counting=settings.reputation or warming,
                # the guards off, a warming pool still needs its own counts (warmup.py)
                scopes=REP_SCOPES if settings.reputation else ("pool",),
            )
        if warming:
            if ports.budgets is None:
                raise ConfigError("a pool warms up but no budget counter store was given")
            guard = self.reputation
            assert guard is not None
            self.warmup = WarmupGate(
                self.pools,
                ports.budgets,
                # the ramp holds while the pool's standing in the guard is out of band
                standing=lambda name: guard.standing("pool", name),
                clock=lambda: self.clock().timestamp(),
            )
        self.shaper: Shaper | None = None
        if settings.shaping:
            if ports.shaping is None:
                raise ConfigError("shaping is on but no shaping store was given")
            rules, backoff_rules = load_rules(settings.shaping_rules, settings.backoff_rules)
            if not self.pools.single:  # limits per (pool, site): "<pool>|<site>" keys
                rules, backoff_rules = pool_rules(rules, self.pools), pool_backoff(backoff_rules)
            elif self.pool.max_per_second is not None:  # one pool, its total: "default|*"
                rules = pool_rules(rules, self.pools)
            check_transaction_limits(rules, storage.group_recipient_limit)
            self.shaper = Shaper(
                rules,
                backoff_rules,
                ports.shaping,
                slot_lease=float(settings.lease_seconds),
                clock=lambda: self.clock().timestamp(),
                inline_wait=settings.shaping_inline_wait_seconds,
                shard_max_rate=settings.shaping_shard_max_rate,
                late_tolerance=settings.shaping_late_tolerance_seconds,
                timed_floor=settings.shaping_timed_connection_seconds,
            )

    @contextmanager
    def invocation(self, time_left: Callable[[], float] | None = None) -> Iterator[Invocation]:
        """One SMTP connection pool per invocation, closed at the end whatever happens."""
        pool = ConnectionPool()
        client = SmtpClient(
            self.pool.ehlo_name(self.settings.hostname),
            source_address=self.pool.bind,
            timeouts=self.timeouts,
            pool=pool,
            credentials=self.credentials,
            max_sessions=self.settings.smtp_max_sessions,
            tls_context_factory=self.tls_contexts,
        )
        lanes = ThreadPoolExecutor(
            max_workers=self.settings.batch_concurrency, thread_name_prefix="delivery-lane"
        )
        inv = Invocation(self, client, time_left or (lambda: 900.0), lanes)
        try:
            yield inv
        finally:
            lanes.shutdown(wait=True)  # no record outlives its invocation
            pool.close()
            inv.release_sites()
            dns = self.dns_cache.take_counts()  # the container's, since the last invocation
            for name, n in (("DnsCacheHits", dns.hits), ("DnsCacheMisses", dns.misses)):
                if n:
                    inv.stats.add_extra(name, n)


class Invocation:
    """One Lambda invocation: its records run at once on `lanes` (a bounded pool, at most
    `batch_concurrency` threads), sharing the SMTP client and its connection cache, the
    container's TLS contexts, routes and limiter, and one deadline (`time_left`)."""

    def __init__(
        self,
        svc: DeliveryService,
        client: SmtpClient,
        time_left: Callable[[], float],
        lanes: ThreadPoolExecutor | None = None,
    ):
        self.svc = svc
        self.client = client
        self.time_left = time_left
        self.stats = Stats()
        self._lanes = lanes
        self._hops: dict[str, list[Hop] | Result] = {}
        self._lock = threading.Lock()
        # Connection slots (shaping's max_connections): the invocation holds some per site,
        # each used by one record at a time (so at most one connection in use per slot);
        # a record takes an idle one, or a new one, or waits for one to be given back
        self._free = threading.Condition(self._lock)
        self._idle: dict[str, list[str]] = {}  # site -> holders with a slot, not in use
        self._held_slots: dict[str, int] = {}  # site -> holders with a slot
        self._lane = threading.local()  # the (site, holder) this record uses
        self._sites: set[tuple[str, str]] = set()  # (site, holder) slots to give back
        self._full: set[str] = set()  # sites that refused this invocation a connection
        self._asking: set[str] = set()  # sites a record is asking a new slot of now
        self._shaping_requests = svc.shaper.store.requests if svc.shaper else 0

    def _holder_for(self, site: str, *, wait: bool = True) -> tuple[str, bool]:
        """(holder, asking): an idle holder of this invocation for `site` (its connection
        slot is ours), else a new one that asks the limiter for a slot, one record at a
        time per site; once the site has refused us one, records wait for ours instead
        (ten records refused one after another would be ten reads of the site).
        `wait=False` (a record whose booked slot has come): no waiting, a late send
        would bunch with the next slot's."""
        # no longer than a short wait is slept: then ask the limiter (or re-arm) anyway
        end = time.monotonic() + (
            min(
                self.svc.settings.shaping_inline_wait_seconds,
                max(0.0, self.time_left() - self.svc.settings.min_time_left_seconds),
            )
            if wait
            else 0.0
        )
        with self._free:
            while True:
                idle = self._idle.get(site)
                if idle:
                    return idle.pop(), False
                shaper = self.svc.shaper
                kept = shaper.reuse_kept(site, self.time_left() + 5) if shaper else None
                if kept is not None:  # a slot this container kept from an earlier invocation
                    self._note_slot_locked(site, kept)
                    return kept, False
                left = end - time.monotonic()
                mine = self._held_slots.get(site, 0) > 0
                if left <= 0 or not (site in self._asking or (site in self._full and mine)):
                    if left > 0:
                        self._asking.add(site)
                    return Shaper.new_holder(), left > 0
                self._free.wait(min(left, 1.0))

    def _wait_holder(self, site: str, seconds: float) -> str | None:
        """When the site's connections are all taken and this invocation holds some: one
        of ours, given back by a record that has finished (None after `seconds`)."""
        end = time.monotonic() + seconds
        with self._free:
            while not self._idle.get(site):
                left = end - time.monotonic()
                if self._held_slots.get(site, 0) == 0 or left <= 0:
                    return None
                self._free.wait(left)
            return self._idle[site].pop()

    def _note_slot(self, site: str, holder: str) -> None:
        with self._lock:
            self._note_slot_locked(site, holder)

    def _note_slot_locked(self, site: str, holder: str) -> None:
        if (site, holder) not in self._sites:
            self._sites.add((site, holder))
            self._held_slots[site] = self._held_slots.get(site, 0) + 1

    def _give_back_holder(self) -> None:
        """The record is done with its connection slot: another record may use it; at a
        site of one or two connections, the site's other senders (`_at_once`)."""
        using: tuple[str, str] | None = getattr(self._lane, "using", None)
        if using is None:
            return
        self._lane.using = None
        shaper = self.svc.shaper
        if shaper is not None and _at_once(shaper.limits(using[0])):
            with self._free:
                if using in self._sites:
                    self._sites.discard(using)
                    self._held_slots[using[0]] -= 1
                self._free.notify_all()
            try:
                shaper.release(*using)
            except MailqueueError:  # the slot's lease expires by itself
                log.warning("slot release failed", extra={"site": using[0]})
            return
        with self._free:
            self._idle.setdefault(using[0], []).append(using[1])
            self._free.notify_all()

    # -------------------------------------------------------------- a batch at once
    async def handle_async(
        self, body: str, receipt_handle: str | None, source: str | None = None
    ) -> str:
        """`handle` on one of the invocation's lanes, awaited: Powertools' async batch
        processor gathers a batch's records, so they are delivered at once (the SMTP work
        is blocking I/O, in threads). The caller's context variables go along."""
        loop = asyncio.get_running_loop()
        ctx = contextvars.copy_context()
        return await loop.run_in_executor(
            self._lanes, ctx.run, self.handle, body, receipt_handle, source
        )

    def handle_all(
        self, records: Sequence[tuple[str, str | None, str | None]]
    ) -> list[str | Exception]:
        """Each record's outcome (what `handle` returned or raised), the records run at
        once on the lanes: the in-process workers' batch handler (the Lambda's goes
        through `handle_async`)."""
        if self._lanes is None:
            futures = None
        else:
            futures = [self._lanes.submit(self._in_context(*r)) for r in records]
        out: list[str | Exception] = []
        for i, r in enumerate(records):
            try:
                out.append(futures[i].result() if futures is not None else self.handle(*r))
            except Exception as e:  # noqa: BLE001 - the record's outcome, reported as failed
                out.append(e)
        return out

    def _in_context(
        self, body: str, receipt_handle: str | None, source: str | None
    ) -> Callable[[], str]:
        """`handle` of one record, to run on a lane in the caller's context variables."""
        ctx = contextvars.copy_context()
        return lambda: ctx.run(self.handle, body, receipt_handle, source)

    # -------------------------------------------------------------- per record
    def handle(self, body: str, receipt_handle: str | None, source: str | None = None) -> str:
        """Process one trigger; returns what happened (for logs and tests). `source`: where
        the record came from (an eventSourceARN on AWS: the transactional or the bulk queue,
        where its receipt is valid; the triggers port names the queue)."""
        ref = parse_trigger(body)
        st = self.svc.storage
        now = self.svc.clock()
        queue = self.svc.triggers.queue_of(source)  # where this receipt is valid
        claim = st.send_start(
            ref, now, lease_seconds=self.svc.settings.lease_seconds, receipt_handle=receipt_handle
        )
        if not isinstance(claim, Claim):
            if claim.reason == "not_due" and claim.next_attempt_at is not None:
                # early receipt (SQS delay cap, or a re-arm hop): wait, do not attempt
                self.stats.add("rearmed")
                if receipt_handle:
                    wait = int((claim.next_attempt_at - now).total_seconds()) + 1
                    self.svc.triggers.rearm(receipt_handle, wait, queue=queue)
                    raise KeepMessage(f"not due for {wait}s")
                return "not_due"
            self.stats.add("lost_claims")
            log.info("claim skipped", extra={"mail_id": ref.mail_id, "reason": claim.reason})
            if claim.reason == "claimed" and receipt_handle:
                # A copy of a live trigger (SQS delivers at least once): its message is
                # the holder's, which re-arms it by ChangeMessageVisibility on its own
                # receipt. Deleting it (a success) after that re-arm left the group
                # without a trigger until the sweeper (issue 43 item 14): leave it as it
                # is instead; the holder's visibility stands, and if the holder dies it
                # comes back and claims once the lease is over.
                raise KeepMessage("claimed by another invocation: trigger left in place")
            return f"skipped:{claim.reason}"
        claim.receipt_queue = queue
        self.stats.add("groups")
        try:
            return self._attempt(claim)
        finally:
            self._give_back_holder()

    def _attempt(self, claim: Claim) -> str:
        st = self.svc.storage
        group = claim.group
        now = self.svc.clock()
        age = now - group.arrival
        if age > self.svc.policy.maximal_queue_lifetime:
            last = next((r.last_result for r in group.pending() if r.last_result), None)
            res = expired(last, self.svc.policy.maximal_queue_lifetime)
            st.drop(claim, {r.rid: res for r in group.pending()})
            self.stats.add("bounced", len(group.pending()))
            return "expired"
        if self.time_left() < self.svc.settings.min_time_left_seconds:
            st.send_cancel(claim)
            self.stats.add("handed_back")
            raise KeepMessage("not enough time left; handed back")

        moved = self._pool_gate(claim)
        if moved is not None:
            return moved
        held = self._held(claim, None)
        if held is not None:
            return held
        hops = self._route(group.key.split("#", 1)[0])
        if isinstance(hops, Result):
            return self._record(claim, {r.rid: hops for r in group.pending()}, None)
        throttled = self._shape(claim, group.key.split("#", 1)[0], hops)
        if throttled is not None:
            return throttled
        throttled = self._pool_total(claim)
        if throttled is not None:
            return throttled
        spent = self._warmup(claim, hops)
        if spent is not None:
            return spent
        if not self.svc.pools.single or self.svc.pool.warmup is not None:
            # the pool that sends: its events name it, the guard counts its results
            # under it (a warming pool's ramp holds on them, warmup.py)
            claim.sending_pool = self.svc.pool.name
        try:
            mail = st.read_inflight(claim)
        except NotFound:
            # The content vanished under a live group: never silently drop; bounce so the
            # sender learns of it (a DSN without returned content).
            lost = Result(0, "5.3.0", "message content unavailable in the queue")
            return self._record(claim, {r.rid: lost for r in group.pending()}, None)
        loop = self._loop_check(mail.content)
        if isinstance(loop, Result):
            return self._record(claim, {r.rid: loop for r in group.pending()}, None)
        loop, added = self._list_unsubscribe(loop, group)  # before DKIM: the fields are signed
        signed = self._sign(loop, group.sender, added)
        if isinstance(signed, Result):
            return self._record(claim, {r.rid: signed for r in group.pending()}, None)
        body, size = signed if signed is not None else (loop, mail.size + added)
        mail_from = self._mail_from(group)
        if isinstance(mail_from, Result):
            body.close()
            return self._record(claim, {r.rid: mail_from for r in group.pending()}, None)
        try:
            outcome = self.client.deliver(
                hops,
                mail_from,
                group.pending(),
                body,
                size,
                ret=group.ret,
                envid=group.envid,
                smtputf8=group.smtputf8,
                deadline=self.time_left,
                late=self._late_check(),
            )
        finally:
            loop.close()
        if outcome.missed_slot:
            return self._missed_slot(claim)
        results = self._backoff(claim, explain(hops, outcome.results), outcome)
        return self._record(claim, results, outcome)

    # ------------------------------------------------------------------ shaping
    def _shape(self, claim: Claim, domain: str, hops: list[Hop]) -> str | None:
        """Before connecting: the site's shared budget (shaping.py). Short waits are slept;
        out of budget is not an attempt: the group goes back to the queue for the time the
        limiter says, with no connection, no attempt and no event (a counter only)."""
        self._lane.slot = None  # no send time yet (`_late_check`)
        shaper = self.svc.shaper
        if shaper is None:
            return None
        # the limiter's key: the site, per egress pool ("<pool>|<site>"; pools.py)
        site = shaping_key(
            self.svc.pool.name, shaper.site_for(domain, lambda: [h.host for h in hops])
        )
        claim.site = site
        held = self._held(claim, site)
        if held is not None:
            return held
        inline = self.svc.settings.shaping_inline_wait_seconds
        book = self.svc.settings.shaping_book_slots
        previous = Reservation.decode(claim.group.reservation)
        booked = previous if book else None
        # a send given up at MAIL FROM for its missed slot (`_missed_slot`: a booking at
        # 0) is not checked there again at this attempt: a site whose connection alone
        # outlasts the tolerance (a greeting delay) would never be sent to
        recheck = not (
            previous is not None
            and previous.at == 0
            and previous.site == site
            and previous.attempts == claim.group.attempts
        )
        if booked is not None and not (
            booked.site == site
            and booked.attempts == claim.group.attempts
            and not shaper.late_by(site, booked.at)
        ):
            # another site, a later attempt, or missed (back later than the slot and a
            # small tolerance: sent now it would bunch with the on-time sends after it):
            # book afresh
            booked = None
        record = f"{claim.group.mail_id}/{claim.group.key}"  # its shard at a sharded site
        # a record about to book announces itself before it waits for a holder: the
        # record asking first books for it in the same write (Shaper.announce)
        announced = book and booked is None
        if announced:
            shaper.announce(site)
        try:
            holder, asking = self._holder_for(site)
        except BaseException:
            if announced:
                shaper.withdraw(site)
            raise
        while True:
            got = (
                shaper.redeem(site, holder, booked.at)
                if booked is not None
                else shaper.admit(site, holder, 1, reserve=book, announced=announced, record=record)
            )
            announced = False  # an admit after a wait announces itself
            if asking:
                asking = False
                with self._free:
                    self._asking.discard(site)
                    if isinstance(got, Wait) and got.reason == "connections":
                        self._full.add(site)
                    self._free.notify_all()
            if isinstance(got, Wait) and got.reason == "connections":
                mine = self._wait_holder(
                    site, min(got.seconds, self.svc.settings.shaping_inline_wait_seconds)
                )
                if mine is not None:  # one of this invocation's slots came free
                    holder = mine
                    continue
                if booked is not None and got.slot and _at_once(shaper.limits(site)):
                    # its slot has come and the site's one or two connections are in use:
                    # they are given back as their sends end (`_at_once`), so ask again
                    # shortly, until the slot is missed (then it books afresh: `late`)
                    time.sleep(_CONNECTION_RETRY)
                    continue
            if isinstance(got, Wait) and got.slot:
                booked = Reservation(site, got.slot, claim.group.attempts)
                if shaper.holds_slot(site, holder):  # booked with a connection slot
                    self._note_slot(site, holder)
                    self._lane.using = (site, holder)  # given back if we re-arm
            elif isinstance(got, Wait):
                booked = None
            if isinstance(got, Permit):
                self._note_slot(site, holder)
                self._lane.using = (site, holder)
                # the time this send is for: its booked slot, or now for a grant; the
                # SMTP client asks `_late_check`'s predicate just before MAIL FROM
                if recheck:
                    self._lane.slot = (site, booked.at if booked is not None else shaper.clock())
                # the rules' limits: a site whose connections are counted by time has
                # its connection limit folded into the permit's rate (Shaper.timed), and
                # its connection must close after its one transaction all the same
                rules = shaper.limits(site)
                per_conn = 1 if _at_once(rules) else rules.max_messages_per_connection
                if per_conn and self.client.pool is not None:
                    for h in hops:
                        self.client.pool.per_key_max[h.pool_key] = per_conn
                return None
            if got.seconds > inline or (
                self.time_left() - got.seconds < self.svc.settings.min_time_left_seconds
            ):
                break
            if (
                booked is not None
                and shaper.limits(site).max_connections is not None
                and not shaper.holds_slot(site, holder)
            ):
                # wait for the booked slot without a holder: when it comes, use a holder
                # of this invocation that another record has finished with (one connection
                # slot for records whose slots follow one another), else ask for one
                time.sleep(got.seconds)
                holder, asking = self._holder_for(site, wait=False)
                continue
            time.sleep(got.seconds)
        self.stats.add("throttled")
        self.stats.add("groups", -1)  # claimed, but not an attempt
        key = f"Throttled_{got.reason}"
        self.stats.add_extra(key)
        if booked is not None:
            # back one to two seconds before its own slot (SQS counts whole seconds),
            # then the rest is slept: the group is re-armed once and sends on its slot.
            # The second of lead is for a loaded machine's slow claim: a group back
            # after its slot and the tolerance books again (Shaper.late_by), and within
            # a second of its slot it missed it often at load 15 (4/s read 2.4/s)
            lead = max(0.0, min(1.0, inline - 1.0))
            wait = max(1, math.floor(got.seconds - lead))
        else:
            wait = max(1, math.ceil(got.seconds + self.svc.rng.uniform(0, 1)))
        self.svc.storage.postpone(
            claim, wait, reservation=booked.encode() if booked is not None else None
        )
        log.info("site out of budget", extra={"site": site, "reason": got.reason, "wait": wait})
        if claim.receipt_handle:
            raise KeepMessage(f"site {site} {got.reason}: back in {wait}s")
        return "throttled"

    def _late_check(self) -> Callable[[], bool] | None:
        """What the SMTP client asks just before MAIL FROM: whether this record's shaping
        slot has been missed by more than the tolerance (`Shaper.late_by`). Asked at
        `_shape` only, a send could still come late by the tolerance plus what follows
        it: the pool total, the content read, DKIM, connect, EHLO and STARTTLS (1 refusal
        in 30 from Postfix's anvil at load 2.9, issue 40). None: not shaped."""
        shaper = self.svc.shaper
        slot: tuple[str, float] | None = getattr(self._lane, "slot", None)
        self._lane.slot = None
        if shaper is None or slot is None:
            return None
        site, at = slot
        return lambda: shaper.late_by(site, at)

    def _missed_slot(self, claim: Claim) -> str:
        """The slot passed before MAIL FROM and nothing was sent (`_late_check`): the
        group goes back untried, as a throttled one, and books a fresh slot when it
        comes back. Not an attempt: no result, no event, a counter. Once per attempt: the
        booking it carries back (at 0) says so, and the next send is not checked. A warm-up
        unit taken for it stays spent (the pool sends fewer than its budget, never more)."""
        self._give_back_holder()
        self.stats.add("throttled")
        self.stats.add("groups", -1)  # claimed, but not an attempt
        self.stats.add_extra("Throttled_late")
        missed = Reservation(claim.site or "", 0.0, claim.group.attempts)
        self.svc.storage.postpone(claim, 1, reservation=missed.encode())
        log.info("site slot missed before MAIL FROM", extra={"site": claim.site, "wait": 1})
        if claim.receipt_handle:
            raise KeepMessage(f"site {claim.site} slot missed: back in 1s")
        return "throttled"

    # ------------------------------------------------------------------ egress pools
    def _pool_total(self, claim: Claim) -> str | None:
        """The pool's `max_per_second` over every site (pools.py), after the site said
        yes: one more limiter key, "<pool>|*", shared by every delivery of the pool.
        Short waits are slept; longer, the group goes back untried (as a site's)."""
        shaper, pool = self.svc.shaper, self.svc.pool
        if shaper is None or pool.max_per_second is None:
            return None
        key = total_key(pool.name)
        record = f"{claim.group.mail_id}/{claim.group.key}"
        while True:
            got = shaper.admit(key, "total", 1, record=record)
            if isinstance(got, Permit):
                return None
            if got.seconds > self.svc.settings.shaping_inline_wait_seconds or (
                self.time_left() - got.seconds < self.svc.settings.min_time_left_seconds
            ):
                break
            time.sleep(got.seconds)
        self._give_back_holder()
        self.stats.add("throttled")
        self.stats.add("groups", -1)  # claimed, but not an attempt
        self.stats.add_extra(f"Throttled_pool_{got.reason}")
        wait = max(1, math.ceil(got.seconds + self.svc.rng.uniform(0, 1)))
        self.svc.storage.postpone(claim, wait)
        log.info("pool out of budget", extra={"pool": pool.name, "wait": wait})
        if claim.receipt_handle:
            raise KeepMessage(f"pool {pool.name} {got.reason}: back in {wait}s")
        return "throttled"

    def _pool_gate(self, claim: Claim) -> str | None:
        """The group's egress pool (its `mailqueue:pool` tag) against this function's:
        ours (or one whose warm-up overflows to ours) goes on; another pool's trigger is
        handed to that pool's queue; a pool paused or missing keeps the mail waiting with
        a DeliveryDelay saying why (nothing refused, nothing sent from a wrong address)."""
        cfg, mine = self.svc.pools, self.svc.pool
        name = claim.group.pool or cfg.default
        pool = cfg.get(name)
        if pool is None:
            return self._pool_wait(claim, "PoolMissing", f"egress pool {name} is not configured")
        if pool.name != mine.name:
            overflow = pool.warmup.overflow if pool.warmup is not None else None
            if overflow == mine.name:
                self.stats.add_extra("PoolOverflowTaken")
                return None
            if pool.name not in self.svc.pool_queues:  # nobody here sends for it
                return self._pool_wait(
                    claim, "PoolMissing", f"egress pool {name} has no delivery queue"
                )
            return self._hand_to(claim, pool.name, "PoolHandedOver")
        if mine.paused:
            return self._pool_wait(claim, "PoolPaused", f"egress pool {name} is paused")
        return None

    def _hand_to(self, claim: Claim, pool: str, metric: str) -> str:
        """Give the claim back with a fresh trigger on `pool`'s queue (this record is then
        deleted): the group is attempted by that pool's delivery, from its addresses."""
        self.stats.add("groups", -1)
        self.stats.add_extra(metric)
        claim.receipt_handle = None  # no re-arm here: a new trigger, on the pool's queue
        claim.hand_to = pool
        self.svc.storage.send_cancel(claim)
        log.info("handed to its egress pool", extra={"pool": pool})
        return f"pool:{pool}"

    def _pool_wait(self, claim: Claim, metric: str, reason: str, until: float | None = None) -> str:
        """The group waits (a DeliveryDelay event with `reason`, a metric): a paused or
        missing pool is rechecked after suspension_recheck_seconds, a spent warm-up
        budget at `until` (the next UTC day, spread over its first ten minutes)."""
        self.stats.add("groups", -1)  # claimed, but not an attempt
        self.stats.add_extra(metric)
        now = self.svc.clock()
        if until is None:
            at = now + timedelta(seconds=self.svc.settings.suspension_recheck_seconds)
        else:
            at = datetime.fromtimestamp(until + self.svc.rng.uniform(0, 600), now.tzinfo)
        # postponed, not rescheduled: the attempts stay as they were (a wait for the
        # pool is not a delivery attempt, so it never brings the mail nearer a bounce);
        # the reason is kept as the group's `wait`, which the event log makes a
        # DeliveryDelay of (eventlog.derive_events)
        try:
            seconds = max(1, math.ceil((at - now).total_seconds()))
            self.svc.storage.postpone(claim, seconds, wait=Result(0, "4.4.5", reason))
        except LeaseLost:
            self.stats.add("lost_claims")
            return "lease_lost"
        log.info("waits for its egress pool", extra={"reason": metric})
        if claim.receipt_handle:
            raise KeepMessage(f"{reason}: back at {at.isoformat()}")
        return "pool_wait"

    def _warmup(self, claim: Claim, hops: list[Hop]) -> str | None:
        """The pool's warm-up budget for today (warmup.py), after the limiter said yes:
        spent, the mail overflows to the pool the schedule names or waits for tomorrow."""
        gate = self.svc.warmup
        if gate is None:
            return None
        cfg = self.svc.pools
        pool = cfg.get(claim.group.pool or cfg.default) or self.svc.pool
        if pool.name != self.svc.pool.name:  # taken as overflow: the budget is ours
            pool = self.svc.pool
        if pool.warmup is None:
            return None
        if claim.site is not None:  # the limiter's site
            site = split_key(claim.site)[1]
        else:
            site = self.svc.site_rules.site_of([h.host for h in hops])
        spent = gate.admit(pool, site)
        if spent is None:
            self.stats.add_extra("WarmupSent")
            return None
        self._give_back_holder()
        if (
            spent.overflow is not None
            and claim.group.pool != spent.overflow
            and (spent.overflow in self.svc.pool_queues or spent.overflow == self.svc.pools.default)
        ):
            return self._hand_to(claim, spent.overflow, "WarmupOverflow")
        return self._pool_wait(claim, "WarmupDeferred", spent.reason, spent.until)

    def _held(self, claim: Claim, site: str | None) -> str | None:
        """An operator suspension of the group's domain, sender domain or site: re-armed
        for its remaining time (at most suspension_recheck_seconds), not an attempt."""
        group = claim.group
        s = self.svc.suspensions.find(
            domain=group.key.split("#", 1)[0],
            sender_domain=group.sender.rpartition("@")[2],
            site=split_key(site)[1] if site is not None else None,
            principal=group.principal,
            pool=self.svc.pool.name,
        )
        if s is None:
            return None
        self.stats.add("groups", -1)  # claimed, but not an attempt
        key = f"Suspended_{s.scope}"
        self.stats.add_extra(key)
        left = s.until - self.svc.clock().timestamp()
        wait = max(1, min(math.ceil(left), self.svc.settings.suspension_recheck_seconds))
        self.svc.storage.postpone(claim, wait)
        log.info("suspended by an operator", extra={"scope": s.scope, "wait": wait})
        if claim.receipt_handle:
            raise KeepMessage(f"{s.scope} suspended: back in {wait}s")
        return "suspended"

    def _backoff(
        self, claim: Claim, results: dict[str, Result], outcome: DeliveryOutcome
    ) -> dict[str, Result]:
        """On each reply: the backoff rules act on the site (suspend, slow down) and may
        turn a permanent reply known to be temporary at that site into a deferral."""
        shaper, site = self.svc.shaper, claim.site
        if shaper is None or site is None:
            return results
        seen: set[str] = set()
        for reply in dict.fromkeys([*outcome.hop_failures, *results.values()]):
            rule = shaper.backoff.match(site, reply)
            if rule is None or rule.id in seen:
                continue
            seen.add(rule.id)
            shaper.on_reply(site, reply)
            claim.shaping = f"{rule.id}:{'+'.join(rule.actions)}"
            for action in rule.actions:
                key = f"Backoff_{action}"
                self.stats.add_extra(key)
            if rule.reclassify:
                results = {
                    rid: reclassified(r, rule) if rule.matches(site, r) else r
                    for rid, r in results.items()
                }
        return results

    def release_sites(self) -> None:
        """End of invocation: give back connection slots; count the shaping requests;
        write the reputation counts (reputation.py)."""
        self._reputation()
        shaper = self.svc.shaper
        if shaper is None:
            return
        for site, holder in self._sites:
            try:
                # kept for the next invocation where the site can spare it (Shaper.release);
                # never at a site that refused this invocation a slot
                shaper.release(site, holder, keep=site not in self._full)
            except MailqueueError:  # the slot's lease expires by itself
                log.warning("slot release failed", extra={"site": site})
        self.stats.add_extra("ShapingRequests", shaper.store.requests - self._shaping_requests)

    def _reputation(self) -> None:
        """One write per principal / sender domain for the whole invocation; a pause is a
        suspension (re-read at once here, so the rest of the queue waits too)."""
        guard = self.svc.reputation
        if guard is None:
            return
        try:
            judged = guard.flush()
        except MailqueueError:  # the counts are lost, never a result
            log.warning("reputation counters not written")
            return
        for st in judged:
            for name, rate in (
                ("BounceRate", st.bounce_rate),
                ("ComplaintRate", st.complaint_rate),
            ):
                key = f"Reputation{name}Max"
                self.stats.rates[key] = max(self.stats.rates.get(key, 0.0), 100.0 * rate)
            if st.verdict in ("review", "pause"):
                key = f"Reputation_{st.verdict}"
                self.stats.extra[key] = self.stats.extra.get(key, 0) + 1
        if any(st.verdict == "pause" for st in judged):
            self.svc.suspensions.forget()

    def _list_unsubscribe(self, content: HeaderPeek, group: Group) -> tuple[HeaderPeek, int]:
        """RFC 8058 fields for bulk (or asked-for) mail to one recipient (unsubscribe.py):
        the content with them on top, and how many octets they add."""
        s = self.svc.settings
        pending = group.pending()
        keys = self.svc.unsub_keys
        if keys is None or len(pending) != 1 or not unsub.wanted(group.tags):
            return content, 0
        if unsub.has_field(content.head, b"List-Unsubscribe"):
            return content, 0  # the sender runs its own
        scope = unsub.scope_of(group.tags, group.sender)
        if scope is None:
            return content, 0
        token = unsub.make_token(
            keys,
            unsub.Unsubscription(
                group.mail_id,
                pending[0].address,
                scope[0],
                scope[1],
                int(self.svc.clock().timestamp() // 86400),
                keys.current,
            ),
        )
        url = f"{s.list_unsubscribe_url.rstrip('/')}/u/{token}"
        eol = b"\r\n" if b"\r\n" in content.head else b"\n"
        fields = unsub.header_fields(url, s.list_unsubscribe_mailto, eol)
        head = content.read(len(content.head))  # consumed: served again after the fields
        self.stats.extra["ListUnsubscribe"] = self.stats.extra.get("ListUnsubscribe", 0) + 1
        return HeaderPeek(fields + head, cast(BinaryIO, content)), len(fields)

    def _loop_check(self, content: BinaryIO) -> HeaderPeek | Result:
        """Count the hops before connecting anywhere: a looping mail is bounced 5.4.6 here
        (RFC 3463: routing loop detected) instead of going round again. Returns the
        content, still whole, to send."""
        try:
            head, stream = peek_header(content)
        except (OSError, ValueError) as exc:  # a content stream's errors, as the SMTP client
            close = getattr(content, "close", None)
            if close is not None:
                close()
            return Result(0, "4.3.0", f"cannot read message content: {type(exc).__name__}")
        hops = count_received(head)
        limit = self.svc.settings.hopcount_limit
        if hops <= limit:
            return stream
        stream.close()
        log.warning("routing loop", extra={"hops": hops, "limit": limit})
        return Result(0, "5.4.6", f"routing loop detected: {hops} Received: fields (limit {limit})")

    def _sign(
        self, content: HeaderPeek, sender: str, added: int = 0
    ) -> tuple[io.BytesIO, int] | Result | None:
        """DKIM-sign this attempt's bytes (dkim.py says why here): the signed wire form
        and its size, None when the mail is not signed, or a temporary failure when a
        configured key cannot be had (the mail waits for the operator, never goes out
        unsigned by accident). The From field is looked for as ingress looked for it:
        the one header limit over the stored bytes (`added`: the fields put in front)."""
        signer = self.svc.signer
        if signer is None:
            return None
        from_domain = dkim_from_domain(header_section(content.head, HEADER_SCAN_LIMIT + added))
        if signer.config.signing_domain(from_domain, not sender) is None:
            return None
        try:
            data = content.read()
        except (OSError, ValueError) as exc:
            return Result(0, "4.3.0", f"cannot read message content: {type(exc).__name__}")
        finally:
            content.close()
        try:
            signed, sigs = signer.sign(data, from_domain=from_domain, null_sender=not sender)
        except KeyUnavailable as e:
            log.error("dkim key unavailable", extra={"reason": str(e)})
            return Result(0, "4.7.0", f"DKIM signing key unavailable: {e}")
        except Unsignable as e:
            log.warning("dkim: mail cannot be signed, sent unsigned", extra={"reason": str(e)})
            signed, sigs = wire_form(data), []
        log.debug("dkim signed", extra={"signatures": [f"{s.domain}/{s.selector}" for s in sigs]})
        return io.BytesIO(signed), len(signed)

    def _mail_from(self, group: Group) -> str | Result:
        """The envelope sender of this transaction: a VERP return path (returnpath.py)
        or the sender; a temporary failure when the keys cannot be read."""
        try:
            return self.svc.return_paths.mail_from(
                group.sender, group.mail_id, [r.rid for r in group.pending()], group.principal
            )
        except KeysUnavailable as e:
            log.error("return path keys unavailable", extra={"reason": str(e)})
            return Result(0, "4.7.0", str(e))

    def _route(self, domain: str) -> list[Hop] | Result:
        cached = self._hops.get(domain)
        if cached is not None:
            return cached
        sts = self.svc.mta_sts
        route = self.svc.routes.lookup(domain) if self.svc.routes is not None else None
        # the recipient domain's MTA-STS policy, unless a relay or an address literal
        use_sts = sts is not None and not (route and route.host) and not domain.startswith("[")
        if self.svc.dane_resolver is not None and not (route and route.host):
            dane = self._dane(domain)  # RFC 8461 §2: DANE before MTA-STS
            if dane is not None:
                self._hops[domain] = dane
                return dane
        entry = sts.discover(domain) if sts is not None and use_sts else None
        enforced = entry is not None and entry.policy.mode is Mode.ENFORCE
        try:
            value: list[Hop] | Result = resolve_next_hops(
                domain,
                self.svc.routes,
                self.svc.resolver,
                rng=self.svc.rng,
                port=self.svc.settings.mx_port,
                guard=self.svc.guard,
                mx_filter=entry.policy.matches if entry is not None and enforced else None,
            )
        except NextHopError as e:
            value = e.result
        if sts is not None and use_sts and not isinstance(value, Result):
            value = sts.apply_entry(entry, value)
        self._hops[domain] = value
        return value

    def _dane(self, domain: str) -> list[Hop] | Result | None:
        """The domain's hops under DANE (routing.with_dane), or None when DANE does not apply."""

        if domain.startswith("[") or self.svc.dane_resolver is None:
            return None
        try:
            hops = resolve_next_hops(
                domain,
                self.svc.routes,
                self.svc.resolver,
                rng=self.svc.rng,
                port=self.svc.settings.mx_port,
                guard=self.svc.guard,
            )
        except NextHopError as e:
            return e.result
        return with_dane(self.svc.dane_resolver, domain, hops)

    def _record(
        self, claim: Claim, results: dict[str, Result], outcome: DeliveryOutcome | None
    ) -> str:
        """Record per-recipient results: delivered first, then bounced, then deferred."""
        st = self.svc.storage
        tls = bool(outcome and outcome.tls)
        group = claim.group
        pending = {r.rid: r for r in group.pending()}
        missing = set(pending) - set(results)
        if missing:  # the client answers every rid; be safe rather than lose one
            results = {
                **results,
                **{rid: Result(0, "4.3.0", "no result recorded") for rid in missing},
            }
        ok = {rid: r for rid, r in results.items() if r.success}
        perm = {rid: r for rid, r in results.items() if r.permanent}
        temp = {rid: r for rid, r in results.items() if rid not in ok and rid not in perm}
        try:
            if ok:
                by_result: dict[Result, list[str]] = {}
                for rid, r in ok.items():
                    by_result.setdefault(r, []).append(rid)
                for r, rids in by_result.items():
                    st.send_done(claim, rids, r, tls=tls)
                self.stats.add("delivered", len(ok))
            now = self.svc.clock()
            attempts = max((pending[rid].attempts for rid in temp), default=0) + 1
            delay = backoff(attempts, now - group.arrival, self.svc.policy) if temp else None
            if temp and delay is None:
                last = next(iter(temp.values()))
                res = expired(last, self.svc.policy.maximal_queue_lifetime)
                perm.update({rid: res for rid in temp})
                temp = {}
            if self.svc.reputation is not None:
                origin = None
                if ok:  # a delivered recipient may complain or bounce later
                    origin = Origin(
                        group.mail_id,
                        group.principal,
                        group.sender,
                        group.arrival.timestamp(),
                        pool=claim.sending_pool or "",
                    )
                self.svc.reputation.note(
                    group.principal,
                    group.sender,
                    counts_of({**ok, **perm}),
                    claim.sending_pool or "",  # the pool that sent (warmup.py holds on it)
                    origin=origin,
                )
            if perm:
                st.drop(claim, perm, tls=tls)
                self.stats.add("bounced", len(perm))
                self._suppress(group, {pending[rid].address: r for rid, r in perm.items()})
            if temp:
                assert delay is not None
                warn = delay_warning_due(
                    now - group.arrival,
                    self.svc.policy,
                    all(pending[rid].delay_warned for rid in temp),
                )
                st.reschedule(claim, temp, now + delay, delay_warning=warn, tls=tls)
                self.stats.add("deferred", len(temp))
                if claim.receipt_handle:
                    raise KeepMessage(f"deferred {int(delay.total_seconds())}s")
                return "deferred"
        except LeaseLost:
            # our lease expired and another attempt took over: it will record its own results
            log.warning("lease lost while recording", extra={"mail_id": group.mail_id})
            self.stats.add("lost_claims")
            return "lease_lost"
        return "bounced" if perm and not ok else ("partial" if perm else "delivered")

    def _suppress(self, group: Group, bounced: dict[str, Result]) -> None:
        """Hard bounces go on the suppression list (after the bounce is recorded: a
        failure here loses an entry, never a result or a DSN)."""
        store = self.svc.suppression
        if store is None:
            return
        entries = from_bounces(
            bounced,
            self.svc.suppress_statuses,
            now=self.svc.clock().timestamp(),
            ttl_seconds=self.svc.settings.suppression_ttl_days * 86400.0,
            source=group.mail_id,
        )
        if not entries:
            return
        try:
            store.put_many(entries)
        except MailqueueError:
            log.warning("could not add to the suppression list", extra={"count": len(entries)})
            return
        self.stats.add_extra("Suppressed", len(entries))
        log.info("suppressed", extra={"mail_id": group.mail_id, "count": len(entries)})


def parse_trigger(body: str) -> MailRef:
    try:
        data = json.loads(body)
        return MailRef(mail_id=str(data["mail_id"]), group=str(data["group"]))
    except (ValueError, KeyError, TypeError) as e:
        raise PoisonMessage("unreadable trigger message") from e
