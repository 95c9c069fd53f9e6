"""The admin API's egress pool routes: each pool's addresses, EHLO name, queue, whether
it is paused (its file or an operator suspension) and its warm-up progress
(outbound/pools.py, outbound/warmup.py).

  GET /v1/queue/pools            every pool
  GET /v1/queue/pools/{pool}     one pool
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from mailqueue.core.errors import NotFound
from mailqueue.outbound.pools import Pool, PoolConfig
from mailqueue.outbound.suspensions import SuspensionStore
from mailqueue.outbound.warmup import BudgetCounters, PoolStanding, WarmupGate


class PoolsApi:
    def __init__(
        self,
        config: PoolConfig,
        counters: BudgetCounters | None,
        suspensions: SuspensionStore | None,
        clock: Callable[[], datetime],
        *,
        queues: Mapping[str, str] | None = None,
        standing: PoolStanding | None = None,
    ) -> None:
        self.config = config
        self.suspensions = suspensions
        self.queues = dict(queues or {})
        self.gate = (
            WarmupGate(config, counters, standing=standing, clock=lambda: clock().timestamp())
            if counters is not None
            else None
        )
        self.clock = clock

    def _one(self, p: Pool, held: dict[str, Any]) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "name": p.name,
            "default": p.name == self.config.default,
            "addresses": list(p.addresses),
            "ehlo": p.ehlo,
            "bind": p.bind,
            "queue": self.queues.get(p.name),
            "paused": bool(p.paused or p.name in held),
            "suspension": held.get(p.name),
            "warmup": None,
        }
        if p.warmup is not None and self.gate is not None:
            doc["warmup"] = {**self.gate.progress(p).to_json(), "source": p.warmup.source}
        return doc

    def _held(self) -> dict[str, Any]:
        if self.suspensions is None:
            return {}
        now = self.clock().timestamp()
        return {
            s.target: s.to_json()
            for s in self.suspensions.all()
            if s.scope == "pool" and s.active(now)
        }

    def list(self) -> dict[str, Any]:
        held = self._held()
        return {"items": [self._one(p, held) for p in self.config.pools.values()]}

    def show(self, name: str) -> dict[str, Any]:
        p = self.config.pools.get(urllib.parse.unquote(name))
        if p is None:
            raise NotFound(f"no egress pool {name!r}")
        return self._one(p, self._held())


__all__ = ["PoolsApi"]
