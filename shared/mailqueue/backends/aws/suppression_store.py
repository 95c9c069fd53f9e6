"""The suppression list (mailqueue.outbound.suppression.SuppressionStore) in the state table.

Item: ``pk = "SUP#<b>"``, ``sk = "<normalised address>"``, where ``b`` is the first hex
digit of the address's SHA-256: sixteen partitions. Why this key:

- the ingress check knows every key from the envelope, so it is one BatchGetItem for up
  to 100 distinct recipients (DynamoDB's limit per call; more recipients, one call per
  100), eventually consistent: 0.5 read unit per recipient, nothing written;
- listing and export are a Query per bucket (sorted by address within a bucket, paged
  with a cursor), never a Scan of the queue's table;
- sixteen buckets spread a large list over partitions instead of one hot key range.

Like the site and MTA-STS items, an entry never carries ``st``/``due`` (so it stays out of
the by_state index) and its ``sk`` does not start with "G#" (the stream's event writer
skips it). ``expires_at`` is the table's TTL attribute: DynamoDB deletes an
expired entry eventually; readers check it themselves (``Entry.active``).
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from mailqueue.backends.aws.clients import batch_write, translate
from mailqueue.core.errors import InvalidInput, TransientStorageError
from mailqueue.outbound.suppression import Entry

BUCKETS = "0123456789abcdef"
_BATCH_GET = 100  # DynamoDB: at most 100 keys per BatchGetItem
_RETRIES = 8


def bucket(address: str) -> str:
    return hashlib.sha256(address.encode()).hexdigest()[0]


def _key(address: str) -> dict[str, Any]:
    return {"pk": {"S": f"SUP#{bucket(address)}"}, "sk": {"S": address}}


def _item(e: Entry) -> dict[str, Any]:
    item = {
        **_key(e.address),
        "reason": {"S": e.reason or "-"},
        "added": {"N": f"{e.added_at:.3f}"},
        "expires_at": {"N": str(int(e.expires_at))},
    }
    for name, value in (("src", e.source), ("status", e.status), ("actor", e.actor)):
        if value:
            item[name] = {"S": value}
    return item


def _entry(item: dict[str, Any]) -> Entry:
    return Entry(
        address=item["sk"]["S"],
        reason=item.get("reason", {}).get("S", ""),
        added_at=float(item.get("added", {}).get("N", "0")),
        expires_at=float(item.get("expires_at", {}).get("N", "0")),
        source=item.get("src", {}).get("S", ""),
        status=item.get("status", {}).get("S", ""),
        actor=item.get("actor", {}).get("S", ""),
    )


class DynamoSuppressionStore:
    """`SuppressionStore` on the state table (`dynamodb` is a boto3 DynamoDB client)."""

    def __init__(
        self, dynamodb: Any, table: str, *, sleep: Callable[[float], None] = time.sleep
    ) -> None:
        self.ddb = dynamodb
        self.table = table
        self.sleep = sleep
        self.requests = 0
        self._lock = threading.Lock()

    def _count(self) -> None:
        with self._lock:
            self.requests += 1

    def get_many(self, addresses: Sequence[str]) -> dict[str, Entry]:
        out: dict[str, Entry] = {}
        unique = list(dict.fromkeys(addresses))
        for i in range(0, len(unique), _BATCH_GET):
            keys = [_key(a) for a in unique[i : i + _BATCH_GET]]
            pending: dict[str, Any] = {self.table: {"Keys": keys}}
            for attempt in range(_RETRIES):
                self._count()
                with translate("dynamodb:BatchGetItem"):
                    resp = self.ddb.batch_get_item(RequestItems=pending)
                for item in resp.get("Responses", {}).get(self.table, []):
                    e = _entry(item)
                    out[e.address] = e
                pending = resp.get("UnprocessedKeys") or {}
                if not pending:
                    break
                self.sleep(min(0.05 * (2**attempt), 1.0))
            else:
                raise TransientStorageError("dynamodb:BatchGetItem: unprocessed keys after retries")
        return out

    def put_many(self, entries: Sequence[Entry]) -> None:
        # one request per key: BatchWriteItem refuses duplicate keys within a batch
        by_key = {e.address: e for e in entries}
        puts = [{"PutRequest": {"Item": _item(e)}} for e in by_key.values()]
        batch_write(
            self.ddb,
            self.table,
            puts,
            what="suppression entries",
            sleep=self.sleep,
            on_call=self._count,
        )

    def delete(self, address: str) -> Entry | None:
        self._count()
        with translate("dynamodb:DeleteItem"):
            resp = self.ddb.delete_item(
                TableName=self.table, Key=_key(address), ReturnValues="ALL_OLD"
            )
        old = resp.get("Attributes")
        return _entry(old) if old else None

    def page(self, cursor: str | None, limit: int) -> tuple[list[Entry], str | None]:
        """Bucket by bucket; the cursor is (bucket, last address) as URL-safe base64."""
        b, after = _decode(cursor) if cursor else (0, None)
        out: list[Entry] = []
        while b < len(BUCKETS) and len(out) < limit:
            kw: dict[str, Any] = {
                "TableName": self.table,
                "KeyConditionExpression": "pk = :pk",
                "ExpressionAttributeValues": {":pk": {"S": f"SUP#{BUCKETS[b]}"}},
                "Limit": limit - len(out),
            }
            if after is not None:
                kw["ExclusiveStartKey"] = {"pk": {"S": f"SUP#{BUCKETS[b]}"}, "sk": {"S": after}}
            self._count()
            with translate("dynamodb:Query"):
                resp = self.ddb.query(**kw)
            out.extend(_entry(it) for it in resp.get("Items", []))
            last = resp.get("LastEvaluatedKey")
            if last:
                after = last["sk"]["S"]
            else:
                b, after = b + 1, None
        if b >= len(BUCKETS):
            return out, None
        return out, _encode(b, after)


def _encode(b: int, after: str | None) -> str:
    raw = json.dumps([b, after], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode(cursor: str) -> tuple[int, str | None]:
    try:
        b, after = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        if not isinstance(b, int) or not 0 <= b < len(BUCKETS):
            raise ValueError
        if after is not None and not isinstance(after, str):
            raise ValueError
        return b, after
    except (ValueError, TypeError):
        raise InvalidInput("invalid_cursor", "not a cursor of this listing", "cursor") from None
