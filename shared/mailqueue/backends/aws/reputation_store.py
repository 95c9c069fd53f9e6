"""Reputation counters (mailqueue.outbound.reputation.ReputationStore) in the state table,
and its events as outbox items.

Items: ``pk = "REP#<scope>#<target>#<shard>"``, ``sk = "B#<bucket>"`` (zero-padded
bucket number) with ``s``, ``b``, ``c`` (sends, bounces, complaints) added with ``ADD``
and ``expires_at`` (TTL: the bucket is past the look-back). The shard is chosen at random
per write, so one busy principal spreads its writes over ``shards`` partitions instead of
making one hot key; the guard writes once per key per invocation anyway. Reading a key is
one Query per shard. ``pk = "REP#<scope>#<target>#base"``, ``sk = "BASE"`` holds the
bucket counting restarts from after an operator's resume. ``t`` and ``u`` (soft bounces,
unsubscribes) are counted apart. ``pk = "REPM#<mail id>"``, ``sk = "O"`` is a finished
mail's origin (principal ``p``, sender ``f``, arrival ``a``) for the feedback that comes
later, written 25 to a BatchWriteItem and expired after ``feedback_days`` (one write unit a
mail: $1.25 per million on demand). No ``st``/``due``, no "G#" sort key: the index and
the event writer ignore these items.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from typing import Any

from mailqueue.backends.aws.clients import translate
from mailqueue.core.errors import TransientStorageError
from mailqueue.outbound.reputation import Counts, Origin

_TOP = "B#9999999999"


def _sk(bucket: int) -> str:
    return f"B#{bucket:010d}"


class DynamoReputationStore:
    def __init__(self, dynamodb: Any, table: str) -> None:
        self.ddb = dynamodb
        self.table = table
        self.requests = 0
        self._lock = threading.Lock()

    def _count(self, n: int = 1) -> None:
        with self._lock:
            self.requests += n

    def add(self, key: str, shard: int, bucket: int, counts: Counts, expires_at: int) -> None:
        self._count()
        with translate("dynamodb:UpdateItem"):
            self.ddb.update_item(
                TableName=self.table,
                Key={"pk": {"S": f"REP#{key}#{shard}"}, "sk": {"S": _sk(bucket)}},
                UpdateExpression="ADD s :s, b :b, c :c, t :t, u :u SET expires_at = :e",
                ExpressionAttributeValues={
                    ":s": {"N": str(counts.sends)},
                    ":b": {"N": str(counts.bounces)},
                    ":c": {"N": str(counts.complaints)},
                    ":t": {"N": str(counts.soft_bounces)},
                    ":u": {"N": str(counts.unsubscribes)},
                    ":e": {"N": str(expires_at)},
                },
            )

    def buckets(self, key: str, shards: int, since: int) -> dict[int, Counts]:
        out: dict[int, Counts] = {}
        for shard in range(shards):
            kw: dict[str, Any] = {
                "TableName": self.table,
                "KeyConditionExpression": "pk = :pk AND sk BETWEEN :a AND :z",
                "ExpressionAttributeValues": {
                    ":pk": {"S": f"REP#{key}#{shard}"},
                    ":a": {"S": _sk(max(0, since))},
                    ":z": {"S": _TOP},
                },
            }
            while True:
                self._count()
                with translate("dynamodb:Query"):
                    resp = self.ddb.query(**kw)
                for item in resp.get("Items", []):
                    b = int(item["sk"]["S"][2:])
                    out.setdefault(b, Counts()).add(
                        Counts(
                            int(item.get("s", {}).get("N", "0")),
                            int(item.get("b", {}).get("N", "0")),
                            int(item.get("c", {}).get("N", "0")),
                            int(item.get("t", {}).get("N", "0")),
                            int(item.get("u", {}).get("N", "0")),
                        )
                    )
                if not resp.get("LastEvaluatedKey"):
                    break
                kw["ExclusiveStartKey"] = resp["LastEvaluatedKey"]
        return out

    def set_baseline(self, key: str, bucket: int) -> None:
        self._count()
        with translate("dynamodb:PutItem"):
            self.ddb.put_item(
                TableName=self.table,
                Item={
                    "pk": {"S": f"REP#{key}#base"},
                    "sk": {"S": "BASE"},
                    "bucket": {"N": str(bucket)},
                },
            )

    def baseline(self, key: str) -> int:
        self._count()
        with translate("dynamodb:GetItem"):
            resp = self.ddb.get_item(
                TableName=self.table,
                Key={"pk": {"S": f"REP#{key}#base"}, "sk": {"S": "BASE"}},
            )
        item = resp.get("Item")
        return int(item["bucket"]["N"]) if item else 0

    def remember(self, origins: Sequence[Origin], expires_at: int) -> None:
        for i in range(0, len(origins), 25):
            pending = [
                {
                    "PutRequest": {
                        "Item": {
                            "pk": {"S": f"REPM#{o.mail_id}"},
                            "sk": {"S": "O"},
                            "p": {"S": o.principal or "-"},
                            "f": {"S": o.sender or "-"},
                            "a": {"N": str(int(o.arrival * 1000))},
                            **({"o": {"S": o.pool}} if o.pool else {}),
                            "expires_at": {"N": str(expires_at)},
                        }
                    }
                }
                for o in origins[i : i + 25]
            ]
            for attempt in range(5):
                self._count()
                with translate("dynamodb:BatchWriteItem"):
                    resp = self.ddb.batch_write_item(RequestItems={self.table: pending})
                pending = resp.get("UnprocessedItems", {}).get(self.table, [])
                if not pending:
                    break
                time.sleep(0.05 * 2**attempt)
            if pending:
                raise TransientStorageError(f"{len(pending)} origins not written")

    def origin(self, mail_id: str) -> Origin | None:
        self._count()
        with translate("dynamodb:GetItem"):
            resp = self.ddb.get_item(
                TableName=self.table,
                Key={"pk": {"S": f"REPM#{mail_id}"}, "sk": {"S": "O"}},
            )
        item = resp.get("Item")
        if not item or int(item.get("expires_at", {}).get("N", "0")) <= time.time():
            return None  # expired: DynamoDB's TTL deletes it within days, readers do now

        def text(k: str) -> str:
            v = str(item[k]["S"]) if k in item else "-"
            return "" if v == "-" else v

        return Origin(mail_id, text("p"), text("f"), int(item["a"]["N"]) / 1000, text("o"))


class OutboxReputationEvents:
    """Reputation events as outbox items (the event writer passes them through)."""

    def __init__(self, dynamodb: Any, table: str, ttl_seconds: int = 86400) -> None:
        self.ddb = dynamodb
        self.table = table
        self.ttl_seconds = ttl_seconds

    def __call__(self, record: dict[str, Any]) -> None:
        import time

        eid = str(record["mailqueue"]["eventId"])
        with translate("dynamodb:PutItem"):
            self.ddb.put_item(
                TableName=self.table,
                Item={
                    "pk": {"S": f"E#{eid}"},
                    "sk": {"S": "E"},
                    "event": {"S": json.dumps(record, separators=(",", ":"))},
                    "expires_at": {"N": str(int(time.time()) + self.ttl_seconds)},
                },
            )
