"""A local Lambda runtime: runs the real handlers with Lambda's trigger semantics.

SQS event source mapping: receive up to `batch_size` messages, invoke the handler with an
SQS event, delete the records not listed in `batchItemFailures` (their visibility stays as
the handler set it), enforce the function timeout through the context's remaining time.

The rest is what `mailqueue_local.stack` assembles into the local stack: `LocalFunction`
(a function's warm containers: the real `app.handler`, one invocation per container at a
time, as many containers as its event source mappings run at once; its output in its own
log file through `OutputRouter`), `Loop` (a polling thread that stops
on an event) and `Schedule` (an EventBridge `rate(...)` rule).
"""

from __future__ import annotations

import contextvars
import importlib
import importlib.util
import io
import logging
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import ModuleType
from typing import Any, TextIO

from mailqueue.core.ports import PollResult

Handler = Callable[[dict[str, Any], Any], Any]
log = logging.getLogger(__name__)


@dataclass
class LocalContext:
    """The parts of Lambda's context object the handlers use."""

    function_name: str
    timeout_seconds: float = 300.0
    memory_limit_in_mb: int = 512
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    started: float = field(default_factory=time.monotonic)

    @property
    def invoked_function_arn(self) -> str:
        return f"arn:aws:lambda:us-east-1:123456789012:function:{self.function_name}"

    @property
    def function_version(self) -> str:
        return "$LATEST"

    @property
    def log_group_name(self) -> str:
        return f"/aws/lambda/{self.function_name}"

    @property
    def log_stream_name(self) -> str:
        return "local"

    def get_remaining_time_in_millis(self) -> int:
        left = self.timeout_seconds - (time.monotonic() - self.started)
        return max(0, int(left * 1000))


def sqs_event(messages: list[dict[str, Any]], queue_arn: str) -> dict[str, Any]:
    """Messages from ReceiveMessage → the Lambda SQS event shape."""
    records = []
    for m in messages:
        attrs = m.get("Attributes", {})
        records.append(
            {
                "messageId": m["MessageId"],
                "receiptHandle": m["ReceiptHandle"],
                "body": m["Body"],
                "attributes": {
                    "ApproximateReceiveCount": attrs.get("ApproximateReceiveCount", "1"),
                    "SentTimestamp": attrs.get("SentTimestamp", "0"),
                    "SenderId": attrs.get("SenderId", "local"),
                    "ApproximateFirstReceiveTimestamp": attrs.get(
                        "ApproximateFirstReceiveTimestamp", "0"
                    ),
                },
                "messageAttributes": {},
                "md5OfBody": m.get("MD5OfBody", ""),
                "eventSource": "aws:sqs",
                "eventSourceARN": queue_arn,
                "awsRegion": "us-east-1",
            }
        )
    return {"Records": records}


