"""moto's TransactWriteItems, made to cost what it touches: a patch for the local stack.

moto 5.2 makes a transaction undoable by ``copy.deepcopy`` of every table it names: all
items, and the table's stream with every record ever written, so in a long local run
each transaction copies an ever larger table and stream, and moto, one process, slows
everything down with it (see docs/benchmarks.md, "Local stack"). The queue's own
TransactWriteItems were the stream counters' (removed: queue size is counted from the
index); the patch stays for any transaction a test or tool issues.

`install()` keeps moto's transaction code as it is and changes only its undo copy: the
items the transaction names are copied before it runs (and the stream's length noted),
the table itself is no longer copied, and on a rollback exactly those items are put back
and the records the failed transaction appended to the stream are dropped. The outcome of
every transaction is the same; `tests/local/test_motopatch.py` checks that against
unpatched moto. It is installed in the moto server the local stack starts, never in a
process it does not own.
"""

from __future__ import annotations

import copy
import logging
from typing import Any

log = logging.getLogger(__name__)

SUPPORTED = ("5.2.",)  # moto versions whose internals this was written against


def install() -> bool:
    """Patch this process's moto; False (and moto unchanged) when the version differs."""
    try:
        import moto
        import moto.dynamodb.models as models
        from moto.dynamodb.models.dynamo_type import DynamoType
        from moto.dynamodb.models.table import Table
    except ImportError:
        return False
    if not str(getattr(moto, "__version__", "")).startswith(SUPPORTED):
        log.warning("moto %s: transaction patch not installed", getattr(moto, "__version__", "?"))
        return False
    backend = models.DynamoDBBackend
    if getattr(backend.transact_write_items, "mailqueue_patch", False):
        return True
    original = backend.transact_write_items

    class _CopyModule:
        """moto.dynamodb.models' `copy`: deepcopy of a Table is the table itself."""

        def __getattr__(self, name: str) -> Any:
            return getattr(copy, name)

        @staticmethod
        def deepcopy(x: Any, memo: Any = None) -> Any:
            return x if isinstance(x, Table) else copy.deepcopy(x, memo)

    def snapshot(
        self: Any, transact_items: list[dict[str, Any]]
    ) -> list[tuple[Any, int, list[Any]]]:
        saved: dict[str, tuple[Any, int, list[Any]]] = {}
        for entry in transact_items:
            if not isinstance(entry, dict) or len(entry) != 1:
                continue
            (op,) = entry.values()
            name = str(op.get("TableName") or "") if isinstance(op, dict) else ""
            table = self.tables.get(name) if name else None
            if table is None:
                continue
            key = op.get("Key") or op.get("Item") or {}
            try:
                hk = DynamoType(key[table.hash_key_attr])
                rk = DynamoType(key[table.range_key_attr]) if table.range_key_attr else None
                current = table.get_item(hk, rk)
            except Exception:  # noqa: BLE001 - a malformed key: moto refuses it, changes nothing
                continue
            if name not in saved:
                shard = table.stream_shard
                saved[name] = (table, len(shard.items) if shard is not None else 0, [])
            saved[name][2].append((hk, rk, copy.deepcopy(current)))
        return list(saved.values())

    def restore(saved: list[tuple[Any, int, list[Any]]]) -> None:
        for table, stream_length, entries in saved:
            for hk, rk, item in reversed(entries):  # the first copy of a key is the oldest
                if rk is not None:
                    if item is None:
                        table.items.get(hk, {}).pop(rk, None)
                    else:
                        table.items[hk][rk] = item
                elif item is None:
                    table.items.pop(hk, None)
                else:
                    table.items[hk] = item
            if table.stream_shard is not None:
                del table.stream_shard.items[stream_length:]

    def transact_write_items(self: Any, transact_items: list[dict[str, Any]]) -> Any:
        saved = snapshot(self, transact_items)
        try:
            return original(self, transact_items)
        except BaseException:
            restore(saved)
            raise

    transact_write_items.mailqueue_patch = True  # type: ignore[attr-defined]
    setattr(models, "copy", _CopyModule())  # noqa: B010 - moto's module, not ours
    setattr(backend, "transact_write_items", transact_write_items)  # noqa: B010
    return True


