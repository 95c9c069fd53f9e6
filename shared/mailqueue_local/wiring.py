"""What runs locally and what triggers it, read from the SAM template.

`from_template` reads template.yaml (the same file `sam deploy` uses) together with what
the moto deploy made of it (physical ids, the functions' resolved configuration), and
returns the functions (code folder, handler, timeout, memory, environment) and their
triggers: SQS and DynamoDB stream event source mappings, schedules and HTTP API routes.
`builtin` is the same wiring written out, for a run without the CloudFormation deploy.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from mailqueue_local.gateway import DEFAULT_ROUTES, Route
from mailqueue_local.runtime import FunctionSpec


@dataclass(frozen=True)
class SqsTrigger:
    function: str
    queue_url: str
    batch_size: int = 10
    report_batch_item_failures: bool = False
    # ScalingConfig.MaximumConcurrency: invocations the mapping runs at once (None: the
    # template sets none; Lambda then scales to the account's limit, locally one)
    max_concurrency: int | None = None


@dataclass(frozen=True)
class StreamTrigger:
    function: str
    batch_size: int = 100
    starting_position: str = "TRIM_HORIZON"
    bisect_on_error: bool = False
    maximum_retry_attempts: int = -1
    report_batch_item_failures: bool = False
    on_failure_queue_url: str | None = None


@dataclass(frozen=True)
class ScheduleTrigger:
    function: str
    rule_name: str
    interval_seconds: float
    input: dict[str, Any] | None = None


@dataclass
class Wiring:
    functions: list[FunctionSpec] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)  # union of the functions' variables
    sqs: list[SqsTrigger] = field(default_factory=list)
    streams: list[StreamTrigger] = field(default_factory=list)
    schedules: list[ScheduleTrigger] = field(default_factory=list)
    routes: list[Route] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what could not be reproduced, and why

    def function(self, name: str) -> FunctionSpec | None:
        return next((f for f in self.functions if f.name == name), None)


_RATE = re.compile(r"^rate\((\d+)\s+(minute|minutes|hour|hours|day|days)\)$")
_UNIT = {"minute": 60, "hour": 3600, "day": 86400}


def parse_rate(expression: str) -> float | None:
    """``rate(5 minutes)`` → 300.0; None for anything else (cron expressions)."""
    m = _RATE.match(expression.strip())
    if m is None:
        return None
    return float(int(m.group(1)) * _UNIT[m.group(2).rstrip("s")])


def _target(value: Any) -> str | None:
    """The logical id a Ref or GetAtt points at."""
    if isinstance(value, dict):
        if "Ref" in value:
            return str(value["Ref"])
        att = value.get("Fn::GetAtt")
        if isinstance(att, list) and att:
            return str(att[0])
        if isinstance(att, str):
            return att.split(".", 1)[0]
    return None


def _attribute(value: Any) -> str | None:
    att = value.get("Fn::GetAtt") if isinstance(value, dict) else None
    if isinstance(att, list) and len(att) > 1:
        return str(att[1])
    if isinstance(att, str) and "." in att:
        return att.split(".", 1)[1]
    return None


def _bool(value: Any) -> bool:
    return value is True or str(value).lower() == "true"


def from_template(
    template: Mapping[str, Any],
    physical: Mapping[str, str],
    configs: Mapping[str, Mapping[str, Any]],
) -> Wiring:
    """`template`: the SAM template as loaded; `physical`: logical id → physical id of the
    deployed resources; `configs`: function logical id → its Lambda configuration."""
    resources: Mapping[str, Any] = template.get("Resources") or {}
    globals_fn: Mapping[str, Any] = (template.get("Globals") or {}).get("Function") or {}
    w = Wiring()
    names: dict[str, str] = {}  # function logical id → local name
    declared: dict[str, tuple[str, str]] = {}  # variable → (value, function)
    for lid, res in resources.items():
        if res.get("Type") != "AWS::Serverless::Function" or lid not in configs:
            continue
        props = res.get("Properties") or {}
        code = str(props.get("CodeUri", "")).strip("/")
        handler = str(props.get("Handler") or globals_fn.get("Handler") or "app.handler")
        module_part, _, attribute = handler.rpartition(".")
        if not code or "/" not in code or not module_part:
            w.notes.append(f"{lid}: CodeUri {code!r} / Handler {handler!r} not runnable here")
            continue
        cfg = configs[lid]
        name = code.rsplit("/", 1)[1]
        names[lid] = name
        w.functions.append(
            FunctionSpec(
                name=name,
                module=f"{code.replace('/', '.')}.{module_part}",
                attribute=attribute,
                timeout_seconds=float(cfg.get("Timeout", 3)),
                memory_mb=int(cfg.get("MemorySize", 128)),
                physical_name=str(cfg.get("FunctionName") or physical.get(lid) or ""),
            )
        )
        variables = (cfg.get("Environment") or {}).get("Variables") or {}
        for k, v in variables.items():
            value = str(v)
            seen = declared.get(k)
            if seen is not None and seen[0] != value:
                w.notes.append(
                    f"{k}: {seen[1]} says {seen[0]!r}, {name} says {value!r}; "
                    f"one process environment, {seen[1]}'s value kept"
                )
                continue
            declared[k] = (value, name)
            w.env[k] = value
        for ev_name, ev in (props.get("Events") or {}).items():
            _event(w, name, lid, ev_name, ev, physical)
    defaults = {k: v.get("Default") for k, v in (template.get("Parameters") or {}).items()}
    for lid, res in resources.items():
        if res.get("Type") == "AWS::Lambda::EventSourceMapping":
            props = _with_defaults(res.get("Properties") or {}, defaults)
            _mapping(w, lid, props, names, resources, physical)
    return w


def _with_defaults(p: Mapping[str, Any], defaults: Mapping[str, Any]) -> dict[str, Any]:
    """`!Ref <parameter>` values replaced by the parameter's default (the events source's
    batch size and window, the delivery mapping's MaximumConcurrency are parameters)."""
    out = dict(p)
    for k, v in p.items():
        if isinstance(v, dict) and set(v) == {"Ref"} and defaults.get(v["Ref"]) is not None:
            out[k] = defaults[v["Ref"]]
        elif isinstance(v, dict) and k == "ScalingConfig":
            out[k] = _with_defaults(v, defaults)
    return out


