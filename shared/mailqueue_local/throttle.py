"""Per-partition-key throughput, as DynamoDB enforces it: a hot key is throttled locally too.

moto has no partitions, so a layout whose writes all land on a few partition key values
(issue 25, finding 1: the old `by_state` index keyed on a state with five values) passes
every test and stops in AWS far below its cost figures. This guard gives each partition
key value of a table and of each of its global secondary indexes a write and a read
budget per second and refuses what goes over, with DynamoDB's own error:

- The budget. "Quotas in Amazon DynamoDB" (developer guide, ServiceQuotas.html,
  "Read/write throughput") and "Best practices for designing and using partition keys
  effectively" (bp-partition-key-design.html, "Burst capacity" / "adaptive capacity"): one
  partition serves at most 3,000 read units and 1,000 write units a second, and one
  partition key value is served by one partition (split-for-heat splits on the sort key,
  which cannot spread a key whose sort key `due` grows with time). Divided here by a
  scale factor (default 100: 10 write units/s per key value), so a laptop reaches the
  ceiling. A token bucket of one second's budget: the 300 s burst of the docs is for a
  table's unused provisioned capacity, not for one partition's hard limit.
- What one request is charged (issue 43 item 17). Dividing the budget scales time, not
  item sizes: an item of 400 KB (DynamoDB's largest, 400 write units, under half of one
  partition's second) would take 40 s of a key value's scaled budget, longer than the
  SDK's retries wait (4 attempts, a few seconds), so the 111-recipient group the data
  model says fits could not be written, or once written not claimed. So a request's share
  on one key value is charged at most one second's scaled budget (the bucket's
  capacity): it passes when the bucket is full and empties it, never leaving the key in
  debt. Requests up to a second's budget (every index write: keys only, 1 unit; a
  typical group) are charged exactly as before; on one key value the largest items pass
  at one request a second, where AWS ÷ 100 would allow one each 40 s. No key value of
  this layout takes large items often (a table key is one mail's), so the throttle still
  finds what it is for: many requests on one key value.
- The error. "Troubleshooting throttling in Amazon DynamoDB" / "DynamoDB throttling
  resolution guide" (troubleshooting-throttling-diagnostics.html) and the API reference's
  `ThrottlingReason`: a request over a key range's limit, in on-demand and in provisioned
  mode alike, is answered `ProvisionedThroughputExceededException` (HTTP 400) with a
  `ThrottlingReasons` entry `TableWriteKeyRangeThroughputExceeded` /
  `IndexWriteKeyRangeThroughputExceeded` (Read for reads) naming the table or index ARN.
  (`ThrottlingException` is the control plane's rate error, not a data-plane throttle.)
  A write that an index cannot take is refused on the table too. The refusal is answered
  on `before-send`, inside botocore's retry loop, so its retry logic sees a throttle and
  backs off as it would in AWS; a BatchWriteItem whose items are partly over budget has
  those returned in `UnprocessedItems` ("BatchWriteItem", API reference).
- The units ("Read consumption"/"Write consumption" in "DynamoDB read and write
  operations", and "Provisioned throughput considerations for Global Secondary Indexes"):
  a write costs ceil(size / 1 KB), the larger of the item's before and after images, at
  least 1, also when its condition fails; a read ceil(size / 4 KB), half for eventually
  consistent reads; a Query the sum of what it returns. On an index, an item entering it
  is one write of its projected size on its new key value, leaving it one write on its
  old key value, a change of its index key both, a change of a projected attribute one
  write on the key value. Transactions count double.

The old image of a written item is read from moto before the write (a consistent
GetItem on an unguarded client), the new one after it; so the index writes are exact
whatever the UpdateExpression does. Every unit is recorded per partition key value in a
`ThroughputRecorder`, which a benchmark can read (see `UnitUse`).
"""

from __future__ import annotations

import base64
import json
import math
import re
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

from mailqueue.backends.aws.limits import item_size

from mailqueue_local.limitguard import register

