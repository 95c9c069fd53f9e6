"""Queue administration (issue 7): the service behind the admin API and the CLI.

Postfix's postqueue/postsuper/postcat/qshape and James's distributed mail queue API, on
the storage's own primitives: browse and size from the by_state index, operator actions
as conditional transitions under the delivery lease, bulk actions as resumable jobs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import datetime

from ..aws.backend import AwsStorage
from ..aws.clients import AwsClients
from ..model import utcnow
from .api import AdminApi, Reply
from .filters import QueueFilter, parse_filter
from .jobs import DynamoJobStore, InlineLauncher, Job, JobLauncher, LambdaLauncher, NullLauncher
from .service import (
    Action,
    AdminSettings,
    Busy,
    OpContext,
    Outcome,
    QueueAdmin,
    admin_settings_from_env,
)

__all__ = [
    "Action",
    "AdminApi",
    "AdminSettings",
    "Busy",
    "InlineLauncher",
    "Job",
    "JobLauncher",
    "LambdaLauncher",
    "NullLauncher",
    "OpContext",
    "Outcome",
    "QueueAdmin",
    "QueueFilter",
    "Reply",
    "admin_settings_from_env",
    "build_admin",
    "parse_filter",
]


def build_admin(
    settings: AdminSettings,
    clients: AwsClients,
    *,
    clock: Callable[[], datetime] = utcnow,
) -> QueueAdmin:
    """The service on AWS: AwsStorage, job items and the operator lists in the queue
    table."""
    from ..aws.ports import SqsBounces
    from ..aws.suppression_store import DynamoSuppressionStore
    from ..aws.suspension_store import DynamoSuspensionStore

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
    )