def install_atomic_dynamodb() -> bool:
    """moto's DynamoDB, one request at a time, as DynamoDB applies each conditional write
    atomically. moto's server answers requests on several threads and checks a condition
    then writes without a lock, so with concurrent invocations (the local runtime runs
    several delivery containers at once) two conditional creates of one item could both
    succeed (measured in tests/shaping/conftest.py: 19 wins for 10 items, 6 threads).
    SQS and the stream are left concurrent (a long poll must not block the table)."""
    import threading

    try:
        from moto.dynamodb.responses import DynamoHandler
    except ImportError:
        return False
    if getattr(DynamoHandler.call_action, "mailqueue_atomic", False):
        return True
    original = DynamoHandler.call_action
    lock = threading.Lock()

    def call_action(self: Any) -> Any:
        with lock:
            return original(self)

    call_action.mailqueue_atomic = True  # type: ignore[attr-defined]
    setattr(DynamoHandler, "call_action", call_action)  # noqa: B010 - moto's class, not ours
    return True


#: the operations whose answers are items (what browse, size, shape and every claim read)
FAST_ANSWERS = frozenset({"GetItem", "BatchGetItem", "Query", "Scan"})


def _plain(value: Any) -> Any:
    """An item answer as DynamoDB's JSON: binary values base64, None-valued keys left out
    (what moto's serializer makes of them)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items() if v is not None}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, bytes | bytearray):
        import base64

        return base64.b64encode(bytes(value)).decode("ascii")
    return value


def install_fast_item_answers() -> bool:
    """moto's item reads made to cost what they return (GetItem, BatchGetItem, Query, Scan).

    Where `list`, `size` and `shape` of 100 groups spent their 1-3 s on the local stack
    (issue 43 item 15), profiled: moto, inside the lock that keeps DynamoDB one request at
    a time (install_atomic_dynamodb). Two costs, both changed here, outcomes unchanged:

    * moto 5.2 serializes every answer by walking botocore's shape model value by value:
      a BatchGetItem of 100 group items took ~0.4 s. An item answer is already DynamoDB's
      JSON (moto's `dynamo_to_dict`), so it is written with json.dumps (binary values in
      base64, None-valued keys left out, as the serializer does). Errors and every other
      operation keep moto's serializer.
    * a Scan of a keys-only index deep-copied each whole item (recipients, history,
      inline content) before cutting it to its keys: ~2 ms an item. The index's entries
      are made from the key attributes alone instead (a keys-only entry is just those),
      which also sizes the 1 MB page by the entries, as DynamoDB does.

    `tests/local/test_motopatch.py` checks that botocore reads the same answers from
    patched and unpatched moto."""
    import json

    try:
        from moto.dynamodb.models.dynamo_type import Item
        from moto.dynamodb.models.table import Table
        from moto.dynamodb.responses import DynamoResult
    except ImportError:
        return False
    if getattr(DynamoResult.execute_result, "mailqueue_fast", False):
        return True
    original = DynamoResult.execute_result
    original_idx_items = Table.has_idx_items

    def execute_result(self: Any, context: Any) -> Any:
        name = getattr(context.operation_model, "name", None)
        result = self.result
        if name not in FAST_ANSWERS or not isinstance(result, dict):
            return original(self, context)
        body = json.dumps(_plain(result), separators=(",", ":"))
        return 200, {"Content-Type": "application/x-amz-json-1.0"}, body

    def has_idx_items(self: Any, index_name: str) -> list[Any]:
        items = original_idx_items(self, index_name)
        idx = self.get_index(index_name)
        if (idx.projection or {}).get("ProjectionType") != "KEYS_ONLY":
            return list(items)
        names = [self.hash_key_attr, self.range_key_attr] + [k["AttributeName"] for k in idx.schema]
        keep = [n for n in dict.fromkeys(names) if n]
        return [
            Item(
                hash_key=it.hash_key,
                range_key=it.range_key,
                attrs={n: {it.attrs[n].type: it.attrs[n].value} for n in keep if n in it.attrs},
            )
            for it in items
        ]

    execute_result.mailqueue_fast = True  # type: ignore[attr-defined]
    setattr(DynamoResult, "execute_result", execute_result)  # noqa: B010 - moto's class
    setattr(Table, "has_idx_items", has_idx_items)  # noqa: B010 - moto's class
    return True
