"""Warm-up budget counters (mailqueue.outbound.warmup.BudgetCounters) in the state table.

Items: ``pk = "B#<pool>|<day>[|<site>]"``, ``sk = "B"``, ``n`` the count, ``expires_at``
(the table's TTL) a week after the day; the ramp item ``pk = "B#<pool>|ramp"`` holds
``day`` and ``step``. A take is one UpdateItem ``ADD n :one`` under the condition
``attribute_not_exists(n) OR n < :limit``: two containers can never pass the cap together
(DynamoDB: "Condition expressions", conditional writes are atomic per item). No ``st``,
no "G#" sort key: the index and the event writer ignore these items.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

from botocore.exceptions import ClientError

from mailqueue.backends.aws.clients import error_code, translate

SK = "B"


def _key(key: str) -> dict[str, Any]:
    return {"pk": {"S": f"B#{key}"}, "sk": {"S": SK}}


class DynamoBudgetCounters:
    def __init__(self, dynamodb: Any, table: str) -> None:
        self.ddb = dynamodb
        self.table = table
        self.requests = 0
        self._lock = threading.Lock()

    def _count(self) -> None:
        with self._lock:
            self.requests += 1

    def _update(self, key: str, expr: str, cond: str | None, values: dict[str, Any]) -> bool:
        self._count()
        kw: dict[str, Any] = {
            "TableName": self.table,
            "Key": _key(key),
            "UpdateExpression": expr,
            "ExpressionAttributeValues": values,
        }
        if cond:
            kw["ConditionExpression"] = cond
        with translate("dynamodb:UpdateItem"):
            try:
                self.ddb.update_item(**kw)
            except ClientError as e:
                if error_code(e) != "ConditionalCheckFailedException":
                    raise
                return False
        return True

    def take(self, key: str, limit: int, ttl: float) -> bool:
        return self._update(
            key,
            "ADD n :one SET expires_at = if_not_exists(expires_at, :exp)",
            "attribute_not_exists(n) OR n < :limit",
            {
                ":one": {"N": "1"},
                ":limit": {"N": str(limit)},
                ":exp": {"N": str(int(time.time() + ttl))},
            },
        )

    def give_back(self, key: str) -> None:
        self._update(key, "ADD n :minus", "n > :zero", {":minus": {"N": "-1"}, ":zero": {"N": "0"}})

    def add(self, key: str, n: int, ttl: float) -> None:
        self._update(
            key,
            "ADD n :n SET expires_at = if_not_exists(expires_at, :exp)",
            None,
            {":n": {"N": str(n)}, ":exp": {"N": str(int(time.time() + ttl))}},
        )

    def get(self, keys: Sequence[str]) -> dict[str, int]:
        out: dict[str, int] = {}
        todo = list(dict.fromkeys(keys))
        for i in range(0, len(todo), 100):  # BatchGetItem: at most 100 keys
            req: dict[str, Any] = {
                self.table: {"Keys": [_key(k) for k in todo[i : i + 100]], "ConsistentRead": True}
            }
            while req:
                self._count()
                with translate("dynamodb:BatchGetItem"):
                    resp = self.ddb.batch_get_item(RequestItems=req)
                for item in resp.get("Responses", {}).get(self.table, []):
                    out[item["pk"]["S"][2:]] = int(item.get("n", {}).get("N", "0"))
                req = resp.get("UnprocessedKeys") or {}
        return out

    def ramp(self, pool: str) -> tuple[str, int] | None:
        self._count()
        with translate("dynamodb:GetItem"):
            item = self.ddb.get_item(
                TableName=self.table, Key=_key(f"{pool}|ramp"), ConsistentRead=True
            ).get("Item")
        if not item:
            return None
        return item["day"]["S"], int(item["step"]["N"])

    def set_ramp(self, pool: str, day: str, step: int, expected: str | None) -> bool:
        values: dict[str, Any] = {":day": {"S": day}, ":step": {"N": str(step)}}
        if expected is None:
            cond = "attribute_not_exists(#day)"
        else:
            cond = "#day = :expected"
            values[":expected"] = {"S": expected}
        self._count()
        with translate("dynamodb:UpdateItem"):
            try:
                self.ddb.update_item(
                    TableName=self.table,
                    Key=_key(f"{pool}|ramp"),
                    UpdateExpression="SET #day = :day, step = :step",
                    ConditionExpression=cond,
                    ExpressionAttributeNames={"#day": "day"},
                    ExpressionAttributeValues=values,
                )
            except ClientError as e:
                if error_code(e) != "ConditionalCheckFailedException":
                    raise
                return False
        return True


__all__ = ["DynamoBudgetCounters"]