def _max_concurrency(p: Mapping[str, Any]) -> int | None:
    value = (p.get("ScalingConfig") or {}).get("MaximumConcurrency")
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None  # an expression the defaults do not resolve


def _event(
    w: Wiring, name: str, lid: str, ev_name: str, ev: Mapping[str, Any], physical: Mapping[str, str]
) -> None:
    kind = ev.get("Type")
    p = ev.get("Properties") or {}
    if kind == "HttpApi":
        auth = "NONE" if (p.get("Auth") or {}).get("Authorizer") == "NONE" else "AWS_IAM"
        w.routes.append(Route(str(p.get("Method", "ANY")), str(p.get("Path", "/")), name, auth))
    elif kind in ("Schedule", "ScheduleV2"):
        expr = str(p.get("Schedule") or p.get("ScheduleExpression") or "")
        seconds = parse_rate(expr)
        if seconds is None:
            w.notes.append(f"{lid}.{ev_name}: {expr!r} is not a rate(); not scheduled locally")
            return
        raw = p.get("Input")
        doc = json.loads(raw) if isinstance(raw, str) else raw
        w.schedules.append(
            ScheduleTrigger(name, f"{physical.get(lid, lid)}-{ev_name}", seconds, doc)
        )
    elif kind == "SQS":
        queue = _target(p.get("Queue"))
        url = physical.get(queue or "")
        if url:
            w.sqs.append(
                SqsTrigger(
                    name,
                    url,
                    int(p.get("BatchSize", 10)),
                    "ReportBatchItemFailures" in (p.get("FunctionResponseTypes") or []),
                    _max_concurrency(p),
                )
            )
    elif kind == "DynamoDB":
        w.streams.append(_stream(name, p, physical))
    elif kind is not None:
        w.notes.append(f"{lid}.{ev_name}: {kind} events are not reproduced locally")


