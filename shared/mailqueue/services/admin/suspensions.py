"""The admin API's operator suspensions (routes in :mod:`mailqueue.services.admin.api`).

GET    /v1/queue/suspensions                   active ones (?all=true: expired too)
POST   /v1/queue/suspensions                   {"scope", "target", "duration", "reason"}
DELETE /v1/queue/suspensions/{scope}/{target}  resume
"""

from __future__ import annotations

import logging
import urllib.parse
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from mailqueue.core.errors import InvalidInput, NotFound
from mailqueue.core.validate import check_text
from mailqueue.outbound.shaping import RulesError, parse_duration
from mailqueue.outbound.suspensions import (
    MAX_SECONDS,
    Suspension,
    SuspensionStore,
    parse_scope,
    parse_target,
)

log = logging.getLogger(__name__)

FIELDS = frozenset({"scope", "target", "duration", "reason"})


class SuspensionApi:
    def __init__(self, store: SuspensionStore, clock: Callable[[], datetime]) -> None:
        self.store = store
        self.clock = clock

    def list(self, params: Mapping[str, str | None]) -> dict[str, Any]:
        for k in params:
            if k != "all":
                raise InvalidInput("unknown_parameter", f"unknown parameter {k!r}", k)
        everything = (params.get("all") or "").lower() in ("1", "true", "yes")
        now = self.clock().timestamp()
        items = sorted(self.store.all(), key=lambda s: (s.scope, s.target))
        return {"items": [s.to_json() for s in items if everything or s.active(now)]}

    def suspend(self, doc: Mapping[str, Any], actor: str) -> dict[str, Any]:
        unknown = sorted(set(doc) - FIELDS)
        if unknown:
            raise InvalidInput("unknown_field", f"unknown field {unknown[0]!r}", unknown[0])
        scope = parse_scope(doc.get("scope"))
        target = parse_target(doc.get("target"), scope)
        if "duration" not in doc:
            raise InvalidInput("missing_field", "duration is required (e.g. 30m, 2h)", "duration")
        try:
            seconds = parse_duration(doc["duration"], "duration")
        except RulesError as e:
            raise InvalidInput("invalid_duration", str(e), "duration") from None
        if seconds > MAX_SECONDS:
            raise InvalidInput("invalid_duration", "at most 30 days", "duration")
        reason = doc.get("reason") or ""
        if not isinstance(reason, str) or len(reason) > 500:
            raise InvalidInput("invalid_value", "reason: text up to 500 characters", "reason")
        check_text(reason, "reason")  # no ESC/CR/LF: a reason is printed on terminals
        now = self.clock().timestamp()
        s = Suspension(scope, target, now + seconds, reason, actor, now)
        self.store.put(s)
        log.warning("operator suspension", extra={"scope": scope, "seconds": seconds})
        return s.to_json()

    def resume(self, scope: str, target: str) -> dict[str, Any]:
        sc = parse_scope(scope)
        t = parse_target(urllib.parse.unquote(target), sc)
        old = self.store.delete(sc, t)
        if old is None or not old.active(self.clock().timestamp()):
            raise NotFound(f"{sc} {t} is not suspended")
        log.warning("operator resume", extra={"scope": sc})
        return {"resumed": old.to_json()}
