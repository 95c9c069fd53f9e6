"""Event writer Lambda: the table's change stream → SES-shaped events → S3 (gzip JSON lines)."""

from __future__ import annotations

import functools
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext
from mailqueue.compose.events import event_writer_from_env
from mailqueue.compose.xray import LazyTracer
from mailqueue.services.eventlog import EventWriterService

# "mailqueue-events", not "events": Powertools adds SuppressFilter(service) to the root
# handlers, which drops every record whose logger name contains it (mailqueue.services.events)
logger = Logger(service="mailqueue-events")
tracer = LazyTracer(service="mailqueue-events")
metrics = Metrics(namespace="mailqueue", service="events")


@functools.cache
def default_service() -> EventWriterService:
    return event_writer_from_env()


def handle(
    event: dict[str, Any], context: LambdaContext, service: EventWriterService
) -> dict[str, Any]:
    # The whole batch is one unit: a failure raises and Lambda retries (bisecting) the batch;
    # object keys derive from the batch, so a retry overwrites rather than duplicates.
    result = service.handle(event.get("Records", []))
    metrics.add_metric(name="EventsWritten", unit=MetricUnit.Count, value=result["events"])
    if result.get("destinations_too_large"):
        # in the S3 event log, but no destination can take them even shrunk (fit)
        metrics.add_metric(
            name="DestinationEventsTooLarge",
            unit=MetricUnit.Count,
            value=result["destinations_too_large"],
        )
    return result


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return handle(event, context, default_service())
