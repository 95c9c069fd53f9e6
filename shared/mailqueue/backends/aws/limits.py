"""The services' documented limits, checked on each request before it leaves the client.

moto accepts requests that AWS refuses (a 9 KB UpdateExpression, a 400 KB+ item, 11
messages in a batch, a 2 KB S3 key), so code that passes its tests can fail in AWS at
its first large input. `check_request` checks one request's parameters (the dict a
low-level boto3 client call receives, typed attribute values like ``{"S": ...}``) against
the documented limits; `LimitGuard` applies it to every request of a client and answers a
violation as the service would (HTTP 400 with the service's error code), and records it
so that code which catches the error cannot hide it from the test.

Only what a request alone shows is checked. Where the outcome depends on stored state
(the size an UpdateItem leaves the item at), the check is a lower bound: it never refuses
what AWS would accept, and may let through what AWS would refuse.
"""

from __future__ import annotations

import base64
import json
import logging
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

# --- DynamoDB: "Constraints in Amazon DynamoDB" (developer guide). Sizes are binary units:
# 1 KB = 1,024 bytes, 1 MB = 1,024 KB.
# "Expression parameters": the maximum length of any expression string is 4 KB.
DDB_EXPRESSION_MAX_BYTES = 4 * 1024
# "Expression parameters": any single expression attribute name or value placeholder
# (#name, :val) is at most 255 bytes.
DDB_PLACEHOLDER_MAX_BYTES = 255
# "Expression parameters": all substitution variables of a request (the sum of
# ExpressionAttributeNames and ExpressionAttributeValues) at most 2 MB.
DDB_SUBSTITUTIONS_MAX_BYTES = 2 * 1024 * 1024
# "Expression parameters": at most 300 operators or functions in an UpdateExpression.
DDB_UPDATE_OPERATORS_MAX = 300
# "Expression parameters": at most 100 operands for the IN comparator.
DDB_IN_OPERANDS_MAX = 100
# "Items": the maximum item size is 400 KB (attribute names and values, binary lengths).
DDB_ITEM_MAX_BYTES = 400 * 1024
# "Partition keys and sort keys": a partition key value 1..2,048 bytes, a sort key value
# 1..1,024 bytes.
DDB_PARTITION_KEY_MAX_BYTES = 2048
DDB_SORT_KEY_MAX_BYTES = 1024
# "API-specific constraints": BatchWriteItem up to 25 put or delete requests, at most 16 MB.
DDB_BATCH_WRITE_MAX_REQUESTS = 25
DDB_BATCH_WRITE_MAX_BYTES = 16 * 1024 * 1024
# "API-specific constraints": BatchGetItem up to 100 items.
DDB_BATCH_GET_MAX_KEYS = 100
# "DynamoDB transactions": up to 100 unique items per TransactWriteItems /
# TransactGetItems, aggregate size at most 4 MB, and no two actions on the same item.
DDB_TRANSACT_MAX_ITEMS = 100
DDB_TRANSACT_MAX_BYTES = 4 * 1024 * 1024

# --- SQS: "Amazon SQS message quotas" and the API reference.
# Message size: the queue's MaximumMessageSize, default 262,144 bytes (256 KiB), counting
# the body and the message attributes (name, type and value of each). AWS allows queues to
# be configured up to 1 MiB since 2025; the template keeps the default, so 256 KiB holds.
SQS_MESSAGE_MAX_BYTES = 262_144
# Message batch: at most 10 entries, and the batch's messages together at most 256 KiB.
SQS_BATCH_MAX_ENTRIES = 10
SQS_BATCH_MAX_BYTES = 262_144
# Batched message ID: up to 80 characters, alphanumerics, hyphens and underscores.
SQS_BATCH_ID_MAX_CHARS = 80
# Delay (message timers): 0..900 seconds (15 minutes).
SQS_DELAY_MAX_SECONDS = 900
# Visibility timeout: 0..43,200 seconds (12 hours).
SQS_VISIBILITY_MAX_SECONDS = 43_200
# ReceiveMessage: MaxNumberOfMessages 1..10, WaitTimeSeconds 0..20.
SQS_RECEIVE_MAX_MESSAGES = 10
SQS_RECEIVE_MAX_WAIT_SECONDS = 20

