"""The limit guard: botocore hooks that refuse, as the real services would, any request over
a documented DynamoDB, SQS or S3 limit (`mailqueue.backends.aws.limits` holds the limits
and the checks). Used by the test suite and the local stack, never shipped to Lambda."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from mailqueue.backends.aws.limits import ServiceLimitExceeded, check_request

log = logging.getLogger(__name__)


def register(client: Any, handlers: list[tuple[str, Any]]) -> Any:
    """Register botocore event handlers on one client (the guard's and the throttle's)."""
    for event, handler in handlers:
        client.meta.events.register(event, handler)
    return client


class LimitRecorder:
    """The violations a guard answered, kept until a test (or the stack) drains them."""

    def __init__(self, on_record: Callable[[ServiceLimitExceeded], None] | None = None) -> None:
        self._lock = threading.Lock()
        self._seen: list[ServiceLimitExceeded] = []
        self._on_record = on_record

    def record(self, violation: ServiceLimitExceeded) -> None:
        with self._lock:
            self._seen.append(violation)
        if self._on_record is not None:
            self._on_record(violation)

    def drain(self) -> list[ServiceLimitExceeded]:
        with self._lock:
            out, self._seen = self._seen, []
        return out

    def peek(self) -> list[ServiceLimitExceeded]:
        with self._lock:
            return list(self._seen)


_CONTEXT_KEY = "mailqueue_limits"


class _Raw:
    """The body of a synthetic response, for after-call hooks that read it."""

    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self._body


class LimitGuard:
    """Checks every request of the clients it is installed on; answers violations as 400s.

    Hooks: the check runs on ``before-parameter-build`` (it needs the parameters as the
    caller gave them, typed values and all; ``before-call`` only sees the serialised
    body) and stores its verdict in the request context; ``before-call`` then answers a
    refused request with the service's error response instead of sending it, so botocore
    raises the same modelled `ClientError` (code, HTTP 400) the service would, after
    parameter validation, with no retry. ``after-call`` of CreateTable/DescribeTable
    learns key schemas, which makes the key checks exact.
    """

    def __init__(self, recorder: LimitRecorder | None = None) -> None:
        self.recorder = recorder if recorder is not None else LimitRecorder()
        self._schemas: dict[str, tuple[str, str | None]] = {}
        self._lock = threading.Lock()

    # the (event, handler) pairs this guard registers
    def handlers(self) -> list[tuple[str, Any]]:
        return [
            ("before-parameter-build", self._on_params),
            ("before-call", self._on_call),
            ("after-call.dynamodb", self._on_response),
        ]

    def install(self, client: Any) -> Any:
        return register(client, self.handlers())

    def _on_params(
        self, params: Mapping[str, Any], model: Any, context: dict[str, Any], **_: Any
    ) -> None:
        if _CONTEXT_KEY in context:
            return  # another guard on this client owns the request
        service = model.service_model.service_name
        if service == "dynamodb" and model.name == "CreateTable":
            self._learn(params.get("TableName"), params.get("KeySchema"))
        with self._lock:
            schemas = dict(self._schemas)
        verdict: ServiceLimitExceeded | None = None
        try:
            check_request(service, model.name, params, schemas=schemas)
        except ServiceLimitExceeded as e:
            verdict = e
        except Exception:  # malformed params: botocore's validation answers them
            log.debug("limits: %s:%s not checked", service, model.name, exc_info=True)
        context[_CONTEXT_KEY] = (self, verdict)

    def _on_call(self, model: Any, context: dict[str, Any], **_: Any) -> Any:
        owner, verdict = context.get(_CONTEXT_KEY, (None, None))
        if owner is not self or verdict is None:
            return None
        self.recorder.record(verdict)
        # the rule only: the message may name attribute paths (addresses, in map keys)
        log.error(
            "refused as AWS would: %s:%s %s (%s)",
            verdict.service,
            verdict.operation,
            verdict.rule,
            verdict.code,
        )
        return _error_response(verdict)

    def _on_response(self, parsed: Mapping[str, Any], model: Any, **_: Any) -> None:
        if model.name in ("CreateTable", "DescribeTable"):
            desc = parsed.get("TableDescription") or parsed.get("Table") or {}
            self._learn(desc.get("TableName"), desc.get("KeySchema"))

    def _learn(self, table: Any, key_schema: Any) -> None:
        if not table or not key_schema:
            return
        hash_key = next(
            (k["AttributeName"] for k in key_schema if k.get("KeyType") == "HASH"), None
        )
        range_key = next(
            (k["AttributeName"] for k in key_schema if k.get("KeyType") == "RANGE"), None
        )
        if hash_key:
            with self._lock:
                self._schemas[str(table)] = (hash_key, range_key)


def _error_response(v: ServiceLimitExceeded) -> tuple[Any, dict[str, Any]]:
    from botocore.awsrequest import AWSResponse

    body = json.dumps({"__type": v.code, "message": v.message}).encode()
    headers = {"Content-Type": "application/x-amz-json-1.0", "x-mailqueue-limits": v.rule}
    http = AWSResponse("", 400, headers, _Raw(body))
    parsed = {
        "Error": {"Code": v.code, "Message": v.message},
        "ResponseMetadata": {"HTTPStatusCode": 400, "HTTPHeaders": headers, "RetryAttempts": 0},
    }
    return http, parsed


def install_guard(client: Any, recorder: LimitRecorder | None = None) -> LimitGuard:
    """Guard one client: its requests are checked, violations answered 400 and recorded."""
    guard = LimitGuard(recorder)
    guard.install(client)
    return guard


@contextmanager
def strict_limits(recorder: LimitRecorder | None = None) -> Iterator[LimitGuard]:
    """Guard every botocore session created in this process while the block runs.

    The Lambda handlers build their own boto3 sessions (as in AWS), so a guard on the
    harness's clients does not reach them; botocore registers its BUILTIN_HANDLERS on every
    new session, so the guard's handlers go there for the duration. Sessions made before
    the block are not guarded; ones made inside stay guarded after it.
    """
    from botocore import handlers as builtin

    guard = LimitGuard(recorder)
    added = guard.handlers()
    builtin.BUILTIN_HANDLERS.extend(added)
    try:
        yield guard
    finally:
        for spec in added:
            try:
                builtin.BUILTIN_HANDLERS.remove(spec)
            except ValueError:
                pass


def rules_of(violations: Iterable[ServiceLimitExceeded]) -> list[str]:
    return [f"{v.service}:{v.operation}:{v.rule}" for v in violations]