class SqsPoller:
    """One event source mapping: queue → handler."""

    def __init__(
        self,
        sqs: Any,
        queue_url: str,
        handler: Handler,
        *,
        function_name: str,
        batch_size: int = 10,
        timeout_seconds: float = 300.0,
        wait_seconds: int = 0,
        report_batch_item_failures: bool = True,
    ) -> None:
        self.sqs = sqs
        self.queue_url = queue_url
        self.handler = handler
        self.function_name = function_name
        self.batch_size = batch_size
        self.timeout_seconds = timeout_seconds
        self.wait_seconds = wait_seconds
        # FunctionResponseTypes: [ReportBatchItemFailures]; without it a returned
        # response is ignored and the whole batch counts as processed
        self.report_batch_item_failures = report_batch_item_failures
        self.queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])[
            "Attributes"
        ]["QueueArn"]

    def poll_once(self) -> PollResult:
        resp = self.sqs.receive_message(
            QueueUrl=self.queue_url,
            MaxNumberOfMessages=self.batch_size,
            WaitTimeSeconds=self.wait_seconds,
            AttributeNames=["All"],
        )
        messages = resp.get("Messages", [])
        if not messages:
            return PollResult(0, 0, 0, [])
        event = sqs_event(messages, self.queue_arn)
        ctx = LocalContext(self.function_name, self.timeout_seconds)
        receipts = [m["ReceiptHandle"] for m in messages]
        try:
            result = self.handler(event, ctx)
        except Exception as e:  # noqa: BLE001 - a crashed invocation: nothing is deleted
            return PollResult(len(messages), len(messages), 0, receipts, e)
        reported = (
            (result or {}).get("batchItemFailures", []) if self.report_batch_item_failures else []
        )
        failures = {str(f.get("itemIdentifier") or "") for f in reported}
        if failures - {m["MessageId"] for m in messages}:
            # an empty or unknown identifier fails the whole batch, as Lambda does
            failures = {m["MessageId"] for m in messages}
        done = [m for m in messages if m["MessageId"] not in failures]
        for i in range(0, len(done), 10):
            chunk = done[i : i + 10]
            self.sqs.delete_message_batch(
                QueueUrl=self.queue_url,
                Entries=[
                    {"Id": str(j), "ReceiptHandle": m["ReceiptHandle"]} for j, m in enumerate(chunk)
                ],
            )
        return PollResult(len(messages), len(failures), len(done), receipts)

    def drain(self, max_polls: int = 100) -> list[PollResult]:
        """Poll until the queue yields nothing visible (tests)."""
        out = []
        for _ in range(max_polls):
            r = self.poll_once()
            if r.received == 0:
                break
            out.append(r)
        return out


# ------------------------------------------------------------------ the local "Lambda service"
ACCOUNT_ID = "123456789012"
REGION = "us-east-1"


class OutputRouter(io.TextIOBase):
    """Stands in for sys.stdout/sys.stderr: what a function invocation prints goes to that
    function's log file (its CloudWatch log group), everything else to the real stream.

    Powertools' Logger binds sys.stdout when the function module is imported, so the router
    is installed before the local stack imports any function. The redirection is a context
    variable, not a thread-local: the threads an invocation runs its records on (delivery's
    lanes) copy the invoking context and so write to the same function's log.
    """

    def __init__(self, default: TextIO, share: OutputRouter | None = None) -> None:
        super().__init__()
        self.default = default
        # routers made with `share` follow the same redirection (stdout and stderr alike)
        self._var: contextvars.ContextVar[TextIO | None] = (
            share._var
            if share is not None
            else contextvars.ContextVar(f"mq_output_{id(self)}", default=None)
        )

    def _target(self) -> TextIO:
        target = self._var.get()
        return target if target is not None else self.default

    def write(self, s: str) -> int:
        return self._target().write(s)

    def flush(self) -> None:
        self._target().flush()

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return self._target().isatty()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self.default, "encoding", "utf-8")

    @contextmanager
    def to(self, stream: TextIO) -> Iterator[None]:
        token = self._var.set(stream)
        try:
            yield
        finally:
            self._var.reset(token)


@dataclass
class FunctionSpec:
    """One function as the template declares it: where its handler is and its limits."""

    name: str  # logical name: ingress, admin, delivery, bounce, sweeper, events
    module: str  # "functions.delivery.app"
    attribute: str = "handler"
    timeout_seconds: float = 300.0
    memory_mb: int = 512
    physical_name: str = ""  # the deployed FunctionName; default mailqueue-<name>

    @property
    def function_name(self) -> str:
        return self.physical_name or f"mailqueue-{self.name}"


