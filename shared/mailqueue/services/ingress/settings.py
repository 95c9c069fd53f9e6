"""Ingress settings: one typed dataclass, validated at start (fail fast, never per request)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from mailqueue.core.authz import SenderPolicy, parse_principals
from mailqueue.core.config import ConfigError, StorageSettings, settings_from_env
from mailqueue.core.trace import TRACE_RESERVE
from mailqueue.core.verp import ReturnPathPolicy
from mailqueue.outbound.dkim import DkimConfig, DkimError
from mailqueue.outbound.pools import PoolConfig, load_pools
from mailqueue.outbound.reputation import Thresholds
from mailqueue.outbound.routing import RoutingConfigError, RoutingTable, check_receiving_routes
from mailqueue.outbound.suppression import SUPPRESSION_POLICIES

VERDICT_POLICIES = ("reject", "accept")
# the largest batch body: Lambda's synchronous payload limit (6 MB for the whole event)
# holds a 4 MiB body even when API Gateway passes it base64 encoded (× 4/3), with room
# for the event's headers and context; API Gateway's own 10 MB limit is further away
MAX_BATCH_BODY = 4 * 1024 * 1024
_DOMAIN_RE = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)(?:\.(?!-)[a-z0-9-]{1,63}(?<!-))+$")


def _split(value: Any) -> tuple[str, ...]:
    """Lists arrive from the environment as one string: comma or whitespace separated."""
    if isinstance(value, str):
        return tuple(p for p in re.split(r"[\s,]+", value) if p)
    return tuple(str(v) for v in value)


@dataclass(frozen=True, slots=True)
class IngressSettings:
    """What ingress accepts. Env vars: ``MQ_<FIELD>`` (lists comma separated).

    `max_size` and `max_recipients` override the storage's own limits for everything
    ingress enqueues, so the two can never disagree.
    """

    storage: StorageSettings
    max_size: int = 40 * 1024 * 1024
    max_recipients: int = 1000
    # sender domains the HTTP API accepts from every caller (older form of sender_policy)
    allowed_sender_domains: tuple[str, ...] = ()
    # per principal (ARN pattern) the sender domains it may use: JSON, see mailqueue.core.authz;
    # with neither this nor allowed_sender_domains, every sender domain is refused
    sender_policy: str = ""
    # IAM principal ARNs allowed to submit with the null sender (DSN producers)
    null_sender_principals: tuple[str, ...] = ()
    # SES receipt: recipients outside these domains are dropped (no open relay)
    receiving_domains: tuple[str, ...] = ()
    ses_bucket: str = ""  # "" = the content bucket
    ses_prefix: str = "ses-inbound/"
    ses_delete_raw: bool = True  # the raw SES object is removed once the mail is queued
    spam_verdict: str = "reject"  # what a FAIL spam verdict does: reject | accept
    virus_verdict: str = "reject"  # what a FAIL virus verdict does: reject | accept
    routes: str = ""  # JSON routing table (mailqueue.outbound.routing), validated here at start
    upload_prefix: str = "uploads/"
    upload_expires: int = 900  # seconds a presigned upload URL stays valid
    max_delay_seconds: int = 30 * 86400  # how far in the future `not_before` may lie
    # POST /v1/messages/batch: at most this many mails per call, within this many octets
    # of request body (docs/ingress.md "Batch submission"). 50 mails of the bench's 10 KB
    # are ~0.7 MB of JSON, and at ~40 ms of AWS requests each about 2 s of a 30 s timeout
    max_batch: int = 50
    max_batch_body: int = MAX_BATCH_BODY
    # mails of a batch not started within this many seconds of the request's start are
    # answered 503 (not attempted, retryable): API Gateway gives up after 30 s, and a
    # storage outage makes every mail wait for its retries
    batch_time_budget: float = 20.0
    events_table: str = ""  # outbox table for Reject events; "" = the state table
    hostname: str = "mailqueue.invalid"  # the `by` of the Received: field ingress prepends
    # Received: of HTTP submissions without the client's IP address and IAM principal ARN
    # (a digest of the ARN stays, for correlation): on by default, as an operator of a
    # submission API does not expect account ids, role names and VPC addresses to reach
    # every recipient
    trace_private: bool = True
    # DKIM (mailqueue.outbound.dkim): which From domains are signed at delivery; with the policy
    # "refuse", a submission nothing would sign is refused here (422 dkim_unsigned_domain)
    dkim_domains: str = "{}"
    dkim_unsigned_policy: str = "send"
    dkim_host_domain: str = ""  # signs null-sender mail; empty: the hostname
    # the suppression list (mailqueue.outbound.suppression): "refuse" a submission naming a
    # suppressed recipient (422 recipient_suppressed); "bounce" it like Amazon SES: the
    # others are queued, each suppressed one bounces at once (Bounce event with subtype
    # OnAccountSuppressionList, a DSN to the sender as NOTIFY asks); "off" (no check)
    suppression: str = "refuse"
    # priority (mailqueue.core.model.Priority): callers (IAM principal ARN patterns) whose mail
    # is bulk: their default, and `"priority": "transactional"` from them is refused (403
    # priority_not_allowed), so a campaign sender cannot take the transactional path.
    # Everyone else defaults to transactional. Mail received through SES: ses_priority.
    bulk_principals: tuple[str, ...] = ()
    ses_priority: str = "transactional"
    # feedback (services/feedback): SES receipt for the bounce domains of this policy (the
    # delivery function's return_path_policy) is a report, read with these keys
    return_path_policy: str = ""
    return_path_keys: str = ""
    # reputation guards (outbound/reputation.py): complaints and late bounces received here
    # count against the mail's principal and sender domain; the delivery function's values
    reputation: bool = False
    reputation_thresholds: str = ""
    # egress pools (outbound/pools.py): the pools file (path, inline JSON, "" = the
    # packaged one pool); its routing policy chooses each mail's pool at enqueue
    pools: str = ""

    def __post_init__(self) -> None:
        for name in (
            "allowed_sender_domains",
            "receiving_domains",
        ):
            vals = tuple(v.lower().rstrip(".") for v in _split(getattr(self, name)))
            bad = [v for v in vals if not _DOMAIN_RE.match(v)]
            if bad:
                raise ConfigError(f"{name}: not a domain name: {bad[0]!r}")
            object.__setattr__(self, name, vals)
        principals = _split(self.null_sender_principals)
        if any(not p.startswith("arn:") for p in principals):
            raise ConfigError("null_sender_principals must be IAM principal ARNs")
        object.__setattr__(self, "null_sender_principals", principals)
        object.__setattr__(
            self, "bulk_principals", parse_principals(self.bulk_principals, "bulk_principals")
        )
        if self.ses_priority not in ("transactional", "bulk"):
            raise ConfigError("ses_priority must be transactional or bulk")
        self.senders()  # fail fast on a bad sender policy
        self.pool_config()  # a bad pools file refuses the start (file, place, reason)
        if not 0 < self.max_size <= 40 * 1024 * 1024:
            # the enqueue path holds the whole mail in memory (and SES receives at most 40 MB)
            raise ConfigError("max_size must be within 1..41943040")
        if self.max_recipients <= 0:
            raise ConfigError("max_recipients must be positive")
        for name in ("spam_verdict", "virus_verdict"):
            if getattr(self, name) not in VERDICT_POLICIES:
                raise ConfigError(f"{name} must be one of {', '.join(VERDICT_POLICIES)}")
        for name in ("ses_prefix", "upload_prefix"):
            value = getattr(self, name)
            if value and not value.endswith("/"):
                raise ConfigError(f"{name} must end with '/'")
        if self.suppression not in SUPPRESSION_POLICIES:
            raise ConfigError(f"suppression must be one of {', '.join(SUPPRESSION_POLICIES)}")
        if not self.upload_prefix:
            raise ConfigError("upload_prefix must not be empty")
        if self.upload_prefix == self.storage.content_prefix:
            raise ConfigError("upload_prefix must differ from the content prefix")
        if not 1 <= self.upload_expires <= 7 * 86400:
            raise ConfigError("upload_expires must be within 1..604800 seconds")
        if not 1 <= self.max_batch <= 500:
            raise ConfigError("max_batch must be within 1..500")
        if not 1024 <= self.max_batch_body <= MAX_BATCH_BODY:
            raise ConfigError(f"max_batch_body must be within 1024..{MAX_BATCH_BODY}")
        if not 0 < self.batch_time_budget <= 25:
            raise ConfigError("batch_time_budget must be within (0, 25] seconds")
        if self.max_delay_seconds < 0:
            raise ConfigError("max_delay_seconds must not be negative")
        if not _DOMAIN_RE.match(self.hostname.lower()):
            raise ConfigError("hostname must be a fully qualified host name")
        try:
            self.dkim()
        except DkimError as e:
            raise ConfigError(str(e)) from e
        Thresholds.parse(self.reputation_thresholds)  # fail fast on bad thresholds
        if self.return_path().enabled and not self.return_path_keys:
            raise ConfigError("return_path_policy is set but return_path_keys is empty")
        table = self.routing_table()  # fail fast on a bad routing table
        if self.receiving_domains:
            # mail for a receiving domain delivered by its MX (SES) comes back: a loop
            try:
                check_receiving_routes(table or RoutingTable({}), self.receiving_domains)
            except RoutingConfigError as e:
                raise ConfigError(f"routes: {e}") from e

    def return_path(self) -> ReturnPathPolicy:
        return ReturnPathPolicy.parse(self.return_path_policy)

    def pool_config(self) -> PoolConfig:
        return load_pools(self.pools)

    def senders(self) -> SenderPolicy:
        """Who may send as which domain: the policy plus allowed_sender_domains."""
        return SenderPolicy.parse(self.sender_policy) + SenderPolicy.for_domains(
            self.allowed_sender_domains
        )

    def dkim(self) -> DkimConfig:
        return DkimConfig.parse(
            self.dkim_domains, self.dkim_unsigned_policy, self.dkim_host_domain or self.hostname
        )

    def routing_table(self) -> RoutingTable | None:
        if not self.routes.strip():
            return None
        try:
            return RoutingTable.from_json(self.routes)
        except RoutingConfigError as e:
            raise ConfigError(f"routes: {e}") from e

    @property
    def enqueue_storage(self) -> StorageSettings:
        """The storage settings enqueue runs with: ingress's limits win. `max_size` bounds
        the client's octets; the stored mail may be larger by the Received: field."""
        return replace(
            self.storage,
            max_size=self.max_size + TRACE_RESERVE,
            max_recipients=self.max_recipients,
        )

    @property
    def inbound_bucket(self) -> str:
        return self.ses_bucket or self.storage.bucket

    @property
    def outbox_table(self) -> str:
        return self.events_table or self.storage.table


def ingress_settings_from_env(
    env: Mapping[str, str] | None = None, **explicit: Any
) -> IngressSettings:
    """Storage settings and ingress settings from ``MQ_*`` (explicit arguments win)."""
    storage = explicit.pop("storage", None) or settings_from_env(StorageSettings, env=env)
    return settings_from_env(IngressSettings, env=env, storage=storage, **explicit)
