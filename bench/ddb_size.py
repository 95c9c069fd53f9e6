"""DynamoDB's size of an item and of one attribute value (DynamoDB JSON, as the API
carries it: binaries base64), per its documented rules: what the cost model
(`bench/cost.py`) and the request trace (`bench/trace.py`) both price reads and writes
by. Its own module, so the two do not import each other.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
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