# --- S3: "Naming Amazon S3 objects" (object key naming): a key is at most 1,024 bytes of
# UTF-8. DeleteObjects: "you can delete up to 1,000 objects" per request (API reference).
S3_KEY_MAX_BYTES = 1024
S3_DELETE_OBJECTS_MAX_KEYS = 1000

# The error code each service answers a rule with (all HTTP 400).
_SQS_CODES = {
    "message_size": "InvalidParameterValue",
    "message_characters": "InvalidMessageContents",
    "batch_entries": "TooManyEntriesInBatchRequest",
    "batch_empty": "EmptyBatchRequest",
    "batch_size": "BatchRequestTooLong",
    "batch_ids_distinct": "BatchEntryIdsNotDistinct",
    "batch_id_format": "InvalidBatchEntryId",
}
_S3_CODES = {"key_length": "KeyTooLongError", "delete_objects_keys": "MalformedXML"}

KeySchemas = Mapping[str, tuple[str, str | None]]  # table → (partition key, sort key)


class ServiceLimitExceeded(Exception):
    """A request the real service refuses for one of its documented limits."""

    def __init__(self, service: str, operation: str, rule: str, message: str) -> None:
        super().__init__(f"{service}:{operation}: {rule}: {message}")
        self.service = service
        self.operation = operation
        self.rule = rule
        self.message = message

    @property
    def code(self) -> str:
        """The error code the service answers this violation with."""
        if self.service == "sqs":
            return _SQS_CODES.get(self.rule, "InvalidParameterValue")
        if self.service == "s3":
            return _S3_CODES.get(self.rule, "InvalidRequest")
        return "ValidationException"


class _Violation(Exception):
    """Raised inside a service's checks; `check_request` adds service and operation."""

    def __init__(self, rule: str, message: str) -> None:
        super().__init__(message)
        self.rule = rule
        self.message = message


def check_request(
    service: str,
    operation: str,
    params: Mapping[str, Any],
    *,
    schemas: KeySchemas | None = None,
) -> None:
    """Raise `ServiceLimitExceeded` for the first documented limit `params` exceed.

    `service` is botocore's name ("dynamodb", "sqs", "s3"), `operation` the API name.
    `schemas` (table → key attribute names) makes the key checks exact; without it, the
    key of a Put is unknown (no duplicate check on Puts) and both key attributes of a
    Key are held to the partition key's bound. Unknown services and operations pass.
    """
    check = _CHECKS.get(service)
    if check is None:
        return
    try:
        check(operation, params, schemas or {})
    except _Violation as v:
        raise ServiceLimitExceeded(service, operation, v.rule, v.message) from None


# ======================================================================== DynamoDB sizes
def _utf8(s: Any) -> int:
    return len(str(s).encode("utf-8", "surrogatepass"))


def _binary_len(v: Any) -> int:
    if isinstance(v, bytes | bytearray | memoryview):
        return len(v)
    if isinstance(v, str):
        return _utf8(v)  # boto3 sends a str as its UTF-8 bytes
    return 0


def number_size(n: Any) -> int:
    """Bytes of a Number: 1 byte per two significant digits, plus 1 (the docs' estimate)."""
    digits = str(n).strip().lstrip("+-").lower().split("e", 1)[0].replace(".", "")
    significant = digits.strip("0") or "0"
    return math.ceil(len(significant) / 2) + 1


