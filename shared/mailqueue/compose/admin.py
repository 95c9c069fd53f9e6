"""Composition of the admin service on AWS: the storage, the job store and the operator
lists in the state table, SQS for bounces, Lambda for job slices, DNS checks with keys read
through boto3."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from mailqueue.backends.aws.backend import AwsStorage
from mailqueue.backends.aws.clients import AwsClients
from mailqueue.backends.aws.jobs import DynamoJobStore, LambdaLauncher
from mailqueue.backends.aws.ports import SqsBounces
from mailqueue.backends.aws.suppression_store import DynamoSuppressionStore
from mailqueue.backends.aws.suspension_store import DynamoSuspensionStore
from mailqueue.core.model import utcnow
from mailqueue.services.admin import AdminSettings, QueueAdmin

if TYPE_CHECKING:
    from mailqueue.outbound.doctor import KeySource

__all__ = ["LambdaLauncher", "aws_keys", "build_admin", "default_doctor"]


def build_admin(
    settings: AdminSettings,
    clients: AwsClients,
    *,
    clock: Callable[[], datetime] = utcnow,
) -> QueueAdmin:
    """The service on AWS: AwsStorage, job items and the operator lists in the queue
    table."""
    table = settings.storage.table
    # An operator's delete or bounce of a solo mail removes it at once (postsuper -d
    # semantics: gone from `show`), rather than leaving it to DynamoDB's TTL; rare, so
    # the write unit does not matter
    storage = AwsStorage(replace(settings.storage, solo_delete=True), clients, clock=clock)
    return QueueAdmin(
        settings,
        storage,
        DynamoJobStore(
            settings.storage.table, clients.dynamodb, ttl_seconds=settings.job_ttl_seconds
        ),
        clock=clock,
        bounces=SqsBounces(storage),
        suppressions=DynamoSuppressionStore(clients.dynamodb, table),
        suspensions=DynamoSuspensionStore(clients.dynamodb, table),
        reputation=reputation_api(settings, clients, clock),
        pools=pools_api(settings, clients, clock),
    )


def pools_api(settings: AdminSettings, clients: Any, clock: Callable[[], datetime]) -> Any:
    """The /pools routes: the pools file, the warm-up counters in the state table."""
    from mailqueue.backends.aws.budget_store import DynamoBudgetCounters
    from mailqueue.compose.aws import reputation_guard
    from mailqueue.outbound.pools import load_pools
    from mailqueue.services.admin.pools import PoolsApi

    table = settings.storage.table
    guard = reputation_guard(clients.dynamodb, table, settings.reputation_thresholds)
    return PoolsApi(
        load_pools(settings.pools),
        DynamoBudgetCounters(clients.dynamodb, table),
        DynamoSuspensionStore(clients.dynamodb, table),
        clock,
        queues=settings.storage.pool_queues(),
        # the ramp's hold: each pool's standing in the guard's counters (warmup.py)
        standing=lambda name: guard.standing("pool", name),
    )


def reputation_api(settings: AdminSettings, clients: Any, clock: Callable[[], datetime]) -> Any:
    """The /reputation routes on the state table (outbound/reputation.py)."""
    from mailqueue.backends.aws.reputation_store import (
        DynamoReputationStore,
        OutboxReputationEvents,
    )
    from mailqueue.outbound.reputation import Thresholds
    from mailqueue.services.admin.reputation import ReputationApi

    table = settings.storage.table
    return ReputationApi(
        DynamoReputationStore(clients.dynamodb, table),
        DynamoSuspensionStore(clients.dynamodb, table),
        Thresholds.parse(settings.reputation_thresholds),
        clock,
        OutboxReputationEvents(clients.dynamodb, table),
    )


def aws_keys(region: str | None, endpoint_url: str | None) -> KeySource:
    """DKIM keys through boto3, its clients made on the first key asked for (none: no AWS)."""
    made: list[KeySource] = []

    def get(ref: str) -> str | None:
        if not made:
            import boto3

            from mailqueue.backends.aws.doctor_keys import boto_key_source

            session = boto3.session.Session(region_name=region)
            made.append(
                boto_key_source(
                    session.client("secretsmanager", endpoint_url=endpoint_url),
                    session.client("ssm", endpoint_url=endpoint_url),
                )
            )
        return made[0](ref)

    return get


def default_doctor(
    env: Mapping[str, str] | None = None, keys: KeySource | None = None, **explicit: Any
) -> dict[str, Any]:
    """Run every check with MQ_* settings (explicit values win); ConfigError if invalid."""
    # DNS checks pull in dnspython: loaded only when asked (the admin function's cold start)
    from mailqueue.outbound.doctor import (
        DoctorSettings,
        doctor_report,
        local_stack_report,
        run,
    )

    settings = DoctorSettings.from_env(env, **explicit)
    if settings.local_stack and not explicit.get("dns_nameservers"):
        return local_stack_report()
    source = env if env is not None else os.environ
    if keys is None:
        keys = aws_keys(
            source.get("AWS_REGION") or source.get("AWS_DEFAULT_REGION"),
            source.get("MQ_ENDPOINT_URL") or None,
        )
    return doctor_report(run(settings.input(), settings.resolver(), keys))
