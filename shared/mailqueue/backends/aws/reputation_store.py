"""Reputation counters (mailqueue.outbound.reputation.ReputationStore) in the state table,
and its events as outbox items.

Items: ``pk = "REP#<scope>#<target>#<shard>"``, ``sk = "B#<bucket>"`` (zero-padded
bucket number) with ``s``, ``b``, ``c`` (sends, bounces, complaints) added with ``ADD``
and ``expires_at`` (TTL: the bucket is past the look-back). The shard is chosen at random
per write, so one busy principal spreads its writes over ``shards`` partitions instead of
making one hot key; the guard writes once per key per invocation anyway. Reading a key is
one Query per shard. ``pk = "REP#<scope>#<target>#base"``, ``sk = "BASE"`` holds the
bucket counting restarts from after an operator's resume. No ``st``/``due``, no "G#"
sort key: the index and the event writer ignore these items.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from mailqueue.backends.aws.clients import translate
from mailqueue.outbound.reputation import Counts

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
                UpdateExpression="ADD s :s, b :b, c :c SET expires_at = :e",
                ExpressionAttributeValues={
                    ":s": {"N": str(counts.sends)},
                    ":b": {"N": str(counts.bounces)},
                    ":c": {"N": str(counts.complaints)},
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