def value_size(value: Mapping[str, Any]) -> int:
    """Size of one typed attribute value, per "DynamoDB item sizes and formats"."""
    if not isinstance(value, Mapping) or len(value) != 1:
        return 0
    ((kind, v),) = value.items()
    if kind == "S":
        return _utf8(v)
    if kind == "N":
        return number_size(v)
    if kind == "B":
        return _binary_len(v)
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "SS":
        return sum(_utf8(x) for x in v)
    if kind == "NS":
        return sum(number_size(x) for x in v)
    if kind == "BS":
        return sum(_binary_len(x) for x in v)
    if kind == "L":  # 3 bytes for the list, 1 per element
        return 3 + sum(1 + value_size(x) for x in v)
    if kind == "M":  # 3 bytes for the map, 1 per element, plus each element's name
        return 3 + sum(1 + _utf8(k) + value_size(x) for k, x in v.items())
    return 0


def item_size(item: Mapping[str, Any]) -> int:
    """Size of an item: the UTF-8 lengths of its attribute names plus their values' sizes."""
    return sum(_utf8(name) + value_size(v) for name, v in item.items())


def _key_value_len(value: Mapping[str, Any]) -> int:
    """A key attribute's length as the key limits count it: the value's bytes."""
    return value_size(value)


# ================================================================ DynamoDB expressions
_TOKEN = re.compile(
    r"\s*(?:(?P<name>\#[A-Za-z0-9_]+)|(?P<value>:[A-Za-z0-9_]+)|(?P<index>\[\s*\d+\s*\])"
    r"|(?P<op><>|<=|>=|[=<>+\-,().])|(?P<word>[A-Za-z_][A-Za-z0-9_]*)|(?P<other>\S))"
)
_UPDATE_CLAUSES = frozenset({"SET", "REMOVE", "ADD", "DELETE"})
_KEYWORDS = frozenset({"AND", "OR", "NOT", "BETWEEN", "IN", *_UPDATE_CLAUSES})


@dataclass(frozen=True, slots=True)
class _Tok:
    kind: str
    text: str


def _tokens(expression: str) -> list[_Tok]:
    out = []
    for m in _TOKEN.finditer(expression):
        kind = m.lastgroup
        if kind is not None:
            out.append(_Tok(kind, m.group(kind)))
    return out


def _split_top(tokens: Sequence[_Tok], sep: str = ",") -> list[list[_Tok]]:
    """Split at `sep` outside parentheses."""
    parts: list[list[_Tok]] = [[]]
    depth = 0
    for t in tokens:
        if t.text == "(":
            depth += 1
        elif t.text == ")":
            depth -= 1
        if t.kind == "op" and t.text == sep and depth == 0:
            parts.append([])
        else:
            parts[-1].append(t)
    return [p for p in parts if p]


Path = tuple[str, ...]


def _path(tokens: Sequence[_Tok], names: Mapping[str, str]) -> Path | None:
    """A document path (``#a.b[2]``) with placeholders resolved; None if not one."""
    out: list[str] = []
    expect_name = True
    for t in tokens:
        if expect_name:
            if t.kind == "name":
                out.append("." + names.get(t.text, t.text))
            elif t.kind == "word" and t.text.upper() not in _KEYWORDS:
                out.append("." + t.text)
            else:
                return None
            expect_name = False
        elif t.kind == "index":
            out.append("[" + re.sub(r"\s", "", t.text)[1:-1] + "]")
        elif t.text == ".":
            expect_name = True
        else:
            return None
    return tuple(out) if out and not expect_name else None


def _show(p: Path) -> str:
    return "[" + ", ".join(s.lstrip(".") for s in p) + "]"


def _check_overlaps(kind: str, paths: Sequence[Path]) -> None:
    """DynamoDB refuses two paths where one equals or contains the other."""
    for i, p in enumerate(paths):
        for q in paths[i + 1 :]:
            n = min(len(p), len(q))
            if p[:n] == q[:n]:
                raise _Violation(
                    "path_overlap",
                    f"Invalid {kind}: Two document paths overlap with each other; must remove"
                    f" or rewrite one of these paths; path one: {_show(p)}, path two: {_show(q)}",
                )


