"""Delivery Lambda: SQS batch → one claimed SMTP attempt per record, the records at once
(Powertools' async batch processor over the invocation's bounded lanes; partial batch
failures)."""

from __future__ import annotations

import functools
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.batch import (
    AsyncBatchProcessor,
    EventType,
    async_process_partial_response,
)
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext
from mailqueue.compose.aws import delivery_service_from_env, pool_for_source
from mailqueue.compose.xray import LazyTracer
from mailqueue.outbound.secrets import powertools_credentials
from mailqueue.outbound.smtp import lambda_deadline
from mailqueue.services.delivery import DeliveryService

# "mailqueue-delivery", not "delivery": Powertools adds SuppressFilter(service) to the root
# handlers, which drops every record whose logger name contains it (mailqueue.services.delivery)
logger = Logger(service="mailqueue-delivery")
tracer = LazyTracer(service="mailqueue-delivery")
metrics = Metrics(namespace="mailqueue", service="delivery")


@functools.cache
def default_service(pool: str | None = None) -> DeliveryService:
    """Built once per container and egress pool, on first use (never at import): the AWS
    adapters. `pool`: the pool whose own queue the records come from (outbound/pools.py;
    its EHLO name, source address and limits), None: the default pool's."""
    return delivery_service_from_env(credentials=powertools_credentials, pool=pool)


def _pool(event: dict[str, Any]) -> str | None:
    """An invocation's records come from one event source, so from one pool's queue."""
    records = event.get("Records") or []
    return pool_for_source(records[0].get("eventSourceARN")) if records else None


def handle(event: dict[str, Any], context: LambdaContext, service: DeliveryService) -> Any:
    processor = AsyncBatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)
    with service.invocation(lambda_deadline(context, reserve=5.0)) as inv:

        async def record_handler(record: SQSRecord) -> str:
            return await inv.handle_async(
                record.body, record.receipt_handle, record.event_source_arn
            )

        response = async_process_partial_response(
            event=event, record_handler=record_handler, processor=processor, context=context
        )
    s = inv.stats
    # Only the counts that happened, besides GroupsAttempted (so every invocation's
    # document has a metric): a zero adds nothing to a Sum, and the eight names with
    # their EMF declarations were most of the delivery log's bytes (~680 B per invocation).
    metrics.add_metric(name="GroupsAttempted", unit=MetricUnit.Count, value=s.groups)
    for name, value in (
        ("RecipientsDelivered", s.delivered),
        ("RecipientsBounced", s.bounced),
        ("RecipientsDeferred", s.deferred),
        ("ClaimsLost", s.lost_claims),
        ("TriggersRearmed", s.rearmed),
        ("GroupsHandedBack", s.handed_back),
        ("GroupsThrottled", s.throttled),
        *s.extra.items(),  # shaping: Throttled_<reason>, Backoff_<action>, ShapingRequests
    ):
        if value:
            metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)
    for name, rate in s.rates.items():  # reputation.py: worst rates judged, percent
        metrics.add_metric(name=name, unit=MetricUnit.Percent, value=rate)
    return response


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> Any:
    pool = _pool(event)
    # `default_service()` and `default_service(None)` are two keys of the cache: the
    # default pool's is always the first, so a container builds it once
    return handle(event, context, default_service(pool) if pool else default_service())
