"""Fault injection at the botocore layer: real requests, real responses, chosen failures."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from botocore.awsrequest import AWSResponse


class InjectedCrash(BaseException):
    """Simulates the Lambda dying: a BaseException, so no `except Exception` swallows it."""


@contextmanager
def short_circuit(
    client: Any, operation: str, respond: Callable[[dict[str, Any]], dict[str, Any] | None]
) -> Iterator[None]:
    """Answer `operation` with `respond(api_params)` instead of calling AWS (None: call AWS).

    `api_params` is the decoded JSON request for JSON-protocol services, else {}.
    """
    svc = client.meta.service_model.service_name

    def hook(params: dict[str, Any], **_: Any) -> Any:
        body = params.get("body") or b"{}"
        try:  # JSON protocols (DynamoDB, SQS): the body is the API parameters
            api = json.loads(body if isinstance(body, (bytes, str)) else b"{}")
        except ValueError:
            api = {}
        parsed = respond(api if isinstance(api, dict) else {})
        if parsed is None:
            return None
        http = AWSResponse("http://fault", 200, {}, None)
        return http, parsed

    event = f"before-call.{svc}.{operation}"
    client.meta.events.register(event, hook)
    try:
        yield
    finally:
        client.meta.events.unregister(event, hook)


@contextmanager
def crash_after(clients: tuple[Any, ...], k: int) -> Iterator[list[str]]:
    """Raise InjectedCrash right after the k-th AWS request completes (1-based)."""
    seen: list[str] = []

    def hook(model: Any, **_: Any) -> None:
        seen.append(f"{model.service_model.service_name}:{model.name}")
        if len(seen) == k:
            raise InjectedCrash(f"crash after request {k} ({seen[-1]})")

    for c in clients:
        c.meta.events.register("after-call.*.*", hook)
    try:
        yield seen
    finally:
        for c in clients:
            c.meta.events.unregister("after-call.*.*", hook)
