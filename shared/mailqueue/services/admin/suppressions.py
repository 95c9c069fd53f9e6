"""The admin API's suppression-list requests (routes in :mod:`mailqueue.services.admin.api`).

  GET    /v1/queue/suppressions              list (limit, cursor; ?all=true with expired)
  GET    /v1/queue/suppressions/{address}    one entry (404 if none or expired)
  POST   /v1/queue/suppressions              add or import: {"entries": [{"address",
                                             "reason"}...], "ttl_days"} or one
                                             {"address", "reason", "ttl_days"}
  DELETE /v1/queue/suppressions/{address}    remove

Operator entries carry the caller's principal as actor; an import of up to 1000 entries is
one request (25 entries per BatchWriteItem).
"""

from __future__ import annotations

import logging
import urllib.parse
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from mailqueue.core.errors import InvalidInput, NotFound
from mailqueue.core.validate import check_text
from mailqueue.outbound.suppression import (
    DEFAULT_TTL_DAYS,
    MAX_REASON,
    Entry,
    SuppressionStore,
    normalise,
)

log = logging.getLogger(__name__)

MAX_ENTRIES = 1000  # per POST: an import is cut into requests of this size by the CLI
ADD_FIELDS = frozenset({"entries", "address", "reason", "ttl_days"})


class SuppressionApi:
    def __init__(self, store: SuppressionStore, clock: Callable[[], datetime]) -> None:
        self.store = store
        self.clock = clock

    def list(self, params: Mapping[str, str | None]) -> dict[str, Any]:
        from mailqueue.services.admin.filters import parse_int

        for k in params:
            if k not in ("limit", "cursor", "all"):
                raise InvalidInput("unknown_parameter", f"unknown parameter {k!r}", k)
        limit = parse_int(params.get("limit") or "100", "limit", low=1, high=1000)
        everything = (params.get("all") or "").lower() in ("1", "true", "yes")
        now = self.clock().timestamp()
        items, cursor = self.store.page(params.get("cursor") or None, limit)
        return {
            "items": [e.to_json() for e in items if everything or e.active(now)],
            "cursor": cursor,
        }

    def get(self, address: str) -> dict[str, Any]:
        addr = normalise(urllib.parse.unquote(address))
        entry = self.store.get_many([addr]).get(addr)
        if entry is None or not entry.active(self.clock().timestamp()):
            raise NotFound(f"{addr} is not suppressed")
        return entry.to_json()

    def add(self, doc: Mapping[str, Any], actor: str) -> dict[str, Any]:
        unknown = sorted(set(doc) - ADD_FIELDS)
        if unknown:
            raise InvalidInput("unknown_field", f"unknown field {unknown[0]!r}", unknown[0])
        ttl_days = doc.get("ttl_days", DEFAULT_TTL_DAYS)
        if isinstance(ttl_days, bool) or not isinstance(ttl_days, int | float):
            raise InvalidInput("invalid_type", "ttl_days must be a number", "ttl_days")
        if not 0 < ttl_days <= 3650:
            raise InvalidInput("invalid_value", "ttl_days must be within (0, 3650]", "ttl_days")
        if "entries" in doc:
            if "address" in doc:
                raise InvalidInput("invalid_request", "give entries or address, not both", None)
            raw = doc["entries"]
            if not isinstance(raw, list) or not raw:
                raise InvalidInput("invalid_type", "entries must be a non-empty list", "entries")
        elif "address" in doc:
            raw = [{"address": doc["address"], "reason": doc.get("reason")}]
        else:
            raise InvalidInput("missing_field", "address (or entries) is required", "address")
        if len(raw) > MAX_ENTRIES:
            raise InvalidInput("too_many_entries", f"at most {MAX_ENTRIES} per request", "entries")
        now = self.clock().timestamp()
        entries: list[Entry] = []
        for i, e in enumerate(raw):
            where = f"entries[{i}]" if "entries" in doc else "address"
            if not isinstance(e, dict) or not isinstance(e.get("address"), str):
                raise InvalidInput("invalid_type", "an entry is {address, reason}", where)
            reason = e.get("reason") or "added by an operator"
            if not isinstance(reason, str) or len(reason) > MAX_REASON:
                raise InvalidInput("invalid_value", f"reason: text up to {MAX_REASON}", where)
            check_text(reason, where)  # no ESC/CR/LF: a reason is printed on terminals
            try:
                addr = normalise(e["address"])
            except InvalidInput as err:
                raise InvalidInput(err.code, err.message, where) from None
            entries.append(Entry(addr, reason, now, now + ttl_days * 86400.0, actor=actor))
        self.store.put_many(entries)
        log.info("suppression entries added", extra={"count": len(entries)})
        return {"added": len({e.address for e in entries})}

    def remove(self, address: str) -> dict[str, Any]:
        addr = normalise(urllib.parse.unquote(address))
        old = self.store.delete(addr)
        if old is None or not old.active(self.clock().timestamp()):
            raise NotFound(f"{addr} is not suppressed")
        log.info("suppression entry removed")
        return {"removed": old.to_json()}