def _stream(name: str, p: Mapping[str, Any], physical: Mapping[str, str]) -> StreamTrigger:
    dest = ((p.get("DestinationConfig") or {}).get("OnFailure") or {}).get("Destination")
    return StreamTrigger(
        function=name,
        batch_size=int(p.get("BatchSize", 100)),
        starting_position=str(p.get("StartingPosition", "TRIM_HORIZON")),
        bisect_on_error=_bool(p.get("BisectBatchOnFunctionError", False)),
        maximum_retry_attempts=int(p.get("MaximumRetryAttempts", -1)),
        report_batch_item_failures="ReportBatchItemFailures"
        in (p.get("FunctionResponseTypes") or []),
        on_failure_queue_url=physical.get(_target(dest) or ""),
    )


def _mapping(
    w: Wiring,
    lid: str,
    p: Mapping[str, Any],
    names: Mapping[str, str],
    resources: Mapping[str, Any],
    physical: Mapping[str, str],
) -> None:
    fn = names.get(_target(p.get("FunctionName")) or "")
    source = _target(p.get("EventSourceArn"))
    if fn is None or source is None:
        w.notes.append(f"{lid}: function or event source not resolvable; not started")
        return
    kind = (resources.get(source) or {}).get("Type")
    if kind == "AWS::SQS::Queue" and physical.get(source):
        w.sqs.append(
            SqsTrigger(
                fn,
                physical[source],
                int(p.get("BatchSize", 10)),
                "ReportBatchItemFailures" in (p.get("FunctionResponseTypes") or []),
                _max_concurrency(p),
            )
        )
    elif kind == "AWS::DynamoDB::Table" and _attribute(p.get("EventSourceArn")) == "StreamArn":
        w.streams.append(_stream(fn, p, physical))
    else:
        w.notes.append(f"{lid}: event source {source} ({kind}) is not reproduced locally")


BUILTIN_FUNCTIONS: tuple[FunctionSpec, ...] = (
    FunctionSpec("ingress", "functions.ingress.app", timeout_seconds=30, memory_mb=1024),
    FunctionSpec("delivery", "functions.delivery.app", timeout_seconds=300),
    FunctionSpec("bounce", "functions.bounce.app", timeout_seconds=120),
    FunctionSpec("sweeper", "functions.sweeper.app", timeout_seconds=240, memory_mb=256),
    FunctionSpec("admin", "functions.admin.app", timeout_seconds=120),
    FunctionSpec("events", "functions.events.app", timeout_seconds=60),
)


DELIVERY_MAX_CONCURRENCY = 60  # the template's DeliveryMaxConcurrency default
BULK_DELIVERY_MAX_CONCURRENCY = 30  # and BulkDeliveryMaxConcurrency's


def builtin(
    delivery_queue_url: str, bounce_queue_url: str, bulk_delivery_queue_url: str = ""
) -> Wiring:
    """The template's wiring written out (resources created without CloudFormation)."""
    bulk = [
        SqsTrigger("delivery", bulk_delivery_queue_url, 10, True, BULK_DELIVERY_MAX_CONCURRENCY)
    ]
    return Wiring(
        functions=list(BUILTIN_FUNCTIONS),
        env={"MQ_LEASE_SECONDS": "360", "POWERTOOLS_METRICS_NAMESPACE": "mailqueue"},
        sqs=[
            SqsTrigger("delivery", delivery_queue_url, 10, True, DELIVERY_MAX_CONCURRENCY),
            *(bulk if bulk_delivery_queue_url else []),
            SqsTrigger("bounce", bounce_queue_url, 10, True),
        ],
        streams=[StreamTrigger("events", 100, "TRIM_HORIZON", True, 10)],
        schedules=[
            ScheduleTrigger("sweeper", "mailqueue-sweeper-Sweep", 300.0, {"orphans": False}),
            ScheduleTrigger(
                "sweeper", "mailqueue-sweeper-DailyOrphans", 86400.0, {"orphans": True}
            ),
        ],
        routes=list(DEFAULT_ROUTES),
    )
