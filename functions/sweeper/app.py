"""Sweeper Lambda: on an EventBridge schedule, finishes what crashes left behind."""

from __future__ import annotations

import functools
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext
from mailqueue.compose.aws import sweeper_from_env
from mailqueue.compose.xray import LazyTracer
from mailqueue.services.sweeper import Sweeper

# "mailqueue-sweeper", not "sweeper": Powertools adds SuppressFilter(service) to the root
# handlers, which drops every record whose logger name contains it (mailqueue.services.sweeper)
logger = Logger(service="mailqueue-sweeper")
tracer = LazyTracer(service="mailqueue-sweeper")
metrics = Metrics(namespace="mailqueue", service="sweeper")


@functools.cache
def default_sweeper() -> Sweeper:
    return sweeper_from_env()


def handle(event: dict[str, Any], context: LambdaContext, sweeper: Sweeper) -> dict[str, Any]:
    # the daily schedule passes {"orphans": true}: listing the content prefix is not free
    orphans = bool((event or {}).get("orphans", False))
    stats = sweeper.run(lambda: context.get_remaining_time_in_millis() / 1000.0, orphans=orphans)
    for name, value in stats.as_metrics().items():
        metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)
    logger.info("sweep finished", extra={"stats": stats.as_metrics(), "early": stats.stopped_early})
    return {"stats": stats.as_metrics(), "stopped_early": stats.stopped_early}


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return handle(event, context, default_sweeper())
