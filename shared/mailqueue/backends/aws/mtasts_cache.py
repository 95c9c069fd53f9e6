"""The MTA-STS policy cache (mailqueue.outbound.mtasts.PolicyCache) in the state table.

Item: ``pk = "STS#<domain>"``, ``sk = "P"``. It never carries `st`/`due` (so it stays out
of the by_state index) and its `sk` does not start with "G#" (so the stream's event writer
skips it). Read with Query and written with UpdateItem, the two calls the delivery role already
has. ``expires_at`` (the table's TTL) lets DynamoDB drop it a day after the policy expired;
an MX list is bounded by the 64 KiB policy file, far below the 400 KB item limit.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from mailqueue.backends.aws.clients import translate
from mailqueue.outbound.mtasts import CachedPolicy, Mode, Policy

_GRACE = timedelta(days=1)


def _key(domain: str) -> dict[str, Any]:
    return {"pk": {"S": f"STS#{domain}"}, "sk": {"S": "P"}}


class DynamoPolicyCache:
    """`PolicyCache` on the state table (`dynamodb` is a boto3 DynamoDB client)."""

    def __init__(self, dynamodb: Any, table: str) -> None:
        self.ddb = dynamodb
        self.table = table

    def get(self, domain: str) -> CachedPolicy | None:
        key = _key(domain)
        with translate("mtasts cache get"):
            resp = self.ddb.query(
                TableName=self.table,
                KeyConditionExpression="pk = :pk AND sk = :sk",
                ExpressionAttributeValues={":pk": key["pk"], ":sk": key["sk"]},
            )
        items = resp.get("Items") or []
        if not items:
            return None
        it = items[0]
        try:
            policy = Policy(
                Mode(it["sts_mode"]["S"]),
                tuple(v["S"] for v in it.get("sts_mx", {}).get("L", [])),
                int(it["sts_max_age"]["N"]),
            )
            fetched = datetime.fromtimestamp(int(it["fetched_ms"]["N"]) / 1000, UTC)
            return CachedPolicy(domain, it["sts_id"]["S"], policy, fetched)
        except (KeyError, ValueError):
            return None  # an item of another shape: as if nothing were cached

    def put(self, entry: CachedPolicy) -> None:
        ttl = int((entry.expires_at + _GRACE).timestamp())
        with translate("mtasts cache put"):
            self.ddb.update_item(
                TableName=self.table,
                Key=_key(entry.domain),
                UpdateExpression=("SET #m = :m, #x = :x, #a = :a, #i = :i, #f = :f, #e = :e"),
                ExpressionAttributeNames={
                    "#m": "sts_mode",
                    "#x": "sts_mx",
                    "#a": "sts_max_age",
                    "#i": "sts_id",
                    "#f": "fetched_ms",
                    "#e": "expires_at",
                },
                ExpressionAttributeValues={
                    ":m": {"S": entry.policy.mode.value},
                    ":x": {"L": [{"S": p} for p in entry.policy.mx]},
                    ":a": {"N": str(entry.policy.max_age)},
                    ":i": {"S": entry.policy_id},
                    ":f": {"N": str(round(entry.fetched_at.timestamp() * 1000))},
                    ":e": {"N": str(ttl)},
                },
            )