def _functions(tokens: Sequence[_Tok]) -> int:
    return sum(
        1
        for a, b in zip(tokens, tokens[1:], strict=False)
        if a.kind == "word" and b.text == "(" and a.text.upper() not in _KEYWORDS
    )


def update_operators(expression: str) -> int:
    """Operators and functions of an UpdateExpression, as this harness counts them.

    Counting rule: every action (each assignment of SET, each path of REMOVE, each
    path/value pair of ADD and DELETE) is 1, every ``+`` and ``-`` is 1, every function
    call (if_not_exists, list_append, ...) is 1. The docs' example ("SET a = :v1 + :v2 +
    :v3" has two "+") counts the arithmetic; counting the actions too is the stricter
    reading, so an expression that passes here also passes in DynamoDB.
    """
    return sum(_update_operator_count(actions) for _, actions in _update_actions(expression))


def _update_operator_count(actions: Sequence[Sequence[_Tok]]) -> int:
    n = 0
    for a in actions:
        n += 1 + _functions(a) + sum(1 for t in a if t.kind == "op" and t.text in "+-")
    return n


def _update_actions(expression: str) -> list[tuple[str, list[list[_Tok]]]]:
    clauses: list[tuple[str, list[_Tok]]] = []
    depth = 0
    for t in _tokens(expression):
        if t.text == "(":
            depth += 1
        elif t.text == ")":
            depth -= 1
        if t.kind == "word" and depth == 0 and t.text.upper() in _UPDATE_CLAUSES:
            clauses.append((t.text.upper(), []))
        elif clauses:
            clauses[-1][1].append(t)
    return [(kind, _split_top(toks)) for kind, toks in clauses]


def _update_targets(
    expression: str, names: Mapping[str, str]
) -> tuple[list[Path], list[tuple[Path | None, list[_Tok]]]]:
    """The paths an UpdateExpression writes, and SET's (target, right-hand side) pairs."""
    targets: list[Path] = []
    sets: list[tuple[Path | None, list[_Tok]]] = []
    for kind, actions in _update_actions(expression):
        for a in actions:
            if kind == "SET":
                eq = next((i for i, t in enumerate(a) if t.text == "="), None)
                if eq is None:
                    continue
                p = _path(a[:eq], names)
                sets.append((p, a[eq + 1 :]))
            elif kind == "REMOVE":
                p = _path(a, names)
            else:  # ADD / DELETE: path, then a value placeholder
                end = next((i for i, t in enumerate(a) if t.kind == "value"), len(a))
                p = _path(a[:end], names)
            if p is not None:
                targets.append(p)
    return targets, sets


def _check_in_operands(kind: str, expression: str) -> None:
    toks = _tokens(expression)
    for i, t in enumerate(toks):
        if t.kind == "word" and t.text.upper() == "IN" and i + 1 < len(toks):
            if toks[i + 1].text != "(":
                continue
            depth, operands = 0, 1
            for u in toks[i + 1 :]:
                if u.text == "(":
                    depth += 1
                elif u.text == ")":
                    depth -= 1
                    if depth == 0:
                        break
                elif u.text == "," and depth == 1:
                    operands += 1
            if operands > DDB_IN_OPERANDS_MAX:
                raise _Violation(
                    "in_operands",
                    f"Invalid {kind}: The IN operator is provided with too many operands;"
                    f" number of operands: {operands}",
                )


_EXPRESSIONS = (
    "UpdateExpression",
    "ConditionExpression",
    "KeyConditionExpression",
    "FilterExpression",
    "ProjectionExpression",
)


