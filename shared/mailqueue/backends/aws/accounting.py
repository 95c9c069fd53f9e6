"""Counts AWS requests by service and operation through botocore's event hooks.

Cost on AWS is requests, so tests assert request counts and benchmarks turn them into
dollars. `calls` counts API calls as the code makes them; `sends` counts HTTP attempts
(retries included), which is what AWS bills.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


class RequestCounter:
    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.sends: Counter[str] = Counter()

    def attach(self, *clients: Any) -> RequestCounter:
        for client in clients:
            client.meta.events.register("before-call.*.*", self._on_call)
            client.meta.events.register("before-send.*.*", self._on_send)
        return self

    def detach(self, *clients: Any) -> None:
        for client in clients:
            client.meta.events.unregister("before-call.*.*", self._on_call)
            client.meta.events.unregister("before-send.*.*", self._on_send)

    def _on_call(self, model: Any, **_: Any) -> None:
        self.calls[f"{model.service_model.service_name}:{model.name}"] += 1

    def _on_send(self, request: Any, **_: Any) -> None:
        ctx = getattr(request, "context", {}) or {}
        op = ctx.get("operation_name") or "?"
        svc = ctx.get("service_name") or "?"
        self.sends[f"{svc}:{op}"] += 1

    def reset(self) -> None:
        self.calls.clear()
        self.sends.clear()

    @property
    def total(self) -> int:
        return sum(self.calls.values())

    def by_service(self) -> dict[str, int]:
        out: Counter[str] = Counter()
        for key, n in self.calls.items():
            out[key.split(":", 1)[0]] += n
        return dict(out)

    def snapshot(self) -> dict[str, int]:
        return dict(sorted(self.calls.items()))

    @contextmanager
    def measure(self) -> Iterator[RequestCounter]:
        """Counts only what happens inside the block (in a fresh counter)."""
        before = Counter(self.calls)
        sub = RequestCounter()
        yield sub
        sub.calls = self.calls - before
