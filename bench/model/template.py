"""template.yaml's settings as the cost model reads them (memory, tracing, batch sizes,
filters, indexes, schedules, alarms, dashboards, capacity mode)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.model.dynamodb import Index
from bench.model.prices import SECONDS_PER_MONTH

ROOT = Path(__file__).resolve().parent.parent.parent
FUNCTIONS = ("ingress", "delivery", "bounce", "events", "sweeper", "admin")


@dataclass
class Template:
    memory_mb: dict[str, int]
    architecture: str
    tracing: bool
    alarms: int
    dashboards: int
    schedules: dict[str, float]  # function -> invocations per month
    log_retention_days: int
    events_batch_size: int
    events_window_s: int
    events_filters: list[dict[str, Any]]
    delivery_batch_size: int
    indexes: tuple[Index, ...]
    sqs_sources: int = 2  # SQS event source mappings (delivery, bulk delivery, bounce)
    # the state table's capacity mode (StateTableCapacity) and, when provisioned, the
    # least capacity units kept on the table and on each index (write, read)
    # delivery containers at most (the SQS event sources' MaximumConcurrency, summed): the
    # per-container caches (DKIM keys) refresh per container, not per mail
    delivery_containers: int = 30
    state_capacity: str = "on-demand"
    state_min_units: tuple[int, int] = (0, 0)
    # provisioned only: the share of the provisioned capacity used over a month; None:
    # simulated (bench/model/autoscale.py) at the target below on the assumed traffic profile
    state_use: float | None = None
    state_target: float = 0.7  # StateTableTargetUtilization / 100
    # the delivery event sources' MaximumBatchingWindowInSeconds (0: none set)
    delivery_window_s: float = 0.0
    events_retention_days: int = 400  # EventsExpirationDays (0: kept forever)
    # the stream source's ParallelizationFactor: a shard's records over that many batches
    events_parallelization: int = 1
    events_transition_days: int = 30  # EventsTransitionDays: events/ to STANDARD_IA
    # MaxQueueLifetimeSeconds: how long a content item is kept past its mail's due time
    # (with StorageSettings' margin), whatever the run's own (short) lifetime was
    queue_lifetime_s: int = 5 * 86400
    # functions whose START/REPORT lines reach CloudWatch Logs: all but those whose
    # LoggingConfig sets SystemLogLevel WARN (those lines are INFO: "Log-level filtering",
    # docs.aws.amazon.com/lambda/latest/dg/monitoring-cloudwatchlogs-log-level.html)
    platform_logs: frozenset[str] = frozenset(FUNCTIONS)

    @classmethod
    def load(cls, path: Path = ROOT / "template.yaml", tracing: bool | None = None) -> Template:
        from mailqueue_local.cfn import condition_off, load_template

        t = load_template(path)
        off = condition_off(t)  # e.g. the event destinations' resources: off by default
        res = {lid: r for lid, r in t["Resources"].items() if lid not in off}
        params = t.get("Parameters", {})
        glob = t.get("Globals", {}).get("Function", {})
        mem: dict[str, int] = {}
        schedules: dict[str, float] = {}
        platform: set[str] = set()
        for name in FUNCTIONS:
            fn = res.get(f"{name.capitalize()}Function", {}).get("Properties", {})
            mem[name] = int(_param(fn.get("MemorySize", glob.get("MemorySize", 128)), params))
            logging = fn.get("LoggingConfig") or glob.get("LoggingConfig") or {}
            level = str(_param(logging.get("SystemLogLevel", "INFO"), params)).upper()
            if logging.get("LogFormat") != "JSON" or level != "WARN":
                platform.add(name)
            for ev in (fn.get("Events") or {}).values():
                if ev.get("Type") == "Schedule":
                    schedules[name] = schedules.get(name, 0.0) + _per_month(
                        str(ev["Properties"]["Schedule"])
                    )
        trace = glob.get("Tracing")
        if tracing is None:
            p = params.get("Tracing", {})
            tracing = trace == "Active" or (
                isinstance(trace, dict) and str(p.get("Default", "")).lower() == "active"
            )
        ev = res["EventsStreamSource"]["Properties"]
        filters = [
            json.loads(f["Pattern"]) for f in (ev.get("FilterCriteria") or {}).get("Filters", [])
        ]
        table = res["StateTable"]["Properties"]
        table_keys = tuple(k["AttributeName"] for k in table.get("KeySchema", []))
        ixs = tuple(
            Index(
                g["IndexName"],
                tuple(k["AttributeName"] for k in g["KeySchema"]),
                str(_param(g["Projection"]["ProjectionType"], params)),
                tuple(g["Projection"].get("NonKeyAttributes") or ()),
                table_keys or ("pk", "sk"),
            )
            for g in table.get("GlobalSecondaryIndexes", [])
        )
        dash_cond = {k: v for k, v in res.items() if v.get("Type") == "AWS::CloudWatch::Dashboard"}
        dashboards = sum(
            1
            for v in dash_cond.values()
            if not v.get("Condition")
            or str(params.get(str(v.get("Condition")), {}).get("Default", "")) == "true"
        )
        retention = int(params.get("LogRetentionDays", {}).get("Default", 30))

        def default(name: str, fallback: Any) -> Any:
            return params.get(name, {}).get("Default", fallback)

        return cls(
            delivery_containers=sum(
                int(
                    _param(
                        (v["Properties"].get("ScalingConfig") or {}).get("MaximumConcurrency", 0),
                        params,
                    )
                )
                for v in res.values()
                if v.get("Type") == "AWS::Lambda::EventSourceMapping"
                and v["Properties"].get("FunctionName") == {"Ref": "DeliveryFunction"}
            )
            or 30,
            queue_lifetime_s=int(default("MaxQueueLifetimeSeconds", 5 * 86400)),
            state_capacity=str(default("StateTableCapacity", "on-demand")),
            state_min_units=(
                int(default("StateTableWriteCapacityMin", 0)),
                int(default("StateTableReadCapacityMin", 0)),
            ),
            state_target=float(default("StateTableTargetUtilization", 70)) / 100.0,
            memory_mb=mem,
            architecture=(glob.get("Architectures") or ["x86_64"])[0],
            tracing=bool(tracing),
            alarms=sum(1 for v in res.values() if v.get("Type") == "AWS::CloudWatch::Alarm"),
            dashboards=dashboards,
            schedules=schedules,
            log_retention_days=retention,
            events_batch_size=int(_param(ev.get("BatchSize", 100), params)),
            events_window_s=int(_param(ev.get("MaximumBatchingWindowInSeconds", 0), params)),
            events_parallelization=int(_param(ev.get("ParallelizationFactor", 1), params)),
            events_filters=filters,
            delivery_batch_size=int(
                res["DeliveryEventSource"]["Properties"].get("BatchSize", 10)
                if "DeliveryEventSource" in res
                else 10
            ),
            indexes=ixs,
            delivery_window_s=float(
                _param(
                    (res.get("DeliveryEventSource", {}).get("Properties") or {}).get(
                        "MaximumBatchingWindowInSeconds", 0
                    ),
                    params,
                )
            ),
            events_retention_days=int(default("EventsExpirationDays", 400)),
            events_transition_days=int(default("EventsTransitionDays", 30)),
            platform_logs=frozenset(platform),
            sqs_sources=sum(
                1
                for v in res.values()
                if v.get("Type") == "AWS::Lambda::EventSourceMapping"
                and res.get(
                    str((v["Properties"].get("EventSourceArn") or {}).get("Fn::GetAtt", [""])[0]),
                    {},
                ).get("Type")
                == "AWS::SQS::Queue"
            ),
        )


def _param(value: Any, params: dict[str, Any]) -> Any:
    """A property's value, or the default of the parameter a `!Ref` names."""
    if isinstance(value, dict) and set(value) == {"Ref"}:
        return params[value["Ref"]]["Default"]
    return value


def _per_month(expr: str) -> float:
    if expr.startswith("rate("):
        n, unit = expr[5:-1].split()
        secs = {
            "minute": 60,
            "minutes": 60,
            "hour": 3600,
            "hours": 3600,
            "day": 86400,
            "days": 86400,
        }[unit]
        return SECONDS_PER_MONTH / (int(n) * secs)
    return 30.0  # a cron expression: count it as daily