def _check_expressions(req: Mapping[str, Any]) -> None:
    """All expression rules for one request body (or one transaction action)."""
    names = req.get("ExpressionAttributeNames") or {}
    values = req.get("ExpressionAttributeValues") or {}
    for kind in _EXPRESSIONS:
        expr = req.get(kind)
        if not isinstance(expr, str):
            continue
        size = _utf8(expr)
        if size > DDB_EXPRESSION_MAX_BYTES:
            raise _Violation(
                "expression_length",
                f"Invalid {kind}: Expression size has exceeded the maximum allowed size;"
                f" expression size: {size}",
            )
    for placeholder in (*names, *values):
        if _utf8(placeholder) > DDB_PLACEHOLDER_MAX_BYTES:
            raise _Violation(
                "placeholder_length",
                f"ExpressionAttributeNames/Values contains invalid key: {placeholder[:40]}..."
                f" is {_utf8(placeholder)} bytes, more than {DDB_PLACEHOLDER_MAX_BYTES}",
            )
    total = sum(_utf8(k) + _utf8(v) for k, v in names.items()) + sum(
        _utf8(k) + value_size(v) for k, v in values.items()
    )
    if total > DDB_SUBSTITUTIONS_MAX_BYTES:
        raise _Violation(
            "substitutions_size",
            f"ExpressionAttributeNames and ExpressionAttributeValues total {total} bytes,"
            f" more than {DDB_SUBSTITUTIONS_MAX_BYTES}",
        )
    update = req.get("UpdateExpression")
    if isinstance(update, str):
        n = update_operators(update)
        if n > DDB_UPDATE_OPERATORS_MAX:
            raise _Violation(
                "update_operators",
                f"Invalid UpdateExpression: The expression contains too many operators;"
                f" operator count: {n}, more than {DDB_UPDATE_OPERATORS_MAX}",
            )
        targets, _ = _update_targets(update, names)
        _check_overlaps("UpdateExpression", targets)
    projection = req.get("ProjectionExpression")
    if isinstance(projection, str):
        paths = [_path(p, names) for p in _split_top(_tokens(projection))]
        _check_overlaps("ProjectionExpression", [p for p in paths if p is not None])
    for kind in ("ConditionExpression", "FilterExpression"):
        expr = req.get(kind)
        if isinstance(expr, str):
            _check_in_operands(kind, expr)


def _update_size(req: Mapping[str, Any]) -> int:
    """A lower bound of the item an UpdateItem leaves: its key plus what SET writes."""
    key = req.get("Key") or {}
    names = req.get("ExpressionAttributeNames") or {}
    values = req.get("ExpressionAttributeValues") or {}
    size = item_size(key)
    update = req.get("UpdateExpression")
    if not isinstance(update, str):
        return size
    _, sets = _update_targets(update, names)
    for target, rhs in sets:
        if target is not None:
            size += _utf8(target[-1].lstrip(".").split("[")[0])
        size += sum(value_size(values.get(t.text, {})) for t in rhs if t.kind == "value")
    return size


def _check_item(item: Mapping[str, Any], what: str = "Item") -> int:
    size = item_size(item)
    if size > DDB_ITEM_MAX_BYTES:
        raise _Violation(
            "item_size",
            f"{what} size has exceeded the maximum allowed size ({size} bytes,"
            f" more than {DDB_ITEM_MAX_BYTES})",
        )
    return size


def _check_update_size(req: Mapping[str, Any]) -> int:
    size = _update_size(req)
    if size > DDB_ITEM_MAX_BYTES:
        raise _Violation(
            "item_size",
            f"Item size to update has exceeded the maximum allowed size ({size} bytes or"
            f" more, more than {DDB_ITEM_MAX_BYTES})",
        )
    return size


