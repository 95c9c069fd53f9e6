"""The cost model: dollars per million mails, computed from what a run measured.

`measure()` runs the local stack (`make run`'s: the template deployed into moto, the real
handlers, the SQS and stream event sources, the SMTP sink on 127.0.0.1), submits mails over
the HTTP API one per call, waits until each is delivered and cleaned up and the stream is
drained, and records:

* every AWS request each function made (botocore hooks on every session of the process),
  by function and operation; requests made outside a function (the local event sources,
  this harness) are not billed here: the model prices Lambda's event sources itself;
* read units from the items each read returned, write units from the stream's old and new
  images of every write (the larger of the two, per 1 KB), on the table and on each index
  the item is in (a key change is a delete plus a put), twice for transactional writes;
* every stream record of the table (the events function's share, through the template's
  filter; runs of revisions that kept queue-size counters also replayed the records
  through them, `counters_by_batch`, and the model still prices those runs);
* each function's invocations and time in the handler, its log bytes and EMF metrics;
* the event-log objects written.

`model()` turns a `Run` into $ per month at a volume, per service, from the prices in
bench/aws-prices.json and the template's settings (memory, architecture, tracing, batch
sizes, alarms, dashboards, schedules); Lambda's CPU scales with memory (`lambda_seconds`)
and `memory_sweep` prices each function at each memory size. Assumptions that are not measured are named in
`ASSUMPTIONS` and printed with the figures.
"""

from __future__ import annotations

import base64
import contextvars
import json
import math
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from bench import autoscale

ROOT = Path(__file__).resolve().parent.parent
PRICES: dict[str, Any] = json.loads((Path(__file__).parent / "aws-prices.json").read_text())
SECONDS_PER_MONTH = 730 * 3600
VOLUMES = (1_000_000, 10_000_000, 100_000_000)
FUNCTIONS = ("ingress", "delivery", "bounce", "events", "sweeper", "admin")

#: What is assumed rather than measured (printed with the model).
ASSUMPTIONS = {
    "stream_shards": 4,  # an on-demand table starts with 4 partitions (4,000 WRU/s)
    "esm_pollers_per_queue": 5,  # Lambda's SQS event source: 5 long-polling pollers
    "long_poll_seconds": 20,
    "platform_log_bytes_per_invocation": 0,  # set from the REPORT line format below
    "cw_log_event_overhead_bytes": 26,  # CloudWatch Logs bills 26 B per event on top
    "api_requests_per_mail": 1,  # one mail per API call, under 512 KB
    "smtp_ms_per_mail_relay": 30,  # SMTP exchange with an in-region relay, TLS amortised
    # a direct MX on the internet: issue 25's figure ("hundreds of ms"; ~400 ms per
    # transaction), not measured here (no internet from this machine); Lambda bills the wait
    "smtp_ms_per_mail_direct": 400,
    # a failed conditional write bills the larger of the item's and the write's size
    # (DynamoDB developer guide, "read/write operations"); a cancelled transaction's items
    # are counted at twice that (transactional writes bill 2x): assumed
    # StateTableCapacity=provisioned: the traffic over a week that auto scaling follows
    # (bench/autoscale.py simulates its documented rules on it and gives the average use
    # of what is provisioned, per table and index): a weekday curve 4:1, weekends at 60 %,
    # a bulk hour a weekday (a tenth of the day's mail), three 20-minute bulk sends a day
    "provisioned_traffic_profile": "bursty",
}
#: AWS's answer time per request inside a region (typical published figures), added to the
#: handler's own CPU time to get a Lambda duration (moto's answer time is not AWS's).
LATENCY_MS = {"dynamodb": 6.0, "sqs": 8.0, "s3:PutObject": 20.0, "s3": 12.0}
# Lambda's own lines per invocation (START / END / REPORT), at their usual lengths
_PLATFORM_LINES = (
    "START RequestId: 8f5c2a9e-1b2c-4d3e-9f00-0123456789ab Version: $LATEST\n"
    "END RequestId: 8f5c2a9e-1b2c-4d3e-9f00-0123456789ab\n"
    "REPORT RequestId: 8f5c2a9e-1b2c-4d3e-9f00-0123456789ab\tDuration: 123.45 ms\t"
    "Billed Duration: 124 ms\tMemory Size: 512 MB\tMax Memory Used: 98 MB\t\n"
)
ASSUMPTIONS["platform_log_bytes_per_invocation"] = len(_PLATFORM_LINES)


# ---------------------------------------------------------------- DynamoDB sizes
def _num_size(n: str) -> int:
    digits = n.lstrip("-").replace(".", "").strip("0") or "0"
    return (len(digits) + 1) // 2 + 1


def value_size(v: Mapping[str, Any]) -> int:
    """DynamoDB's size of one attribute value (DynamoDB JSON), per its documented rules."""
    ((t, x),) = v.items()
    if t == "S":
        return len(str(x).encode())
    if t == "N":
        return _num_size(str(x))
    if t == "B":
        return len(x) if isinstance(x, bytes | bytearray) else len(base64.b64decode(x))
    if t in ("BOOL", "NULL"):
        return 1
    if t == "SS":
        return sum(len(s.encode()) for s in x)
    if t == "NS":
        return sum(_num_size(s) for s in x)
    if t == "BS":
        return sum(len(b) for b in x)
    if t == "L":
        return 3 + sum(1 + value_size(e) for e in x)
    if t == "M":
        return 3 + sum(1 + len(k.encode()) + value_size(e) for k, e in x.items())
    raise ValueError(f"unknown attribute type {t}")


def item_size(item: Mapping[str, Any] | None) -> int:
    if not item:
        return 0
    return sum(len(k.encode()) + value_size(v) for k, v in item.items())


def units(size: int, unit: int) -> int:
    return max(1, math.ceil(size / unit))


@dataclass(frozen=True)
class Index:
    name: str
    keys: tuple[str, ...]
    projection: str  # ALL | KEYS_ONLY | INCLUDE
    include: tuple[str, ...] = ()  # INCLUDE's NonKeyAttributes
    table_keys: tuple[str, ...] = ("pk", "sk")  # projected into every index entry

    def entry(self, img: Mapping[str, Any] | None) -> dict[str, Any]:
        """What the index holds of an item (the whole item under ALL): a write that leaves
        it as it was and on the same key writes nothing to the index."""
        if self.projection == "ALL":
            return dict(img or {})
        keep = set(self.keys) | set(self.table_keys) | set(self.include)
        return {k: v for k, v in (img or {}).items() if k in keep}

    def projected_size(self, img: Mapping[str, Any] | None) -> int:
        """An index entry's size: the whole item (ALL), or the table's and the index's
        keys plus the included attributes (KEYS_ONLY, INCLUDE)."""
        if self.projection == "ALL":
            return item_size(img)
        keep = set(self.keys) | set(self.table_keys) | set(self.include)
        return item_size({k: v for k, v in (img or {}).items() if k in keep})


def write_units(
    record: Mapping[str, Any], indexes: tuple[Index, ...], transactional: bool = False
) -> dict[str, int]:
    """WRU of the write behind one stream record: the table, and each index it touches."""
    ddb = record.get("dynamodb") or {}
    old, new = ddb.get("OldImage"), ddb.get("NewImage")
    if (record.get("userIdentity") or {}).get("principalId") == "dynamodb.amazonaws.com":
        return {}  # a TTL deletion: free
    factor = 2 if transactional else 1
    out = {"table": factor * units(max(item_size(old), item_size(new)), 1024)}
    for ix in indexes:

        def key(img: Mapping[str, Any] | None, ix: Index = ix) -> tuple[str, ...] | None:
            if not img or any(k not in img for k in ix.keys):
                return None
            return tuple(json.dumps(img[k], sort_keys=True) for k in ix.keys)

        def size(img: Mapping[str, Any] | None, ix: Index = ix) -> int:
            return ix.projected_size(img)

        ko, kn = key(old), key(new)
        n = 0
        if ko is not None and kn is not None and ko == kn:
            # the entry stays on its key: written only if what it projects changed ("If a
            # write to a table does not require a global secondary index update, then no
            # write capacity is consumed from the index": "Provisioned throughput
            # considerations for Global Secondary Indexes", docs.aws.amazon.com/
            # amazondynamodb/latest/developerguide/GSI.ThroughputConsiderations.html) —
            # under KEYS_ONLY a claim, which changes no key, writes no entry
            if ix.entry(old) != ix.entry(new):
                n = units(max(size(old), size(new)), 1024)
        else:
            if ko is not None:
                n += units(size(old), 1024)
            if kn is not None:
                n += units(size(new), 1024)
        if n:
            out[ix.name] = factor * n
    return out


# ---------------------------------------------------------------- template settings
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
    # simulated (bench/autoscale.py) at the target below on the assumed traffic profile
    state_use: float | None = None
    state_target: float = 0.7  # StateTableTargetUtilization / 100
    # the delivery event sources' MaximumBatchingWindowInSeconds (0: none set)
    delivery_window_s: float = 0.0
    events_retention_days: int = 400  # EventsExpirationDays (0: kept forever)
    # the stream source's ParallelizationFactor: a shard's records over that many batches
    events_parallelization: int = 1
    events_transition_days: int = 30  # EventsTransitionDays: events/ to STANDARD_IA
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


def matches(pattern: Mapping[str, Any], record: Mapping[str, Any]) -> bool:
    """Lambda event filtering (the subset the template uses: nested keys, lists of exact
    values or {"prefix": ...})."""
    for k, want in pattern.items():
        got = record.get(k) if isinstance(record, Mapping) else None
        if isinstance(want, dict):
            if not isinstance(got, Mapping) or not matches(want, got):
                return False
        else:
            ok = False
            for w in want:
                if isinstance(w, dict) and "prefix" in w:
                    ok = ok or (isinstance(got, str) and got.startswith(w["prefix"]))
                else:
                    ok = ok or got == w
            if not ok:
                return False
    return True


