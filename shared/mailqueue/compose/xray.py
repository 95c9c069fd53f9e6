"""X-Ray for the Lambda handlers, loaded only when tracing is on.

Powertools' `Tracer()` imports the X-Ray SDK when it is constructed (~130–330 ms of a cold
start on this machine), even when tracing is disabled. `LazyTracer` decides at the first
invocation, from the environment Lambda gives the function (tracing is on when the
function runs in Lambda and ``POWERTOOLS_TRACE_DISABLED`` is not true; the template sets
it from its `Tracing` parameter), and only then builds the Tracer.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any, TypeVar

Handler = TypeVar("Handler", bound=Callable[..., Any])

_TRUE = frozenset({"1", "true", "yes", "on"})


def tracing_enabled(env: dict[str, str] | os._Environ[str] | None = None) -> bool:
    e = os.environ if env is None else env
    if not e.get("AWS_LAMBDA_FUNCTION_NAME") or e.get("AWS_SAM_LOCAL"):
        return False
    return e.get("POWERTOOLS_TRACE_DISABLED", "").strip().lower() not in _TRUE


class LazyTracer:
    """`tracer.capture_lambda_handler` as Powertools', without importing X-Ray when off."""

    def __init__(self, service: str) -> None:
        self.service = service
        self.tracer: Any = None  # the Powertools Tracer, once tracing was found on

    def capture_lambda_handler(self, fn: Handler) -> Handler:
        chosen: list[Callable[..., Any]] = []

        @functools.wraps(fn)
        def run(event: Any, context: Any) -> Any:
            if not chosen:
                if tracing_enabled():
                    from aws_lambda_powertools import Tracer

                    self.tracer = Tracer(service=self.service)
                    chosen.append(self.tracer.capture_lambda_handler(fn))
                else:
                    chosen.append(fn)
            return chosen[0](event, context)

        return run  # type: ignore[return-value]