def _check_key(table: str, key: Mapping[str, Any], schemas: KeySchemas) -> None:
    schema = schemas.get(table)
    for name, value in key.items():
        limit = DDB_PARTITION_KEY_MAX_BYTES
        if schema is not None and name == schema[1]:
            limit = DDB_SORT_KEY_MAX_BYTES
        elif schema is None and len(key) == 2:
            limit = DDB_PARTITION_KEY_MAX_BYTES  # which one sorts is unknown: the looser bound
        n = _key_value_len(value)
        if n > limit:
            kind = "sort" if limit == DDB_SORT_KEY_MAX_BYTES else "partition"
            raise _Violation(
                "key_length",
                f"One or more parameter values were invalid: Size of {kind} key {name!r}"
                f" is {n} bytes, more than {limit}",
            )


def _item_key(table: str, item: Mapping[str, Any], schemas: KeySchemas) -> dict[str, Any] | None:
    schema = schemas.get(table)
    if schema is None:
        return None
    return {k: item[k] for k in schema if k is not None and k in item}


def _identity(table: str, key: Mapping[str, Any]) -> str:
    def enc(o: Any) -> Any:
        if isinstance(o, bytes | bytearray | memoryview):
            return base64.b64encode(bytes(o)).decode()
        if isinstance(o, set | frozenset):
            return sorted(map(str, o))
        return str(o)

    return table + "\0" + json.dumps(key, sort_keys=True, default=enc)


def _ddb(operation: str, p: Mapping[str, Any], schemas: KeySchemas) -> None:
    table = str(p.get("TableName", ""))
    if operation in ("GetItem", "PutItem", "UpdateItem", "DeleteItem", "Query", "Scan"):
        _check_expressions(p)
        if isinstance(p.get("Key"), Mapping):
            _check_key(table, p["Key"], schemas)
        if operation == "PutItem" and isinstance(p.get("Item"), Mapping):
            key = _item_key(table, p["Item"], schemas)
            if key:
                _check_key(table, key, schemas)
            _check_item(p["Item"])
        if operation == "UpdateItem":
            _check_update_size(p)
    elif operation == "BatchWriteItem":
        _batch_write(p, schemas)
    elif operation == "BatchGetItem":
        n = 0
        for t, req in (p.get("RequestItems") or {}).items():
            _check_expressions(req)
            for key in req.get("Keys") or []:
                _check_key(t, key, schemas)
                n += 1
        if n > DDB_BATCH_GET_MAX_KEYS:
            raise _Violation(
                "batch_get_keys",
                f"Too many items requested for the BatchGetItem call ({n}, more than"
                f" {DDB_BATCH_GET_MAX_KEYS})",
            )
    elif operation in ("TransactWriteItems", "TransactGetItems"):
        _transact(p, schemas)


def _batch_write(p: Mapping[str, Any], schemas: KeySchemas) -> None:
    n = total = 0
    for table, requests in (p.get("RequestItems") or {}).items():
        seen: set[str] = set()
        for r in requests:
            n += 1
            key: Mapping[str, Any] | None = None
            if "PutRequest" in r:
                item = r["PutRequest"].get("Item") or {}
                total += _check_item(item)
                key = _item_key(table, item, schemas)
            elif "DeleteRequest" in r:
                key = r["DeleteRequest"].get("Key") or {}
                total += item_size(key)
            if key:
                _check_key(table, key, schemas)
                ident = _identity(table, key)
                if ident in seen:
                    raise _Violation(
                        "batch_duplicate_keys", "Provided list of item keys contains duplicates"
                    )
                seen.add(ident)
    if n > DDB_BATCH_WRITE_MAX_REQUESTS:
        raise _Violation(
            "batch_write_requests",
            f"Too many items requested for the BatchWriteItem call ({n}, more than"
            f" {DDB_BATCH_WRITE_MAX_REQUESTS})",
        )
    if total > DDB_BATCH_WRITE_MAX_BYTES:
        raise _Violation(
            "batch_write_size",
            f"BatchWriteItem request size {total} bytes, more than {DDB_BATCH_WRITE_MAX_BYTES}",
        )


