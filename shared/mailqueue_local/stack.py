"""The whole queue on one machine: moto in server mode, the resources, the real handlers.

One piece (~850 lines): the start order below is one sequence whose steps hand each other
endpoints, names and environment, and `stop` undoes it in reverse; the parts that stand
alone (gateway, runtime, streams, sink, throttle, smtpd) are their own modules.

`LocalStack(StackOptions(...)).start()` brings up, in order:

1. moto in server mode on 127.0.0.1 (the AWS APIs over HTTP, as boto3 sees them);
2. the resources: the SAM template deployed into moto's CloudFormation when
   `mailqueue_local.cfn` and template.yaml are there (one source of truth), else
   `mailqueue.backends.aws.resources.create_resources` (the same names, keys and index);
3. the next hop: the SMTP sink filing mail under ``<var>/mail`` (or ``--relay``);
4. the functions (`LocalFunction`: the real ``app.handler`` in warm containers, their
   environment the ``MQ_*`` variables below, their output in ``<var>/logs/<name>.log``);
5. the triggers: SQS pollers for the delivery and bounce queues (Lambda's batch contract,
   long polling; as many poller threads, each with its own container, as the mapping's
   MaximumConcurrency or ``concurrency``), the table's stream → the event writer, the
   sweeper's schedule, and the HTTP API (`ApiGateway`) for ingress and admin.

`stop()` undoes all of it in reverse order, joining every thread it started. One stack
per process at a time: the functions read their settings from the process environment,
as they do in Lambda.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import json
import logging
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from mailqueue.core.authz import PERMISSIVE_SENDER_POLICY
from mailqueue.core.config import ConfigError

from mailqueue_local.gateway import ApiGateway, LocalAuth
from mailqueue_local.runtime import (
    ACCOUNT_ID,
    REGION,
    LocalFunction,
    Loop,
    OutputRouter,
    Schedule,
    SqsPoller,
    sqs_step,
)
from mailqueue_local.sink import SinkEvent, SinkRules, SmtpSink
from mailqueue_local.streams import StreamPoller, stream_arn_of
from mailqueue_local.wiring import ScheduleTrigger, SqsTrigger, Wiring, builtin, from_template

log = logging.getLogger(__name__)

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

LIMITS_LOG = "limit-violations.jsonl"  # --strict-limits: one JSON line per refused request
HOSTNAME = "mailqueue.localhost"  # EHLO name and Reporting-MTA of the local stack
DKIM_DEMO_DOMAINS = ("example.org",)  # the demo's and message.eml's From domain

_AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": REGION,
    "AWS_REGION": REGION,
    "POWERTOOLS_TRACE_DISABLED": "true",  # no X-Ray daemon here
}
_AWS_ENV_DROP = ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_ENDPOINT_URL")


# The local callers (development token, SigV4 with the local key) are its operators.
LOCAL_OPERATORS = f"arn:aws:iam::{ACCOUNT_ID}:user/local-*"


def busy_ports(host: str, ports: Mapping[str, int]) -> None:
    """Refuse to start when a fixed port is taken, before anything starts (issue 44: a busy
    API port was reported after the whole stack had started, 120 s at load 45). Binds each
    port as its server will (SO_REUSEADDR), then lets it go; 0 means any free port."""
    for what, port in ports.items():
        if not port:
            continue
        s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((host, port))
        except OSError as e:
            raise OSError(e.errno, f"{what} port {host}:{port} is in use") from e
        finally:
            s.close()


@dataclass
class StackOptions:
    var_dir: Path = Path("var")
    host: str = "127.0.0.1"
    api_port: int = 3000
    sink_port: int = 0
    moto_port: int = 0
    moto: str = "process"  # process: its own interpreter (a second core) | thread: in ours
    moto_patch: bool = True  # transactions copy what they touch, not the table (motopatch)
    relay: str | None = None  # "host:port" of a real MTA instead of the sink
    fast_retries: bool = False
    sweep_interval: float = 60.0
    token: str | None = None  # default: kept in <var>/dev-token across runs
    poll_wait_seconds: int = 1  # SQS long polling
    sink_rules: SinkRules = field(default_factory=SinkRules.demo)
    settings: Mapping[str, str] = field(default_factory=dict)  # extra MQ_* variables
    on_sink_event: Callable[[SinkEvent], None] | None = None
    route_output: bool = True  # function output → <var>/logs/<name>.log
    deploy: str = "auto"  # auto | cloudformation | direct
    # refuse (400) and record every request over a documented AWS limit
    # (mailqueue.backends.aws.limits)
    strict_limits: bool = False
    # each DynamoDB partition key value (table and index) gets AWS's per-partition
    # throughput divided by this (mailqueue_local.throttle); 0: off
    partition_throttle_scale: float = 0.0
    # DKIM: keys made at start for the demo domain and the host (DSNs), stored in moto;
    # their TXT records are in the READY line ("dkim_txt") and <var>/dkim-records.txt
    dkim: bool = True
    # concurrent invocations per SQS event source mapping, by function ("delivery": 5;
    # "*": every function); default: the mapping's ScalingConfig.MaximumConcurrency (the
    # template's DeliveryMaxConcurrency for delivery), 1 where the template sets none
    concurrency: Mapping[str, int] = field(default_factory=dict)
    # the SMTP front door (mailqueue_local.smtpd): submission on a free loopback port;
    # the receiving listener (no AUTH) too when smtpd_receive_port is not -1
    smtpd: bool = True
    # event source mappings left disabled (Lambda's `Enabled: false`), by function: its
    # queue fills and nothing consumes it (tests that keep what ingress stored in place)
    disabled_triggers: frozenset[str] = frozenset()
    smtpd_receive_port: int = -1
    # egress pools (outbound/pools.py): "" = the one default pool; "local" = LOCAL_POOLS
    # (transactional mail from 127.0.0.2, bulk from 127.0.0.3); else a pools file (path
    # or JSON). Each pool but the default gets the template's PoolN queue and delivery
    # (EgressPools), and each pool's delivery binds its loopback source address
    pools: str = ""
    # one line per start step ("moto: …", "resources: …"), for `make run` and `make demo`:
    # the start takes tens of seconds on a loaded machine and should not be silent (issue 44)
    progress: Callable[[str], None] | None = None
    # template parameters beyond Hostname (e.g. EventDestinations: the conditional
    # resources it turns on are deployed and wired as on AWS)
    template_parameters: Mapping[str, str] = field(default_factory=dict)


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
    wiring: Wiring = field(default_factory=Wiring)  # functions and triggers
    bulk_delivery_queue_url: str = ""  # the bulk delivery path (Priority.BULK)


class LocalStack:
    def __init__(self, options: StackOptions | None = None) -> None:
        self.options = options or StackOptions()
        self.var_dir = self.options.var_dir.resolve()
        self.mail_dir = self.var_dir / "mail"
        self.log_dir = self.var_dir / "logs"
        self.events_dir = self.var_dir / "events"
        self.token = ""
        self.endpoint_url = ""
        self.deployment: Deployment | None = None
        self.functions: dict[str, LocalFunction] = {}
        self.sink: SmtpSink | None = None
        self.gateway: ApiGateway | None = None
        self.smtpd: Any = None  # mailqueue_local.smtpd.LocalSmtpd
        self.clients: Any = None
        self.env: dict[str, str] = {}
        self.dkim_txt: dict[str, str] = {}  # "<selector>._domainkey.<domain>" -> TXT value
        self.threads: list[Loop] = []
        self.stream_pollers: list[StreamPoller] = []
        self.next_hop = ""
        self._stop = threading.Event()
        self._mirror: EventMirror | None = None
        self.timings: dict[str, float] = {}
        self._moto: Any = None
        self._logs: list[TextIO] = []
        self._saved_env: dict[str, str | None] = {}
        self._router: tuple[TextIO, TextIO, list[tuple[logging.StreamHandler[Any], Any]]] | None = (
            None
        )
        self._limits: contextlib.ExitStack | None = None
        self.throttle: Any = None  # a mailqueue_local.throttle.PartitionThrottle when on
        self.limit_violations = 0
        # SQS-triggered function -> pollers started for each of its event source mappings
        self.concurrency: dict[str, list[int]] = {}

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
        if o.strict_limits:
            self._guard_limits()
        if o.partition_throttle_scale > 0:
            self._throttle_partitions(o.partition_throttle_scale)

        busy_ports(o.host, {"API": o.api_port, "SMTP sink": o.sink_port, "moto": o.moto_port})
        started = time.monotonic()
        self._step("[1/4] starting moto (the AWS APIs, on loopback)")
        self.endpoint_url = self._start_moto()
        from mailqueue.backends.aws.clients import make_clients

        self.clients = make_clients(endpoint_url=self.endpoint_url, region=REGION)
        self.timings["moto"] = time.monotonic() - started
        self._step(f"[2/4] moto up in {self.timings['moto']:.1f} s; creating the resources")
        self.deployment = self._deploy()
        self.timings["resources"] = time.monotonic() - started - self.timings["moto"]

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
        if o.dkim and "MQ_DKIM_DOMAINS" not in o.settings:
            self.env.update(self._make_dkim_keys())
        self._set_env(self.env)
        if o.route_output:
            self._install_router()
        # every function's settings, before READY (a bad one fails the start, as in Lambda)
        from mailqueue_local.preflight import check_settings

        check_settings()
        mark = time.monotonic()
        self._step(
            f"[3/4] resources made in {self.timings['resources']:.1f} s;"
            " importing the functions' handlers"
        )
        self._load_functions()
        self.timings["functions"] = time.monotonic() - mark
        self._step(f"[4/4] handlers imported in {self.timings['functions']:.1f} s; triggers")
        self._start_triggers()
        if o.smtpd:
            from mailqueue_local.smtpd import start_local_smtpd

            self.smtpd = start_local_smtpd(self.var_dir, o.host, receive_port=o.smtpd_receive_port)
        self.timings["total"] = time.monotonic() - started
        log.info(
            "started in %.1f s (moto %.1f s, resources %.1f s, function imports %.1f s)",
            self.timings["total"],
            self.timings["moto"],
            self.timings["resources"],
            self.timings["functions"],
        )

    def _step(self, text: str) -> None:
        if self.options.progress is not None:
            self.options.progress(text)

    def stop(self) -> None:
        """Stop everything started, in reverse order; safe to call twice."""
        self._stop.set()
        if self.smtpd is not None:
            self.smtpd.stop()
            self.smtpd = None
        if self.gateway is not None:
            self.gateway.stop()
            self.gateway = None
        for t in self.threads:
            # a batch in flight finishes (its SMTP session, its records) before the join
            t.join(
                max(30.0, max((f.spec.timeout_seconds for f in self.functions.values()), default=0))
            )
            if t.is_alive():
                log.error("%s did not stop", t.name)
        self.threads = []
        if self._mirror is not None:
            try:  # the last events before moto (and its in-memory S3) goes away
                self._mirror.sync()
            except Exception:
                log.exception("events mirror: final sync failed")
            self._mirror = None
        if self.sink is not None:
            self.sink.stop()
            self.sink = None
        if self._moto is not None:
            self._moto.stop()
            self._moto = None
        self._remove_router()
        if self._limits is not None:
            self._limits.close()
            self._limits = None
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
    def moto_pid(self) -> int | None:
        """The moto server's process id when it runs in its own process."""
        m = self._moto
        return m.proc.pid if isinstance(m, MotoProcess) and m.proc is not None else None

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
            "bulk_delivery_queue_url": d.bulk_delivery_queue_url if d else None,
            "stream": bool(self.stream_pollers),
            "fast_retries": self.options.fast_retries,
            "concurrency": {k: list(v) for k, v in self.concurrency.items()},
            "strict_limits": self.options.strict_limits,
            "partition_throttle_scale": self.options.partition_throttle_scale,
            "limit_violations_log": str(self.log_dir / LIMITS_LOG),
            "dkim_txt": self.dkim_txt,
            "pid": os.getpid(),
            "smtp": self.smtpd.readiness() if self.smtpd is not None else None,
        }

    # ------------------------------------------------------------------ pieces
    def _make_dkim_keys(self) -> dict[str, str]:
        """An RSA and an ed25519 key for the demo sender domain and for the host name (DSNs),
        stored where delivery reads them (moto's Secrets Manager), the public records
        written to <var>/dkim-records.txt. Returns the MQ_DKIM_* settings."""
        import boto3
        from mailqueue.cli.dkim import dns_record
        from mailqueue.outbound.dkim import generate_key, key_json, key_name, public_txt

        sm = boto3.client("secretsmanager", region_name=REGION, endpoint_url=self.endpoint_url)
        prefix = "mailqueue/"
        domains: dict[str, list[str]] = {}
        lines = []
        for domain in DKIM_DEMO_DOMAINS + (self.env.get("MQ_HOSTNAME") or HOSTNAME,):
            for selector, algorithm in (("local-r", "rsa-sha256"), ("local-e", "ed25519-sha256")):
                private = generate_key(algorithm)  # type: ignore[arg-type]
                sm.create_secret(
                    Name=key_name(prefix, domain, selector),
                    SecretString=key_json(algorithm, private),  # type: ignore[arg-type]
                )
                txt = public_txt(algorithm, private)  # type: ignore[arg-type]
                self.dkim_txt[f"{selector}._domainkey.{domain}"] = txt
                lines.append(dns_record(domain, selector, txt))
                domains.setdefault(domain, []).append(selector)
        (self.mail_dir.parent / "dkim-records.txt").write_text("\n".join(lines) + "\n")
        return {
            "MQ_DKIM_DOMAINS": json.dumps(domains, separators=(",", ":")),
            "MQ_DKIM_KEY_PREFIX": prefix,
            "MQ_DKIM_KEY_STORE": "secretsmanager",
        }

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
        while token.startswith("-"):  # `--token -x…` would read as an option (argparse)
            token = secrets.token_urlsafe(24)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(token + "\n")
        return token

    def _throttle_partitions(self, scale: float) -> None:
        """Every boto3 session this process makes gets DynamoDB's per-partition budgets
        (scaled down): a hot key is throttled here as in AWS (issue 25)."""
        from mailqueue_local.throttle import PartitionThrottle, partition_throttle

        if self._limits is None:
            self._limits = contextlib.ExitStack()
        self.throttle = self._limits.enter_context(partition_throttle(PartitionThrottle(scale)))

    def _guard_limits(self) -> None:
        """Every boto3 session this process makes (ours, the handlers') checks the limits.

        A refused request gets the service's 400, as in AWS; each is also appended to
        ``<var>/logs/limit-violations.jsonl`` so a test (or you) sees it even if the code
        under test swallowed the error.
        """
        from mailqueue.backends.aws.limits import ServiceLimitExceeded

        from mailqueue_local.limitguard import LimitRecorder, strict_limits

        out = open(self.log_dir / LIMITS_LOG, "a", buffering=1, encoding="utf-8")
        self._logs.append(out)
        lock = threading.Lock()

        def write(v: ServiceLimitExceeded) -> None:
            line = {"service": v.service, "operation": v.operation, "rule": v.rule}
            with lock:
                self.limit_violations += 1
                out.write(json.dumps({**line, "code": v.code}) + "\n")

        if self._limits is None:
            self._limits = contextlib.ExitStack()
        self._limits.enter_context(strict_limits(LimitRecorder(write)))

    def _set_env(self, values: Mapping[str, str], drop: tuple[str, ...] = ()) -> None:
        for k in (*values, *drop):
            if k not in self._saved_env:
                self._saved_env[k] = os.environ.get(k)
        for k in drop:
            os.environ.pop(k, None)
        os.environ.update(values)

    def _start_moto(self) -> str:
        o = self.options
        if o.moto == "thread":
            from moto.server import ThreadedMotoServer

            from mailqueue_local.motopatch import (
                install,
                install_atomic_dynamodb,
                install_fast_item_answers,
            )

            install_atomic_dynamodb()  # concurrent containers: conditional writes atomic
            if o.moto_patch:
                install()  # this process is the stack's own
                install_fast_item_answers()

            logging.getLogger("werkzeug").setLevel(logging.WARNING)
            server = ThreadedMotoServer(ip_address=o.host, port=o.moto_port, verbose=False)
            server.start()
            self._moto = server
            host, port = server.get_host_and_port()
            return f"http://{host}:{port}"
        if o.moto != "process":
            raise ValueError("moto must be process or thread")
        proc = MotoProcess(o.host, o.moto_port, self.log_dir / "moto.log", patched=o.moto_patch)
        self._moto = proc
        return proc.start()

    def _deploy(self) -> Deployment:
        mode = self.options.deploy
        if mode not in ("auto", "cloudformation", "direct"):
            raise ValueError("deploy must be auto, cloudformation or direct")
        if mode != "direct":
            reason = _cloudformation_unavailable()
            if reason is None:
                return self._deploy_cloudformation()
            if mode == "cloudformation":
                raise RuntimeError(f"cannot deploy the template: {reason}")
            log.warning("resources created directly, not from the template: %s", reason)
            if self.options.pools:
                raise RuntimeError("egress pools need the template deployed (CloudFormation)")
        from mailqueue.backends.aws.resources import create_resources

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
            wiring=builtin(
                res.delivery_queue_url, res.bounce_queue_url, res.bulk_delivery_queue_url
            ),
            bulk_delivery_queue_url=res.bulk_delivery_queue_url,
        )

    def _deploy_cloudformation(self) -> Deployment:
        """template.yaml → SAM translation → moto's CloudFormation (mailqueue_local.cfn)."""
        import boto3

        from mailqueue_local import cfn

        params = {
            "Hostname": HOSTNAME,
            **pool_parameters(self.options.pools),
            **self.options.template_parameters,
        }
        out = cfn.deploy_stack(self.endpoint_url, parameters=params)
        sess = boto3.session.Session()
        kw: dict[str, Any] = {"endpoint_url": self.endpoint_url, "region_name": REGION}
        physical: dict[str, str] = {}
        for page in (
            sess.client("cloudformation", **kw)
            .get_paginator("list_stack_resources")
            .paginate(StackName=out.stack_name)
        ):
            for r in page["StackResourceSummaries"]:
                physical[r["LogicalResourceId"]] = r["PhysicalResourceId"]
        lam = sess.client("lambda", **kw)
        configs = {
            lid: lam.get_function_configuration(FunctionName=name)
            for lid, name in out.functions.items()
        }
        wiring = from_template(cfn.load_template(cfn.default_template_path()), physical, configs)
        for note in wiring.notes:
            log.info("template: %s", note)
        if out.skipped:
            log.debug("left out of the moto deploy: %s", ", ".join(out.skipped))
        return Deployment(
            table=out.table,
            bucket=out.bucket,
            delivery_queue_url=out.delivery_queue_url,
            bounce_queue_url=out.bounce_queue_url,
            delivery_dlq_url=out.outputs.get("DeliveryDlqUrl"),
            bounce_dlq_url=out.outputs.get("BounceDlqUrl"),
            stream_arn=stream_arn_of(self.clients.dynamodb, out.table),
            source="cloudformation",
            wiring=wiring,
            bulk_delivery_queue_url=out.bulk_delivery_queue_url,
        )

    def _function_env(self, routes: Mapping[str, Any]) -> dict[str, str]:
        d = self.deployment
        assert d is not None
        env = dict(d.wiring.env)  # what the template declares, resolved by the deploy
        env.update(
            {
                "MQ_TABLE": d.table,
                "MQ_BUCKET": d.bucket,
                "MQ_DELIVERY_QUEUE_URL": d.delivery_queue_url,
                "MQ_BOUNCE_QUEUE_URL": d.bounce_queue_url,
                "MQ_BULK_DELIVERY_QUEUE_URL": d.bulk_delivery_queue_url,
                # what differs locally: the endpoint, the next hop, the job runner
                "MQ_REGION": REGION,
                "MQ_ENDPOINT_URL": self.endpoint_url,
                "MQ_HOSTNAME": env.get("MQ_HOSTNAME") or HOSTNAME,
                "MQ_ROUTES": json.dumps(routes, separators=(",", ":")),
                "MQ_JOB_RUNNER": "inline",  # admin bulk jobs run in the request locally
                "MQ_LOCAL_STACK": "true",  # `mailqueue doctor`: no public DNS here, says so
                # explicit and local only (the banner says so): any caller, any sender
                "MQ_SENDER_POLICY": PERMISSIVE_SENDER_POLICY,
                # the development token's and SigV4 callers are the local operators
                "MQ_ADMIN_PRINCIPALS": LOCAL_OPERATORS,
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
        sys.stdout, sys.stderr = out, err

    def _remove_router(self) -> None:
        if self._router is None:
            return
        out, err, rebound = self._router
        for h, old in rebound:
            h.setStream(old)
        sys.stdout, sys.stderr = out, err
        self._router = None

    def _load_functions(self) -> None:
        assert self.deployment is not None
        router = sys.stdout if isinstance(sys.stdout, OutputRouter) else None
        if importlib.util.find_spec("functions") is None:
            raise RuntimeError(
                "the functions/ folder is not importable: run from the repository root (make run)"
            )
        for spec in self.deployment.wiring.functions:
            if importlib.util.find_spec(spec.module) is None:
                log.warning("%s: %s not found; not started", spec.name, spec.module)
                continue
            f = open(self.log_dir / f"{spec.name}.log", "a", buffering=1, encoding="utf-8")
            self._logs.append(f)
            self.functions[spec.name] = LocalFunction(spec, f, router)

    def _start_triggers(self) -> None:
        o = self.options
        d = self.deployment
        assert d is not None
        w = d.wiring
        fns = self.functions
        sqs = self._poller_client(w)
        for t in w.sqs:
            fn = fns.get(t.function)
            if fn is None or t.function in o.disabled_triggers:
                continue
            n = trigger_concurrency(t, o.concurrency)
            self.concurrency.setdefault(t.function, []).append(n)
            for i in range(n):
                # n pollers: up to n invocations at once, each in a container of its own
                poller = SqsPoller(
                    sqs,
                    t.queue_url,
                    fn.invoke_pooled,
                    function_name=fn.spec.function_name,
                    batch_size=t.batch_size,
                    timeout_seconds=fn.spec.timeout_seconds,
                    wait_seconds=o.poll_wait_seconds,
                    report_batch_item_failures=t.report_batch_item_failures,
                )
                name = f"sqs-{t.function}" + (f"-{i}" if n > 1 else "")
                self.threads.append(Loop(name, sqs_step(poller, t.function), self._stop))
        for st in w.streams:
            fn = fns.get(st.function)
            if fn is None or not d.stream_arn:
                continue
            import boto3

            streams = boto3.session.Session().client(
                "dynamodbstreams", endpoint_url=self.endpoint_url, region_name=REGION
            )
            poller_s = StreamPoller(
                streams,
                d.stream_arn,
                fn,
                function_name=fn.spec.function_name,
                batch_size=st.batch_size,
                timeout_seconds=fn.spec.timeout_seconds,
                starting_position=st.starting_position,
                bisect_on_error=st.bisect_on_error,
                maximum_retry_attempts=st.maximum_retry_attempts,
                report_batch_item_failures=st.report_batch_item_failures,
                on_discard=self._failure_destination(st.on_failure_queue_url),
            )
            self.stream_pollers.append(poller_s)
            self.threads.append(Loop(f"stream-{st.function}", poller_s.step, self._stop))
        shortest: dict[str, ScheduleTrigger] = {}
        for sc in w.schedules:
            if sc.function in fns:
                prev = shortest.get(sc.function)
                if prev is None or sc.interval_seconds < prev.interval_seconds:
                    shortest[sc.function] = sc
        for sc in w.schedules:
            fn = fns.get(sc.function)
            if fn is None:
                continue
            # --sweep-interval replaces the sweeper's most frequent rate() locally
            every = (
                o.sweep_interval
                if sc.function == "sweeper" and shortest.get("sweeper") is sc
                else sc.interval_seconds
            )
            sched = Schedule(sc.rule_name, every, fn, sc.input)
            self.threads.append(Loop(f"schedule-{sc.rule_name}", sched.step, self._stop))
        if d.bucket:
            mirror = EventMirror(self.clients.s3, d.bucket, self.events_dir)
            self._mirror = mirror
            self.threads.append(Loop("events-mirror", mirror.step, self._stop))
        for t_ in self.threads:
            t_.start()
        http = {r.function: fns[r.function] for r in w.routes if r.function in fns}
        access = open(self.log_dir / "api-access.log", "a", buffering=1, encoding="utf-8")
        self._logs.append(access)
        self.gateway = ApiGateway(
            w.routes,
            http,
            LocalAuth(self.token),
            host=o.host,
            port=o.api_port,
            access_log=access,
        ).start()

    def _poller_client(self, w: Wiring) -> Any:
        """One SQS client for every poller thread, its connection pool as large as the
        number of pollers (each long poll holds a connection)."""
        import boto3
        from botocore.config import Config

        total = sum(trigger_concurrency(t, self.options.concurrency) for t in w.sqs)
        return boto3.session.Session().client(
            "sqs",
            endpoint_url=self.endpoint_url,
            region_name=REGION,
            config=Config(max_pool_connections=max(10, total + 2), read_timeout=30),
        )

    def _failure_destination(
        self, queue_url: str | None
    ) -> Callable[[dict[str, Any]], None] | None:
        if not queue_url:
            return None
        sqs = self.clients.sqs

        def send(record: dict[str, Any]) -> None:
            sqs.send_message(QueueUrl=queue_url, MessageBody=json.dumps(record))

        return send


#: the local stack runs a mapping's MaximumConcurrency divided by this (2 cores: more
#: pollers than that only contend for the CPU and split batches thinner); the option
#: (`--concurrency`) sets any value
LOCAL_CONCURRENCY_DIVISOR = 3


# `StackOptions(pools="local")` (make run --pools local): two pools on loopback source
# addresses, so the sink's peer address says which pool sent a mail
LOCAL_POOLS: dict[str, Any] = {
    "version": 1,
    "pools": {
        "default": {"addresses": ["127.0.0.2/32"], "bind": "127.0.0.2", "ehlo": "@hostname"},
        "bulk": {
            "addresses": ["127.0.0.3/32"],
            "bind": "127.0.0.3",
            "ehlo": "bulk.mailqueue.localhost",
        },
    },
    "routing": {"default": "default", "rules": [{"priority": "bulk", "pool": "bulk"}]},
}


def pool_parameters(pools: str) -> dict[str, str]:
    """The template's pool parameters for a pools file: EgressPools, Pools and the names
    of the pools other than the default one (at most two: the template's Pool2, Pool3)."""
    if not pools:
        return {}
    from mailqueue.outbound.pools import load_pools

    text = json.dumps(LOCAL_POOLS) if pools == "local" else pools
    if not text.lstrip().startswith("{"):
        text = Path(text).read_text()
    cfg = load_pools(text)  # refused here, with its place and reason, before any deploy
    extra = [n for n in cfg.pools if n != cfg.default]
    if len(extra) > 2:
        raise ConfigError(f"pools: the template takes 3 pools at most, not {len(cfg.pools)}")
    out = {"EgressPools": str(1 + len(extra)), "Pools": json.dumps(json.loads(text))}
    for i, name in enumerate(extra, start=2):
        out[f"Pool{i}Name"] = name
    return out


def trigger_concurrency(t: SqsTrigger, overrides: Mapping[str, int]) -> int:
    """Concurrent invocations for one SQS event source mapping locally: the option for
    its function (or "*"), else the mapping's MaximumConcurrency scaled down
    (LOCAL_CONCURRENCY_DIVISOR), else one."""
    n = overrides.get(t.function, overrides.get("*"))
    if n is None:
        n = max(1, round((t.max_concurrency or 1) / LOCAL_CONCURRENCY_DIVISOR))
    if not 1 <= n <= 1000:
        raise ValueError(f"concurrency for {t.function} must be within 1..1000, not {n}")
    return n


def parse_concurrency(values: Iterable[str]) -> dict[str, int]:
    """``["delivery=5", "bounce=2"]`` or ``["5"]`` (every SQS-triggered function) → a
    `StackOptions.concurrency` mapping; a clear error for anything else."""
    out: dict[str, int] = {}
    for raw in values:
        for part in raw.replace(",", " ").split():
            name, sep, number = part.rpartition("=")
            if not number.isdigit() or (sep and not name):
                raise ValueError(f"concurrency wants FUNCTION=N or N, not {part!r}")
            out[name or "*"] = int(number)
    return out


# `python -m moto.server` without werkzeug's line per request (errors still logged),
# DynamoDB one request at a time (conditional writes atomic, as in DynamoDB), optionally
# with the transaction patch and the item answers' direct JSON (mailqueue_local.motopatch)
_MOTO_MAIN = (
    "import logging, os, sys; logging.getLogger('werkzeug').setLevel(logging.WARNING)\n"
    "from mailqueue_local.motopatch import install_atomic_dynamodb; install_atomic_dynamodb()\n"
    "if os.environ.get('MQ_LOCAL_MOTO_PATCH') == '1':\n"
    "    from mailqueue_local.motopatch import install, install_fast_item_answers\n"
    "    install(); install_fast_item_answers()\n"
    "from moto.server import main; main(sys.argv[1:])"
)


class MotoProcess:
    """moto's server in a child process (``python -m moto.server``), stopped by PID."""

    def __init__(self, host: str, port: int, log_path: Path, *, patched: bool = True) -> None:
        self.host = host
        self.port = port
        self.log_path = log_path
        self.patched = patched
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 30.0) -> str:
        if self.port == 0:
            with socket.socket() as s:
                s.bind((self.host, 0))
                self.port = int(s.getsockname()[1])
        with open(self.log_path, "ab") as log_file:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", _MOTO_MAIN, "-H", self.host, "-p", str(self.port)],
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env={**os.environ, "MQ_LOCAL_MOTO_PATCH": "1" if self.patched else "0"},
                preexec_fn=_die_with_parent(),
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"moto exited with {self.proc.returncode}; see {self.log_path}")
            with socket.socket() as s:
                s.settimeout(0.5)
                if s.connect_ex((self.host, self.port)) == 0:
                    return f"http://{self.host}:{self.port}"
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"moto did not listen on {self.host}:{self.port} within {timeout} s")

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


