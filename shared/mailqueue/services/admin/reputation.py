"""The admin API's reputation routes: a principal's or sender domain's standing, and the
operator's resume of an automatic pause (outbound/reputation.py says why and how).

  GET  /v1/queue/reputation/{scope}/{target}          rates over the window, verdict, pause
  POST /v1/queue/reputation/{scope}/{target}/resume   end the pause, restart the counting
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable
from datetime import datetime
from typing import Any

from mailqueue.core.errors import NotFound
from mailqueue.outbound.reputation import (
    ACTOR,
    ReputationEvents,
    ReputationGuard,
    ReputationStore,
    Thresholds,
    parse_rep_scope,
)
from mailqueue.outbound.suspensions import SuspensionStore, parse_target


class ReputationApi:
    def __init__(
        self,
        store: ReputationStore,
        suspensions: SuspensionStore,
        thresholds: Thresholds,
        clock: Callable[[], datetime],
        events: ReputationEvents | None = None,
    ) -> None:
        self.guard = ReputationGuard(
            store, suspensions, thresholds, events=events, clock=lambda: clock().timestamp()
        )
        self.clock = clock

    def _key(self, scope: str, target: str) -> tuple[Any, str]:
        sc = parse_rep_scope(scope)
        return sc, parse_target(urllib.parse.unquote(target), sc)

    def show(self, scope: str, target: str) -> dict[str, Any]:
        sc, t = self._key(scope, target)
        now = self.clock().timestamp()
        doc = self.guard.standing(sc, t).to_json()
        held = [
            s
            for s in self.guard.suspensions.all()
            if s.scope == sc and s.target == t and s.active(now)
        ]
        doc["paused"] = held[0].to_json() if held else None
        return doc

    def resume(self, scope: str, target: str, actor: str) -> dict[str, Any]:
        sc, t = self._key(scope, target)
        now = self.clock().timestamp()
        current = [
            s
            for s in self.guard.suspensions.all()
            if s.scope == sc and s.target == t and s.active(now)
        ]
        if not current:
            raise NotFound(f"{sc} {t} is not paused")
        if current[0].actor != ACTOR:
            raise NotFound(f"{sc} {t} is suspended by an operator: mailqueue resume")
        old = self.guard.resume(sc, t, actor)
        return {"resumed": old.to_json() if old else None}