def delivered_to_events(
    records: list[dict[str, Any]], filters: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    if not filters:
        return records
    return [r for r in records if any(matches(f, r) for f in filters)]


# ---------------------------------------------------------------- the measured run
@dataclass
class Run:
    mails: int
    requests: dict[str, Counter[str]] = field(default_factory=dict)  # function -> op -> n
    rru: Counter[str] = field(default_factory=Counter)  # function -> read units
    invocations: Counter[str] = field(default_factory=Counter)
    busy_s: Counter[str] = field(default_factory=Counter)
    # CPU time of each function's handler thread and of every thread it started (the
    # lanes: `_ThreadCpu`); runs before issue 40 counted the handler thread alone
    cpu_s: dict[str, float] = field(default_factory=dict)
    # CPU of each function's composition root (`default_service()`), built before the
    # measured window as a warm container has it: once per container, not per mail
    init_cpu_s: dict[str, float] = field(default_factory=dict)
    log_bytes: Counter[str] = field(default_factory=Counter)
    log_events: Counter[str] = field(default_factory=Counter)
    api_log_bytes: int = 0
    records: list[dict[str, Any]] = field(default_factory=list)
    transact_keys: set[tuple[str, str]] = field(default_factory=set)
    event_objects: int = 0
    event_bytes: int = 0
    metrics: set[tuple[str, str, str]] = field(default_factory=set)
    counters_by_batch: dict[int, dict[str, float]] = field(default_factory=dict)
    replayed_per_mail: float = 0.0  # records per mail the counters replay was fed
    # SMTP transactions in progress at once per delivery invocation (bench.scale measures
    # it against a slow local peer; 1 = one after the other)
    smtp_parallel: float = 1.0
    wall_s: float = 0.0
    mails_per_call: int = 1  # mails per API request (POST /v1/messages/batch when > 1)
    # every AWS request a function made, in completion order (bench.scale reads the
    # partition key values, units, queues, S3 keys and durations from it)
    trace: list[dict[str, Any]] = field(default_factory=list)
    records_in: Counter[str] = field(default_factory=Counter)  # event records per function
    sweeps: int = 0  # scheduled sweeps run (their log and EMF output is in log_bytes)

    def ops(self, function: str | None = None) -> Counter[str]:
        out: Counter[str] = Counter()
        for fn, c in self.requests.items():
            if function is None or fn == function:
                out.update(c)
        return out


# which function a request belongs to: a context variable, so the delivery service's
# lanes (threads that run in a copy of the invocation's context) are credited too
_function: contextvars.ContextVar[str | None] = contextvars.ContextVar("mq_fn", default=None)


class _Hooks:
    """botocore hooks on every session made while installed (as mailqueue.backends.aws.limits does)."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.lock = threading.Lock()

    def before(self, model: Any, params: Any, context: Any, **_: Any) -> None:
        fn = _function.get()
        if fn is None:
            return
        op = f"{model.service_model.service_name}:{model.name}"
        context["mq_fn"] = fn
        context["mq_consistent"] = bool(params.get("ConsistentRead"))
        context["mq_params"] = params
        context["mq_t0"] = time.perf_counter()
        if op == "dynamodb:BatchGetItem":
            # per key requested: a key with no item still costs a read unit's minimum
            context["mq_keys"] = [
                (len(v.get("Keys", [])), bool(v.get("ConsistentRead")))
                for v in params.get("RequestItems", {}).values()
            ]
        with self.lock:
            self.run.requests.setdefault(fn, Counter())[op] += 1
            if op == "dynamodb:BatchWriteItem":
                n = sum(len(v) for v in params.get("RequestItems", {}).values())
                self.run.requests[fn]["dynamodb:BatchWriteItem:items"] += n
            if op == "dynamodb:TransactWriteItems":
                for a in params.get("TransactItems", []):
                    ((_, body),) = a.items()
                    key = body.get("Key") or body.get("Item") or {}
                    self.run.transact_keys.add(
                        (key.get("pk", {}).get("S", ""), key.get("sk", {}).get("S", ""))
                    )

    def after(self, model: Any, parsed: Any, context: Any, **_: Any) -> None:
        fn = context.get("mq_fn")
        if fn is None:
            return
        from bench import trace as _trace

        try:
            entry = _trace.entry(
                fn,
                model.service_model.service_name,
                model.name,
                context.get("mq_params") or {},
                parsed or {},
                time.perf_counter() - context.get("mq_t0", time.perf_counter()),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:  # bookkeeping only
            entry = {
                "fn": fn,
                "svc": model.service_model.service_name,
                "op": model.name,
                "s": 0.0,
                "trace_error": repr(exc),
            }
        with self.lock:
            self.run.trace.append(entry)
        if model.service_model.service_name != "dynamodb":
            return
        factor = 1.0 if context.get("mq_consistent") else 0.5
        ru = 0.0
        if model.name == "GetItem":
            ru = units(item_size(parsed.get("Item")), 4096) * factor
        elif model.name in ("Query", "Scan"):
            ru = units(sum(item_size(i) for i in parsed.get("Items", [])), 4096) * factor
        elif model.name == "BatchGetItem":
            got = [i for items in parsed.get("Responses", {}).values() for i in items]
            keys = context.get("mq_keys") or []
            requested = sum(n for n, _ in keys)
            consistent = any(c for _, c in keys)
            f = 1.0 if consistent else 0.5
            ru = sum(units(item_size(i), 4096) * f for i in got)
            ru += max(0, requested - len(got)) * f  # keys not found: the minimum each
        elif model.name == "TransactGetItems":
            ru = sum(units(item_size(r.get("Item")), 4096) * 2 for r in parsed.get("Responses", []))
        if ru:
            with self.lock:
                self.run.rru[fn] += ru

    @contextmanager
    def installed(self) -> Iterator[None]:
        from botocore import handlers as builtin

        # module-level dispatchers, not bound methods: a client made in an earlier run and
        # kept by its module (Powertools' parameters client) must count in the run in
        # progress, not in the run that created it
        added = [
            ("before-parameter-build.*.*", _dispatch_before),
            ("after-call.*.*", _dispatch_after),
        ]
        builtin.BUILTIN_HANDLERS.extend(added)
        _ACTIVE.append(self)
        try:
            yield
        finally:
            _ACTIVE.remove(self)
            for spec in added:
                builtin.BUILTIN_HANDLERS.remove(spec)


#: the hooks of the run in progress (bench only; see `_Hooks.installed`)
_ACTIVE: list[_Hooks] = []


def _dispatch_before(**kw: Any) -> None:
    if _ACTIVE:
        _ACTIVE[-1].before(**kw)


def _dispatch_after(**kw: Any) -> None:
    if _ACTIVE:
        _ACTIVE[-1].after(**kw)


class _ThreadCpu:
    """CPU time of the threads a handler starts, credited to its function.

    The handler thread's own `time.thread_time()` misses the work a handler hands to
    threads it starts: delivery runs a batch's records on lane threads (a
    ThreadPoolExecutor made per invocation), so the handler thread only waits (0.8 ms of
    CPU a mail counted against 17.9 ms measured, issue 40). While installed, a thread
    started from a function's context (`_function` set: the handler, or a lane started
    from it) is tagged with that function; its CPU clock is read when it ends and, for
    threads still alive, when the function's invocation returns (`flush`), each second
    credited once."""

    def __init__(self, cpu: dict[str, float]) -> None:
        self.cpu = cpu
        self.lock = threading.Lock()
        self.live: dict[threading.Thread, tuple[str, float]] = {}  # -> (fn, credited)

    def _credit(self, t: threading.Thread, now: float) -> None:
        fn, done = self.live[t]
        self.cpu[fn] = self.cpu.get(fn, 0.0) + max(0.0, now - done)
        self.live[t] = (fn, max(done, now))

    def started(self, t: threading.Thread) -> None:
        fn = _function.get()
        if fn is None:
            return
        run = t.run

        def counted() -> None:
            with self.lock:
                self.live[t] = (fn, time.thread_time())  # its clock at its start
            try:
                run()
            finally:
                with self.lock:
                    self._credit(t, time.thread_time())
                    del self.live[t]

        t.run = counted  # type: ignore[method-assign]

    def flush(self, fn: str) -> None:
        """Credit the CPU so far of `fn`'s threads still running (read by their clock id)."""
        with self.lock:
            for t, (f, _) in list(self.live.items()):
                if f != fn or t.ident is None:
                    continue
                try:
                    now = time.clock_gettime(time.pthread_getcpuclockid(t.ident))
                except (OSError, ProcessLookupError):
                    continue  # ended between the check and the read: credited at its end
                self._credit(t, now)

    @contextmanager
    def installed(self) -> Iterator[None]:
        start = threading.Thread.start
        tracker = self

        def tagged_start(t: threading.Thread) -> None:
            tracker.started(t)
            start(t)

        threading.Thread.start = tagged_start  # type: ignore[method-assign,assignment]
        _THREAD_CPU.append(self)
        try:
            yield
        finally:
            _THREAD_CPU.remove(self)
            threading.Thread.start = start  # type: ignore[method-assign]


#: the thread accounting of the run in progress (bench only; see `_ThreadCpu.installed`)
_THREAD_CPU: list[_ThreadCpu] = []


def _wrap(
    name: str,
    handler: Callable[..., Any],
    cpu: dict[str, float],
    records_in: Counter[str] | None = None,
) -> Callable[..., Any]:
    """The handler with its CPU counted: the handler thread's, and (while a `_ThreadCpu`
    is installed) every thread it starts, e.g. delivery's lanes."""

    def run(event: Any, context: Any) -> Any:
        token = _function.set(name)
        if records_in is not None and isinstance(event, dict):
            records_in[name] += len(event.get("Records") or ()) or 1
        t0 = time.thread_time()
        try:
            return handler(event, context)
        finally:
            _function.reset(token)
            cpu[name] = cpu.get(name, 0.0) + time.thread_time() - t0
            for tc in _THREAD_CPU:
                if tc.cpu is cpu:
                    tc.flush(name)

    return run