def _die_with_parent() -> Callable[[], None] | None:
    """Linux: the child gets SIGTERM should we die without stopping it (a SIGKILL).

    prctl is looked up here, in the parent: the function run between fork and exec only
    calls it (no import, no lock another thread might hold).
    """
    try:
        import ctypes

        prctl = ctypes.CDLL("libc.so.6", use_errno=True).prctl
    except (OSError, AttributeError):
        return None  # not Linux: stop() still ends it on every orderly exit
    return functools.partial(prctl, 1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _cloudformation_unavailable() -> str | None:
    """Why the template cannot be deployed here, or None when it can."""
    for module in ("yaml", "samtranslator"):
        if importlib.util.find_spec(module) is None:
            return f"the {module} package is not installed"
    from mailqueue_local import cfn

    if not cfn.default_template_path().exists():
        return "template.yaml not found"
    return None


def _relay_hop(relay: str) -> str:
    """``host:port`` → ``[address]:port`` (resolved once, so no MX lookup happens)."""
    host, sep, port = relay.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"--relay wants host:port, not {relay!r}")
    host = host.strip("[]")
    address = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)[0][4][0]
    return f"[{address}]:{port}"


class EventMirror:
    """Copies the event log from moto's S3 (in memory) to `var/events/` on disk.

    On AWS the event log stays in S3; locally it would vanish with moto, and `make report`
    reads it from disk. Same keys below `events/`, so the partitions (dt=/hr=) carry over.
    """

    def __init__(self, s3: Any, bucket: str, target: Path, prefix: str = "events/") -> None:
        self.s3 = s3
        self.bucket = bucket
        self.target = target
        self.prefix = prefix
        self.copied: dict[str, str] = {}  # key -> ETag already on disk

    def sync(self) -> int:
        n = 0
        paginator = self.s3.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self.bucket, Prefix=self.prefix):
            for obj in page.get("Contents", []):
                key, etag = obj["Key"], obj.get("ETag", "")
                if self.copied.get(key) == etag:
                    continue
                dest = self.target / key[len(self.prefix) :]
                dest.parent.mkdir(parents=True, exist_ok=True)
                body = self.s3.get_object(Bucket=self.bucket, Key=key)["Body"].read()
                tmp = dest.with_name(dest.name + ".tmp")
                tmp.write_bytes(body)
                tmp.replace(dest)  # a reader never sees half a file
                self.copied[key] = etag
                n += 1
        return n

    def step(self) -> float:
        self.sync()
        return 5.0