# "Quotas in Amazon DynamoDB" / bp-partition-key-design: one partition's ceiling.
PARTITION_WRITE_UNITS_PER_SECOND = 1000
PARTITION_READ_UNITS_PER_SECOND = 3000
WRITE_UNIT_BYTES = 1024  # one write unit: an item up to 1 KB
READ_UNIT_BYTES = 4096  # one read unit: an item up to 4 KB, strongly consistent
DEFAULT_SCALE = 100  # 1,000 WCU/s / 100 = 10 write units a second per key value
BURST_SECONDS = 1.0

Kind = Literal["read", "write"]
_CTX = "mailqueue_throttle"
_WRITES = frozenset({"PutItem", "UpdateItem", "DeleteItem"})
_READS = frozenset({"GetItem", "Query"})


@dataclass(frozen=True, slots=True)
class IndexSchema:
    name: str
    hash_key: str
    range_key: str | None
    projection: str = "ALL"  # ALL | KEYS_ONLY | INCLUDE
    include: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class TableSchema:
    name: str
    hash_key: str
    range_key: str | None
    indexes: tuple[IndexSchema, ...] = ()

    def key_of(self, item: Mapping[str, Any]) -> dict[str, Any]:
        return {k: item[k] for k in (self.hash_key, self.range_key) if k and k in item}


@dataclass(frozen=True, slots=True)
class UnitUse:
    """Units one request consumed on one partition key value (of the table or an index).

    `at`: the guard's clock; `index`: None for the base table; `key`: the partition key
    value as a string; `throttled`: the request was refused (units not consumed).
    """

    at: float
    table: str
    index: str | None
    key: str
    kind: Kind
    units: float
    operation: str
    throttled: bool = False


