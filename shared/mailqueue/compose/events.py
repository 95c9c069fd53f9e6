"""Composition of the event writer on AWS: the state table's stream in, S3 out."""

from __future__ import annotations

from typing import Any

from mailqueue.backends.aws.destinations import SqsOutbox
from mailqueue.backends.aws.eventlog import (
    ContentHeaders,
    DynamoStreamSource,
    S3EventWriter,
    inline_reader,
)
from mailqueue.services.eventlog import EventWriterService, EventWriterSettings

__all__ = ["event_writer", "event_writer_from_env"]


def event_writer(
    settings: EventWriterSettings, s3: Any, dynamodb: Any, table: str, sqs: Any = None
) -> EventWriterService:
    """The service on the stream of `table`, writing to `settings.bucket`."""
    outbox = (
        SqsOutbox(sqs, settings.destinations_queue_url)
        if sqs is not None and settings.destinations_queue_url
        else None
    )
    return EventWriterService(
        settings,
        source=DynamoStreamSource(),
        sink=S3EventWriter(s3, settings.bucket, settings.prefix),
        headers=ContentHeaders(s3, settings.bucket, inline_reader(dynamodb, table)),
        outbox=outbox,
    )


def event_writer_from_env() -> EventWriterService:
    """Built from MQ_* variables; a bad setting fails the cold start."""
    from mailqueue.backends.aws.clients import make_clients
    from mailqueue.core.config import StorageSettings, settings_from_env

    ss = settings_from_env(StorageSettings)
    settings = settings_from_env(
        EventWriterSettings, bucket=ss.bucket, region=ss.region, endpoint_url=ss.endpoint_url
    )
    clients = make_clients(region=ss.region, endpoint_url=ss.endpoint_url)
    return event_writer(settings, clients.s3, clients.dynamodb, ss.table, clients.sqs)
