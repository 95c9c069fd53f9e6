"""Composition of the ingress service on AWS: S3 for content and uploads, the state table,
SQS triggers, the table outbox for Reject events, the suppression store."""

from __future__ import annotations

import functools
from typing import Any

import boto3

from mailqueue.backends.aws.backend import AwsStorage
from mailqueue.backends.aws.clients import AwsClients
from mailqueue.backends.aws.objects import S3RawStore, presigning_client
from mailqueue.backends.aws.outbox import TableOutboxEmitter
from mailqueue.backends.aws.suppression_store import DynamoSuppressionStore
from mailqueue.core.events import EventEmitter
from mailqueue.services.ingress import IngressService, IngressSettings

__all__ = ["build_service", "feedback_guard"]


def feedback_guard(settings: IngressSettings, clients: AwsClients) -> Any:
    """The reputation guard late feedback counts on (the delivery function's counters in
    the state table); with guards off, one that only finds the origins delivery left (the
    late events' `mail`)."""
    from mailqueue.compose.aws import reputation_guard

    return reputation_guard(
        clients.dynamodb,
        settings.storage.table,
        settings.reputation_thresholds,
        counting=settings.reputation,
    )


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
    feedback = None
    policy = settings.return_path()
    if policy.enabled:
        from mailqueue.compose.aws import key_clients
        from mailqueue.outbound.dkim import powertools_key_source
        from mailqueue.outbound.returnpath import ReturnPaths
        from mailqueue.services.feedback.service import FeedbackService, FeedbackSettings

        paths = ReturnPaths(
            policy,
            settings.return_path_keys,
            powertools_key_source(**key_clients(settings.storage)),
        )
        feedback = FeedbackService(
            FeedbackSettings(policy.bounce_domains, hostname=settings.hostname),
            paths.ring,
            AwsStorage(settings.enqueue_storage, clients),
            emitter or TableOutboxEmitter(settings.outbox_table, clients.dynamodb),
            suppression=DynamoSuppressionStore(clients.dynamodb, settings.storage.table),
            reputation=feedback_guard(settings, clients),
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
        feedback=feedback,
    )
