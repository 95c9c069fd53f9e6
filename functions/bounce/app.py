"""Bounce Lambda: bounce-queue batch → one RFC 3464 DSN per mail and kind, enqueued as mail."""

from __future__ import annotations

import functools
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.batch import (
    BatchProcessor,
    EventType,
    process_partial_response,
)
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext
from mailqueue.compose.aws import bounce_service_from_env
from mailqueue.compose.xray import LazyTracer
from mailqueue.services.bounce import BounceService, BounceStats, parse_ref

# "mailqueue-bounce", not "bounce": Powertools adds SuppressFilter(service) to the root
# handlers, which drops every record whose logger name contains it (mailqueue.services.bounce)
logger = Logger(service="mailqueue-bounce")
tracer = LazyTracer(service="mailqueue-bounce")
metrics = Metrics(namespace="mailqueue", service="bounce")


@functools.cache
def default_service() -> BounceService:
    return bounce_service_from_env()


def handle(event: dict[str, Any], context: LambdaContext, service: BounceService) -> Any:
    processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)
    stats = BounceStats()
    done: set[str] = set()

    def record_handler(record: SQSRecord) -> None:
        # all of a mail's pending reports go in one DSN per kind: the first record of a
        # mail in this batch handles the mail, later ones find nothing left to do
        mail_id = parse_ref(record.body).mail_id
        if mail_id in done:
            return
        service.handle_mail(mail_id, stats)
        done.add(mail_id)

    response = process_partial_response(
        event=event, record_handler=record_handler, processor=processor, context=context
    )
    metrics.add_metric(name="DsnQueued", unit=MetricUnit.Count, value=stats.dsns)
    metrics.add_metric(name="DsnSuppressed", unit=MetricUnit.Count, value=stats.suppressed)
    return response


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> Any:
    return handle(event, context, default_service())
