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

The models that price a `Run` are bench/model/ (`bench.model.bill.model`: $ per month at a
volume, per service, from bench/aws-prices.json and the template's settings; one module
per service; `bench.model.memory`: each function at each memory size; what is assumed
rather than measured: `bench.model.assumptions`). `python -m bench.cost [MAILS]` measures
a run and prints the cost model's tables (`bench.model.report`).
"""

from __future__ import annotations

import base64
import contextvars
import gc
import json
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.model import trace as _trace
from bench.model.dynamodb import item_size, units
from bench.model.report import report
from bench.model.run import Run
from bench.model.secretsmanager import PER_CONTAINER
from bench.model.state_table import state_records
from bench.model.stream import delivered_to_events
from bench.model.template import Template

#: what `python -m bench.compare` and `bench.mix --from` unpickle: runs saved before the
#: models moved to bench/model/ name their class `bench.cost.Run`
__all__ = ["Run", "handler_rss_mb", "measure"]


# which function a request belongs to: a context variable, so the delivery service's
# lanes (threads that run in a copy of the invocation's context) are credited too
_function: contextvars.ContextVar[str | None] = contextvars.ContextVar("mq_fn", default=None)
# set while the warm-up mail runs (`_warm_mail`): its requests are left out of the run but
# for the per-container ones the model prices per container, not per mail (the DKIM keys'
# reads, PER_CONTAINER), which a warm container made once and the run would otherwise miss
_warming: contextvars.ContextVar[str | None] = contextvars.ContextVar("mq_warm", default=None)


class _Hooks:
    """botocore hooks on every session made while installed (as mailqueue.backends.aws.limits does)."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.lock = threading.Lock()

    def before(self, model: Any, params: Any, context: Any, **_: Any) -> None:
        fn = _function.get()
        op = f"{model.service_model.service_name}:{model.name}"
        if fn is None:
            warm = _warming.get()
            if warm is not None and (warm, op) in PER_CONTAINER:
                with self.lock:
                    self.run.requests.setdefault(warm, Counter())[op] += 1
            return
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
    var: contextvars.ContextVar[str | None] = _function,
) -> Callable[..., Any]:
    """The handler with its CPU counted: the handler thread's, and (while a `_ThreadCpu`
    is installed on `cpu`) every thread it starts, e.g. delivery's lanes. `var` names the
    function to the hooks: `_function` (counted) or `_warming` (the warm-up mail)."""

    def run(event: Any, context: Any) -> Any:
        token = var.set(name)
        if records_in is not None and isinstance(event, dict):
            records_in[name] += len(event.get("Records") or ()) or 1
        t0 = time.thread_time()
        try:
            return handler(event, context)
        finally:
            var.reset(token)
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