def _transact(p: Mapping[str, Any], schemas: KeySchemas) -> None:
    actions = list(p.get("TransactItems") or [])
    if len(actions) > DDB_TRANSACT_MAX_ITEMS:
        raise _Violation(
            "transact_items",
            f"Member must have length less than or equal to {DDB_TRANSACT_MAX_ITEMS}"
            f" (TransactItems has {len(actions)})",
        )
    bodies = [
        (kind, body) for a in actions for kind, body in a.items() if isinstance(body, Mapping)
    ]
    # key attribute names per table, from the schema or from the other actions' Keys
    known: dict[str, tuple[str, ...]] = {
        t: tuple(k for k in s if k is not None) for t, s in schemas.items()
    }
    for _, body in bodies:
        t = str(body.get("TableName", ""))
        if t not in known and isinstance(body.get("Key"), Mapping):
            known[t] = tuple(body["Key"])
    total = 0
    seen: set[str] = set()
    for kind, body in bodies:
        t = str(body.get("TableName", ""))
        _check_expressions(body)
        if kind == "Put":
            item = body.get("Item") or {}
            total += _check_item(item)
            names = known.get(t)
            key = {k: item[k] for k in names if k in item} if names else None
        else:
            key = body.get("Key") or {}
            total += _check_update_size(body) if kind == "Update" else item_size(key)
        if key:
            _check_key(t, key, schemas)
            ident = _identity(t, key)
            if ident in seen:
                raise _Violation(
                    "transact_same_item",
                    "Transaction request cannot include multiple operations on one item",
                )
            seen.add(ident)
    if total > DDB_TRANSACT_MAX_BYTES:
        raise _Violation(
            "transact_size",
            f"Transaction request size {total} bytes, more than {DDB_TRANSACT_MAX_BYTES}",
        )