class ThroughputRecorder:
    """Every request's units per partition key value, and every refusal.

    API for a benchmark: `uses()` (all `UnitUse`s in order), `totals(kind)` (units per
    (table, index, key) ), `hottest(kind)`, `throttled()` (refusals per (table, index,
    key)), `reset()`.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._uses: list[UnitUse] = []

    def add(self, use: UnitUse) -> None:
        with self._lock:
            self._uses.append(use)

    def uses(self) -> list[UnitUse]:
        with self._lock:
            return list(self._uses)

    def reset(self) -> None:
        with self._lock:
            self._uses.clear()

    def totals(self, kind: Kind = "write") -> dict[tuple[str, str | None, str], float]:
        out: defaultdict[tuple[str, str | None, str], float] = defaultdict(float)
        for u in self.uses():
            if u.kind == kind and not u.throttled:
                out[(u.table, u.index, u.key)] += u.units
        return out

    def by_index(self, kind: Kind = "write") -> dict[str, float]:
        """Units per table ("table") and per index name, refusals left out."""
        out: defaultdict[str, float] = defaultdict(float)
        for u in self.uses():
            if u.kind == kind and not u.throttled:
                out[u.index or "table"] += u.units
        return out

    def hottest(self, kind: Kind = "write") -> tuple[tuple[str, str | None, str], float] | None:
        t = self.totals(kind)
        return max(t.items(), key=lambda kv: kv[1]) if t else None

    def throttled(self) -> Counter[tuple[str, str | None, str]]:
        out: Counter[tuple[str, str | None, str]] = Counter()
        for u in self.uses():
            if u.throttled:
                out[(u.table, u.index, u.key)] += 1
        return out


class _Bucket:
    """Tokens refilled at `rate` a second up to `capacity`; may go negative after a
    request that used more than estimated (the next ones wait for the refill)."""

    def __init__(self, rate: float, capacity: float, now: float) -> None:
        self.rate = rate
        self.capacity = capacity
        self.tokens = capacity
        self.at = now

    def level(self, now: float) -> float:
        if now > self.at:
            self.tokens = min(self.capacity, self.tokens + (now - self.at) * self.rate)
            self.at = now
        return self.tokens


@dataclass(slots=True)
class _Touch:
    table: str
    index: str | None
    key: str
    kind: Kind
    units: float


@dataclass(slots=True)
class _Plan:
    operation: str
    table: str
    touches: list[_Touch] = field(default_factory=list)
    admitted: bool = False
    refused_batch: dict[str, list[Any]] = field(default_factory=dict)
    old: dict[str, Any] | None = None
    key: dict[str, Any] | None = None
    factor: float = 1.0
    reader: Any = None


class PartitionThrottle:
    """Per-key-value budgets on the DynamoDB requests of the clients it is installed on.

    `scale`: AWS's per-partition figures are divided by it. `clock`: seconds (monotonic);
    a test passes its own to drive a rate without waiting. `enforce=False` only records.
    """

    def __init__(
        self,
        scale: float = DEFAULT_SCALE,
        *,
        clock: Callable[[], float] = time.monotonic,
        recorder: ThroughputRecorder | None = None,
        enforce: bool = True,
    ) -> None:
        if scale <= 0:
            raise ValueError("scale must be positive")
        self.scale = scale
        self.write_rate = PARTITION_WRITE_UNITS_PER_SECOND / scale
        self.read_rate = PARTITION_READ_UNITS_PER_SECOND / scale
        self.clock = clock
        self.recorder = recorder if recorder is not None else ThroughputRecorder()
        self.enforce = enforce
        self._lock = threading.RLock()
        self._buckets: dict[tuple[str, str | None, str, Kind], _Bucket] = {}
        self._schemas: dict[str, TableSchema] = {}
        self._readers: dict[tuple[str, str], Any] = {}
        self._internal = threading.local()

    # ------------------------------------------------------------------ wiring
    def handlers(self) -> list[tuple[str, Any]]:
        return [
            ("before-call.dynamodb", self._on_call),
            ("before-send.dynamodb", self._on_send),
            ("after-call.dynamodb", self._on_after),
        ]

    def install(self, client: Any) -> Any:
        return register(client, self.handlers())

    def learn(self, description: Mapping[str, Any]) -> None:
        """A table's key schema and indexes, from CreateTable's parameters or a
        DescribeTable answer (both shapes are the same)."""
        name = description.get("TableName")
        keys = description.get("KeySchema")
        if not name or not keys:
            return
        indexes = []
        for g in description.get("GlobalSecondaryIndexes") or []:
            h, r = _hash_range(g.get("KeySchema") or [])
            proj = g.get("Projection") or {}
            if h:
                indexes.append(
                    IndexSchema(
                        g["IndexName"],
                        h,
                        r,
                        str(proj.get("ProjectionType", "ALL")),
                        tuple(proj.get("NonKeyAttributes") or ()),
                    )
                )
        h, r = _hash_range(keys)
        if h:
            with self._lock:
                self._schemas[str(name)] = TableSchema(str(name), h, r, tuple(indexes))

    # ------------------------------------------------------------------ hooks
    def _on_call(
        self, model: Any, params: dict[str, Any], context: dict[str, Any], **kw: Any
    ) -> None:
        if getattr(self._internal, "active", False) or _CTX in context:
            return
        op = model.name
        body = _json_body(params)
        if op == "CreateTable":
            self.learn(body)
            return
        table = str(body.get("TableName", ""))
        schema = self._schema(table, params, kw.get("request_signer"))
        if schema is None and op != "BatchWriteItem":
            return
        plan: _Plan | None = None
        if op in _WRITES and schema is not None:
            plan = self._plan_write(op, body, schema, params, kw.get("request_signer"))
        elif op in _READS and schema is not None:
            plan = self._plan_read(op, body, schema)
        elif op == "BatchWriteItem":
            plan = self._plan_batch(body, params, kw.get("request_signer"))
        if plan is not None:
            context[_CTX] = plan

    def _on_send(self, request: Any, **_: Any) -> Any:
        ctx = getattr(request, "context", None) or {}
        plan: _Plan | None = ctx.get(_CTX)
        if plan is None or plan.admitted or not plan.touches:
            return None
        now = self.clock()
        with self._lock:
            over = self._over(plan.touches, now) if self.enforce else None
            if over is None:
                for k, units in _per_key(plan.touches).items():
                    b = self._bucket(_Touch(*k, 0), now)
                    b.tokens -= min(units, b.capacity)
                plan.admitted = True
                return None
        self.recorder.add(
            UnitUse(now, over.table, over.index, over.key, over.kind, 0, plan.operation, True)
        )
        return _throttle_response(over, plan.table)

    def _on_after(
        self, model: Any, parsed: dict[str, Any], context: dict[str, Any], **_: Any
    ) -> None:
        if model.name in ("CreateTable", "DescribeTable"):
            self.learn(parsed.get("TableDescription") or parsed.get("Table") or {})
        plan: _Plan | None = context.get(_CTX)
        if plan is None:
            return
        if plan.refused_batch:
            un = parsed.setdefault("UnprocessedItems", {})
            for table, reqs in plan.refused_batch.items():
                un.setdefault(table, []).extend(reqs)
        if not plan.admitted:
            return
        code = (parsed.get("Error") or {}).get("Code")
        actual = plan.touches
        if plan.operation in _WRITES:
            actual = self._actual_write(plan, failed=bool(code))
        elif plan.operation in _READS and not code:
            actual = self._actual_read(plan, parsed)
        now = self.clock()
        with self._lock:
            # what was charged at send (the estimate, capped) against what the answer
            # says it cost (capped alike): the difference goes back to (or from) the bucket
            est, got = _per_key(plan.touches), _per_key(actual)
            for k in est.keys() | got.keys():
                b = self._bucket(_Touch(*k, 0), now)
                diff = min(est.get(k, 0.0), b.capacity) - min(got.get(k, 0.0), b.capacity)
                if diff:
                    b.tokens += diff
        for t in actual:
            if t.units:
                self.recorder.add(
                    UnitUse(now, t.table, t.index, t.key, t.kind, t.units, plan.operation)
                )

    # ------------------------------------------------------------------ budgets
    def _bucket(self, t: _Touch, now: float) -> _Bucket:
        k = (t.table, t.index, t.key, t.kind)
        b = self._buckets.get(k)
        if b is None:
            rate = self.write_rate if t.kind == "write" else self.read_rate
            b = self._buckets[k] = _Bucket(rate, rate * BURST_SECONDS, now)
        return b

    def _over(
        self, touches: Sequence[_Touch], now: float, before: Sequence[_Touch] = ()
    ) -> _Touch | None:
        """The first key value without budget for its share of the request, if any.

        `before`: what earlier items of the same request take. A key value's share is
        admitted while its bucket holds it, or when the bucket is full and nothing else of
        the request takes from it (an item larger than a second's scaled budget passes
        then, charged that second's budget: see "What one request is charged")."""
        need: defaultdict[tuple[str, str | None, str, Kind], float] = defaultdict(float)
        prior: defaultdict[tuple[str, str | None, str, Kind], float] = defaultdict(float)
        for t in before:
            prior[(t.table, t.index, t.key, t.kind)] += t.units
        for t in touches:
            need[(t.table, t.index, t.key, t.kind)] += t.units
        for t in touches:
            k = (t.table, t.index, t.key, t.kind)
            b = self._bucket(t, now)
            level = b.level(now)
            if level < need[k] + prior[k] and not (level >= b.capacity and not prior[k]):
                return t
        return None

    # ------------------------------------------------------------------ plans
    def _schema(self, table: str, params: Mapping[str, Any], signer: Any) -> TableSchema | None:
        with self._lock:
            s = self._schemas.get(table)
        if s is not None or not table or signer is None:
            return s
        reader = self._reader(params, signer)
        if reader is None:
            return None
        self._internal.active = True
        try:
            desc = reader.describe_table(TableName=table)["Table"]
        except Exception:  # noqa: BLE001 (no such table: the request itself will say so)
            return None
        finally:
            self._internal.active = False
        self.learn(desc)
        with self._lock:
            return self._schemas.get(table)

    def _reader(self, params: Mapping[str, Any], signer: Any) -> Any:
        """An unguarded client on the same endpoint and region (the old and new images)."""
        url = str(params.get("url", ""))
        m = re.match(r"^(https?://[^/]+)", url)
        if not m:
            return None
        region = getattr(signer, "region_name", None) or "us-east-1"
        k = (m.group(1), region)
        with self._lock:
            client = self._readers.get(k)
        if client is not None:
            return client
        import botocore.session
        from botocore.config import Config

        creds = getattr(signer, "_credentials", None)
        frozen = creds.get_frozen_credentials() if creds is not None else None
        self._internal.active = True
        try:
            client = botocore.session.Session().create_client(
                "dynamodb",
                region_name=region,
                endpoint_url=m.group(1),
                aws_access_key_id=frozen.access_key if frozen else "testing",
                aws_secret_access_key=frozen.secret_key if frozen else "testing",
                aws_session_token=frozen.token if frozen else None,
                config=Config(retries={"max_attempts": 2, "mode": "standard"}),
            )
        finally:
            self._internal.active = False
        with self._lock:
            self._readers.setdefault(k, client)
        return client

    def _get(self, reader: Any, table: str, key: Mapping[str, Any]) -> dict[str, Any] | None:
        self._internal.active = True
        try:
            got = reader.get_item(TableName=table, Key=dict(key), ConsistentRead=True)
        finally:
            self._internal.active = False
        item: dict[str, Any] | None = got.get("Item")
        return item

    def _plan_write(
        self,
        op: str,
        body: Mapping[str, Any],
        schema: TableSchema,
        params: Mapping[str, Any],
        signer: Any,
    ) -> _Plan | None:
        item = _unwire(body.get("Item")) if op == "PutItem" else None
        key = schema.key_of(item) if item is not None else _unwire(body.get("Key") or {})
        if not key:
            return None
        reader = self._reader(params, signer)
        old = self._get(reader, schema.name, key) if reader is not None else None
        new: dict[str, Any] | None
        if op == "PutItem":
            new = item
        elif op == "DeleteItem":
            new = None
        else:  # the index keys the update will set or remove; the rest as before
            new = _predict_update(old, key, body)
        plan = _Plan(op, schema.name, old=old, key=dict(key), reader=reader)
        plan.touches = _write_touches(schema, old, new, failed=False)
        return plan

    def _actual_write(self, plan: _Plan, *, failed: bool) -> list[_Touch]:
        schema = self._schemas[plan.table]
        if failed:
            return _write_touches(schema, plan.old, plan.old, failed=True)
        new = self._get(plan.reader, plan.table, plan.key or {}) if plan.reader else None
        return _write_touches(schema, plan.old, new, failed=False)

    def _plan_read(self, op: str, body: Mapping[str, Any], schema: TableSchema) -> _Plan | None:
        factor = 1.0 if body.get("ConsistentRead") else 0.5
        index: str | None = None
        if op == "GetItem":
            key = _unwire(body.get("Key") or {})
            value = key.get(schema.hash_key)
        else:
            index = body.get("IndexName")
            hash_key = schema.hash_key
            if index:
                ix = next((i for i in schema.indexes if i.name == index), None)
                if ix is None:
                    return None
                hash_key = ix.hash_key
            value = _query_hash_value(body, hash_key)
        if value is None:
            return None
        plan = _Plan(op, schema.name, factor=factor)
        plan.touches = [_Touch(schema.name, index, _key_str(value), "read", factor)]
        return plan

    def _actual_read(self, plan: _Plan, parsed: Mapping[str, Any]) -> list[_Touch]:
        if plan.operation == "GetItem":
            size = item_size(parsed.get("Item") or {})
        else:
            items = parsed.get("Items")
            if items is None:  # Select=COUNT: what was read, not returned (≥ 1 unit)
                size = int(parsed.get("ScannedCount", 0)) * 100
            else:
                size = sum(item_size(i) for i in items)
        units = max(1, math.ceil(size / READ_UNIT_BYTES)) * plan.factor
        t = plan.touches[0]
        return [_Touch(t.table, t.index, t.key, "read", units)]

    def _plan_batch(
        self, body: Mapping[str, Any], params: dict[str, Any], signer: Any
    ) -> _Plan | None:
        """Per item: those whose key values are out of budget are left out of the request
        and answered in UnprocessedItems; all out: the whole request is throttled."""
        requests = body.get("RequestItems") or {}
        plan = _Plan("BatchWriteItem", next(iter(requests), ""))
        now = self.clock()
        kept: dict[str, list[Any]] = {}
        for table, reqs in requests.items():
            schema = self._schema(str(table), params, signer)
            reader = self._reader(params, signer)
            for r in reqs:
                if schema is None or reader is None:
                    kept.setdefault(table, []).append(r)
                    continue
                if "PutRequest" in r:
                    new = _unwire(r["PutRequest"].get("Item") or {})
                    key = schema.key_of(new)
                else:
                    key = _unwire(r.get("DeleteRequest", {}).get("Key") or {})
                    new = None
                old = self._get(reader, str(table), key)
                touches = _write_touches(schema, old, new, failed=False)
                with self._lock:
                    over = self._over(touches, now, plan.touches) if self.enforce else None
                if over is not None and kept:
                    plan.refused_batch.setdefault(table, []).append(r)
                    self.recorder.add(
                        UnitUse(
                            now,
                            over.table,
                            over.index,
                            over.key,
                            over.kind,
                            0,
                            "BatchWriteItem",
                            True,
                        )
                    )
                    continue
                kept.setdefault(table, []).append(r)
                plan.touches += touches
        if plan.refused_batch:
            params["body"] = json.dumps({**body, "RequestItems": kept}).encode()
        return plan


# ====================================================================== helpers
def _per_key(touches: Sequence[_Touch]) -> dict[tuple[str, str | None, str, Kind], float]:
    """Units by (table, index, key value, kind): what one request takes from each bucket."""
    out: defaultdict[tuple[str, str | None, str, Kind], float] = defaultdict(float)
    for t in touches:
        out[(t.table, t.index, t.key, t.kind)] += t.units
    return out


def _hash_range(keys: Sequence[Mapping[str, Any]]) -> tuple[str | None, str | None]:
    h = next((k["AttributeName"] for k in keys if k.get("KeyType") == "HASH"), None)
    r = next((k["AttributeName"] for k in keys if k.get("KeyType") == "RANGE"), None)
    return h, r


def _json_body(params: Mapping[str, Any]) -> dict[str, Any]:
    body = params.get("body")
    if isinstance(body, bytes | bytearray):
        body = body.decode("utf-8")
    if not body:
        return {}
    try:
        out = json.loads(body)
    except ValueError:
        return {}
    return out if isinstance(out, dict) else {}


def _unwire(value: Any) -> Any:
    """Wire JSON (binary as base64) to the typed values botocore hands callers."""
    if isinstance(value, dict):
        if len(value) == 1:
            ((k, v),) = value.items()
            if k == "B" and isinstance(v, str):
                return {"B": base64.b64decode(v)}
            if k == "BS" and isinstance(v, list):
                return {"BS": [base64.b64decode(x) for x in v]}
        return {k: _unwire(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_unwire(v) for v in value]
    return value


def _key_str(value: Mapping[str, Any]) -> str:
    ((_, v),) = value.items()
    if isinstance(v, bytes | bytearray):
        return base64.b64encode(bytes(v)).decode()
    return str(v)


def _projected(schema: TableSchema, ix: IndexSchema, item: Mapping[str, Any]) -> int:
    if ix.projection == "ALL":
        return item_size(item)
    names = {schema.hash_key, schema.range_key, ix.hash_key, ix.range_key}
    if ix.projection == "INCLUDE":
        names |= set(ix.include)
    return item_size({k: v for k, v in item.items() if k in names})


def _in_index(ix: IndexSchema, item: Mapping[str, Any] | None) -> bool:
    if not item:
        return False
    return ix.hash_key in item and (not ix.range_key or ix.range_key in item)


def _wu(size: int) -> int:
    return max(1, math.ceil(size / WRITE_UNIT_BYTES))


def _write_touches(
    schema: TableSchema,
    old: Mapping[str, Any] | None,
    new: Mapping[str, Any] | None,
    *,
    failed: bool,
) -> list[_Touch]:
    """Units on the table's key value and each index's key values for old → new."""
    ref = new or old or {}
    pk = ref.get(schema.hash_key)
    if pk is None:
        return []
    size = max(item_size(old or {}), item_size(new or {}))
    out = [_Touch(schema.name, None, _key_str(pk), "write", _wu(size))]
    if failed:
        return out
    for ix in schema.indexes:
        was, now = _in_index(ix, old), _in_index(ix, new)
        assert old is not None or not was
        if was and now:
            assert old is not None and new is not None
            same_key = old[ix.hash_key] == new[ix.hash_key] and (
                not ix.range_key or old[ix.range_key] == new[ix.range_key]
            )
            if same_key:
                p_old, p_new = _projected(schema, ix, old), _projected(schema, ix, new)
                if p_old != p_new or (ix.projection == "ALL" and old != new):
                    # an entry rewritten in place: the larger of its two images, as on
                    # the table
                    units = max(_wu(p_old), _wu(p_new))
                    key = _key_str(new[ix.hash_key])
                    out.append(_Touch(schema.name, ix.name, key, "write", units))
                continue
        # the key moved (or the item entered or left the index): a delete and a put
        for img, inside in ((old, was), (new, now)):
            if inside and img is not None:
                key = _key_str(img[ix.hash_key])
                units = _wu(_projected(schema, ix, img))
                out.append(_Touch(schema.name, ix.name, key, "write", units))
    return out


_SET_VALUE = re.compile(r"(?:^|[\s,])(#?[A-Za-z0-9_]+)\s*=\s*(:[A-Za-z0-9_]+)\s*(?=,|$|\s+[A-Z])")


def _predict_update(
    old: Mapping[str, Any] | None, key: Mapping[str, Any], body: Mapping[str, Any]
) -> dict[str, Any]:
    """The item after an UpdateItem as far as its top-level `a = :v` and REMOVEs go: enough
    to know the index keys it writes before sending it (the after-call reads the truth)."""
    new = dict(old or key)
    expr = str(body.get("UpdateExpression") or "")
    names = body.get("ExpressionAttributeNames") or {}
    values = _unwire(body.get("ExpressionAttributeValues") or {})
    clauses = re.split(r"\b(SET|REMOVE|ADD|DELETE)\b", expr)
    for i in range(1, len(clauses) - 1, 2):
        kind, text = clauses[i], clauses[i + 1]
        if kind == "SET":
            for m in _SET_VALUE.finditer(text):
                name = str(names.get(m.group(1), m.group(1)))
                if m.group(2) in values:
                    new[name] = values[m.group(2)]
        elif kind == "REMOVE":
            for part in text.split(","):
                p = part.strip()
                if p and "." not in p and "[" not in p:
                    new.pop(names.get(p, p), None)
    return new


def _query_hash_value(body: Mapping[str, Any], hash_key: str) -> Any:
    expr = str(body.get("KeyConditionExpression") or "")
    names = body.get("ExpressionAttributeNames") or {}
    values = body.get("ExpressionAttributeValues") or {}
    for m in re.finditer(r"(#?[A-Za-z0-9_]+)\s*=\s*(:[A-Za-z0-9_]+)", expr):
        if names.get(m.group(1), m.group(1)) == hash_key:
            return values.get(m.group(2))
    return None


def _throttle_response(t: _Touch, table: str) -> Any:
    from botocore.awsrequest import AWSResponse

    what = "Index" if t.index else "Table"
    kind = "Write" if t.kind == "write" else "Read"
    reason = f"{what}{kind}KeyRangeThroughputExceeded"
    resource = f"arn:aws:dynamodb:local:000000000000:table/{table}" + (
        f"/index/{t.index}" if t.index else ""
    )
    body = json.dumps(
        {
            "__type": "com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException",
            "message": f"Throughput exceeds the current capacity for one or more partition keys"
            f" ({reason})",
            "ThrottlingReasons": [{"reason": reason, "resource": resource}],
        }
    ).encode()
    headers = {"Content-Type": "application/x-amz-json-1.0", "x-mailqueue-throttle": reason}
    return AWSResponse("", 400, headers, _Raw(body))


class _Raw:
    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self._body

    def read(self, *_: Any) -> bytes:
        return self._body


def install_throttle(client: Any, throttle: PartitionThrottle | None = None) -> PartitionThrottle:
    """Per-partition budgets on one client's DynamoDB requests."""
    t = throttle if throttle is not None else PartitionThrottle()
    t.install(client)
    return t


@contextmanager
def partition_throttle(throttle: PartitionThrottle | None = None) -> Iterator[PartitionThrottle]:
    """Per-partition budgets on every botocore session created while the block runs (the
    local stack's handlers make their own sessions; see `limitguard.strict_limits`)."""
    from botocore import handlers as builtin

    t = throttle if throttle is not None else PartitionThrottle()
    added = t.handlers()
    builtin.BUILTIN_HANDLERS.extend(added)
    try:
        yield t
    finally:
        for spec in added:
            try:
                builtin.BUILTIN_HANDLERS.remove(spec)
            except ValueError:
                pass
