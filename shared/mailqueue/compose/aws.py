"""Composition on AWS: the services of the core with their AWS adapters.

The only place (with the handlers that call it and the local wiring) where the
delivery, bounce and sweeper services meet `AwsStorage`, SQS and the DynamoDB stores.
Adapters are built only when the settings use them (cold start, and no client for a
feature that is off).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from mailqueue.backends.aws.backend import AwsStorage
from mailqueue.backends.aws.clients import make_clients
from mailqueue.backends.aws.ports import SqsBounces, SqsTriggers
from mailqueue.core.config import StorageSettings, settings_from_env
from mailqueue.core.model import utcnow

if TYPE_CHECKING:  # each function imports its own service: a handler loads only its own
    from mailqueue.outbound.dkim import KeySource
    from mailqueue.outbound.routing import CredentialsProvider
    from mailqueue.services.bounce import BounceService
    from mailqueue.services.delivery import DeliveryPorts, DeliveryService, DeliverySettings
    from mailqueue.services.sweeper import Sweeper, SweeperSettings


def delivery_ports(storage: AwsStorage, settings: DeliverySettings) -> DeliveryPorts:
    """SQS triggers and the stores in the state table, as `settings` need them."""
    from mailqueue.backends.aws.suspension_store import DynamoSuspensionStore
    from mailqueue.outbound.suppression import parse_statuses
    from mailqueue.services.delivery import DeliveryPorts

    ddb, table = storage.c.dynamodb, storage.s.table
    ports = DeliveryPorts(
        triggers=SqsTriggers(storage), suspensions=DynamoSuspensionStore(ddb, table)
    )
    extra: dict[str, Any] = {}
    if settings.mta_sts:
        from mailqueue.backends.aws.mtasts_cache import DynamoPolicyCache

        extra["mta_sts_cache"] = DynamoPolicyCache(ddb, table)
    if parse_statuses(settings.suppression_statuses):
        from mailqueue.backends.aws.suppression_store import DynamoSuppressionStore

        extra["suppression"] = DynamoSuppressionStore(ddb, table)
    if settings.shaping:
        from mailqueue.backends.aws.shaping_store import DynamoShapingStore

        extra["shaping"] = DynamoShapingStore(ddb, table)
    warming = any(p.warmup is not None for p in settings.pool_config().pools.values())
    feedback = bool(settings.list_unsubscribe_url or settings.return_path_policy)
    if settings.reputation or warming or feedback:
        # the counters, or only the origins late feedback needs (reputation.Origin); a
        # warming pool's ramp reads the guard's counts
        from mailqueue.backends.aws.reputation_store import (
            DynamoReputationStore,
            OutboxReputationEvents,
        )

        extra["reputation"] = DynamoReputationStore(ddb, table)
        extra["reputation_events"] = OutboxReputationEvents(ddb, table)
    if warming:
        from mailqueue.backends.aws.budget_store import DynamoBudgetCounters

        extra["budgets"] = DynamoBudgetCounters(ddb, table)
    if not extra:
        return ports
    from dataclasses import replace

    return replace(ports, **extra)


def delivery_service(settings: DeliverySettings, storage: AwsStorage, **kw: Any) -> DeliveryService:
    """`DeliveryService` on `storage` with the AWS ports (kw: the service's options) and
    the container's DNS cache (outbound/dnscache.py), built here once per container."""
    from mailqueue.services.delivery import DeliveryService

    kw.setdefault("pool_queues", tuple(storage.s.pool_queues()))
    kw.setdefault("dns_cache", settings.dns_cache())
    return DeliveryService(settings, storage, ports=delivery_ports(storage, settings), **kw)


def key_clients(storage: StorageSettings) -> dict[str, Any]:
    """Secrets Manager and SSM clients for an explicit endpoint; none (Powertools' own) in AWS."""
    if not storage.endpoint_url:
        return {}
    import boto3

    return {
        f"{name}_client": boto3.client(
            service, region_name=storage.region, endpoint_url=storage.endpoint_url
        )
        for name, service in (("secrets", "secretsmanager"), ("ssm", "ssm"))
    }


def _storage_from_env() -> AwsStorage:
    ss = settings_from_env(StorageSettings)
    return AwsStorage(ss, make_clients(region=ss.region, endpoint_url=ss.endpoint_url))


def delivery_service_from_env(
    credentials: CredentialsProvider | None = None,
    dkim_keys: KeySource | None = None,
    pool: str | None = None,
) -> DeliveryService:
    """The delivery function's service: settings from the environment; `pool`: the egress
    pool it sends for (the pool whose queue the records come from; None: MQ_POOL, else
    the default pool)."""
    from mailqueue.outbound.dkim import powertools_key_source
    from mailqueue.services.delivery import DeliverySettings

    storage = _storage_from_env()
    if dkim_keys is None:
        # DKIM keys through Powertools (cached per container); with an endpoint (the
        # local stack) its clients go there too
        dkim_keys = powertools_key_source(**key_clients(storage.s))
    return delivery_service(
        DeliverySettings.from_env(pool=pool) if pool else DeliverySettings.from_env(),
        storage,
        credentials=credentials,
        dkim_keys=dkim_keys,
        return_path_keys=dkim_keys,  # the same cached secret source (outbound/returnpath.py)
    )


def pool_for_source(source_arn: str | None) -> str | None:
    """The egress pool of an SQS event source (its queue in MQ_POOL_QUEUE_URLS)."""
    return settings_from_env(StorageSettings).pool_for_source(source_arn)


def bounce_service_from_env() -> BounceService:
    from mailqueue.services.bounce import BounceService, BounceSettings

    return BounceService(settings_from_env(BounceSettings), _storage_from_env())


def sweeper(
    settings: SweeperSettings,
    storage: AwsStorage,
    *,
    clock: Callable[[], datetime] = utcnow,
) -> Sweeper:
    """`Sweeper` on `storage`, re-posting through its queues."""
    from mailqueue.services.sweeper import Sweeper

    return Sweeper(
        settings, storage, triggers=SqsTriggers(storage), bounces=SqsBounces(storage), clock=clock
    )


def sweeper_from_env() -> Sweeper:
    from mailqueue.services.sweeper import SweeperSettings

    return sweeper(settings_from_env(SweeperSettings), _storage_from_env())


__all__ = [
    "bounce_service_from_env",
    "delivery_ports",
    "delivery_service",
    "delivery_service_from_env",
    "key_clients",
    "sweeper",
    "sweeper_from_env",
]


def reputation_guard(
    dynamodb: Any, table: str, thresholds: str = "", *, counting: bool = True
) -> Any:
    """A `ReputationGuard` on the state table, for code that counts late feedback
    (services/feedback, services/unsubscribe: late bounces, complaints, unsubscribes);
    with counting off it only finds the origins delivery left."""
    from mailqueue.backends.aws.reputation_store import (
        DynamoReputationStore,
        OutboxReputationEvents,
    )
    from mailqueue.backends.aws.suspension_store import DynamoSuspensionStore
    from mailqueue.outbound.reputation import ReputationGuard, Thresholds

    return ReputationGuard(
        DynamoReputationStore(dynamodb, table),
        DynamoSuspensionStore(dynamodb, table),
        Thresholds.parse(thresholds),
        events=OutboxReputationEvents(dynamodb, table),
        counting=counting,
    )