# ================================================================================= SQS
_SQS_BAD_CHARS = re.compile("[^\t\n\r\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_SQS_BATCH_ID = re.compile(rf"[A-Za-z0-9_-]{{1,{SQS_BATCH_ID_MAX_CHARS}}}")


def message_size(body: Any, attributes: Mapping[str, Any] | None) -> int:
    """Body plus each attribute's name, data type and value, in bytes (SQS's count)."""
    n = _utf8(body or "")
    for name, a in (attributes or {}).items():
        n += _utf8(name) + _utf8(a.get("DataType", ""))
        if "StringValue" in a:
            n += _utf8(a["StringValue"])
        if "BinaryValue" in a:
            n += _binary_len(a["BinaryValue"])
    return n


def _check_message(m: Mapping[str, Any]) -> int:
    body = m.get("MessageBody", "")
    bad = _SQS_BAD_CHARS.search(str(body))
    if bad:
        raise _Violation(
            "message_characters",
            f"Invalid characters found. Valid unicode characters are #x9 | #xA | #xD |"
            f" #x20 to #xD7FF | #xE000 to #xFFFD | #x10000 to #x10FFFF (found"
            f" U+{ord(bad.group()):04X})",
        )
    size = message_size(body, m.get("MessageAttributes"))
    if size > SQS_MESSAGE_MAX_BYTES:
        raise _Violation(
            "message_size",
            f"One or more parameters are invalid. Reason: Message must be shorter than"
            f" {SQS_MESSAGE_MAX_BYTES} bytes (is {size})",
        )
    _check_range("delay_seconds", "DelaySeconds", m.get("DelaySeconds"), 0, SQS_DELAY_MAX_SECONDS)
    return size


def _check_range(rule: str, name: str, value: Any, low: int, high: int) -> None:
    if value is None:
        return
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise _Violation(
            rule,
            f"Value {value} for parameter {name} is invalid. Reason: must be between"
            f" {low} and {high}, if provided.",
        )


def _check_batch(entries: Sequence[Mapping[str, Any]]) -> None:
    if not entries:
        raise _Violation("batch_empty", "There should be at least one entry in the request.")
    if len(entries) > SQS_BATCH_MAX_ENTRIES:
        raise _Violation(
            "batch_entries",
            f"Maximum number of entries per request are {SQS_BATCH_MAX_ENTRIES}."
            f" You have sent {len(entries)}.",
        )
    ids = [str(e.get("Id", "")) for e in entries]
    for i in ids:
        if not _SQS_BATCH_ID.fullmatch(i):
            raise _Violation(
                "batch_id_format",
                "A batch entry id can only contain alphanumeric characters, hyphens and"
                f" underscores. It can be at most {SQS_BATCH_ID_MAX_CHARS} letters long.",
            )
    if len(set(ids)) != len(ids):
        raise _Violation("batch_ids_distinct", "Two or more batch entries have the same Id.")


def _sqs(operation: str, p: Mapping[str, Any], schemas: KeySchemas) -> None:
    vis_max = SQS_VISIBILITY_MAX_SECONDS
    if operation == "SendMessage":
        _check_message(p)
    elif operation == "SendMessageBatch":
        entries = list(p.get("Entries") or [])
        _check_batch(entries)
        total = sum(_check_message(e) for e in entries)
        if total > SQS_BATCH_MAX_BYTES:
            raise _Violation(
                "batch_size",
                f"Batch requests cannot be longer than {SQS_BATCH_MAX_BYTES} bytes."
                f" You have sent {total} bytes.",
            )
    elif operation in ("DeleteMessageBatch", "ChangeMessageVisibilityBatch"):
        entries = list(p.get("Entries") or [])
        _check_batch(entries)
        for e in entries:
            _check_range(
                "visibility_timeout", "VisibilityTimeout", e.get("VisibilityTimeout"), 0, vis_max
            )
    elif operation == "ChangeMessageVisibility":
        _check_range(
            "visibility_timeout", "VisibilityTimeout", p.get("VisibilityTimeout"), 0, vis_max
        )
    elif operation == "ReceiveMessage":
        _check_range(
            "receive_max_messages",
            "MaxNumberOfMessages",
            p.get("MaxNumberOfMessages"),
            1,
            SQS_RECEIVE_MAX_MESSAGES,
        )
        _check_range(
            "receive_wait",
            "WaitTimeSeconds",
            p.get("WaitTimeSeconds"),
            0,
            SQS_RECEIVE_MAX_WAIT_SECONDS,
        )
        _check_range(
            "visibility_timeout", "VisibilityTimeout", p.get("VisibilityTimeout"), 0, vis_max
        )


# ================================================================================== S3
def _check_s3_key(key: Any) -> None:
    n = _utf8(key)
    if n > S3_KEY_MAX_BYTES:
        raise _Violation(
            "key_length", f"Your key is too long ({n} bytes, more than {S3_KEY_MAX_BYTES})"
        )


_S3_KEYED = frozenset(
    {
        "PutObject",
        "GetObject",
        "HeadObject",
        "DeleteObject",
        "CopyObject",
        "CreateMultipartUpload",
        "UploadPart",
        "CompleteMultipartUpload",
        "GetObjectTagging",
        "PutObjectTagging",
    }
)


def _s3(operation: str, p: Mapping[str, Any], schemas: KeySchemas) -> None:
    if operation in _S3_KEYED and "Key" in p:
        _check_s3_key(p["Key"])
    elif operation == "DeleteObjects":
        objects = list((p.get("Delete") or {}).get("Objects") or [])
        if len(objects) > S3_DELETE_OBJECTS_MAX_KEYS:
            raise _Violation(
                "delete_objects_keys",
                "The XML you provided was not well-formed or did not validate against our"
                f" published schema ({len(objects)} keys, more than {S3_DELETE_OBJECTS_MAX_KEYS})",
            )
        for o in objects:
            _check_s3_key(o.get("Key", ""))


_CHECKS = {"dynamodb": _ddb, "sqs": _sqs, "s3": _s3}


# ========================================================================== the guard
