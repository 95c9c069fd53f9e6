"""The admin API's reputation routes: a principal's or sender domain's standing, and the
operator's resume of an automatic pause (outbound/reputation.py says why and how).

  GET  /v1/queue/reputation/{scope}/{target}          rates over the window, verdict, pause
  POST /v1/queue/reputation/{scope}/{target}/resume   end the pause, restart the counting

A principal may be named by its ARN or by the digest (``sha256:…``) its mail's
`mailqueue:principal` tag holds when traces are private, whatever trace_private says: its
counters are under the digest either way (reputation.rep_key), and a pause, under the
tag's value, is found by digest (reputation.same_target).
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable
from datetime import datetime
from typing import Any

from mailqueue.core.errors import NotFound
from mailqueue.core.trace import principal_key
from mailqueue.outbound.reputation import (
    ACTOR,
    RepScope,
    ReputationEvents,
    ReputationGuard,
    ReputationStore,
    Thresholds,
    parse_rep_scope,
    same_target,
)
from mailqueue.outbound.suspensions import Suspension, SuspensionStore, parse_target


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

    def _key(self, scope: str, target: str) -> tuple[RepScope, str]:
        sc = parse_rep_scope(scope)
        return sc, parse_target(urllib.parse.unquote(target), sc)

    def _pauses(self, sc: RepScope, t: str) -> list[Suspension]:
        """The active suspensions of this key, under whichever form names it."""
        now = self.clock().timestamp()
        return [
            s
            for s in self.guard.suspensions.all()
            if s.scope == sc and same_target(sc, s.target, t) and s.active(now)
        ]

    def show(self, scope: str, target: str) -> dict[str, Any]:
        sc, t = self._key(scope, target)
        held = self._pauses(sc, t)
        doc = self.guard.standing(sc, t).to_json()
        # what the counters are under: a principal's digest (reputation.rep_key)
        doc["key"] = principal_key(t) if sc == "principal" else t
        doc["paused"] = held[0].to_json() if held else None
        return doc

    def resume(self, scope: str, target: str, actor: str) -> dict[str, Any]:
        sc, t = self._key(scope, target)
        current = self._pauses(sc, t)
        if not current:
            raise NotFound(f"{sc} {t} is not paused")
        ours = [s for s in current if s.actor == ACTOR]
        if not ours:
            raise NotFound(f"{sc} {t} is suspended by an operator: mailqueue resume")
        old = [self.guard.resume(sc, s.target, actor) for s in ours]
        return {"resumed": next((o.to_json() for o in old if o is not None), None)}
