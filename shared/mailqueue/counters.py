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

import hashlib
import json
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

    Exactly once, with one checkpoint per batch instead of a marker per record: a batch's
    deltas are summed and added in ONE TransactWriteItems together with a checkpoint item
    ``pk = "CP"``, ``sk = <last sequence number, 40 digits>#<digest>`` holding the range's
    first sequence number and a short digest of each record id it applied, written with
    ``attribute_not_exists(pk)`` and expiring after `marker_ttl_seconds` (longer than the
    stream's 24 h). Either all of it lands or none of it. Before adding, a batch reads the
    checkpoints whose range overlaps its own (one strongly consistent Query: ``sk >=`` its
    first sequence number, filtered on ``first <=`` its last) and drops the records they
    name. Membership is by record id, so any re-batching is recognised: a retried batch,
    its bisected halves, halves of halves, records again in reverse order; sequence
    numbers only narrow the search (ranges of other shards that overlap in number are
    read, and their ids do not match). Not covered: two invocations applying overlapping
    records at the same moment — Lambda runs one batch per shard at a time
    (ParallelizationFactor 1).

    A batch with more distinct keys than one transaction holds (~98) stores its plan with
    the checkpoint and adds it in steps, each moving the checkpoint's ``done``; whoever
    finds an unfinished plan (the next retry) completes it before anything else.

    Cost per batch: one Query (a few RRU) and one transaction of 1 + K items (K the
    distinct counter keys whose sums are not zero), at 2 WRU each (the checkpoint ~2 KB at
    100 records). A batch without any counter change reads and writes nothing. (The
    previous design wrote one marker per record, ~4 per mail, in the same transactions.)
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
        entries: list[_Entry] = []
        seen: set[str] = set()
        for rec in records:
            ddb = rec.get("dynamodb") or {}
            d = deltas(ddb.get("OldImage"), ddb.get("NewImage"))
            rid = record_id(rec)
            if not d:
                result.ignored += 1
                continue
            if rid in seen:  # the same record twice in one call
                result.duplicates += 1
                continue
            seen.add(rid)
            entries.append(_Entry(rid, _sequence(rec), d))
        if not entries:
            return result
        entries.sort(key=lambda e: e.seq)
        dup0 = result.duplicates
        for _ in range(self.max_attempts):
            done: set[str] = set()
            for cp in self._overlapping(entries[0].seq, entries[-1].seq):
                if cp.get("total"):
                    self._finish(cp, result)
                done |= set(cp.get("ids", {}).get("SS", []))
            todo = [e for e in entries if _digest(e.rid) not in done]
            result.duplicates = dup0 + len(entries) - len(todo)
            if not todo:
                return result
            try:
                self._apply_range(todo, result)
                return result
            except _Retry:  # a checkpoint appeared meanwhile: look again
                continue
        raise TransientStorageError("dynamodb:TransactWriteItems: checkpoints kept changing")

    def _overlapping(self, first: int, last: int) -> list[dict[str, Any]]:
        """Checkpoints whose range overlaps first..last (strongly consistent)."""
        kw: dict[str, Any] = {
            "TableName": self.table,
            "KeyConditionExpression": "pk = :cp AND sk >= :from",
            "FilterExpression": "#f <= :last",
            "ExpressionAttributeNames": {"#f": "first"},
            "ExpressionAttributeValues": {
                ":cp": {"S": "CP"},
                ":from": {"S": f"{first:040d}"},
                ":last": {"N": str(last)},
            },
            "ConsistentRead": True,
        }
        out: list[dict[str, Any]] = []
        while True:
            with translate("dynamodb:Query"):
                resp = self.ddb.query(**kw)
            out.extend(resp.get("Items", []))
            lek = resp.get("LastEvaluatedKey")
            if not lek:
                return out
            kw["ExclusiveStartKey"] = lek

    def _get(self, pk: str, sk: str) -> dict[str, Any] | None:
        with translate("dynamodb:GetItem"):
            item: dict[str, Any] | None = self.ddb.get_item(
                TableName=self.table, Key={"pk": {"S": pk}, "sk": {"S": sk}}, ConsistentRead=True
            ).get("Item")
        return item

    def _apply_range(self, todo: list[_Entry], result: ApplyResult) -> None:
        """One transaction: the checkpoint naming `todo` and its summed deltas; a range
        with too many keys for one transaction stores its plan with the checkpoint first,
        then adds it in steps (`_finish`), which a retry completes."""
        summed: dict[str, int] = {}
        for e in todo:
            for k, v in e.deltas.items():
                summed[k] = summed.get(k, 0) + v
        plan = sorted((k, v) for k, v in summed.items() if v)
        sk = f"{todo[-1].seq:040d}#{_digest(todo[0].rid)}"
        large = len(plan) + 1 > MAX_TRANSACTION_ITEMS
        expires = str(int(self.clock()) + self.marker_ttl_seconds)
        item: dict[str, Any] = {
            "pk": {"S": "CP"},
            "sk": {"S": sk},
            "first": {"N": str(todo[0].seq)},
            "ids": {"SS": sorted({_digest(e.rid) for e in todo})},
            "expires_at": {"N": expires},
        }
        if large:
            item |= {"total": {"N": str(len(plan))}, "done": {"N": "0"}}
        mark = {
            "Put": {
                "TableName": self.table,
                "Item": item,
                "ConditionExpression": "attribute_not_exists(pk)",
            }
        }
        if not large:
            self._transact([mark, *self._adds(plan)], result, guarded=1)
        else:
            stored = {
                "pk": {"S": f"CPP#{sk}"},
                "sk": {"S": "P"},
                "plan": {"S": json.dumps(plan, separators=(",", ":"))},
                "expires_at": {"N": expires},
            }
            self._transact(
                [mark, {"Put": {"TableName": self.table, "Item": stored}}], result, guarded=1
            )
            self._finish(item, result)
        result.applied += len(todo)
        for k, v in plan:
            result.counters[k] = result.counters.get(k, 0) + v

    def _finish(self, checkpoint: Mapping[str, Any], result: ApplyResult) -> None:
        """Add what remains of a stored plan, a step at a time (each step moves `done`)."""
        sk = str(checkpoint["sk"]["S"])
        while True:
            cp = self._get("CP", sk)
            if cp is None:
                return
            done, total = int(cp.get("done", {}).get("N", "0")), int(cp["total"]["N"])
            if done >= total:
                return
            stored = self._get(f"CPP#{sk}", "P")
            if stored is None:
                raise PermanentStorageError(f"counters: the plan of checkpoint {sk} is missing")
            plan = [(str(k), int(v)) for k, v in json.loads(stored["plan"]["S"])]
            step = plan[done : done + MAX_TRANSACTION_ITEMS - 1]
            move = {
                "Update": {
                    "TableName": self.table,
                    "Key": {"pk": {"S": "CP"}, "sk": {"S": sk}},
                    "UpdateExpression": "SET #d = :new",
                    "ConditionExpression": "#d = :old",
                    "ExpressionAttributeNames": {"#d": "done"},
                    "ExpressionAttributeValues": {
                        ":new": {"N": str(done + len(step))},
                        ":old": {"N": str(done)},
                    },
                }
            }
            try:
                self._transact([move, *self._adds(step)], result, guarded=1)
            except _Retry:
                continue  # another attempt moved it: read again

    def _adds(self, plan: list[tuple[str, int]]) -> list[dict[str, Any]]:
        part = f"C#{self.rng.randrange(self.partitions)}"
        return [
            {
                "Update": {
                    "TableName": self.table,
                    "Key": {"pk": {"S": part}, "sk": {"S": key}},
                    "UpdateExpression": "ADD #n :d",
                    "ExpressionAttributeNames": {"#n": "n"},
                    "ExpressionAttributeValues": {":d": {"N": str(n)}},
                }
            }
            for key, n in plan
        ]

    def _transact(self, actions: list[dict[str, Any]], result: ApplyResult, guarded: int) -> None:
        """TransactWriteItems with back-off; a failed condition on one of the first
        `guarded` actions (a checkpoint) raises _Retry."""
        attempt = 0
        while True:
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
                if "ConditionalCheckFailed" in codes[:guarded]:
                    raise _Retry from None
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
            return

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


@dataclass(frozen=True, slots=True)
class _Entry:
    rid: str
    seq: int
    deltas: dict[str, int]


def _sequence(record: Mapping[str, Any]) -> int:
    """The record's sequence number (increasing within a shard; Lambda batches are one
    shard's records in order)."""
    seq = str((record.get("dynamodb") or {}).get("SequenceNumber", ""))
    if not seq.isdigit():
        raise PermanentStorageError(f"stream record without a sequence number: {seq!r}")
    return int(seq)


class _Retry(Exception):
    """A checkpoint appeared between the look-up and the transaction."""


class _Cancelled(Exception):
    def __init__(self, reasons: list[dict[str, Any]]) -> None:
        super().__init__("transaction cancelled")
        self.reasons = reasons


def _digest(rid: str) -> str:
    """A record id in a checkpoint: 16 hex digits of its SHA-256 (ids are 32+ chars)."""
    return hashlib.sha256(rid.encode()).hexdigest()[:16]