class LockedLog(io.TextIOBase):
    """A function's log file shared by its containers: one write at a time, so the lines
    of concurrent invocations never interleave mid-line."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__()
        self.stream = stream
        self._lock = threading.Lock()

    def write(self, s: str) -> int:
        with self._lock:
            return self.stream.write(s)

    def flush(self) -> None:
        with self._lock:
            self.stream.flush()

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self.stream, "encoding", "utf-8")


def _load_container(module_name: str, number: int) -> ModuleType:
    """A container's own copy of the function module: its module-level state
    (functools.cache'd services, Powertools' Logger/Metrics) belongs to it alone.

    Container 0 is the module as imported; the others are fresh executions of the same
    file under a private name. Powertools' Metrics share one metric set per process (a
    class attribute); each copy gets its own, as each Lambda container has its own."""
    if number == 0:
        module = importlib.import_module(module_name)
        # a new container: forget services cached by an earlier stack in this process
        for value in vars(module).values():
            clear = getattr(value, "cache_clear", None)
            if callable(clear) and getattr(value, "__module__", None) == module.__name__:
                clear()
        return module
    found = importlib.util.find_spec(module_name)
    if found is None or found.origin is None:
        raise ImportError(f"{module_name} not found")
    name = f"{module_name}__container{number}"
    spec = importlib.util.spec_from_file_location(name, found.origin)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and friends look their module up there
    spec.loader.exec_module(module)
    for value in vars(module).values():
        provider = getattr(value, "provider", None)
        if provider is not None and isinstance(getattr(value, "metric_set", None), dict):
            value.metric_set = provider.metric_set = {}
            value.metadata_set = provider.metadata_set = {}
            value.dimension_set = provider.dimension_set = dict(provider.dimension_set)
    return module


class _Container:
    """One execution environment: its own module copy (loaded at its first invocation,
    a cold start), one invocation at a time."""

    def __init__(self, number: int) -> None:
        self.number = number
        self.lock = threading.Lock()
        self.handler: Handler | None = None


class LocalFunction:
    """A function's warm containers: the real `app.handler`, one invocation per container.

    Lambda runs one invocation per execution environment and as many environments as
    invocations run at once (an SQS event source mapping up to its MaximumConcurrency);
    the handlers keep per-container state at module level (functools.cache'd services,
    Powertools' metric set), so each container here has its own copy of the module and
    a lock. Direct calls (HTTP routes, schedules, streams) use container 0; an event
    source mapping's pollers invoke through `invoke_pooled`, which takes an idle warm
    container or starts a new one.
    """

    def __init__(self, spec: FunctionSpec, log: TextIO, router: OutputRouter | None) -> None:
        self.spec = spec
        self.log: TextIO = log if isinstance(log, LockedLog) else LockedLog(log)  # type: ignore[assignment]
        self.router = router
        self.invocations = 0
        self.errors = 0
        self.busy_seconds = 0.0  # time spent in invocations (the benchmark's utilisation)
        self.running = 0  # invocations in progress now
        self.peak_running = 0  # the most that ever ran at once
        self._stats = threading.Lock()
        self._containers = [_Container(0)]
        self._containers[0].handler = getattr(_load_container(spec.module, 0), spec.attribute)
        self._idle = [self._containers[0]]  # warm containers no pooled invocation uses
        self._outer: Handler | None = None
        self._current = threading.local()  # the container invoking on this thread

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def lock(self) -> threading.Lock:
        """Container 0's lock (direct calls)."""
        return self._containers[0].lock

    @property
    def handler(self) -> Handler:
        """What every invocation calls: by default the invoking container's own handler.
        Assigning a wrapper of it (``f.handler = wrap(f.handler)``: the cost benchmark's
        request accounting) wraps the invocations of every container, each still running
        its own module copy."""
        return self._outer if self._outer is not None else self._dispatch

    @handler.setter
    def handler(self, value: Handler) -> None:
        self._outer = value

    def _dispatch(self, event: dict[str, Any], context: Any) -> Any:
        c: _Container = self._current.container
        if c.handler is None:  # cold start: the module copy is loaded in the invocation
            c.handler = getattr(_load_container(self.spec.module, c.number), self.spec.attribute)
        return c.handler(event, context)

    @property
    def containers(self) -> int:
        return len(self._containers)

    def invoke_pooled(self, event: dict[str, Any], context: Any = None) -> Any:
        """An event source mapping's invocation: in an idle warm container (the one used
        last, as Lambda reuses environments), or in a new one (a cold start: its module
        copy loads in the invocation) when every container is busy. So a function runs
        as many containers as invocations ever ran at once, at most its pollers."""
        with self._stats:
            if self._idle:
                c = self._idle.pop()
            else:
                c = _Container(len(self._containers))
                self._containers.append(c)
        try:
            return self._call(c, event, context)
        finally:
            with self._stats:
                self._idle.append(c)

    def context(self) -> LocalContext:
        return LocalContext(self.spec.function_name, self.spec.timeout_seconds, self.spec.memory_mb)

    def __call__(self, event: dict[str, Any], context: Any = None) -> Any:
        """Invoke synchronously; an exception is the invocation's error (as Lambda reports)."""
        return self._call(self._containers[0], event, context)

    def _call(self, c: _Container, event: dict[str, Any], context: Any) -> Any:
        ctx = context if context is not None else self.context()
        with c.lock:
            with self._stats:
                self.invocations += 1
                self.running += 1
                self.peak_running = max(self.peak_running, self.running)
            started = time.monotonic()
            try:
                if self.router is None:
                    return self._invoke(c, event, ctx)
                with self.router.to(self.log):
                    return self._invoke(c, event, ctx)
            finally:
                with self._stats:
                    self.running -= 1
                    self.busy_seconds += time.monotonic() - started

    def _invoke(self, c: _Container, event: dict[str, Any], ctx: Any) -> Any:
        try:
            self._current.container = c
            return self.handler(event, ctx)
        except Exception:
            with self._stats:
                self.errors += 1
            # what Lambda writes to the log group for an unhandled error
            self.log.write(f"[ERROR] invocation {ctx.aws_request_id} failed\n")
            self.log.write(traceback.format_exc())
            self.log.flush()
            raise


class Loop(threading.Thread):
    """Calls ``step()`` until stopped; ``step`` returns how long to wait before the next call.

    A failing step is logged with its traceback and retried after a second: an event source
    mapping keeps polling whatever its function does.
    """

    def __init__(self, name: str, step: Callable[[], float], stop: threading.Event) -> None:
        super().__init__(name=name, daemon=True)
        self.step = step
        self.stop_event = stop

    def run(self) -> None:
        while not self.stop_event.is_set():
            try:
                wait = self.step()
            except Exception:
                log.exception("%s: poll failed", self.name)
                wait = 1.0
            if wait > 0:
                self.stop_event.wait(wait)


def sqs_step(poller: SqsPoller, function: str) -> Callable[[], float]:
    """One long poll of an SQS event source mapping; invocation errors go to the log."""

    def step() -> float:
        r = poller.poll_once()
        if r.error is not None:
            log.error(
                "%s: invocation failed (%s: %s); %d record(s) stay on the queue",
                function,
                type(r.error).__name__,
                r.error,
                r.received,
            )
        return 0.0

    return step


def scheduled_event(
    rule_name: str, now: datetime | None = None, detail: Any = None
) -> dict[str, Any]:
    """An EventBridge scheduled event; a rule's constant `Input` replaces it (see Schedule)."""
    ts = (now or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": ACCOUNT_ID,
        "time": ts,
        "region": REGION,
        "resources": [f"arn:aws:events:{REGION}:{ACCOUNT_ID}:rule/{rule_name}"],
        "detail": detail if detail is not None else {},
    }


@dataclass
class Schedule:
    """An EventBridge rule `rate(...)`: the first invocation one interval after start."""

    rule_name: str
    interval_seconds: float
    function: Handler
    input: dict[str, Any] | None = None  # the rule's constant Input, if any
    next_at: float = field(default=0.0)

    def step(self) -> float:
        now = time.monotonic()
        if not self.next_at:
            self.next_at = now + self.interval_seconds
        if now < self.next_at:
            return min(self.next_at - now, 1.0)
        self.next_at = now + self.interval_seconds
        event = dict(self.input) if self.input is not None else scheduled_event(self.rule_name)
        try:
            self.function(event, None)
        except Exception as e:  # noqa: BLE001 - the traceback is in the function's log
            log.error(
                "schedule %s: invocation failed (%s: %s)", self.rule_name, type(e).__name__, e
            )
        return 0.0