def _warm(stack: Any, init_cpu: dict[str, float]) -> None:
    """Build each function's service in its first container before the measured window
    (its `default_service()`, what the first invocation of a container does): the run
    then measures the steady state the model prices per mail, and records the one-off
    apart. At 100 M mails a month a container serves 10^5+ invocations, so the few
    hundred ms of building clients and the capacity check are noise per mail; in a run
    of 20 mails they were ~40 % of the handlers' measured CPU."""
    import sys

    for name, f in stack.functions.items():
        build = getattr(sys.modules.get(f.spec.module), "default_service", None)
        if not callable(build):
            continue
        t0 = time.thread_time()
        build()
        init_cpu[name] = time.thread_time() - t0


def _content(i: int, size: int) -> bytes:
    head = (
        f"From: bench@example.org\r\nTo: r@example.net\r\nSubject: cost {i}\r\n"
        f"Message-ID: <cost-{i}-{time.time_ns()}@example.org>\r\n\r\n"
    ).encode()
    line = b"x" * 76 + b"\r\n"
    return head + line * max(1, (size - len(head)) // len(line))


def measure(
    mails: int = 20,
    size: int = 10 * 1024,
    var_dir: Path | None = None,
    per_call: int = 1,
    warm: bool = True,
    body: Callable[[int, int], bytes] | None = None,
    recipients: Callable[[int], list[str]] | None = None,
    tempfail: Mapping[str, int] | None = None,
) -> Run:
    """A measured run through the local stack (moto + the real handlers + the SMTP sink).

    `per_call` > 1 submits the mails `per_call` at a time through the batch route
    (`POST /v1/messages/batch`); each must be accepted, delivered and cleaned up as
    in a run of one mail per call. `warm`: build each function's service before the
    measured window (`_warm`); False measures the first invocations' one-offs as part
    of the mails (runs before 2026-11-25). `body(i, size)` and `recipients(i)` make the
    mails (default: the bench's letter, one recipient over 20 domains); `tempfail`:
    domain -> refusals (451) before the sink accepts each address, with the stack's fast
    retries (bench.mix's retry case)."""
    import tempfile

    from mailqueue_local.sink import SinkEvent, SinkRules
    from mailqueue_local.stack import LocalStack, StackOptions

    run = Run(mails=mails, mails_per_call=per_call)
    hooks = _Hooks(run)
    delivered: set[str] = set()
    lock = threading.Lock()

    def on_sink(ev: SinkEvent) -> None:
        if ev.kind == "accepted":
            with lock:
                delivered.update(ev.recipients)

    tmp = tempfile.TemporaryDirectory(prefix="mq-cost-") if var_dir is None else None
    var = Path(tmp.name) if tmp else Path(var_dir or "var/cost")
    options = StackOptions(
        var_dir=var,
        api_port=0,
        sink_rules=SinkRules(tempfail=dict(tempfail or {})),
        fast_retries=bool(tempfail),
        on_sink_event=on_sink,
        sweep_interval=3600.0,
        # steady state: one warm container per function, so the per-container one-offs
        # (DKIM keys, the suspensions read) are not multiplied by the cold starts of
        # concurrent invocations in a run of a few mails (the stack's default is the
        # template's MaximumConcurrency)
        concurrency={"*": 1},
    )
    try:
        with hooks.installed(), _ThreadCpu(run.cpu_s).installed(), LocalStack(options) as stack:
            for name, f in stack.functions.items():
                f.handler = _wrap(name, f.handler, run.cpu_s, run.records_in)
            if warm:
                _warm(stack, run.init_cpu_s)
            base = {n: (f.invocations, f.busy_seconds) for n, f in stack.functions.items()}
            logs0 = {n: _size(stack.log_dir / f"{n}.log") for n in stack.functions}
            api0 = _size(stack.log_dir / "api-access.log")
            t0 = time.monotonic()
            # one recipient per mail, over 20 domains (a Zipf-ish mix would repeat fewer)
            make = body or _content
            todo = [
                (recipients(i) if recipients else [f"c{i}@d{i % 20}.cost.example"], make(i, size))
                for i in range(mails)
            ]
            expected = sum(len(r) for r, _ in todo)
            if per_call == 1:
                for rcpts, content in todo:
                    _submit(stack, rcpts, content)
            else:
                for k in range(0, mails, per_call):
                    _submit_batch(stack, todo[k : k + per_call])
            _wait(lambda: len(delivered) >= expected, 180, "delivery")
            d = stack.deployment
            assert d is not None
            _wait(lambda: _count_items(stack, d.table) == 0, 60, "cleanup")
            _wait(lambda: _stream_quiet(stack), 60, "stream drained")
            run.wall_s = time.monotonic() - t0
            for n, f in stack.functions.items():
                run.invocations[n] = f.invocations - base[n][0]
                run.busy_s[n] = f.busy_seconds - base[n][1]
                data = (stack.log_dir / f"{n}.log").read_bytes()[logs0[n] :]
                run.log_bytes[n] = len(data)
                run.log_events[n] = data.count(b"\n")
                for line in data.splitlines():
                    _emf(line, run.metrics)
            run.api_log_bytes = _size(stack.log_dir / "api-access.log") - api0
            run.records = _read_stream(stack, d.stream_arn or "")
            # one scheduled sweep (the run's interval is an hour: none ran by itself)
            sw = stack.functions["sweeper"]
            i0, b0 = sw.invocations, sw.busy_seconds
            log0 = _size(stack.log_dir / "sweeper.log")
            sw(_scheduled_event())
            run.invocations["sweeper"] = sw.invocations - i0
            run.busy_s["sweeper"] = sw.busy_seconds - b0
            run.sweeps = run.invocations["sweeper"]
            # the sweep's own output: its EMF document is a custom metric every 5 minutes
            # and its log bytes are ingested every run (issue 25, finding 4)
            data = (stack.log_dir / "sweeper.log").read_bytes()[log0:]
            run.log_bytes["sweeper"] = len(data)
            run.log_events["sweeper"] = data.count(b"\n")
            for line in data.splitlines():
                _emf(line, run.metrics)
            run.event_objects, run.event_bytes = _event_objects(stack, d.bucket)
            tpl = Template.load()
            replayed = delivered_to_events(state_records(run.records), tpl.events_filters)
            run.replayed_per_mail = len(replayed) / mails
            # (runs of revisions with queue-size counters replayed the records through
            # `mailqueue.counters` into `counters_by_batch`; the model still prices those)
    finally:
        if tmp:
            tmp.cleanup()
    return run


def _init_note(run: Run) -> str:
    init = getattr(run, "init_cpu_s", None)  # runs pickled before the warm-up have none
    if not init:
        return " Handler CPU includes each function's first-invocation set-up (a cold run)."
    return (
        " Handler CPU is a warm container's: each function's service was built before the run"
        " (once per container, not priced per mail: "
        + ", ".join(f"{f} {init[f] * 1000:.0f} ms" for f in ("ingress", "delivery") if f in init)
        + ")."
    )


def _scheduled_event() -> dict[str, Any]:
    return {"orphans": False}  # the template's 5-minute rule's constant Input


def _size(p: Path) -> int:
    try:
        return p.stat().st_size
    except FileNotFoundError:
        return 0


def _mail_doc(rcpt: str | list[str], body: bytes) -> dict[str, Any]:
    """One submission's JSON (the single route's body, a batch route's item)."""
    return {
        "sender": "bench@example.org",
        "recipients": [rcpt] if isinstance(rcpt, str) else list(rcpt),
        "content": base64.b64encode(body).decode(),
    }


def _post(stack: Any, path: str, doc: dict[str, Any]) -> tuple[int, Any]:
    req = urllib.request.Request(
        f"{stack.api_url}{path}",
        data=json.dumps(doc).encode(),
        headers={"content-type": "application/json", "authorization": f"Bearer {stack.token}"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=60) as resp:
        return resp.status, json.loads(resp.read() or b"null")


def _submit(stack: Any, rcpt: str | list[str], body: bytes) -> None:
    status, _ = _post(stack, "/v1/messages", _mail_doc(rcpt, body))
    if status != 202:
        raise RuntimeError(f"HTTP {status}")


def _submit_batch(stack: Any, mails: list[tuple[list[str], bytes]]) -> None:
    doc = {"messages": [_mail_doc(rcpt, body) for rcpt, body in mails]}
    status, answer = _post(stack, "/v1/messages/batch", doc)
    if status != 207 or [r["status"] for r in answer["results"]] != [202] * len(mails):
        raise RuntimeError(f"HTTP {status}: {answer}")


def _wait(cond: Callable[[], bool], timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise TimeoutError(f"cost run: {what} not reached in {timeout} s")
        time.sleep(0.25)


def _count_items(stack: Any, table: str) -> int:
    """Mail and group items still in the table (cleanup removes them; a finished solo
    mail's expired item is DynamoDB's TTL's to delete, which moto does not run)."""
    now = time.time()
    n = 0
    for page in stack.clients.dynamodb.get_paginator("scan").paginate(TableName=table):
        n += sum(
            1
            for it in page["Items"]
            if it["pk"]["S"].startswith("M#")
            and not ("st" not in it and float(it.get("expires_at", {}).get("N", "inf")) <= now)
        )
    return n


_quiet: dict[int, tuple[int, float]] = {}


def _stream_quiet(stack: Any) -> bool:
    """The events function has not been invoked for 3 s (its window is shorter locally)."""
    f = stack.functions["events"]
    seen, since = _quiet.get(id(stack), (-1, time.monotonic()))
    if f.invocations != seen:
        _quiet[id(stack)] = (f.invocations, time.monotonic())
        return False
    return time.monotonic() - since > 3.0


def _read_stream(stack: Any, arn: str) -> list[dict[str, Any]]:
    import boto3

    c = boto3.client(
        "dynamodbstreams",
        endpoint_url=stack.endpoint_url,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    out: list[dict[str, Any]] = []
    for shard in c.describe_stream(StreamArn=arn)["StreamDescription"].get("Shards", []):
        it = c.get_shard_iterator(
            StreamArn=arn, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        while it:
            resp = c.get_records(ShardIterator=it, Limit=1000)
            recs = resp.get("Records", [])
            for r in recs:
                ddb = dict(r["dynamodb"])
                ddb.pop("ApproximateCreationDateTime", None)
                out.append({**r, "dynamodb": ddb, "eventSourceARN": arn})
            if not recs:
                break
            it = resp.get("NextShardIterator")
    return out


def _event_objects(stack: Any, bucket: str) -> tuple[int, int]:
    n = b = 0
    for page in stack.clients.s3.get_paginator("list_objects_v2").paginate(
        Bucket=bucket, Prefix="events/"
    ):
        for o in page.get("Contents", []):
            n += 1
            b += int(o["Size"])
    return n, b


def _emf(line: bytes, out: set[tuple[str, str, str]]) -> None:
    if b'"_aws"' not in line:
        return
    try:
        doc = json.loads(line)
    except ValueError:
        return
    for m in doc.get("_aws", {}).get("CloudWatchMetrics", []):
        for dims in m.get("Dimensions", [[]]):
            key = ",".join(f"{d}={doc.get(d)}" for d in dims)
            for metric in m.get("Metrics", []):
                out.add((m.get("Namespace", ""), key, metric["Name"]))


# ---------------------------------------------------------------- counters, replayed
def _is_counter(record: Mapping[str, Any]) -> bool:
    pk = str(record.get("dynamodb", {}).get("Keys", {}).get("pk", {}).get("S", ""))
    return pk == "CP" or pk.startswith(("C#", "CR#", "CP#", "CPP#"))


def state_records(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The stream records of the queue's own items (the counters' echo left out)."""
    return [r for r in records if not _is_counter(r)]


#: what the lag of a kept index entry is priced at (issue 25, retry floor): the storage's
#: default `index_due_slack_seconds`, the policy's first retry (Postfix's
#: minimal_backoff_time) and the sweeper's schedule (template: every 5 minutes)
INDEX_SLACK_S = 900.0
FIRST_RETRY_S = 300.0
SWEEP_PERIOD_S = 300.0


def lagging_entry_reads(records: list[dict[str, Any]]) -> float:
    """Read units the sweeper spends on index entries that lag their group's schedule.

    A reschedule (or a shaping re-arm) within `index_due_slack_seconds` of the entry's
    `due` leaves the entry where it was (no index write); until the group's `next_at`
    comes, each sweep's lease recovery (`find_inflight`: queued entries with `due` before
    now) reads the item back and drops it: one strongly consistent read unit per 4 KB per
    sweep. Each kept entry is priced at min(lag, slack) / sweep period sweeps, its lag the
    run's own or, for a retry, the policy's first retry (a run uses fast retries)."""
    units = 0.0
    for rec in records:
        if rec.get("eventName") != "MODIFY":
            continue
        d = rec.get("dynamodb", {})
        old, new = d.get("OldImage") or {}, d.get("NewImage") or {}
        st, due = new.get("st"), new.get("due")
        if not st or not due or st != old.get("st") or due != old.get("due"):
            continue
        if not str(st.get("S", "")).startswith("queued") or "lease_ms" in new:
            continue
        nxt, prev = new.get("next_at", {}).get("S"), old.get("next_at", {}).get("S")
        if not nxt or nxt == prev:
            continue
        lag = datetime.fromisoformat(nxt.replace("Z", "+00:00")).timestamp() - int(due["N"]) / 1000
        if len((new.get("history") or {}).get("L", [])) > len(
            (old.get("history") or {}).get("L", [])
        ):
            lag = max(lag, FIRST_RETRY_S)  # a retry: the real backoff, not the run's
        sweeps = min(max(lag, 0.0), INDEX_SLACK_S) / SWEEP_PERIOD_S
        units += sweeps * max(1, -(-item_size(new) // 4096))
    return units


def records_per_batch(tpl: Template, records_per_s: float) -> float:
    """Records in one stream batch at a rate: full, or what arrives within the window.
    With a ParallelizationFactor of F a shard's records go to F batches at once (by item:
    Lambda keeps each item's records in order), so a window gathers 1/F of them each
    (assumed: Lambda does not say how it fills parallel batches)."""
    per_shard = (
        records_per_s
        / ASSUMPTIONS["stream_shards"]
        / max(1, getattr(tpl, "events_parallelization", 1))
    )
    return max(1.0, min(tpl.events_batch_size, per_shard * max(tpl.events_window_s, 0.2)))


# ---------------------------------------------------------------- the model
@dataclass
class Line:
    service: str
    item: str
    per_month: float


#: the events function's requests for the queue-size counters (runs of revisions that
#: kept them; priced from `counters_by_batch`, not from the run's requests)
_COUNTER_OPS = frozenset(
    {
        "dynamodb:Query",
        "dynamodb:TransactWriteItems",
        "dynamodb:PutItem",
        "dynamodb:UpdateItem",
    }
)


def _events_reads(run: Run) -> float:
    """The events function's read units, the counters' left out (priced from the
    replay): in a run with counters, its GetItems (a Send's header read of a mail item
    under 4 KB, consistent: 1 unit each)."""
    if run.counters_by_batch:
        return float(run.ops("events").get("dynamodb:GetItem", 0))
    return float(run.rru.get("events", 0.0))


def _interp(table: dict[int, dict[str, float]], batch: float, key: str) -> float:
    xs = sorted(table)
    if not xs:
        return 0.0
    if batch <= xs[0]:
        return table[xs[0]].get(key, 0.0)
    for a, b in zip(xs, xs[1:], strict=False):
        if a <= batch <= b:
            t = (batch - a) / (b - a)
            return table[a].get(key, 0.0) * (1 - t) + table[b].get(key, 0.0) * t
    return table[xs[-1]].get(key, 0.0)


#: Lambda gives a function CPU in proportion to its memory: 1,769 MB is one vCPU (AWS's
#: Lambda docs); Python's handlers use one thread, so more than one vCPU buys nothing
FULL_VCPU_MB = 1769


def cpu_factor(memory_mb: int) -> float:
    """How much longer the CPU part of a duration takes at `memory_mb` than on a whole
    core (the run measures CPU time on one core of this machine)."""
    return max(1.0, FULL_VCPU_MB / memory_mb)


def lambda_seconds(
    run: Run,
    f: str,
    memory_mb: int,
    smtp: bool = True,
    egress: str = "relay",
    batch: float | None = None,
    overlap: float = 1.0,
) -> float:
    """The function's Lambda time for the run's work at `memory_mb`: its handler's CPU
    time stretched by `cpu_factor`, plus what does not scale with CPU — AWS's answer time
    for each request it made, SMTP to the relay (delivery), 0.5 ms per invocation.

    `overlap`: requests in flight at once (delivery's lanes run a batch's records at
    once, so their AWS waits overlap as their SMTP transactions do, `smtp_seconds`; the
    CPU does not: it is counted whole, every thread's)."""
    wait = 0.0
    for k, n in run.ops(f).items():
        if k.endswith(":items"):
            continue
        svc = k.split(":", 1)[0]
        wait += n * LATENCY_MS.get(k, LATENCY_MS.get(svc, 10.0)) / 1000
    wait /= max(1.0, overlap)
    if f == "delivery" and smtp:
        wait += smtp_seconds(run, egress, batch)
    cpu = run.cpu_s.get(f, run.busy_s[f]) * cpu_factor(memory_mb)
    return cpu + wait + 0.0005 * run.invocations[f]


def smtp_seconds(run: Run, egress: str = "relay", batch: float | None = None) -> float:
    """Lambda time the run's SMTP transactions bill: one per delivery record at the
    egress mode's time, `smtp_parallel` of a batch's at once (never more than the batch
    holds: at low volume a batch is one record)."""
    ms = ASSUMPTIONS["smtp_ms_per_mail_direct" if egress == "direct" else "smtp_ms_per_mail_relay"]
    records = getattr(run, "records_in", Counter()).get("delivery") or run.mails
    fill = batch if batch is not None else records / max(1, run.invocations.get("delivery", 1))
    par = max(1.0, min(getattr(run, "smtp_parallel", 1.0), fill))
    return records * ms / 1000 / par


def delivery_batch(tpl: Template, records_per_s: float, record_s: float = 0.05) -> float:
    """Records in one delivery invocation at a rate: the SQS event source's pollers (5)
    return what is waiting when they poll, and wait up to the mapping's batching window
    for more; with no window set (the template) a batch holds what arrived during one
    invocation of `record_s` — about one record at 1 M mails a month."""
    per_poller = records_per_s / ASSUMPTIONS["esm_pollers_per_queue"]
    return max(
        1.0,
        min(float(tpl.delivery_batch_size), per_poller * (tpl.delivery_window_s + record_s) + 1),
    )


def state_write_units(run: Run, tpl: Template) -> tuple[float, float]:
    """The run's write units on the state table and on its indexes (from the stream)."""
    wru_table = wru_gsi = 0.0
    for r in run.records:
        keys = r["dynamodb"].get("Keys", {})
        k = (keys.get("pk", {}).get("S", ""), keys.get("sk", {}).get("S", ""))
        if _is_counter(r):
            continue  # the counters: priced from the replay in `model`
        w = write_units(r, tpl.indexes, transactional=k in run.transact_keys)
        wru_table += w.get("table", 0)
        wru_gsi += sum(v for n, v in w.items() if n != "table")
    return wru_table, wru_gsi


def event_log_storage(
    bytes_month: float, objects_month: float, tpl: Template
) -> list[tuple[str, float]]:
    """The event log's storage in the steady state (EventsExpirationDays of it kept: 400
    by default), and its lifecycle transitions: the `events-tiering` rule moves objects to
    STANDARD_IA after EventsTransitionDays, but S3 Lifecycle does not transition objects
    under 128 KB by default ("Transitioning objects using Amazon S3 Lifecycle",
    docs.aws.amazon.com/AmazonS3/latest/userguide/lifecycle-transition-general-
    considerations.html): one stream batch is one object, so at low volume the log stays
    in Standard, at high volume (full batches) most of it is in Standard-IA, each object
    paying one transition request (aws.amazon.com/s3/pricing; bench/aws-prices.json
    `s3_standard_ia`). Reads of the old log by reports (IA retrieval, $/GB) are not
    counted: a daily report reads the last day, still in Standard."""
    s3, ia = PRICES["s3_standard"], PRICES["s3_standard_ia"]
    day_months = 1 / (SECONDS_PER_MONTH / 86400)
    kept_days = tpl.events_retention_days or 3650
    gb = bytes_month / 2**30
    object_bytes = bytes_month / max(objects_month, 1.0)
    tiered = object_bytes >= ia["min_transition_object_bytes"] and kept_days > (
        tpl.events_transition_days
    )
    if not tiered:
        return [
            (
                f"event-log storage (steady state, {tpl.events_retention_days or 'forever'} d "
                f"kept; {object_bytes / 1024:.0f} KB objects stay in Standard)",
                gb * s3["storage_per_gb_month"] * kept_days * day_months,
            )
        ]
    std_days = tpl.events_transition_days
    return [
        (
            f"event-log storage (steady state, {kept_days} d kept: {std_days} d Standard, "
            f"then Standard-IA; {object_bytes / 1024:.0f} KB objects)",
            gb
            * day_months
            * (
                std_days * s3["storage_per_gb_month"]
                + (kept_days - std_days) * ia["storage_per_gb_month"]
            ),
        ),
        (
            "event-log lifecycle transitions to Standard-IA (one per object)",
            objects_month * ia["transition_per_1000"] / 1000,
        ),
    ]


def model(run: Run, volume: int, tpl: Template, egress: str | None = "relay") -> list[Line]:
    """$ per month at `volume` mails a month, line by line."""
    p = PRICES
    per = volume / run.mails  # scale factor from the run to the month
    lines: list[Line] = []

    def add(service: str, item: str, usd: float) -> None:
        lines.append(Line(service, item, usd))

    ops = run.ops()
    # API Gateway
    add(
        "API Gateway",
        "HTTP API requests",
        volume
        * ASSUMPTIONS["api_requests_per_mail"]
        / run.mails_per_call  # 1 unless the run submitted through the batch route
        * p["apigateway_http_api"]["per_million_requests"]
        / 1e6,
    )
    # S3 requests made by the functions (the events function's PUTs are modeled per batch)
    s3 = p["s3_standard"]
    fn_ops = {f: run.ops(f) for f in run.requests}
    put = sum(
        n
        for f, c in fn_ops.items()
        if f != "events"
        for k, n in c.items()
        if k in ("s3:PutObject", "s3:CopyObject", "s3:ListObjectsV2")
    )
    get = sum(
        n for f, c in fn_ops.items() for k, n in c.items() if k in ("s3:GetObject", "s3:HeadObject")
    )
    add("S3", "content PUT (+copy/list)", put * per * s3["put_copy_post_list_per_1000"] / 1000)
    add("S3", "GET/HEAD (content, Send headers)", get * per * s3["get_per_1000"] / 1000)
    # the stream and the events function
    recs = delivered_to_events(state_records(run.records), tpl.events_filters)
    rec_per_mail = len(recs) / run.mails
    rate = volume * rec_per_mail / SECONDS_PER_MONTH
    batch = records_per_batch(tpl, rate)
    # the replay's figures are per record it was fed (the run's own template's records);
    # a batch of `batch` records here holds batch * ctr_rpm / rec_per_mail of those
    ctr_rpm = getattr(run, "replayed_per_mail", 0.0) or rec_per_mail
    batch = max(1.0, batch * ctr_rpm / rec_per_mail)
    ctr_items_per_rec = _interp(run.counters_by_batch, batch, "items") * ctr_rpm / rec_per_mail
    counters_in_state_table = True
    echo = 0.0
    if counters_in_state_table and not tpl.events_filters:
        # the counters' own writes come back on the stream (and their markers' TTL deletes)
        echo = ctr_items_per_rec + _interp(run.counters_by_batch, batch, "dynamodb:PutItem")
        echo += sum(1 for k in run.transact_keys if k[0].startswith("CR#")) / max(1, len(recs))
    records_month = volume * rec_per_mail * (1 + echo)
    batches = records_month / records_per_batch(tpl, records_month / SECONDS_PER_MONTH)
    add(
        "S3",
        "event-log PUTs (one per stream batch)",
        batches * s3["put_copy_post_list_per_1000"] / 1000,
    )
    for item, usd in event_log_storage(run.event_bytes * per, batches, tpl):
        add("S3", item, usd)
    # DynamoDB: writes from the stream images, reads from the responses
    ddb = p["dynamodb_on_demand"]
    wru_table, wru_gsi = state_write_units(run, tpl)
    wru = ddb["write_request_unit_per_million"] / 1e6
    rru_price = ddb["read_request_unit_per_million"] / 1e6
    rru = sum(v for f, v in run.rru.items() if f not in ("events", "sweeper")) + _events_reads(run)
    # the sweeper's reads come with its schedule (every shard of each state it walks, every
    # 5 minutes), not with the mails: per sweep of the run, times the month's sweeps
    sweep_rru = (
        run.rru.get("sweeper", 0.0)
        / max(1, run.sweeps or run.invocations["sweeper"])
        * sum(tpl.schedules.values())
    )
    lag_rru = lagging_entry_reads(state_records(run.records))
    if tpl.state_capacity == "provisioned":
        # capacity units by the hour: the month's units spread over its seconds, divided by
        # the utilization auto scaling achieves, never below the configured minimum (the
        # table and each index keep their own); a write unit per second for an hour is one
        # WCU-hour, an eventually consistent read costs half a unit as on demand
        prov = p["dynamodb_provisioned"]
        n_tables = 1 + len(tpl.indexes)

        def use(units_month: float, minimum: int, tables: int) -> float:
            """The average use auto scaling achieves (simulated unless set), per table."""
            if tpl.state_use is not None:
                return tpl.state_use
            per_table = units_month / SECONDS_PER_MONTH / max(1, tables)
            return autoscale.average_use(
                per_table,
                target=tpl.state_target,
                minimum=max(1, minimum),
                profile=ASSUMPTIONS["provisioned_traffic_profile"],
            )

        def hours(units_month: float, minimum: int, tables: int) -> tuple[float, float]:
            u = use(units_month, minimum, tables)
            if u <= 0:  # nothing consumed: the minimum capacity alone
                return minimum * tables * 730, u
            return max(units_month / SECONDS_PER_MONTH / u, minimum * tables) * 730, u

        w_floor, r_floor = tpl.state_min_units
        wcu_h = prov["write_capacity_unit_hour"]
        h, u = hours(wru_table * per, w_floor, 1)
        add("DynamoDB", f"state writes, table (provisioned WCU at {u:.0%} use)", h * wcu_h)
        h, u = hours(wru_gsi * per, w_floor, n_tables - 1)
        add("DynamoDB", f"state writes, by_state index (provisioned WCU at {u:.0%} use)", h * wcu_h)
        h, u = hours((rru + lag_rru) * per + sweep_rru, r_floor, n_tables)
        add(
            "DynamoDB",
            f"reads (provisioned RCU at {u:.0%} use)",
            h * prov["read_capacity_unit_hour"],
        )
    else:
        add("DynamoDB", "state writes, table (WRU from item sizes)", wru_table * per * wru)
        add("DynamoDB", "state writes, by_state index", wru_gsi * per * wru)
        add("DynamoDB", "reads (RRU from items returned)", rru * per * rru_price)
        add("DynamoDB", "reads by the sweeper (per sweep, on its schedule)", sweep_rru * rru_price)
        add(
            "DynamoDB",
            "reads of lagging index entries by the sweeper (kept reschedules)",
            lag_rru * per * rru_price,
        )
        failed_n, failed_u = failed_writes(run)
        add(
            "DynamoDB",
            f"failed conditional writes ({failed_n / run.mails:.2f} per mail; billed, not streamed)",
            failed_u * per * wru,
        )
    if run.counters_by_batch:  # a run of a revision with queue-size counters
        # the upper bound (no netting within a batch): the run's mails are few and quick,
        # so in its batches most of a mail's deltas cancel; at volume they span batches
        ctr_wru = _interp(run.counters_by_batch, batch, "wru_no_netting") * volume * ctr_rpm
        ctr_reads = (
            _interp(run.counters_by_batch, batch, "dynamodb:Query")
            + _interp(run.counters_by_batch, batch, "dynamodb:GetItem")
        ) * 2
        add("DynamoDB", "queue-size counters (writes)", ctr_wru * wru)
        add(
            "DynamoDB",
            "queue-size counters (reads)",
            ctr_reads * volume * ctr_rpm * ddb["read_request_unit_per_million"] / 1e6,
        )
    # SQS: the functions' requests + the event sources' receive/delete per batch + idle polls
    sqs_p = p["sqs_standard"]["per_million_requests"] / 1e6
    sqs_fn = sum(n for k, n in ops.items() if k.startswith("sqs:"))
    add("SQS", "sends/visibility by the functions", sqs_fn * per * sqs_p)
    d_records = (getattr(run, "records_in", Counter()).get("delivery") or run.mails) / run.mails
    d_batch = delivery_batch(tpl, volume * d_records / SECONDS_PER_MONTH)
    d_inv_month = volume * d_records / d_batch
    esm_batches = d_inv_month + run.invocations["bounce"] * per
    add("SQS", "event source receive + delete (per batch)", esm_batches * 2 * sqs_p)
    idle = (
        tpl.sqs_sources
        * ASSUMPTIONS["esm_pollers_per_queue"]
        * SECONDS_PER_MONTH
        / ASSUMPTIONS["long_poll_seconds"]
    )
    add("SQS", f"event source long polls ({tpl.sqs_sources} queues, idle floor)", idle * sqs_p)
    # Lambda
    lam = p["lambda"]
    gbs_price = lam[
        "per_gb_second_arm64" if tpl.architecture == "arm64" else "per_gb_second_x86_64"
    ]
    inv_month: dict[str, float] = {}

    def seconds(f: str) -> float:
        return lambda_seconds(run, f, tpl.memory_mb[f])

    for f in ("ingress", "delivery", "bounce"):
        inv_month[f] = run.invocations[f] * per
        secs = seconds(f)
        if f == "delivery":
            inv_month[f] = d_inv_month
            mode = egress or "relay"
            # a batch's records on the lanes at once: their AWS waits overlap (issue 40)
            lanes = max(1.0, min(getattr(run, "smtp_parallel", 1.0), d_batch))
            secs = lambda_seconds(
                run, f, tpl.memory_mb[f], smtp=False, overlap=lanes
            ) + smtp_seconds(run, mode, d_batch)
        add(
            "Lambda",
            f"{f}: GB-s ({tpl.memory_mb[f]} MB; CPU measured × 1769/MB + AWS/SMTP latency)",
            secs * per * tpl.memory_mb[f] / 1024 * gbs_price,
        )
    ev_inv = max(1, run.invocations["events"])
    ev_recs = max(1, len(run.records))
    inv_month["events"] = batches
    # per record, its CPU; per batch, what the invocation waits for (its S3 PUT, its
    # reads) and Lambda's 0.5 ms: the run's few records a batch are not the volume's
    # (issue 40: a per-record price of the run's waits made memory look dear)
    ev_cpu = run.cpu_s.get("events", run.busy_s["events"]) * cpu_factor(tpl.memory_mb["events"])
    ev_fixed = max(0.0, seconds("events") - ev_cpu) / ev_inv
    add(
        "Lambda",
        f"events: GB-s ({tpl.memory_mb['events']} MB; CPU per record, waits per batch)",
        (ev_cpu / ev_recs * records_month + ev_fixed * batches)
        * tpl.memory_mb["events"]
        / 1024
        * gbs_price,
    )
    sweeps = sum(tpl.schedules.values())
    inv_month["sweeper"] = sweeps
    sweep_s = seconds("sweeper") / max(1, run.invocations["sweeper"])
    add(
        "Lambda",
        f"sweeper: schedules ({sweeps:,.0f} runs/month)",
        sweeps * sweep_s * tpl.memory_mb["sweeper"] / 1024 * gbs_price,
    )
    add("Lambda", "requests", sum(inv_month.values()) * lam["per_million_requests"] / 1e6)
    # Secrets Manager: the DKIM keys delivery reads (cached per container), and storing them
    sm = p["secrets_manager"]
    calls = sum(per_container_share(run, tpl, volume, f, op) for f, op in PER_CONTAINER) * volume
    add(
        "Secrets Manager",
        f"GetSecretValue (per warm container and 5 min: "
        f"{warm_containers(run, tpl, volume)} containers)",
        calls * sm["per_10000_api_calls"] / 1e4,
    )
    keys = run.ops("delivery").get("secretsmanager:GetSecretValue", 0)
    add(
        "Secrets Manager",
        f"secrets stored ({keys:.0f} DKIM keys read in the run)",
        keys * sm["per_secret_month"],
    )
    # X-Ray
    xr = p["xray"]["per_million_traces_recorded"] / 1e6
    if tpl.tracing:
        traces = 0.0
        for n in inv_month.values():
            rate_f = n / SECONDS_PER_MONTH
            traces += min(n, SECONDS_PER_MONTH) + max(0.0, rate_f - 1) * 0.05 * SECONDS_PER_MONTH
        add("X-Ray", "traces recorded (1/s + 5 % per function)", traces * xr)
    else:
        add("X-Ray", "tracing off (template parameter Tracing=Disabled)", 0.0)
    # CloudWatch
    cw = p["cloudwatch"]
    plat = ASSUMPTIONS["platform_log_bytes_per_invocation"]
    ovh = ASSUMPTIONS["cw_log_event_overhead_bytes"]
    log_b = 0.0

    def platform(f: str) -> float:
        """Lambda's START/END/REPORT lines of `f`, per invocation (none at WARN)."""
        return plat + 3 * ovh if f in tpl.platform_logs else 0.0

    for f in ("ingress", "delivery", "bounce"):
        log_b += (run.log_bytes[f] + run.log_events[f] * ovh) * per + inv_month[f] * platform(f)
    log_b += (run.log_bytes["events"] + run.log_events["events"] * ovh) / ev_inv * batches
    log_b += inv_month["events"] * platform("events")
    log_b += inv_month["sweeper"] * platform("sweeper")
    # the sweep's own lines (its EMF document every 5 minutes), measured once in the run
    log_b += (
        (run.log_bytes["sweeper"] + run.log_events["sweeper"] * ovh)
        / max(1, getattr(run, "sweeps", 0) or run.invocations["sweeper"])
        * inv_month["sweeper"]
    )
    log_b += run.api_log_bytes * per
    gb = log_b / 2**30
    add(
        "CloudWatch",
        "Logs ingestion (measured bytes + platform lines)"
        if tpl.platform_logs
        else "Logs ingestion (measured bytes; SystemLogLevel WARN: no platform lines)",
        gb * cw["logs_ingestion_per_gb"],
    )
    add(
        "CloudWatch",
        f"Logs storage ({tpl.log_retention_days} d retention)",
        gb * cw["logs_storage_per_gb_month"] * min(1.0, tpl.log_retention_days / 30),
    )
    add(
        "CloudWatch",
        f"EMF custom metrics ({len(run.metrics)} seen in the run)",
        len(run.metrics) * cw["custom_metric_per_month"],
    )
    add("CloudWatch", f"alarms ({tpl.alarms})", tpl.alarms * cw["standard_alarm_per_month"])
    add("CloudWatch", f"dashboards ({tpl.dashboards})", tpl.dashboards * cw["dashboard_per_month"])
    eg = egress_monthly(egress, volume) if egress else None
    if eg is not None:
        add("Egress", f"{egress} mode (bench/egress_cost.py; the relay's own price excluded)", eg)
    else:
        add("Egress", "not included (bench/egress_cost.py not present)", 0.0)
    return lines


def failed_writes(run: Run) -> tuple[int, int]:
    """The run's failed conditional writes and the write units DynamoDB bills for them:
    each item the larger of its size (its largest image in the stream) and 1 KB's unit,
    twice in a cancelled transaction (see ASSUMPTIONS). Absent from the stream, so the
    model priced none of them before issue 25."""
    sizes: dict[tuple[str, str], int] = {}
    for r in run.records:
        ddb = r.get("dynamodb") or {}
        k = ddb.get("Keys") or {}
        key = (str(k.get("pk", {}).get("S", "")), str(k.get("sk", {}).get("S", "")))
        sizes[key] = max(
            sizes.get(key, 0), item_size(ddb.get("OldImage")), item_size(ddb.get("NewImage"))
        )
    n = u = 0
    for e in getattr(run, "trace", []):
        if e.get("err") not in ("ConditionalCheckFailedException", "TransactionCanceledException"):
            continue
        factor = 2 if e["op"] == "TransactWriteItems" else 1
        for w in e.get("writes") or ():
            a = w["attrs"]
            n += 1
            u += factor * units(sizes.get((a.get("pk", ""), a.get("sk", "")), 1), 1024)
    return n, u


def egress_monthly(mode: str, volume: int, mail_bytes: int = 10 * 1024) -> float | None:
    """The hook for bench/egress_cost.py (branch `egress`): the queue's egress in $ a month.

    Relay mode: the delivery function talks to the relay from outside any VPC, so the queue
    itself pays no NAT or transfer; the relay's own price (SES's per-recipient fee) is
    what the floors leave out, so 0.0 once that module is there. Direct mode: its NAT
    gateways, IPs, processing and transfer. None when the module has not landed.
    """
    try:
        from bench import egress_cost  # type: ignore[attr-defined,unused-ignore]
    except ImportError:
        return None
    if mode == "relay":
        return 0.0
    prices = egress_cost.load_prices()
    return float(egress_cost.direct_cost(volume, mail_bytes, prices).total)


# ---------------------------------------------------------------- memory sizes
MEMORY_SIZES = (128, 256, 512, 1024, 1769)
#: copies of the largest content a function holds at once (assumed from the code, not
#: measured): ingress the request or SES object and the bytes it stores; delivery and
#: bounce the content read, its signed/DSN form and the SMTP client's dot-stuffed copy
#: (and, for bounce, the original under RET=FULL); admin a 1 MiB body; events header
#: sections; the sweeper none.
CONTENT_COPIES = {"ingress": 3, "delivery": 4, "bounce": 4, "admin": 1, "events": 0, "sweeper": 0}
MARGIN = 1.5  # memory chosen >= MARGIN x the estimated peak
#: functions whose GB-s cost under $0.001 per million at 100 M/month at any size: not
#: chosen by cost, but for their work — the sweeper's recovery after an outage (a large
#: backlog in its 240 s; 14x slower CPU at 128 MB), admin's interactive answers and jobs
#: events: by throughput (issue 40): one vCPU, so the stream keeps up at 10,000 mails/s
#: with one batch per shard (bench/limits.py's stream row; its GB-s hardly depend on
#: memory, the writer's waits being per batch)
NOT_BY_COST = {"sweeper": 256, "admin": 256, "events": FULL_VCPU_MB}


def handler_rss_mb(handler: str) -> float:
    """Peak RSS (MB) of a fresh interpreter that imports the handler and creates the AWS
    clients every function creates (no request made): the floor before any content."""
    from bench.coldstart import in_handler

    # VmHWM, the peak of this process's own memory: Linux carries ru_maxrss over from the
    # parent at fork and keeps it across exec, so a child of a big bench process reported
    # the bench's size (297 MB for every handler) instead of its own
    code = (
        "import app\n"
        "from mailqueue.backends.aws.clients import make_clients\n"
        "make_clients(region='us-east-1')\n"
        "print(next(l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM:')))"
    )
    out = in_handler(handler, "-c", code).stdout
    return int(out.split()[-1]) / 1024  # VmHWM is in kB


def memory_floor_mb(f: str, rss_mb: float, max_size: int = 40 * 2**20) -> float:
    """Estimated peak: the measured floor plus the content copies the function holds."""
    largest = {"admin": 2**20, "events": 11 * 1024}.get(f, max_size)
    return rss_mb + CONTENT_COPIES.get(f, 0) * largest / 2**20


def memory_sweep(
    run: Run, tpl: Template, rss_mb: Mapping[str, float], volume: int = VOLUMES[-1]
) -> dict[str, dict[str, Any]]:
    """Per function: $ per million mails at each memory size (its Lambda GB-s lines of
    the model at `volume`), the duration per invocation, the estimated peak and the
    choice: the smallest size >= MARGIN x the peak (cost only falls with memory in this
    model: the CPU part costs the same GB-s at any size below one vCPU, the waits cost
    in proportion to memory)."""
    out: dict[str, dict[str, Any]] = {}
    for f in FUNCTIONS:
        peak = memory_floor_mb(f, rss_mb.get(f, 0.0))
        cost: dict[int, float] = {}
        dur: dict[int, float] = {}
        for m in MEMORY_SIZES:
            t = replace(tpl, memory_mb={**tpl.memory_mb, f: m})
            lines = model(run, volume, t)
            cost[m] = (
                sum(
                    x.per_month
                    for x in lines
                    if x.service == "Lambda" and x.item.startswith(f"{f}:")
                )
                / volume
                * 1e6
            )
            inv = run.invocations[f]
            dur[m] = lambda_seconds(run, f, m) / inv * 1000 if inv else 0.0
        fit = [m for m in MEMORY_SIZES if m >= MARGIN * peak]
        out[f] = {
            "peak_mb": peak,
            "rss_mb": rss_mb.get(f, 0.0),
            "cost": cost,
            "ms_per_invocation": dur,
            "chosen": NOT_BY_COST.get(f, fit[0] if fit else MEMORY_SIZES[-1]),
            "template": tpl.memory_mb[f],
        }
    return out


def memory_report(run: Run, tpl: Template, rss_mb: Mapping[str, float]) -> list[str]:
    sweep = memory_sweep(run, tpl, rss_mb)
    L = [
        "| function | RSS after import + clients (MB) | est. peak (MB) | "
        + " | ".join(f"{m} MB: $/M (ms/inv.)" for m in MEMORY_SIZES)
        + " | chosen | template |",
        "|---|---:|---:|" + "---:|" * len(MEMORY_SIZES) + "---:|---:|",
    ]
    for f, r in sweep.items():
        cells = " | ".join(
            f"{r['cost'][m]:.3f} ({r['ms_per_invocation'][m]:.0f})"
            if r["ms_per_invocation"][m]
            else f"{r['cost'][m]:.3f}"
            for m in MEMORY_SIZES
        )
        L.append(
            f"| {f} | {r['rss_mb']:.0f} | {r['peak_mb']:.0f} | {cells} | {r['chosen']} | "
            f"{r['template']} |"
        )
    return L


# ---------------------------------------------------------------- the report
FLOORS = {1_000_000: 20.0, 10_000_000: 10.0, 100_000_000: 8.0}
REQUEST_FLOOR = 6.5


#: Requests made per container and cache period, not per mail: (function, op) → cache
#: seconds (dkim.py: Powertools' parameters, max_age 300)
PER_CONTAINER = {("delivery", "secretsmanager:GetSecretValue"): 300}


def warm_containers(run: Run, tpl: Template, volume: int, f: str = "delivery") -> int:
    """Containers of `f` alive at `volume`: its mean concurrency (Little's law: the
    seconds it is busy per mail x mails per second) plus three standard deviations of a
    Poisson count, since the peaks start the containers that then wait, warm, until
    Lambda reclaims them; at least 1, at most the template's delivery concurrency."""
    busy = lambda_seconds(run, f, tpl.memory_mb[f]) / run.mails * volume / SECONDS_PER_MONTH
    return int(min(tpl.delivery_containers, max(1, math.ceil(busy + 3 * math.sqrt(busy)))))


def per_container_share(run: Run, tpl: Template, volume: int, f: str, op: str) -> float:
    """Per mail at `volume`: the run's rate (one warm container: a cache miss per key), or
    what the containers alive at that volume read refreshing their caches, whichever is
    less. (It assumed all `delivery_containers` warm at every volume: 90 containers
    reading 2 keys every 5 minutes is $0.50 a million at 10 M a month, where ~3 run.)"""
    keys = run.ops(f).get(op, 0)  # the run has one warm container per function: one read
    refreshes = SECONDS_PER_MONTH / PER_CONTAINER[(f, op)]  # per key, cached for the period
    alive = warm_containers(run, tpl, volume, f)
    return min(keys / run.mails, alive * keys * refreshes / volume)


def path_requests(run: Run, tpl: Template, volume: int) -> dict[str, float]:
    """AWS requests per delivered mail, accepted → cleaned: the functions' own, the
    counters' and the event log's share of each stream batch, and the SQS event source's
    receive + delete per batch."""
    out: Counter[str] = Counter()
    for f in ("ingress", "delivery", "bounce", "events"):
        for k, n in run.ops(f).items():
            if k.endswith(":items") or (
                f == "events"
                and (
                    k == "s3:PutObject"  # the event log: per batch, below
                    or (k in _COUNTER_OPS and run.counters_by_batch)  # counters': below
                )
            ):
                continue
            if (f, k) in PER_CONTAINER:
                out[k] += per_container_share(run, tpl, volume, f, k)
                continue
            out[k] += n / run.mails
    recs = delivered_to_events(state_records(run.records), tpl.events_filters)
    rpm = len(recs) / run.mails
    batch = records_per_batch(tpl, volume * rpm / SECONDS_PER_MONTH)
    for k in (
        "dynamodb:TransactWriteItems",
        "dynamodb:BatchGetItem",
        "dynamodb:GetItem",
        "dynamodb:UpdateItem",
        "dynamodb:PutItem",
    ):
        v = _interp(run.counters_by_batch, batch, k) * (
            getattr(run, "replayed_per_mail", 0.0) or rpm
        )
        if v:
            out[f"{k} (counters)"] += v
    out["s3:PutObject (event log)"] += rpm / batch
    d_records = (getattr(run, "records_in", Counter()).get("delivery") or run.mails) / run.mails
    d_batch = delivery_batch(tpl, volume * d_records / SECONDS_PER_MONTH)
    esm = d_records / d_batch + run.invocations["bounce"] / run.mails
    out["sqs:ReceiveMessage + DeleteMessageBatch (event source)"] += 2 * esm
    return dict(sorted(out.items()))


def report(run: Run, tpl: Template, title: str = "### Cost model") -> list[str]:
    egress = egress_monthly("relay", VOLUMES[0])
    tables = {v: model(run, v, tpl) for v in VOLUMES}
    L: list[str] = [title, ""]
    L.append(
        f"Measured: {run.mails} mails of 10 KB, 1 recipient each (20 domains), one per API "
        f"call, through the local stack (template in moto, the real handlers, SQS and "
        f"stream event sources, SMTP sink), accepted → delivered → cleaned, in "
        f"{run.wall_s:.0f} s. Relay mode; the relay's own price is not included. "
        f"Tracing {'on' if tpl.tracing else 'off'}. List prices us-east-1 "
        "(bench/aws-prices.json)."
    )
    L.append("")
    L.append(
        "| service | "
        + " | ".join(f"{v // 1_000_000} M/month: $/month" for v in VOLUMES)
        + " | "
        + " | ".join(f"$/M at {v // 1_000_000} M" for v in VOLUMES)
        + " |"
    )
    L.append("|---|" + "---:|" * (2 * len(VOLUMES)))
    services = list(dict.fromkeys(x.service for x in tables[VOLUMES[0]]))
    for svc in services:
        vals = [sum(x.per_month for x in tables[v] if x.service == svc) for v in VOLUMES]
        L.append(
            f"| {svc} | "
            + " | ".join(f"{x:,.2f}" for x in vals)
            + " | "
            + " | ".join(f"{x / v * 1e6:.2f}" for x, v in zip(vals, VOLUMES, strict=True))
            + " |"
        )
    tot = [sum(x.per_month for x in tables[v]) for v in VOLUMES]
    L.append(
        "| **all-in** | "
        + " | ".join(f"**{x:,.2f}**" for x in tot)
        + " | "
        + " | ".join(f"**{x / v * 1e6:.2f}**" for x, v in zip(tot, VOLUMES, strict=True))
        + " |"
    )
    L.append("")
    L.append("Per mail (at 100 M/month), line by line:")
    L.append("")
    L.append("| service | item | $ per million mails |")
    L.append("|---|---|---:|")
    for x in tables[VOLUMES[-1]]:
        L.append(f"| {x.service} | {x.item} | {x.per_month / VOLUMES[-1] * 1e6:.3f} |")
    L.append("")
    recs = delivered_to_events(state_records(run.records), tpl.events_filters)
    L.append(
        f"Measured inputs: {len(run.records) / run.mails:.1f} stream records per mail "
        f"({len(recs) / run.mails:.1f} of them delivered to the events function"
        + (" after the event source's filter" if tpl.events_filters else "")
        + "); invocations per mail: "
        + ", ".join(
            f"{f} {run.invocations[f] / run.mails:.2f}" for f in ("ingress", "delivery", "events")
        )
        + "; handler CPU per mail: "
        + ", ".join(
            f"{f} {run.cpu_s.get(f, 0) / run.mails * 1000:.0f} ms" for f in ("ingress", "delivery")
        )
        + f", events {run.cpu_s.get('events', 0) / max(1, len(run.records)) * 1000:.1f} ms per record; "
        f"log bytes per mail: "
        + ", ".join(
            f"{f} {run.log_bytes[f] / run.mails:,.0f}" for f in ("ingress", "delivery", "events")
        )
        + f", API access log {run.api_log_bytes / run.mails:,.0f}; EMF metrics seen: {len(run.metrics)}; "
        f"event log {run.event_bytes / run.mails:,.0f} B per mail (gzip)." + _init_note(run)
    )
    L.append("")
    if run.counters_by_batch:  # a run of a revision with queue-size counters
        L.append(
            "Counters (replayed through `mailqueue.counters` at each batch size), per stream record:"
        )
        L.append("")
        L.append(
            "| records per batch | requests | items written | WRU | items, no netting | "
            "WRU, no netting (used) |"
        )
        L.append("|---:|---:|---:|---:|---:|---:|")
        for b, c in sorted(run.counters_by_batch.items()):
            req = sum(v for k, v in c.items() if k.startswith("dynamodb:"))
            L.append(
                f"| {b} | {req:.3f} | {c.get('items', 0):.3f} | {c.get('wru', 0):.3f} | "
                f"{c.get('items_no_netting', 0):.3f} | {c.get('wru_no_netting', 0):.3f} |"
            )
        L.append("")
    pr = path_requests(run, tpl, VOLUMES[-1])
    total_req = sum(pr.values())
    L.append(
        f"AWS requests per delivered 1-recipient mail, accepted → cleaned, at 100 M/month "
        f"(full stream batches): **{total_req:.2f}** — "
        + ", ".join(f"{k} {v:.2f}" for k, v in pr.items())
    )
    L.append("")
    L.append("| floor | measured | met |")
    L.append("|---|---:|:---:|")
    for v, t in zip(VOLUMES, tot, strict=True):
        fl = FLOORS[v]
        per_m = t / v * 1e6
        L.append(
            f"| ≤ ${fl:.2f} per million at {v // 1_000_000} M/month | ${per_m:.2f} | "
            f"{'yes' if per_m <= fl else '**no**'} |"
        )
    L.append(
        f"| ≤ {REQUEST_FLOOR} AWS requests per mail | {total_req:.2f} | "
        f"{'yes' if total_req <= REQUEST_FLOOR else '**no**'} |"
    )
    L.append("")
    L.append(
        "Assumptions (not measured): "
        + "; ".join(f"{k} = {v}" for k, v in ASSUMPTIONS.items())
        + f"; events batch {tpl.events_batch_size} records / {tpl.events_window_s} s window, "
        "the records of one batch spread evenly over the shards; Lambda time is the handler "
        "thread's CPU time measured in the run, stretched by 1769/MB below one vCPU "
        "(Lambda's CPU is proportional to memory; 1,769 MB = 1 vCPU), plus AWS's answer "
        "time per request "
        f"({', '.join(f'{k} {v:.0f} ms' for k, v in LATENCY_MS.items())}) and SMTP to the "
        "relay (moto's own answer time, slow and load-dependent here, is left out); "
        "the SQS event source's receive and delete counted once per "
        "invocation, delivery's batches filled from the volume (bench.cost.delivery_batch: "
        "the template's batching window, 5 pollers); X-Ray at Lambda's default sampling (1/s then 5 %) when tracing is on; "
        "storage of content (deleted after delivery) and of state items not included; "
        "a BatchGetItem is priced per key requested (a key without an item costs the "
        "minimum read unit); `mailqueue size` reads the by_state index when asked (not "
        "priced: no steady cost); "
        + (
            "egress: relay mode sends from outside any VPC (no NAT, no transfer charge); "
            "direct mode's NAT and transfer are in bench/egress_cost.py's section."
            if egress is not None
            else "egress not included: bench/egress_cost.py (branch `egress`) has not landed; "
            "`egress_monthly()` is the hook."
        )
    )
    return L


def _crossover(run: Run, tpl: Template, prov: Template, total: Any, u: float | None) -> str:
    """Where provisioned capacity (at `u`; None: the simulated use) becomes the cheaper,
    in whole 0.5 M steps."""
    at = "at the simulated use" if u is None else f"at {u:.0%} use"
    for half in range(1, 201):
        v = half * 500_000
        if total(run, prov, v, u) < total(run, tpl, v, u):
            return f"{at}, provisioned is the cheaper from {v / 1e6:g} M mails a month."
    return f"{at}, provisioned is not the cheaper below 100 M mails a month."


def capacity_report(
    run: Run,
    tpl: Template,
    batch: Run | None = None,
    utilizations: tuple[float, ...] = (0.35, 0.5, 0.7),
) -> list[str]:
    """The same runs priced with the state table in provisioned capacity mode
    (StateTableCapacity=provisioned) at several average utilizations, and the utilization
    at which each volume's floor is met."""
    prov = replace(tpl, state_capacity="provisioned")
    saved = tpl.state_use

    def total(r: Run, t: Template, v: int, u: float | None) -> float:
        return sum(x.per_month for x in model(r, v, replace(t, state_use=u))) / v * 1e6

    L = [
        "#### With provisioned capacity (`StateTableCapacity=provisioned`)",
        "",
        "The state table and its index at provisioned capacity with auto scaling (target "
        "70 %), priced by the hour (bench/aws-prices.json `dynamodb_provisioned`: "
        "$0.00065 per WCU-hour, $0.00013 per RCU-hour, us-east-1) at the average use of "
        "what is provisioned that bench/autoscale.py simulates (auto scaling's documented "
        "rules, minute by minute, over a week of the '"
        + str(ASSUMPTIONS["provisioned_traffic_profile"])
        + "' traffic profile: it follows a daily curve with a lag and scales in at most 27 "
        "times a day, so the use stays below the target), and at fixed uses for comparison; "
        "never below the template's minimum (10 write, 5 read units on the table and on "
        "the index). On demand is the default: " + _crossover(run, tpl, prov, total, saved),
        "",
        "| submission | capacity | "
        + " | ".join(f"$/M at {v // 1_000_000} M" for v in VOLUMES)
        + " |",
        "|---|---|" + "---:|" * len(VOLUMES),
    ]
    rows: list[tuple[str, Run]] = [("one mail per call", run)]
    if batch is not None:
        rows.append((f"batches of {batch.mails_per_call}", batch))
    for name, r in rows:
        L.append(
            f"| {name} | on demand | "
            + " | ".join(f"{total(r, tpl, v, saved):.2f}" for v in VOLUMES)
            + " |"
        )
        L.append(
            f"| {name} | provisioned, simulated use | "
            + " | ".join(f"{total(r, prov, v, None):.2f}" for v in VOLUMES)
            + " |"
        )
        for u in utilizations:
            L.append(
                f"| {name} | provisioned, {u:.0%} used | "
                + " | ".join(f"{total(r, prov, v, u):.2f}" for v in VOLUMES)
                + " |"
            )
    L.append("")
    notes = []
    for v in VOLUMES[1:]:
        fl = FLOORS[v]
        us = [u / 100 for u in range(20, 91)]
        met = next((u for u in us if total(run, prov, v, u) <= fl), None)
        notes.append(
            f"at {v // 1_000_000} M/month the ${fl:.2f} floor (one mail per call) is met from "
            + (f"{met:.0%} average use" if met is not None else "no utilization up to 90 %")
        )
    L.append("Break-even: " + "; ".join(notes) + ".")
    return L


#: the ingress measurements a batch run replaces in `with_ingress_of`
_INGRESS_FIELDS = ("requests", "rru", "invocations", "busy_s", "cpu_s", "log_bytes", "log_events")


def with_ingress_of(run: Run, other: Run) -> Run:
    """`run` with its submission side — API requests per mail, the ingress function's
    invocations, AWS requests, read units, CPU and busy time, logs, the API access log —
    taken from `other` (a run of the same mails through the batch route). Delivery and
    the rest stay `run`'s, so a difference in price is the submission route's alone."""
    if other.mails != run.mails:
        raise ValueError("the runs must have the same number of mails")
    out = replace(run, mails_per_call=other.mails_per_call, api_log_bytes=other.api_log_bytes)
    for name in _INGRESS_FIELDS:
        mine = dict(getattr(run, name))
        theirs = getattr(other, name)
        if "ingress" in theirs:
            mine["ingress"] = theirs["ingress"]
        else:
            mine.pop("ingress", None)
        setattr(out, name, Counter(mine) if isinstance(getattr(run, name), Counter) else mine)
    return out


def batch_report(run: Run, batch: Run, tpl: Template, more: tuple[int, ...] = (50,)) -> list[str]:
    """The figure with batch submission (issue 18): `run` (one mail per call) priced
    again with `batch`'s submission side, and for each of `more` mails per call the
    API requests at 1/N with the ingress function as measured in `batch`."""
    rows: list[tuple[str, Run]] = [
        ("one mail per call (the model above)", run),
        (f"batches of {batch.mails_per_call} (measured)", with_ingress_of(run, batch)),
    ]
    for n in more:
        rows.append(
            (
                f"batches of {n} (API requests 1/{n}; ingress as measured with "
                f"{batch.mails_per_call})",
                replace(with_ingress_of(run, batch), mails_per_call=n),
            )
        )
    L = [
        "#### With batch submission (`POST /v1/messages/batch`)",
        "",
        f"Measured: the same {batch.mails} mails of 10 KB submitted {batch.mails_per_call} "
        f"per call through the local stack's batch route ({batch.invocations['ingress']} "
        f"ingress invocation(s)), each accepted, delivered and cleaned up, in "
        f"{batch.wall_s:.0f} s. Priced: the one-mail-per-call run with its submission side "
        "(API requests, ingress invocations, the ingress function's AWS requests, CPU and "
        "logs, the API access log) taken from the batch run; delivery and the rest stay "
        "the first run's, so the difference is the route's alone. Each mail of a batch is "
        "enqueued as from the single route (one BatchWriteItem + one SendMessageBatch).",
        "",
        "| submission | API requests per mail | ingress Lambda ms per mail | AWS requests "
        "per mail | " + " | ".join(f"$/M at {v // 1_000_000} M" for v in VOLUMES) + " |",
        "|---|---:|---:|---:|" + "---:|" * len(VOLUMES),
    ]
    for name, r in rows:
        tot = [sum(x.per_month for x in model(r, v, tpl)) for v in VOLUMES]
        ms = lambda_seconds(r, "ingress", tpl.memory_mb["ingress"]) / r.mails * 1000
        api = ASSUMPTIONS["api_requests_per_mail"] / r.mails_per_call
        req = sum(path_requests(r, tpl, VOLUMES[-1]).values())
        L.append(
            f"| {name} | {api:.3f} | {ms:.1f} | {req:.2f} | "
            + " | ".join(f"{t / v * 1e6:.2f}" for t, v in zip(tot, VOLUMES, strict=True))
            + " |"
        )
    return L


def main() -> None:
    import sys

    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    run = measure(n)
    print("\n".join(report(run, Template.load())))


if __name__ == "__main__":
    main()
