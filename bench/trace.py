"""One AWS request of a measured run, as the scale model needs it (issue 25).

`entry()` is called by bench.cost's botocore hooks after every request a function makes
and keeps only what AWS's limits are counted in: the table or index and the key values a
DynamoDB request touched (with the read units of what it returned), the error a write
met (a failed conditional write is billed), the queue, the S3 object key, the secret or
parameter, and the time the request took. Nothing about the layout is assumed here:
the key attributes are kept by name and `bench.scale` resolves them against the
template's key schemas, so a new layout is read from the run, not from this file.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from bench.ddb_size import item_size

#: an equality in a key condition: `#n = :v` or `name = :v`
_EQ = re.compile(r"(#?[A-Za-z_][A-Za-z0-9_]*)\s*=\s*(:[A-Za-z0-9_]+)")


def _val(v: Mapping[str, Any] | None) -> str:
    """A key attribute's value as text (its DynamoDB JSON's one value)."""
    if not v:
        return ""
    ((_, x),) = v.items()
    if isinstance(x, str):
        return x
    if isinstance(x, bytes | bytearray):
        return x.hex()
    return json.dumps(x, sort_keys=True, default=str)


def _size(item: Mapping[str, Any] | None) -> int:
    return item_size(item)


def _ru(size: int, consistent: bool) -> float:
    """Read units of `size` bytes returned: 4 KB a unit, half for eventually consistent."""
    return max(1, math.ceil(size / 4096)) * (1.0 if consistent else 0.5)


def _keys(item: Mapping[str, Any] | None) -> dict[str, str]:
    """An item's short attribute values (keys and the like; not bodies or maps)."""
    out = {}
    for k, v in (item or {}).items():
        if isinstance(v, Mapping) and len(v) == 1 and next(iter(v)) in ("S", "N", "B"):
            text = _val(v)
            if len(text) <= 256:
                out[k] = text
    return out


def _write_items(op: str, params: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The items a write request names: (table, op, key attributes or whole item)."""
    out: list[dict[str, Any]] = []
    if op in ("PutItem", "UpdateItem", "DeleteItem"):
        item = params.get("Item") or params.get("Key") or {}
        out.append({"table": params.get("TableName", ""), "op": op, "attrs": _keys(item)})
    elif op == "BatchWriteItem":
        for table, reqs in (params.get("RequestItems") or {}).items():
            for r in reqs:
                if "PutRequest" in r:
                    out.append(
                        {"table": table, "op": "PutItem", "attrs": _keys(r["PutRequest"]["Item"])}
                    )
                elif "DeleteRequest" in r:
                    out.append(
                        {
                            "table": table,
                            "op": "DeleteItem",
                            "attrs": _keys(r["DeleteRequest"]["Key"]),
                        }
                    )
    elif op == "TransactWriteItems":
        for a in params.get("TransactItems") or []:
            ((kind, body),) = a.items()
            item = body.get("Item") or body.get("Key") or {}
            out.append(
                {"table": body.get("TableName", ""), "op": kind, "attrs": _keys(item), "tx": True}
            )
    return out


def _key_condition(params: Mapping[str, Any]) -> dict[str, str]:
    """The equalities of a Query's key condition, names and values resolved."""
    names = params.get("ExpressionAttributeNames") or {}
    values = params.get("ExpressionAttributeValues") or {}
    out: dict[str, str] = {}
    for name, ref in _EQ.findall(str(params.get("KeyConditionExpression") or "")):
        out[str(names.get(name, name))] = _val(values.get(ref))
    return out


def entry(
    fn: str, service: str, op: str, params: Mapping[str, Any], parsed: Mapping[str, Any], dt: float
) -> dict[str, Any]:
    """The trace's record of one request (see the module docstring)."""
    e: dict[str, Any] = {"fn": fn, "svc": service, "op": op, "s": dt}
    err = (parsed.get("Error") or {}).get("Code")
    if err:
        e["err"] = err
        if op == "TransactWriteItems":
            e["reasons"] = [r.get("Code") for r in parsed.get("CancellationReasons") or []]
    if service == "dynamodb":
        consistent = bool(params.get("ConsistentRead"))
        if op in ("GetItem",):
            e["reads"] = [
                {
                    "table": params.get("TableName", ""),
                    "attrs": _keys(params.get("Key")),
                    "ru": _ru(_size(parsed.get("Item")), consistent),
                }
            ]
        elif op in ("Query", "Scan"):
            size = sum(_size(i) for i in parsed.get("Items") or [])
            e["reads"] = [
                {
                    "table": params.get("TableName", ""),
                    "index": params.get("IndexName"),
                    "attrs": _key_condition(params) if op == "Query" else {},
                    "ru": _ru(size, consistent),
                    "scan": op == "Scan",
                }
            ]
        elif op == "BatchGetItem":
            got: dict[str, list[Any]] = parsed.get("Responses") or {}
            reads = []
            for table, spec in (params.get("RequestItems") or {}).items():
                c = bool(spec.get("ConsistentRead"))
                for key in spec.get("Keys") or []:
                    attrs = _keys(key)
                    hit = next(
                        (i for i in got.get(table, []) if _keys(i).items() >= attrs.items()), None
                    )
                    reads.append({"table": table, "attrs": attrs, "ru": _ru(_size(hit), c)})
            e["reads"] = reads
        elif op == "TransactGetItems":
            reads = []
            for a, r in zip(
                params.get("TransactItems") or [], parsed.get("Responses") or [], strict=False
            ):
                body = a.get("Get") or {}
                reads.append(
                    {
                        "table": body.get("TableName", ""),
                        "attrs": _keys(body.get("Key")),
                        "ru": 2 * _ru(_size(r.get("Item")), True),
                    }
                )
            e["reads"] = reads
        writes = _write_items(op, params)
        if writes:
            e["writes"] = writes
    elif service == "sqs":
        e["queue"] = str(params.get("QueueUrl", "")).rsplit("/", 1)[-1]
        if op == "SendMessageBatch":
            e["n"] = len(params.get("Entries") or [])
        elif op == "ReceiveMessage":
            e["n"] = len(parsed.get("Messages") or [])
        elif op == "DeleteMessageBatch" or op == "ChangeMessageVisibilityBatch":
            e["n"] = len(params.get("Entries") or [])
        else:
            e["n"] = 1
    elif service == "s3":
        e["key"] = str(params.get("Key") or params.get("Prefix") or "")
        e["bucket"] = str(params.get("Bucket", ""))
    elif service in ("secretsmanager", "ssm"):
        e["id"] = str(params.get("SecretId") or params.get("Name") or "")
    return e


def prefix(key: str) -> str:
    """An S3 key's prefix as S3 partitions request rates: up to its last '/'."""
    return key.rsplit("/", 1)[0] + "/" if "/" in key else ""


_SEP = re.compile(r"([#/:|=])")


def family(value: str) -> str:
    """A key value with its variable parts folded to '*', so that the values of one
    family share a pattern: any token holding a digit (ids, shard numbers, times), and
    any short token (<= 4 characters: a hash bucket, a shard letter) after a separator
    ('#', '/', ':', '|', '=')."""
    parts = _SEP.split(value)
    out = []
    for k, tok in enumerate(parts):
        if k % 2 == 1 or not tok:
            out.append(tok)  # a separator, or nothing between two
        elif re.search(r"[0-9]", tok) or (k > 0 and len(tok) <= 4):
            out.append("*")
        else:
            out.append(tok)
    return "".join(out)
