"""Destinations Lambda: the events outbox queue → webhooks (signed), EventBridge, SNS."""

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
from mailqueue.backends.aws.destinations import SqsRetry
from mailqueue.compose.destinations import destination_service_from_env
from mailqueue.compose.xray import LazyTracer
from mailqueue.services.destinations import DestinationService

logger = Logger(service="mailqueue-destinations")
tracer = LazyTracer(service="mailqueue-destinations")
metrics = Metrics(namespace="mailqueue", service="destinations")


@functools.cache
def default_service() -> tuple[DestinationService, SqsRetry]:
    return destination_service_from_env()


def handle(
    event: dict[str, Any], context: LambdaContext, service: DestinationService, retry: SqsRetry
) -> Any:
    processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)
    outcome = {"sent": 0, "dead": 0}

    def record_handler(record: SQSRecord) -> None:
        count = int(record.attributes.approximate_receive_count or 1)
        outcome[service.process(record.body, count, record.receipt_handle, retry)] += 1

    response = process_partial_response(
        event=event, record_handler=record_handler, processor=processor, context=context
    )
    failed = len(response.get("batchItemFailures", []))
    metrics.add_metric(name="DestinationSent", unit=MetricUnit.Count, value=outcome["sent"])
    metrics.add_metric(name="DestinationRetried", unit=MetricUnit.Count, value=failed)
    metrics.add_metric(name="DestinationDeadLettered", unit=MetricUnit.Count, value=outcome["dead"])
    return response


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> Any:
    service, retry = default_service()
    return handle(event, context, service, retry)
