"""Ingress Lambda: API Gateway HTTP API (payload 2.0, IAM auth) and SES receipt rules.

Routes (the template declares them with `AuthorizationType: AWS_IAM`):
  POST /v1/messages  submit a mail (inline base64 content or an upload id)  → 202
  POST /v1/messages/batch  up to MQ_MAX_BATCH mails, one result each       → 207
  POST /v1/uploads   a presigned S3 PUT URL for content too large to inline → 201
  GET|POST /u/{token}  one-click unsubscribe, public (no IAM): compose/unsubscribe.py
SES: a receipt rule's S3 action stores the raw mail, its Lambda action invokes us.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from typing import Any

import boto3
from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response, content_types
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext
from mailqueue.backends.aws.clients import AwsClients, make_clients
from mailqueue.compose import ingress as composition
from mailqueue.compose import unsubscribe
from mailqueue.compose.xray import LazyTracer
from mailqueue.core.errors import PermanentStorageError, TransientStorageError
from mailqueue.core.events import EventEmitter
from mailqueue.core.jsonbody import event_body
from mailqueue.services import ingress
from mailqueue.services.ingress import Answer, IngressService, IngressSettings
from mailqueue.services.ingress.doors.ses import is_ses_event
from mailqueue.services.unsubscribe import UnsubscribeService

logger = Logger(service="mailqueue-ingress")
tracer = LazyTracer(service="mailqueue-ingress")
metrics = Metrics(namespace="mailqueue", service="ingress")


def build_service(
    settings: IngressSettings,
    clients: AwsClients,
    emitter: EventEmitter | None = None,
    session: boto3.session.Session | None = None,
) -> IngressService:
    return composition.build_service(settings, clients, emitter=emitter, session=session)


@functools.cache
def default_service() -> IngressService:
    """Built once per container from MQ_* variables; a bad setting fails the cold start."""
    settings = ingress.ingress_settings_from_env()
    clients = make_clients(
        region=settings.storage.region, endpoint_url=settings.storage.endpoint_url
    )
    return build_service(settings, clients)


@functools.cache
def unsubscribe_service() -> UnsubscribeService:
    """The one-click endpoint's service, built once per container (this module's cache, so
    it goes with the container: compose/unsubscribe.py says why)."""
    return unsubscribe.service_from_env()


def _json(
    status: int, body: Mapping[str, Any], headers: Mapping[str, str] | None = None
) -> Response[str]:
    return Response(
        status_code=status,
        content_type=content_types.APPLICATION_JSON,
        body=json.dumps(body, separators=(",", ":")),
        headers=dict(headers or {}),
    )


def _principal(event: Mapping[str, Any]) -> str | None:
    """The caller's IAM principal, as API Gateway's IAM authorizer verified it."""
    ctx = event.get("requestContext") or {}
    iam = (ctx.get("authorizer") or {}).get("iam") or {}
    arn = iam.get("userArn")
    return arn if isinstance(arn, str) and arn else None


def _source_ip(event: Mapping[str, Any]) -> str | None:
    """The client's address as API Gateway saw it (for the Received: field, if shown)."""
    ip = ((event.get("requestContext") or {}).get("http") or {}).get("sourceIp")
    return ip if isinstance(ip, str) and ip else None



def make_router(service: IngressService, metrics: Metrics | None = None) -> APIGatewayHttpResolver:
    router = APIGatewayHttpResolver()

    def count(a: Answer) -> None:
        if metrics is None:
            return
        if a.error and a.status < 500:  # a storage failure is no refusal
            metrics.add_metric(name="Rejected", unit=MetricUnit.Count, value=1)
        elif a.status == 202:
            metrics.add_metric(name="Accepted", unit=MetricUnit.Count, value=1)
            if a.duplicate:
                metrics.add_metric(name="Replayed", unit=MetricUnit.Count, value=1)

    def answer(a: Answer) -> Response[str]:
        for one in a.batch or (a,):  # a batch counts per mail, as the single route does
            count(one)
        return _json(a.status, a.body, a.headers)

    @router.post("/v1/messages")
    def post_message() -> Response[str]:
        ev = router.current_event
        return answer(
            service.submit(
                event_body(ev.raw_event),
                principal=_principal(ev.raw_event),
                idempotency_key=ev.headers.get("idempotency-key"),
                client_ip=_source_ip(ev.raw_event),
            )
        )

    @router.post("/v1/messages/batch")
    def post_batch() -> Response[str]:
        ev = router.current_event
        return answer(
            service.submit_batch(
                event_body(ev.raw_event),
                principal=_principal(ev.raw_event),
                client_ip=_source_ip(ev.raw_event),
            )
        )

    @router.post("/v1/uploads")
    def post_upload() -> Response[str]:
        return answer(service.create_upload(_principal(router.current_event.raw_event)))

    @router.not_found
    def not_found(_: Exception) -> Response[str]:
        return _json(404, {"error": "not_found", "message": "no such route", "field": None})

    def unavailable(e: TransientStorageError) -> Response[str]:
        logger.warning("storage unavailable", extra={"cause": str(e)})
        return _json(
            503,
            {"error": "unavailable", "message": "try again", "field": None},
            {"Retry-After": "1"},
        )

    def internal(e: PermanentStorageError) -> Response[str]:
        logger.exception("storage failure")
        return _json(500, {"error": "internal", "message": "storage failure", "field": None})

    # registered by call: the decorator form is untyped
    router.exception_handler(TransientStorageError)(unavailable)
    router.exception_handler(PermanentStorageError)(internal)
    return router


def handle(
    event: dict[str, Any],
    context: LambdaContext,
    service: IngressService,
    metrics: Metrics | None = None,
) -> dict[str, Any]:
    """Dispatch one invocation: SES receipt records or an HTTP API request."""
    if is_ses_event(event):
        result = service.receive_ses(event)
        if metrics is not None:
            metrics.add_metric(name="SesAccepted", unit=MetricUnit.Count, value=result.accepted)
            metrics.add_metric(name="SesRefused", unit=MetricUnit.Count, value=result.refused)
            for name, n in result.feedback.items():  # services/feedback: forged, complaint...
                metrics.add_metric(name=f"Feedback_{name}", unit=MetricUnit.Count, value=n)
        # Event invocations ignore the answer; RequestResponse ones act on the disposition
        disposition: dict[str, Any] = result.to_json()
        return disposition
    if "requestContext" not in event:
        raise ValueError("neither an SES receipt nor an HTTP API request")
    if unsubscribe.is_unsubscribe(event):  # public one-click route (services/unsubscribe.py)
        return unsubscribe.handle_http(event, unsubscribe_service())
    response: dict[str, Any] = make_router(service, metrics).resolve(event, context)
    return response


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return handle(event, context, default_service(), metrics)
