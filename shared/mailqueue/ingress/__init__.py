"""Ingress: the HTTP API (`POST /v1/messages`, `POST /v1/uploads`) and SES receipt.

`build_service` wires the AWS adapters; `IngressService` holds the logic and knows no
boto3 types.
"""

from __future__ import annotations

import functools

import boto3

from ..aws.backend import AwsStorage
from ..aws.clients import AwsClients
from ..aws.suppression_store import DynamoSuppressionStore
from ..events import EventEmitter
from .objects import S3RawStore, presigning_client
from .outbox import TableOutboxEmitter
from .service import Answer, IngressService, IngressStorage, RawStore, SesResult, http_status
from .settings import IngressSettings, ingress_settings_from_env

__all__ = [
    "Answer",
    "IngressService",
    "IngressSettings",
    "IngressStorage",
    "RawStore",
    "S3RawStore",
    "SesResult",
    "TableOutboxEmitter",
    "build_service",
    "presigning_client",
    "http_status",
    "ingress_settings_from_env",
]


def build_service(
    settings: IngressSettings,
    clients: AwsClients,
    *,
    emitter: EventEmitter | None = None,
    session: boto3.session.Session | None = None,
) -> IngressService:
    """The service on S3/DynamoDB/SQS; Reject events go to the table outbox by default.

    `session` supplies the credentials upload URLs are presigned with (default: the
    Lambda's own).
    """
    presigner = functools.partial(
        presigning_client,
        region=settings.storage.region,
        endpoint_url=settings.storage.endpoint_url,
        session=session,
    )
    return IngressService(
        settings,
        AwsStorage(settings.enqueue_storage, clients),
        uploads=S3RawStore(clients.s3, settings.storage.bucket, presigner=presigner),
        inbound=S3RawStore(clients.s3, settings.inbound_bucket),
        emitter=emitter or TableOutboxEmitter(settings.outbox_table, clients.dynamodb),
        suppression=(
            DynamoSuppressionStore(clients.dynamodb, settings.storage.table)
            if settings.suppression != "off"
            else None
        ),
    )
