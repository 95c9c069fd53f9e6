"""Queue size counters kept from the table's DynamoDB stream, so `size` never scans.

What is counted (recipients of group items, `sk` starting with "G#"; other items are
ignored — mails, jobs, the counters themselves):

* a recipient whose stored state is final (delivered, bounced, deleted) counts under that
  state until cleanup removes the item;
* a pending recipient (stored queued or held) of a group whose `st` is ``inflight`` counts
  as ``inflight`` — a claimed group's recipients stay stored ``queued`` (or ``held`` under
  an operator claim) while the lease lives;
* any other pending recipient counts under its stored state (``queued`` or ``held``).

For groups our operations keep homogeneous this is "the group's `st` for
queued/inflight/held, the recipient's state for final ones". Keys: ``rcpt#<state>``,
``dom#<domain>#<state>`` (recipient domain, lower case) and ``grp#<st>`` (group items by
their `st`; a group whose `st` was removed after it finished counts as ``done``).

`deltas` is pure: the counters' change for one stream record is contribution(new image)
minus contribution(old image). `CounterStore` applies a batch of records exactly once.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from boto3.dynamodb.types import TypeDeserializer
from botocore.exceptions import ClientError

from .aws.clients import error_code, translate
from .config import ConfigError
from .errors import PermanentStorageError, TransientStorageError

__all__ = [
    "ApplyResult",
    "CounterSettings",
    "CounterStore",
    "Counts",
    "contribution",
    "counter_store",
    "deltas",
    "record_id",
]

FINAL_STATES = frozenset({"delivered", "bounced", "deleted"})
PENDING_STATES = frozenset({"queued", "inflight", "held"})
MAX_TRANSACTION_ITEMS = 100  # DynamoDB TransactWriteItems limit
_RETRYABLE = frozenset(
    {
        "None",
        "ConditionalCheckFailed",
        "TransactionConflict",
        "ThrottlingError",
        "ProvisionedThroughputExceeded",
        "RequestLimitExceeded",
    }
)
_deser = TypeDeserializer()


def _plain(image: Mapping[str, Any] | None) -> dict[str, Any]:
    """A stream image (DynamoDB JSON) as plain Python values."""
    if not image:
        return {}
    return {k: _deser.deserialize(v) for k, v in image.items()}


def _recipient_bucket(rcpt_state: str, group_st: str | None) -> str:
    if rcpt_state in FINAL_STATES:
        return rcpt_state
    if group_st == "inflight":
        return "inflight"
    return rcpt_state if rcpt_state in PENDING_STATES else "queued"


def contribution(image: Mapping[str, Any] | None) -> dict[str, int]:
    """What one item image adds to the counters (empty for non-group items)."""
    item = _plain(image)
    sk = item.get("sk")
    if not isinstance(sk, str) or not sk.startswith("G#"):
        return {}
    st = item.get("st")
    group_st = str(st) if st else None
    out: dict[str, int] = {f"grp#{group_st or 'done'}": 1}
    rcpts = item.get("rcpts") or {}
    for r in rcpts.values():
        state = _recipient_bucket(str(r.get("state") or "queued"), group_st)
        domain = str(r.get("address", "")).rpartition("@")[2].lower() or "-"
        for key in (f"rcpt#{state}", f"dom#{domain}#{state}"):
            out[key] = out.get(key, 0) + 1
    return out


def deltas(
    old_image: Mapping[str, Any] | None, new_image: Mapping[str, Any] | None
) -> dict[str, int]:
    """Counter changes for one stream record: new contribution minus old (zeros dropped)."""
    out = dict(contribution(new_image))
    for k, v in contribution(old_image).items():
        out[k] = out.get(k, 0) - v
    return {k: v for k, v in out.items() if v}


def record_id(record: Mapping[str, Any]) -> str:
    """The stream record's identity: its eventID (unique per stream record, stable across
    Lambda retries), else stream ARN + sequence number."""
    rid = record.get("eventID")
    if rid:
        return str(rid)
    ddb = record.get("dynamodb") or {}
    return f"{record.get('eventSourceARN', '')}|{ddb.get('SequenceNumber', '')}"


@dataclass(frozen=True, slots=True)
class Counts:
    """The counters as read: recipients by state, groups by `st`, recipients by domain."""

    recipients: dict[str, int]
    groups: dict[str, int]
    domains: dict[str, dict[str, int]]
    present: bool  # any counter item exists (the stream consumer has run at least once)

    def pending(self) -> int:
        return sum(self.recipients.get(s, 0) for s in PENDING_STATES)

    def to_json(self) -> dict[str, Any]:
        return {
            "recipients": dict(sorted(self.recipients.items())),
            "groups": dict(sorted(self.groups.items())),
            "domains": {d: dict(sorted(v.items())) for d, v in sorted(self.domains.items())},
            "pending": self.pending(),
            "source": "counters" if self.present else "counters (none yet)",
        }


@dataclass(slots=True)
class ApplyResult:
    applied: int = 0  # records whose deltas were added now
    duplicates: int = 0  # records found already applied (a retried batch)
    ignored: int = 0  # records with no counter change (non-group items, no-op writes)
    transactions: int = 0
    conflicts: int = 0
    counters: dict[str, int] = field(default_factory=dict)  # summed deltas written


class CounterStore:
    """Counter items in the queue table, updated exactly once per stream record.

    Layout: counters are ``pk = "C#<n>"``, ``sk = <key>``, attribute ``n`` (Number), with
    ``n`` in ``0..partitions-1``: each transaction adds to sub-counters of one randomly
    chosen partition, and `read` sums them with one Query per partition (4 by default),
    whatever the size of the queue. Spreading keeps concurrent shard consumers from
    conflicting on one hot item and stays below one partition's write ceiling.
    Markers: ``pk = "CR#<record id>"``, ``sk = "R"``, expiring after `marker_ttl_seconds`
    (the table's TTL attribute `expires_at`; longer than the stream's 24 h retention).

    Exactly once: a record's deltas and its marker are written in ONE TransactWriteItems,
    the marker with ``attribute_not_exists(pk)``. Either both land or neither does. A
    retried or re-bisected Lambda batch brings records again: their markers exist, the
    transaction is cancelled with ConditionalCheckFailed at exactly those positions, and
    they are dropped and the rest retried; so every record is added once, in whatever
    batches, order or concurrency Lambda delivers them (sums commute). A per-shard
    checkpoint is not possible here: Lambda's DynamoDB records do not carry their shard id.
    Cost: one marker write per record that changes a counter; records without a counter
    change (most non-group items) write nothing.
    """

    def __init__(
        self,
        table: str,
        dynamodb: Any,
        *,
        partitions: int = 4,
        marker_ttl_seconds: int = 2 * 86400,
        max_attempts: int = 8,
        clock: Callable[[], float] = time.time,
        rng: random.Random | None = None,
    ) -> None:
        if partitions < 1:
            raise ValueError("partitions must be >= 1")
        self.table = table
        self.ddb = dynamodb
        self.partitions = partitions
        self.marker_ttl_seconds = marker_ttl_seconds
        self.max_attempts = max_attempts
        self.clock = clock
        self.rng = rng or random.Random()

    # ------------------------------------------------------------------ write
    def apply(self, records: Iterable[Mapping[str, Any]]) -> ApplyResult:
        """Add the deltas of Lambda-shaped DynamoDB stream records, each exactly once."""
        result = ApplyResult()
        pending: list[tuple[str, dict[str, int]]] = []
        seen: set[str] = set()
        for rec in records:
            ddb = rec.get("dynamodb") or {}
            d = deltas(ddb.get("OldImage"), ddb.get("NewImage"))
            rid = record_id(rec)
            if not d:
                result.ignored += 1
            elif rid in seen:  # the same record twice in one call: one transaction can't
                result.duplicates += 1
            else:
                seen.add(rid)
                pending.append((rid, d))
        for chunk in _chunks(pending, MAX_TRANSACTION_ITEMS):
            self._apply_chunk(chunk, result)
        return result

    def _apply_chunk(self, chunk: list[tuple[str, dict[str, int]]], result: ApplyResult) -> None:
        todo = list(chunk)
        attempt = 0
        while todo:
            summed: dict[str, int] = {}
            for _, d in todo:
                for k, v in d.items():
                    summed[k] = summed.get(k, 0) + v
            summed = {k: v for k, v in summed.items() if v}
            actions = self._actions(todo, summed)
            try:
                with translate("dynamodb:TransactWriteItems"):
                    try:
                        self.ddb.transact_write_items(TransactItems=actions)
                    except ClientError as e:
                        if error_code(e) == "TransactionCanceledException":
                            raise _Cancelled(e.response.get("CancellationReasons") or []) from e
                        raise
            except _Cancelled as c:
                codes = [str((r or {}).get("Code") or "None") for r in c.reasons]
                dup = {
                    i
                    for i, code in enumerate(codes[: len(todo)])
                    if code == "ConditionalCheckFailed"
                }
                if dup:
                    result.duplicates += len(dup)
                    todo = [t for i, t in enumerate(todo) if i not in dup]
                    continue
                odd = sorted(set(codes) - _RETRYABLE)
                if odd:
                    raise PermanentStorageError(
                        f"dynamodb:TransactWriteItems: cancelled {odd}"
                    ) from None
                # a concurrent transaction on a counter, or throttling: back off, retry
                result.conflicts += 1
                attempt += 1
                if attempt >= self.max_attempts:
                    raise TransientStorageError(
                        f"dynamodb:TransactWriteItems: cancelled {codes}"
                    ) from None
                time.sleep(min(0.02 * (2**attempt), 1.0) * (0.5 + self.rng.random()))
                continue
            result.transactions += 1
            result.applied += len(todo)
            for k, v in summed.items():
                result.counters[k] = result.counters.get(k, 0) + v
            return

    def _actions(
        self, todo: list[tuple[str, dict[str, int]]], summed: dict[str, int]
    ) -> list[dict[str, Any]]:
        expires = str(int(self.clock()) + self.marker_ttl_seconds)
        actions: list[dict[str, Any]] = [
            {
                "Put": {
                    "TableName": self.table,
                    "Item": {
                        "pk": {"S": f"CR#{rid}"},
                        "sk": {"S": "R"},
                        "expires_at": {"N": expires},
                    },
                    "ConditionExpression": "attribute_not_exists(pk)",
                }
            }
            for rid, _ in todo
        ]
        part = f"C#{self.rng.randrange(self.partitions)}"
        for key, n in sorted(summed.items()):
            actions.append(
                {
                    "Update": {
                        "TableName": self.table,
                        "Key": {"pk": {"S": part}, "sk": {"S": key}},
                        "UpdateExpression": "ADD #n :d",
                        "ExpressionAttributeNames": {"#n": "n"},
                        "ExpressionAttributeValues": {":d": {"N": str(n)}},
                    }
                }
            )
        return actions

    # ------------------------------------------------------------------ read
    def read(self) -> Counts:
        """All counters: one Query per partition (a handful of requests, any queue size)."""
        totals: dict[str, int] = {}
        present = False
        for p in range(self.partitions):
            kw: dict[str, Any] = {
                "TableName": self.table,
                "KeyConditionExpression": "pk = :pk",
                "ExpressionAttributeValues": {":pk": {"S": f"C#{p}"}},
            }
            while True:
                with translate("dynamodb:Query"):
                    resp = self.ddb.query(**kw)
                for it in resp.get("Items", []):
                    present = True
                    key = it["sk"]["S"]
                    totals[key] = totals.get(key, 0) + int(it.get("n", {}).get("N", "0"))
                lek = resp.get("LastEvaluatedKey")
                if not lek:
                    break
                kw["ExclusiveStartKey"] = lek
        recipients: dict[str, int] = {}
        groups: dict[str, int] = {}
        domains: dict[str, dict[str, int]] = {}
        for key, n in totals.items():
            kind, _, rest = key.partition("#")
            if kind == "rcpt":
                recipients[rest] = n
            elif kind == "grp":
                groups[rest] = n
            elif kind == "dom":
                domain, _, state = rest.rpartition("#")
                domains.setdefault(domain, {})[state] = n
        # zero counters stay as items; drop them from the answer
        return Counts(
            recipients={k: v for k, v in recipients.items() if v},
            groups={k: v for k, v in groups.items() if v},
            domains={
                d: {s: n for s, n in v.items() if n} for d, v in domains.items() if any(v.values())
            },
            present=present,
        )


@dataclass(frozen=True, slots=True)
class CounterSettings:
    """Where the counters live; the stream consumer and the admin API must agree.

    Env: ``MQ_COUNTERS_TABLE`` ("" = the state table), ``MQ_COUNTER_PARTITIONS``.
    """

    counters_table: str = ""
    counter_partitions: int = 4

    def __post_init__(self) -> None:
        if not 1 <= self.counter_partitions <= 64:
            raise ConfigError("counter_partitions must be within 1..64")


def counter_store(
    state_table: str, dynamodb: Any, settings: CounterSettings | None = None
) -> CounterStore:
    s = settings or CounterSettings()
    return CounterStore(s.counters_table or state_table, dynamodb, partitions=s.counter_partitions)


class _Cancelled(Exception):
    def __init__(self, reasons: list[dict[str, Any]]) -> None:
        super().__init__("transaction cancelled")
        self.reasons = reasons


def _chunks(
    pending: list[tuple[str, dict[str, int]]], limit: int
) -> Iterable[list[tuple[str, dict[str, int]]]]:
    """Consecutive records whose markers plus distinct counter keys fit one transaction."""
    chunk: list[tuple[str, dict[str, int]]] = []
    keys: set[str] = set()
    for rid, d in pending:
        grown = keys | set(d)
        if chunk and len(chunk) + 1 + len(grown) > limit:
            yield chunk
            chunk, grown = [], set(d)
        chunk.append((rid, d))
        keys = grown
    if chunk:
        yield chunk
