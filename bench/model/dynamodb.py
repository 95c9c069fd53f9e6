"""DynamoDB's billing rules: an item's size, read and write units, index projections.

Per the developer guide's documented rules; nothing here knows the queue's layout (the
state table's bill is `state_table`)."""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


def _num_size(n: str) -> int:
    digits = n.lstrip("-").replace(".", "").strip("0") or "0"
    return (len(digits) + 1) // 2 + 1


def value_size(v: Mapping[str, Any]) -> int:
    """DynamoDB's size of one attribute value (DynamoDB JSON), per its documented rules."""
    ((t, x),) = v.items()
    if t == "S":
        return len(str(x).encode())
    if t == "N":
        return _num_size(str(x))
    if t == "B":
        return len(x) if isinstance(x, bytes | bytearray) else len(base64.b64decode(x))
    if t in ("BOOL", "NULL"):
        return 1
    if t == "SS":
        return sum(len(s.encode()) for s in x)
    if t == "NS":
        return sum(_num_size(s) for s in x)
    if t == "BS":
        return sum(len(b) for b in x)
    if t == "L":
        return 3 + sum(1 + value_size(e) for e in x)
    if t == "M":
        return 3 + sum(1 + len(k.encode()) + value_size(e) for k, e in x.items())
    raise ValueError(f"unknown attribute type {t}")


def item_size(item: Mapping[str, Any] | None) -> int:
    if not item:
        return 0
    return sum(len(k.encode()) + value_size(v) for k, v in item.items())


def units(size: int, unit: int) -> int:
    return max(1, math.ceil(size / unit))


@dataclass(frozen=True)
class Index:
    name: str
    keys: tuple[str, ...]
    projection: str  # ALL | KEYS_ONLY | INCLUDE
    include: tuple[str, ...] = ()  # INCLUDE's NonKeyAttributes
    table_keys: tuple[str, ...] = ("pk", "sk")  # projected into every index entry

    def entry(self, img: Mapping[str, Any] | None) -> dict[str, Any]:
        """What the index holds of an item (the whole item under ALL): a write that leaves
        it as it was and on the same key writes nothing to the index."""
        if self.projection == "ALL":
            return dict(img or {})
        keep = set(self.keys) | set(self.table_keys) | set(self.include)
        return {k: v for k, v in (img or {}).items() if k in keep}

    def projected_size(self, img: Mapping[str, Any] | None) -> int:
        """An index entry's size: the whole item (ALL), or the table's and the index's
        keys plus the included attributes (KEYS_ONLY, INCLUDE)."""
        if self.projection == "ALL":
            return item_size(img)
        keep = set(self.keys) | set(self.table_keys) | set(self.include)
        return item_size({k: v for k, v in (img or {}).items() if k in keep})


def write_units(
    record: Mapping[str, Any], indexes: tuple[Index, ...], transactional: bool = False
) -> dict[str, int]:
    """WRU of the write behind one stream record: the table, and each index it touches."""
    ddb = record.get("dynamodb") or {}
    old, new = ddb.get("OldImage"), ddb.get("NewImage")
    if (record.get("userIdentity") or {}).get("principalId") == "dynamodb.amazonaws.com":
        return {}  # a TTL deletion: free
    factor = 2 if transactional else 1
    out = {"table": factor * units(max(item_size(old), item_size(new)), 1024)}
    for ix in indexes:

        def key(img: Mapping[str, Any] | None, ix: Index = ix) -> tuple[str, ...] | None:
            if not img or any(k not in img for k in ix.keys):
                return None
            return tuple(json.dumps(img[k], sort_keys=True) for k in ix.keys)

        def size(img: Mapping[str, Any] | None, ix: Index = ix) -> int:
            return ix.projected_size(img)

        ko, kn = key(old), key(new)
        n = 0
        if ko is not None and kn is not None and ko == kn:
            # the entry stays on its key: written only if what it projects changed ("If a
            # write to a table does not require a global secondary index update, then no
            # write capacity is consumed from the index": "Provisioned throughput
            # considerations for Global Secondary Indexes", docs.aws.amazon.com/
            # amazondynamodb/latest/developerguide/GSI.ThroughputConsiderations.html) —
            # under KEYS_ONLY a claim, which changes no key, writes no entry
            if ix.entry(old) != ix.entry(new):
                n = units(max(size(old), size(new)), 1024)
        else:
            if ko is not None:
                n += units(size(old), 1024)
            if kn is not None:
                n += units(size(new), 1024)
        if n:
            out[ix.name] = factor * n
    return out
