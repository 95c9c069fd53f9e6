"""The admin API's reputation routes: a principal's or sender domain's standing, and the
operator's resume of an automatic pause (outbound/reputation.py says why and how).

  GET  /v1/queue/reputation/{scope}/{target}          rates over the window, verdict, pause
  POST /v1/queue/reputation/{scope}/{target}/resume   end the pause, restart the counting

A principal may be named by its ARN or by the digest (``sha256:…``) its mail's
`mailqueue:principal` tag holds when traces are private: counters and pauses are under the
tag's value, so an ARN is looked up under both (reputation.principal_keys), whatever
trace_private says.
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
    Standing,
    Thresholds,
    parse_rep_scope,
    principal_keys,
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

    def _key(self, scope: str, target: str) -> tuple[Any, str, list[str]]:
        """The scope, the target as named, and the keys it may be counted under."""
        sc = parse_rep_scope(scope)
        t = parse_target(urllib.parse.unquote(target), sc)
        return sc, t, principal_keys(t) if sc == "principal" else [t]

    def show(self, scope: str, target: str) -> dict[str, Any]:
        sc, t, keys = self._key(scope, target)
        now = self.clock().timestamp()
        active = [s for s in self.guard.suspensions.all() if s.scope == sc and s.active(now)]
        seen: list[tuple[bool, int, int, Standing, Any]] = []
        for i, k in enumerate(keys):
            held = [s for s in active if s.target == k]
            st = self.guard.standing(sc, k)
            # the key in use: paused first, then the one with sends, then the name given
            seen.append((bool(held), st.sends, -i, st, held[0] if held else None))
        _, _, _, st, pause = max(seen, key=lambda x: x[:3])
        doc = st.to_json()
        doc["target"] = t
        doc["key"] = st.target  # what the counters are under (the tag's value)
        doc["paused"] = pause.to_json() if pause is not None else None
        return doc

    def resume(self, scope: str, target: str, actor: str) -> dict[str, Any]:
        sc, t, keys = self._key(scope, target)
        now = self.clock().timestamp()
        current = [
            s
            for s in self.guard.suspensions.all()
            if s.scope == sc and s.target in keys and s.active(now)
        ]
        if not current:
            raise NotFound(f"{sc} {t} is not paused")
        ours = [s for s in current if s.actor == ACTOR]
        if not ours:
            raise NotFound(f"{sc} {t} is suspended by an operator: mailqueue resume")
        old = [self.guard.resume(sc, s.target, actor) for s in ours]
        return {"resumed": next((o.to_json() for o in old if o is not None), None)}
