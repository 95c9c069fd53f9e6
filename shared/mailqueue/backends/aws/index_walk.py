"""Reading the by_state index's shards for a walk (browse, size, shape, jobs, sweeper).

A state is `shards` (64) index partitions, and a walk read them one Query after another:
~260 Queries for a `list` of the default states, 390 for a `size`, 1.5–6.8 s on the local
stack whatever the queue held (issue 43 item 15). Two ways around that, both here:

* **A snapshot of a small index.** One Scan of the index (keys only, ``SNAPSHOT_LIMIT``
  entries at most, eventually consistent as every index read is): when it ends within
  that page, it *is* every entry of every shard, so the walk is served from it in the
  order and with the cursors a Query walk has (per shard, by `due`, then key; the cursor
  keeps a Query's LastEvaluatedKey shape, so a walk can go on by Query if the index grew
  past the snapshot meanwhile). An empty shard then costs nothing.
* **Concurrent Queries** otherwise (a large index: most shards hold entries): the first
  page of up to ``WALK_CONCURRENCY`` shards at a time (bounded: the client's connection
  pool is 10), used in shard order; a shard's answer beyond the page is cut at an entry
  (its key is the cursor), the answers of shards after the one that filled the page are
  dropped (read again on the next page: at most WALK_CONCURRENCY - 1 first pages).

Read cost (DynamoDB bills a Query or Scan by the 4 KB units of what it reads, at least
one, halved when eventually consistent; "Read consumption for Query" and "... for Scan",
DynamoDB Developer Guide): the snapshot is 0.5 unit per 4 KB of index entries (keys only:
~100 octets each, 500 entries ≈ 13 units), paid by every page call; a large index adds the
Queries, 0.5 unit at least each, as before. The groups behind the entries are read back
as before (BatchGetItem, strongly consistent).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from mailqueue.backends.aws.clients import translate
from mailqueue.backends.aws.items import GSI_STATE

__all__ = [
    "SNAPSHOT_LIMIT",
    "WALK_CONCURRENCY",
    "Snapshot",
    "entry_key",
    "query_pages",
    "snapshot",
]

#: index entries a snapshot reads at most (one Scan page): a queue this small is served
#: whole from it; keys-only entries are ~100 octets, so well under a Scan page's 1 MB
SNAPSHOT_LIMIT = 500
#: shard Queries in flight at once (under botocore's default pool of 10 connections)
WALK_CONCURRENCY = 8
_KEY_ATTRS = ("pk", "sk", "st", "due")


def entry_key(entry: dict[str, Any]) -> dict[str, Any]:
    """The index entry's key attributes: what a Query's LastEvaluatedKey holds for it."""
    return {k: entry[k] for k in _KEY_ATTRS if k in entry}


def _order(entry: dict[str, Any]) -> tuple[int, str, str]:
    return (
        int(entry.get("due", {}).get("N", "0")),
        str(entry.get("pk", {}).get("S", "")),
        str(entry.get("sk", {}).get("S", "")),
    )


def _due_ok(entry: dict[str, Any], due_op: str | None, due_ms: int | None) -> bool:
    if due_op is None or due_ms is None:
        return True
    d = int(entry.get("due", {}).get("N", "0"))
    return d <= due_ms if due_op == "<=" else d < due_ms


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Every index entry, by `st` value, each list in Query order (due, then key)."""

    entries: dict[str, list[dict[str, Any]]]

    def page(
        self,
        st: str,
        *,
        due_op: str | None,
        due_ms: int | None,
        start: dict[str, Any] | None,
        limit: int,
    ) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
        """What `Query(st = :st [AND due op :due], ExclusiveStartKey=start, Limit=limit)`
        returns: the entries and the cursor (None when the shard has no more)."""
        rows = [e for e in self.entries.get(st, ()) if _due_ok(e, due_op, due_ms)]
        if start:
            after = _order(start)
            rows = [e for e in rows if _order(e) > after]
        taken = rows[:limit]
        more = len(rows) > limit
        return taken, (entry_key(taken[-1]) if more and taken else None)

    def count(self, st: str) -> int:
        return len(self.entries.get(st, ()))


def snapshot(dynamodb: Any, table: str, limit: int = SNAPSHOT_LIMIT) -> Snapshot | None:
    """The whole index in one Scan page, or None when it holds more than `limit` entries."""
    with translate("dynamodb:Scan"):
        resp = dynamodb.scan(
            TableName=table,
            IndexName=GSI_STATE,
            Limit=limit,
            ProjectionExpression="#p, #s, #t, #d",
            ExpressionAttributeNames={"#p": "pk", "#s": "sk", "#t": "st", "#d": "due"},
        )
    if resp.get("LastEvaluatedKey"):
        return None
    by_st: dict[str, list[dict[str, Any]]] = {}
    for e in resp.get("Items", []):
        st = e.get("st", {}).get("S")
        if st is not None:
            by_st.setdefault(st, []).append(e)
    for rows in by_st.values():
        rows.sort(key=_order)
    return Snapshot(by_st)


def query_pages(
    dynamodb: Any, requests: Sequence[dict[str, Any]], workers: int = WALK_CONCURRENCY
) -> list[dict[str, Any]]:
    """The answers to these Query requests, in their order, at most `workers` at once."""
    call: Callable[[dict[str, Any]], dict[str, Any]] = _query_one(dynamodb)
    if len(requests) <= 1:
        return [call(r) for r in requests]
    with ThreadPoolExecutor(max_workers=min(workers, len(requests))) as pool:
        return list(pool.map(call, requests))


def _query_one(dynamodb: Any) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def call(kw: dict[str, Any]) -> dict[str, Any]:
        with translate("dynamodb:Query"):
            resp: dict[str, Any] = dynamodb.query(**kw)
        return resp

    return call
