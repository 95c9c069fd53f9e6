"""Operator suspensions (mailqueue.outbound.suspensions.SuspensionStore) in the state table.

Items: ``pk = "SUSP"``, ``sk = "<scope>#<target>"``: one partition, since suspensions are
few and every delivery container reads them all with one Query per refresh period (30 s
by default: at most 2 Queries a minute per warm container, 0.5 read unit each for a
handful of small items). ``expires_at`` (the table's TTL) is the suspension's end; readers
check ``until`` themselves. No ``st``/``due``, no "G#" sort key: the index and the event
writer ignore these items.
"""

from __future__ import annotations

import threading
from typing import Any

from mailqueue.backends.aws.clients import translate
from mailqueue.outbound.suspensions import SCOPES, Scope, Suspension

PK = "SUSP"


def _item(s: Suspension) -> dict[str, Any]:
    item = {
        "pk": {"S": PK},
        "sk": {"S": f"{s.scope}#{s.target}"},
        "until": {"N": f"{s.until:.3f}"},
        "created": {"N": f"{s.created_at:.3f}"},
        "expires_at": {"N": str(int(s.until) + 1)},
    }
    if s.reason:
        item["reason"] = {"S": s.reason}
    if s.actor:
        item["actor"] = {"S": s.actor}
    return item


def _suspension(item: dict[str, Any]) -> Suspension | None:
    scope, _, target = item["sk"]["S"].partition("#")
    if scope not in SCOPES or not target:
        return None
    return Suspension(
        scope,
        target,
        float(item.get("until", {}).get("N", "0")),
        item.get("reason", {}).get("S", ""),
        item.get("actor", {}).get("S", ""),
        float(item.get("created", {}).get("N", "0")),
    )


class DynamoSuspensionStore:
    def __init__(self, dynamodb: Any, table: str) -> None:
        self.ddb = dynamodb
        self.table = table
        self.requests = 0
        self._lock = threading.Lock()

    def _count(self) -> None:
        with self._lock:
            self.requests += 1

    def all(self) -> list[Suspension]:
        out: list[Suspension] = []
        kw: dict[str, Any] = {
            "TableName": self.table,
            "KeyConditionExpression": "pk = :pk",
            "ExpressionAttributeValues": {":pk": {"S": PK}},
        }
        while True:
            self._count()
            with translate("dynamodb:Query"):
                resp = self.ddb.query(**kw)
            out.extend(s for s in map(_suspension, resp.get("Items", [])) if s is not None)
            if not resp.get("LastEvaluatedKey"):
                return out
            kw["ExclusiveStartKey"] = resp["LastEvaluatedKey"]

    def put(self, s: Suspension) -> None:
        self._count()
        with translate("dynamodb:PutItem"):
            self.ddb.put_item(TableName=self.table, Item=_item(s))

    def delete(self, scope: Scope, target: str) -> Suspension | None:
        self._count()
        with translate("dynamodb:DeleteItem"):
            resp = self.ddb.delete_item(
                TableName=self.table,
                Key={"pk": {"S": PK}, "sk": {"S": f"{scope}#{target}"}},
                ReturnValues="ALL_OLD",
            )
        old = resp.get("Attributes")
        return _suspension(old) if old else None
