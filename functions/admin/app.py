"""Admin Lambda: the queue administration API (HTTP API, payload 2.0, IAM auth) and the
runner of bulk jobs.

Routes: see `mailqueue.services.admin.api` (all under /v1/queue/, `AuthorizationType: AWS_IAM`).
A bulk action answers 202 with a job id; the job runs in asynchronous invocations of this
same function (event ``{"mailqueue": "run_job", "job_id": ...}``), one slice each, each
slice launching the next until the job is done. With ``MQ_JOB_RUNNER=inline`` (local
stack) a slice runs inside the request instead, and polling the job drives it.
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
from botocore.config import Config
from mailqueue.backends.aws.clients import make_clients
from mailqueue.compose.admin import LambdaLauncher, build_admin, default_doctor
from mailqueue.compose.xray import LazyTracer
from mailqueue.core.jsonbody import event_body
from mailqueue.services.admin import (
    AdminApi,
    AdminSettings,
    InlineLauncher,
    JobLauncher,
    QueueAdmin,
    Reply,
    admin_settings_from_env,
)

logger = Logger(service="mailqueue-admin")
tracer = LazyTracer(service="mailqueue-admin")
metrics = Metrics(namespace="mailqueue", service="admin")

RESERVE_SECONDS = 15.0  # left to a job slice's last checkpoint and the next launch


@functools.cache
def default_settings() -> AdminSettings:
    return admin_settings_from_env()


@functools.cache
def default_service() -> QueueAdmin:
    """Built once per container from MQ_* variables; a bad setting fails the cold start."""
    s = default_settings()
    clients = make_clients(region=s.storage.region, endpoint_url=s.storage.endpoint_url)
    return build_admin(s, clients)


@functools.cache
def default_api(function_arn: str) -> AdminApi:
    return make_api(default_service(), default_settings(), function_arn)


def make_api(service: QueueAdmin, settings: AdminSettings, function_arn: str) -> AdminApi:
    launcher: JobLauncher
    if settings.job_runner == "inline":
        launcher = InlineLauncher(
            lambda job_id: service.run_job(job_id, budget_seconds=settings.job_slice_seconds)
        )
    else:
        client = boto3.session.Session().client(
            "lambda",
            region_name=settings.storage.region,
            config=Config(retries={"max_attempts": 4, "mode": "standard"}),
        )
        launcher = LambdaLauncher(client, function_arn)
    return AdminApi(service, launcher, doctor=default_doctor)


def _actor(event: Mapping[str, Any]) -> str:
    """The caller's IAM principal, as API Gateway's IAM authorizer verified it."""
    ctx = event.get("requestContext") or {}
    iam = (ctx.get("authorizer") or {}).get("iam") or {}
    arn = iam.get("userArn")
    return arn if isinstance(arn, str) and arn else "unknown"


def _response(reply: Reply) -> Response[str]:
    return Response(
        status_code=reply.status,
        content_type=content_types.APPLICATION_JSON,
        body=json.dumps(reply.body, separators=(",", ":")),
        headers=dict(reply.headers),
    )


def make_router(api: AdminApi, metrics: Metrics | None = None) -> APIGatewayHttpResolver:
    router = APIGatewayHttpResolver()

    def query() -> dict[str, str | None]:
        return dict(router.current_event.query_string_parameters or {})

    def actor() -> str:
        return _actor(router.current_event.raw_event)

    def counted(reply: Reply, action: str) -> Response[str]:
        if metrics is not None and reply.status < 300:
            metrics.add_metric(name=f"Operator_{action}", unit=MetricUnit.Count, value=1)
        return _response(reply)

    @router.get("/v1/queue/mails")
    def browse() -> Response[str]:
        return _response(api.browse(query()))

    @router.get("/v1/queue/mails/<mail_id>")
    def inspect(mail_id: str) -> Response[str]:
        return _response(api.inspect(mail_id, query()))

    @router.delete("/v1/queue/mails/<mail_id>")
    def delete(mail_id: str) -> Response[str]:
        return counted(api.act(mail_id, "delete", query(), actor()), "delete")

    @router.post("/v1/queue/mails/<mail_id>/<action>")
    def act(mail_id: str, action: str) -> Response[str]:
        return counted(api.act(mail_id, action, query(), actor()), action)

    @router.get("/v1/queue/size")
    def size() -> Response[str]:
        return _response(api.size(query()))

    @router.get("/v1/queue/shape")
    def shape() -> Response[str]:
        return _response(api.shape(query()))

    @router.post("/v1/queue/jobs")
    def start_job() -> Response[str]:
        ev = router.current_event
        return counted(api.start_job(event_body(ev.raw_event), actor()), "job")

    @router.get("/v1/queue/jobs/<job_id>")
    def get_job(job_id: str) -> Response[str]:
        return _response(api.get_job(job_id))

    @router.post("/v1/queue/jobs/<job_id>/cancel")
    def cancel_job(job_id: str) -> Response[str]:
        return _response(api.cancel_job(job_id, actor()))

    @router.get("/v1/queue/doctor")
    def doctor() -> Response[str]:
        return _response(api.doctor(query()))

    @router.get("/v1/queue/suspensions")
    def suspensions() -> Response[str]:
        return _response(api.suspension("list", {}, query(), None, actor()))

    @router.post("/v1/queue/suspensions")
    def suspend() -> Response[str]:
        body = event_body(router.current_event.raw_event)
        return counted(api.suspension("suspend", {}, query(), body, actor()), "suspend")

    @router.delete("/v1/queue/suspensions/<scope>/<target>")
    def resume(scope: str, target: str) -> Response[str]:
        path = {"scope": scope, "target": target}
        return counted(api.suspension("resume", path, query(), None, actor()), "resume")

    @router.get("/v1/queue/suppressions")
    def suppressions() -> Response[str]:
        return _response(api.suppression("list", None, query(), None, actor()))

    @router.post("/v1/queue/suppressions")
    def suppress() -> Response[str]:
        body = event_body(router.current_event.raw_event)
        return counted(api.suppression("add", None, query(), body, actor()), "suppress")

    @router.get("/v1/queue/suppressions/<address>")
    def suppression(address: str) -> Response[str]:
        return _response(api.suppression("get", address, query(), None, actor()))

    @router.delete("/v1/queue/suppressions/<address>")
    def unsuppress(address: str) -> Response[str]:
        reply = api.suppression("remove", address, query(), None, actor())
        return counted(reply, "unsuppress")

    @router.get("/v1/queue/pools")
    def pools() -> Response[str]:
        return _response(api.pools(None))

    @router.get("/v1/queue/pools/<pool>")
    def pool(pool: str) -> Response[str]:
        return _response(api.pools(pool))

    @router.get("/v1/queue/reputation/<scope>/<target>")
    def reputation(scope: str, target: str) -> Response[str]:
        path = {"scope": scope, "target": target}
        return _response(api.reputation("show", path, None, actor()))

    @router.post("/v1/queue/reputation/<scope>/<target>/resume")
    def reputation_resume(scope: str, target: str) -> Response[str]:
        path = {"scope": scope, "target": target}
        return counted(api.reputation("resume", path, None, actor()), "reputation_resume")

    @router.not_found
    def not_found(_: Exception) -> Response[str]:
        return _response(
            Reply(404, {"error": "not_found", "message": "no such route", "field": None})
        )

    return router


def run_job_slice(
    event: Mapping[str, Any], context: LambdaContext, api: AdminApi
) -> dict[str, Any]:
    """One slice of a job, then the next launch if the job is not finished."""
    job_id = str(event.get("job_id", ""))
    budget = context.get_remaining_time_in_millis() / 1000.0 - RESERVE_SECONDS
    job = api.service.run_job(job_id, budget_seconds=max(1.0, budget))
    logger.info("job slice", extra={"job": job_id, "state": job.state, "counts": job.counts})
    if api.service.job_stalled(job):  # ours to continue (not another runner's lease)
        api.launcher.launch(job_id)
    return job.to_json()


def handle(
    event: dict[str, Any],
    context: LambdaContext,
    api: AdminApi,
    metrics: Metrics | None = None,
) -> dict[str, Any]:
    if event.get("mailqueue") == "run_job":
        return run_job_slice(event, context, api)
    actor = _actor(event)
    if not api.service.s.is_operator(actor):
        # The route-scoped IAM policy should already have kept this caller out (a
        # submitter's policy names only the submission routes, /v1/messages[/batch] and
        # /v1/uploads); this is the second lock: only principals on the operator
        # allow-list reach the queue's contents.
        logger.warning("admin call refused: not an operator")
        if metrics is not None:
            metrics.add_metric(name="AdminRefused", unit=MetricUnit.Count, value=1)
        return {
            "statusCode": 403,
            "headers": {"Content-Type": content_types.APPLICATION_JSON},
            "body": json.dumps(
                {
                    "error": "not_an_operator",
                    "message": "this caller is not on the operator allow-list",
                    "field": None,
                },
                separators=(",", ":"),
            ),
            "isBase64Encoded": False,
        }
    return make_router(api, metrics).resolve(event, context)


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return handle(event, context, default_api(context.invoked_function_arn), metrics)
