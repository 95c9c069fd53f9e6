"""An `EventEmitter` writing events into the state table as outbox items.

The table's stream carries them to the event writer, which already consumes that
stream for the state changes; ingress needs no second pipeline for its Reject events.
Items: pk ``E#<eventId>``, sk ``E``, ``event`` (the JSON document), ``expires_at``
(TTL: the stream has picked them up long before). The eventId is deterministic, so
emitting an event twice overwrites one item instead of adding a second.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from mailqueue.backends.aws.clients import batch_write
from mailqueue.core.events import QueueEvent, dumps
from mailqueue.core.model import utcnow

OUTBOX_TTL_SECONDS = 86400
_BATCH = 25
_RETRIES = 8


class TableOutboxEmitter:
    def __init__(
        self,
        table: str,
        dynamodb_client: Any,
        *,
        ttl_seconds: int = OUTBOX_TTL_SECONDS,
        clock: Callable[[], datetime] = utcnow,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.table = table
        self.ddb = dynamodb_client
        self.ttl_seconds = ttl_seconds
        self.clock = clock
        self.sleep = sleep

    def item(self, event: QueueEvent) -> dict[str, Any]:
        expires = int(self.clock().timestamp()) + self.ttl_seconds
        return {
            "pk": {"S": f"E#{event.event_id}"},
            "sk": {"S": "E"},
            "event": {"S": dumps(event)},
            "expires_at": {"N": str(expires)},
        }

    def emit(self, events: Iterable[QueueEvent]) -> None:
        # one item per eventId: BatchWriteItem refuses duplicate keys within a batch
        by_id = {e.event_id: e for e in events}
        puts = [{"PutRequest": {"Item": self.item(e)}} for e in by_id.values()]
        batch_write(self.ddb, self.table, puts, what="outbox items", sleep=self.sleep)