def _warm_mail(
    stack: Any,
    init_cpu: dict[str, float],
    delivered: set[str],
    lock: threading.Lock,
    make: Callable[[int, int], bytes],
    size: int,
    recipients: Callable[[int], list[str]] | None,
    per_call: int,
    mails: int,
) -> set[str]:
    """Send one mail (a call of `per_call` for a batch run) the measured mails' way,
    accepted -> delivered -> cleaned -> through the stream, before the measured window:
    a container's first mail pays its one-offs (lazy imports, the first use of each
    botocore operation's model, regexes compiled, TLS contexts), which a warm container
    has paid. Measured, the first 10-mail run of a process counted 42.8 ms of ingress CPU
    a mail, the next runs 10.7-12.2: bench.mix measures its commonest shape first. Its
    handler-thread CPU is added to `init_cpu` (reported as one-offs, not priced per
    mail); its requests, records and events are left out of the run but for the
    per-container reads (`_warming`), and the custom metrics its logs name count (a metric
    is billed by the month whenever it is first written). Returns the stream sequence
    numbers of its records."""
    base = 10**6 + mails  # indexes no measured mail uses
    todo = [
        (recipients(base + k) if recipients else [f"warm{k}@d{k % 20}.cost.example"],
         make(base + k, size))
        for k in range(max(1, per_call))
    ]  # fmt: skip
    want = {r for rcpts, _ in todo for r in rcpts}
    handlers = {n: f.handler for n, f in stack.functions.items()}

    for n, f in stack.functions.items():
        f.handler = _wrap(n, f.handler, init_cpu, var=_warming)  # no lane threads counted
    try:
        if per_call == 1:
            _submit(stack, todo[0][0], todo[0][1])
        else:
            _submit_batch(stack, todo)
        _wait(lambda: want <= delivered, 180, "warm-up delivery")
        d = stack.deployment
        _wait(lambda: _count_items(stack, d.table) == 0, 60, "warm-up cleanup")
        _wait(_stream_quiet(stack), 60, "warm-up stream drained")
    finally:
        for n, f in stack.functions.items():
            f.handler = handlers[n]
    with lock:
        delivered.difference_update(want)
    return {
        str(r["dynamodb"].get("SequenceNumber")) for r in _read_stream(stack, d.stream_arn or "")
    }


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
            warmed: set[str] = set()  # the warm-up mail's stream records (sequence numbers)
            events0 = (0, 0)
            if warm:
                _warm(stack, run.init_cpu_s)
                logs_w = {n: _size(stack.log_dir / f"{n}.log") for n in stack.functions}
                warmed = _warm_mail(
                    stack, run.init_cpu_s, delivered, lock, body or _content, size,
                    recipients, per_call, mails,
                )  # fmt: skip
                assert stack.deployment is not None  # LocalStack deploys on enter
                events0 = _event_objects(stack, stack.deployment.bucket)
                for n, at in logs_w.items():
                    log = stack.log_dir / f"{n}.log"
                    for line in log.read_bytes()[at:].splitlines() if log.exists() else ():
                        _emf(line, run.metrics)
            _freeze_heap()
            for name, f in stack.functions.items():
                f.handler = _wrap(name, f.handler, run.cpu_s, run.records_in)
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
            _wait(_stream_quiet(stack), 60, "stream drained")
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
            run.records = [
                r
                for r in _read_stream(stack, d.stream_arn or "")
                if r["dynamodb"].get("SequenceNumber") not in warmed
            ]
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
            n_obj, n_bytes = _event_objects(stack, d.bucket)
            run.event_objects, run.event_bytes = n_obj - events0[0], n_bytes - events0[1]
            tpl = Template.load()
            replayed = delivered_to_events(state_records(run.records), tpl.events_filters)
            run.replayed_per_mail = len(replayed) / mails
            # (runs of revisions with queue-size counters replayed the records through
            # `mailqueue.counters` into `counters_by_batch`; the model still prices those)
    finally:
        gc.unfreeze()
        if tmp:
            tmp.cleanup()
    return run


def _freeze_heap() -> None:
    """What exists before the measured window (moto's state, the whole stack, every
    function's warm service) moved out of the collector's reach (`gc.freeze`), as a
    Lambda container's heap holds only its own function: the run's process holds ~500,000
    objects, a full collection of which costs ~260 ms of CPU and is charged to whichever
    handler thread happens to trigger it. Measured (5 notification runs in one process,
    20 mails each): delivery 12.4, 25.5, 12.3, 10.0, 26.4 ms a mail unfrozen; 12.5, 12.8,
    9.9, 11.6, 12.2 frozen. Objects made in the window are collected as ever."""
    gc.collect()
    gc.freeze()


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
    mail's expired item and a delivered mail's content item are DynamoDB's TTL's to
    delete, which moto does not run; a content item goes with its group otherwise)."""
    now = time.time()
    n = 0
    for page in stack.clients.dynamodb.get_paginator("scan").paginate(TableName=table):
        n += sum(
            1
            for it in page["Items"]
            if it["pk"]["S"].startswith("M#")
            and it["sk"]["S"] != "C"
            and not ("st" not in it and float(it.get("expires_at", {}).get("N", "inf")) <= now)
        )
    return n


def _stream_quiet(stack: Any) -> Callable[[], bool]:
    """A check, true once the events function has not been invoked for 3 s since the
    check began (its window is shorter locally). Each wait makes its own: one state shared
    across waits (it was module state, keyed by the stack) answered the measured window's
    wait at once from the warm-up's quiet, before the window's records reached the events
    function, whose PUT then fell outside the run's invocations."""
    f = stack.functions["events"]
    state = [f.invocations, time.monotonic()]

    def quiet() -> bool:
        if f.invocations != state[0]:
            state[:] = [f.invocations, time.monotonic()]
            return False
        return bool(time.monotonic() - state[1] > 3.0)

    return quiet


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


def main() -> None:
    import sys

    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    run = measure(n)
    print("\n".join(report(run, Template.load())))


if __name__ == "__main__":
    main()
