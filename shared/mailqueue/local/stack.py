"""The whole queue on one machine: moto in server mode, the resources, the real handlers.

`LocalStack(StackOptions(...)).start()` brings up, in order:

1. moto in server mode on 127.0.0.1 (the AWS APIs over HTTP, as boto3 sees them);
2. the resources: the SAM template deployed into moto's CloudFormation when
   `mailqueue.local.cfn` and template.yaml are there (one source of truth), else
   `mailqueue.aws.resources.create_resources` (the same names, keys and index);
3. the next hop: the SMTP sink filing mail under ``<var>/mail`` (or ``--relay``);
4. one warm container per function (`LocalFunction`: the real ``app.handler``, its
   environment the ``MQ_*`` variables below, its output in ``<var>/logs/<name>.log``);
5. the triggers: SQS pollers for the delivery and bounce queues (Lambda's batch contract,
   long polling), the table's stream → the event writer, the sweeper's schedule, and
   the HTTP API (`ApiGateway`) for ingress and admin.

`stop()` undoes all of it in reverse order, joining every thread it started. One stack
per process at a time: the functions read their settings from the process environment,
as they do in Lambda.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import secrets
import socket
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from .gateway import DEFAULT_ROUTES, ApiGateway, LocalAuth, Route
from .runtime import (
    REGION,
    FunctionSpec,
    LocalFunction,
    Loop,
    OutputRouter,
    Schedule,
    SqsPoller,
    sqs_step,
)
from .sink import SinkEvent, SinkRules, SmtpSink
from .streams import StreamPoller, stream_arn_of

log = logging.getLogger(__name__)

FUNCTIONS: tuple[FunctionSpec, ...] = (
    FunctionSpec("ingress", "functions.ingress.app", timeout_seconds=29, memory_mb=1024),
    FunctionSpec("admin", "functions.admin.app", timeout_seconds=29, memory_mb=512),
    FunctionSpec("delivery", "functions.delivery.app", timeout_seconds=300, memory_mb=512),
    FunctionSpec("bounce", "functions.bounce.app", timeout_seconds=120, memory_mb=512),
    FunctionSpec("sweeper", "functions.sweeper.app", timeout_seconds=300, memory_mb=512),
    FunctionSpec("events", "functions.events.app", timeout_seconds=60, memory_mb=512),
)

# --fast-retries: the retry schedule scaled from minutes and days to seconds and minutes
FAST_RETRIES: dict[str, str] = {
    "MQ_RETRY_MIN_BACKOFF_SECONDS": "5",
    "MQ_RETRY_MAX_BACKOFF_SECONDS": "60",
    "MQ_MAX_QUEUE_LIFETIME_SECONDS": "600",
    "MQ_DELAY_WARNING_SECONDS": "120",
    "MQ_TRIGGER_GRACE_SECONDS": "60",
    "MQ_DSN_GRACE_SECONDS": "60",
    "MQ_CLEANUP_GRACE_SECONDS": "30",
}

_AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": REGION,
    "AWS_REGION": REGION,
    "POWERTOOLS_TRACE_DISABLED": "true",  # no X-Ray daemon here
}
_AWS_ENV_DROP = ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_ENDPOINT_URL")


@dataclass
class StackOptions:
    var_dir: Path = Path("var")
    host: str = "127.0.0.1"
    api_port: int = 3000
    sink_port: int = 0
    moto_port: int = 0
    relay: str | None = None  # "host:port" of a real MTA instead of the sink
    fast_retries: bool = False
    sweep_interval: float = 60.0
    token: str | None = None  # default: kept in <var>/dev-token across runs
    poll_wait_seconds: int = 1  # SQS long polling
    batch_size: int = 10  # SQS event source mappings
    stream_batch_size: int = 100
    sink_rules: SinkRules = field(default_factory=SinkRules.demo)
    settings: Mapping[str, str] = field(default_factory=dict)  # extra MQ_* variables
    on_sink_event: Callable[[SinkEvent], None] | None = None
    route_output: bool = True  # function output → <var>/logs/<name>.log
    deploy: str = "auto"  # auto | cloudformation | direct


@dataclass(frozen=True)
class Deployment:
    """Where the resources are, however they were made."""

    table: str
    bucket: str
    delivery_queue_url: str
    bounce_queue_url: str
    delivery_dlq_url: str | None
    bounce_dlq_url: str | None
    stream_arn: str | None
    source: str  # "cloudformation" | "direct"
    env: Mapping[str, str] = field(default_factory=dict)  # declared function variables


class LocalStack:
    def __init__(self, options: StackOptions | None = None) -> None:
        self.options = options or StackOptions()
        self.var_dir = self.options.var_dir.resolve()
        self.mail_dir = self.var_dir / "mail"
        self.log_dir = self.var_dir / "logs"
        self.token = ""
        self.endpoint_url = ""
        self.deployment: Deployment | None = None
        self.functions: dict[str, LocalFunction] = {}
        self.sink: SmtpSink | None = None
        self.gateway: ApiGateway | None = None
        self.clients: Any = None
        self.env: dict[str, str] = {}
        self.threads: list[Loop] = []
        self.stream_poller: StreamPoller | None = None
        self.next_hop = ""
        self._stop = threading.Event()
        self._moto: Any = None
        self._logs: list[TextIO] = []
        self._saved_env: dict[str, str | None] = {}
        self._router: tuple[TextIO, TextIO, list[tuple[logging.StreamHandler[Any], Any]]] | None = None

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> LocalStack:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        o = self.options
        self.mail_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.token = o.token or self._dev_token()
        self._set_env(_AWS_ENV, drop=_AWS_ENV_DROP)

        self.endpoint_url = self._start_moto()
        from ..aws.clients import make_clients

        self.clients = make_clients(endpoint_url=self.endpoint_url, region=REGION)
        self.deployment = self._deploy()

        if o.relay:
            self.next_hop = _relay_hop(o.relay)
            routes = {"default": {"next_hop": self.next_hop, "tls": "opportunistic"}}
        else:
            self.sink = SmtpSink(
                self.mail_dir,
                rules=o.sink_rules,
                host=o.host,
                port=o.sink_port,
                on_event=o.on_sink_event,
            ).start()
            self.next_hop = f"[{self.sink.host}]:{self.sink.port}"
            routes = {"default": {"next_hop": self.next_hop, "tls": "none"}}

        self.env = self._function_env(routes)
        self._set_env(self.env)
        if o.route_output:
            self._install_router()
        self._load_functions()
        self._start_triggers()

    def stop(self) -> None:
        """Stop everything started, in reverse order; safe to call twice."""
        self._stop.set()
        if self.gateway is not None:
            self.gateway.stop()
            self.gateway = None
        for t in self.threads:
            # a batch in flight finishes (its SMTP session, its records) before the join
            t.join(max(30.0, max((f.spec.timeout_seconds for f in self.functions.values()), default=0)))
            if t.is_alive():
                log.error("%s did not stop", t.name)
        self.threads = []
        if self.sink is not None:
            self.sink.stop()
            self.sink = None
        if self._moto is not None:
            self._moto.stop()
            self._moto = None
        self._remove_router()
        for f in self._logs:
            f.close()
        self._logs = []
        for k, v in self._saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        self._saved_env = {}

    def __enter__(self) -> LocalStack:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # ------------------------------------------------------------------ info
    @property
    def api_url(self) -> str:
        return self.gateway.url if self.gateway is not None else ""

    def readiness(self) -> dict[str, Any]:
        d = self.deployment
        return {
            "api_url": self.api_url,
            "token": self.token,
            "sigv4_access_key_id": self.gateway.auth.access_key_id if self.gateway else None,
            "mail_dir": str(self.mail_dir),
            "log_dir": str(self.log_dir),
            "endpoint_url": self.endpoint_url,
            "region": REGION,
            "next_hop": self.next_hop,
            "sink": self.sink.address if self.sink is not None else None,
            "functions": sorted(self.functions),
            "deployment": d.source if d else None,
            "table": d.table if d else None,
            "bucket": d.bucket if d else None,
            "delivery_queue_url": d.delivery_queue_url if d else None,
            "bounce_queue_url": d.bounce_queue_url if d else None,
            "stream": bool(self.stream_poller),
            "fast_retries": self.options.fast_retries,
            "pid": os.getpid(),
        }

    # ------------------------------------------------------------------ pieces
    def _dev_token(self) -> str:
        """Kept in <var>/dev-token so an exported MAILQUEUE_TOKEN survives a restart."""
        path = self.var_dir / "dev-token"
        try:
            token = path.read_text().strip()
            if len(token) >= 16:
                return token
        except FileNotFoundError:
            pass
        token = secrets.token_urlsafe(24)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(token + "\n")
        return token

    def _set_env(self, values: Mapping[str, str], drop: tuple[str, ...] = ()) -> None:
        for k in (*values, *drop):
            if k not in self._saved_env:
                self._saved_env[k] = os.environ.get(k)
        for k in drop:
            os.environ.pop(k, None)
        os.environ.update(values)

    def _start_moto(self) -> str:
        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.WARNING)
        self._moto = ThreadedMotoServer(
            ip_address=self.options.host, port=self.options.moto_port, verbose=False
        )
        self._moto.start()
        host, port = self._moto.get_host_and_port()
        return f"http://{host}:{port}"

    def _deploy(self) -> Deployment:
        mode = self.options.deploy
        if mode not in ("auto", "cloudformation", "direct"):
            raise ValueError("deploy must be auto, cloudformation or direct")
        cfn_ready = (
            importlib.util.find_spec("mailqueue.local.cfn") is not None
            and Path("template.yaml").exists()
        )
        if mode == "cloudformation" or (mode == "auto" and cfn_ready):
            return self._deploy_cloudformation()
        from ..aws.resources import create_resources

        res = create_resources(self.clients)
        return Deployment(
            table=res.table,
            bucket=res.bucket,
            delivery_queue_url=res.delivery_queue_url,
            bounce_queue_url=res.bounce_queue_url,
            delivery_dlq_url=res.delivery_dlq_url,
            bounce_dlq_url=res.bounce_dlq_url,
            stream_arn=stream_arn_of(self.clients.dynamodb, res.table),
            source="direct",
        )

    def _deploy_cloudformation(self) -> Deployment:
        from . import cfn  # type: ignore[attr-defined]

        outputs: Mapping[str, str] = cfn.deploy_stack(self.endpoint_url)
        table = outputs["StateTableName"]
        return Deployment(
            table=table,
            bucket=outputs["ContentBucketName"],
            delivery_queue_url=outputs["DeliveryQueueUrl"],
            bounce_queue_url=outputs["BounceQueueUrl"],
            delivery_dlq_url=outputs.get("DeliveryDlqUrl"),
            bounce_dlq_url=outputs.get("BounceDlqUrl"),
            stream_arn=stream_arn_of(self.clients.dynamodb, table),
            source="cloudformation",
        )

    def _function_env(self, routes: Mapping[str, Any]) -> dict[str, str]:
        d = self.deployment
        assert d is not None
        env = dict(d.env)
        env.update(
            {
                "MQ_TABLE": d.table,
                "MQ_BUCKET": d.bucket,
                "MQ_DELIVERY_QUEUE_URL": d.delivery_queue_url,
                "MQ_BOUNCE_QUEUE_URL": d.bounce_queue_url,
                "MQ_REGION": REGION,
                "MQ_ENDPOINT_URL": self.endpoint_url,
                "MQ_HOSTNAME": "mailqueue.localhost",
                "MQ_ROUTES": json.dumps(routes, separators=(",", ":")),
                "MQ_JOB_RUNNER": "inline",  # admin bulk jobs run in the request locally
            }
        )
        if self.options.fast_retries:
            env.update(FAST_RETRIES)
        for k, v in self.options.settings.items():
            env[k if k.startswith("MQ_") else "MQ_" + k.upper()] = v
        return env

    def _install_router(self) -> None:
        out = OutputRouter(sys.stdout)
        err = OutputRouter(sys.stderr, share=out)
        rebound: list[tuple[logging.StreamHandler[Any], Any]] = []
        for h in logging.getLogger().handlers:
            if isinstance(h, logging.StreamHandler) and h.stream in (sys.stdout, sys.stderr):
                old = h.stream
                h.setStream(err if old is sys.stderr else out)
                rebound.append((h, old))
        self._router = (sys.stdout, sys.stderr, rebound)
        sys.stdout, sys.stderr = out, err  # type: ignore[assignment]

    def _remove_router(self) -> None:
        if self._router is None:
            return
        out, err, rebound = self._router
        for h, old in rebound:
            h.setStream(old)
        sys.stdout, sys.stderr = out, err
        self._router = None

    def _load_functions(self) -> None:
        router = sys.stdout if isinstance(sys.stdout, OutputRouter) else None
        if importlib.util.find_spec("functions") is None:
            raise RuntimeError(
                "the functions/ folder is not importable: run from the repository root "
                "(make run)"
            )
        for spec in FUNCTIONS:
            if importlib.util.find_spec(spec.module) is None:
                log.warning("%s: %s not found; not started", spec.name, spec.module)
                continue
            f = open(self.log_dir / f"{spec.name}.log", "a", buffering=1, encoding="utf-8")  # noqa: SIM115
            self._logs.append(f)
            self.functions[spec.name] = LocalFunction(spec, f, router)

    def _start_triggers(self) -> None:
        o = self.options
        d = self.deployment
        assert d is not None
        fns = self.functions
        for name, url in (("delivery", d.delivery_queue_url), ("bounce", d.bounce_queue_url)):
            if name not in fns:
                continue
            poller = SqsPoller(
                self.clients.sqs,
                url,
                fns[name],
                function_name=fns[name].spec.function_name,
                batch_size=o.batch_size,
                timeout_seconds=fns[name].spec.timeout_seconds,
                wait_seconds=o.poll_wait_seconds,
            )
            self.threads.append(Loop(f"sqs-{name}", sqs_step(poller, name), self._stop))
        if "events" in fns and d.stream_arn:
            import boto3

            streams = boto3.session.Session().client(
                "dynamodbstreams", endpoint_url=self.endpoint_url, region_name=REGION
            )
            self.stream_poller = StreamPoller(
                streams,
                d.stream_arn,
                fns["events"],
                function_name=fns["events"].spec.function_name,
                batch_size=o.stream_batch_size,
                timeout_seconds=fns["events"].spec.timeout_seconds,
                bisect_on_error=True,
            )
            self.threads.append(Loop("stream-events", self.stream_poller.step, self._stop))
        if "sweeper" in fns:
            for sched in (
                Schedule("mailqueue-sweeper", o.sweep_interval, fns["sweeper"]),
                Schedule("mailqueue-sweeper-daily", 86400.0, fns["sweeper"], {"orphans": True}),
            ):
                self.threads.append(Loop(f"schedule-{sched.rule_name}", sched.step, self._stop))
        for t in self.threads:
            t.start()
        http = {n: fns[n] for n in ("ingress", "admin") if n in fns}
        access = open(self.log_dir / "api-access.log", "a", buffering=1, encoding="utf-8")  # noqa: SIM115
        self._logs.append(access)
        self.gateway = ApiGateway(
            _routes(),
            http,
            LocalAuth(self.token),
            host=o.host,
            port=o.api_port,
            access_log=access,
        ).start()


def _routes() -> tuple[Route, ...]:
    return DEFAULT_ROUTES


def _relay_hop(relay: str) -> str:
    """``host:port`` → ``[address]:port`` (resolved once, so no MX lookup happens)."""
    host, sep, port = relay.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"--relay wants host:port, not {relay!r}")
    host = host.strip("[]")
    address = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)[0][4][0]
    return f"[{address}]:{port}"
