"""Size counters with one checkpoint per stream batch: the request count per batch, and
exactly-once under Lambda's retries (whole batch, bisected halves, a crash between the
chunks of a large batch)."""

from __future__ import annotations

from typing import Any

import pytest
from mailqueue import counters as counters_mod
from mailqueue.counters import CounterStore
from mailqueue.errors import TransientStorageError

from tests.admin.conftest import Admin
from tests.support.streams import StreamReader


def _queue(admin: Admin, mails: int) -> list[dict[str, Any]]:
    reader = StreamReader(admin.aws)
    for i in range(mails):
        admin.enqueue(f"u{i}@d{i}.example", f"v{i}@e{i % 3}.example")
    return reader.poll()


def _expected(mails: int) -> dict[str, Any]:
    return {
        "recipients": {"queued": 2 * mails},
        "domains": {
            **{f"d{i}.example": {"queued": 1} for i in range(mails)},
            **{
                f"e{k}.example": {"queued": sum(1 for i in range(mails) if i % 3 == k)}
                for k in range(3)
                if any(i % 3 == k for i in range(mails))
            },
        },
    }


def test_a_batch_costs_one_query_and_one_transaction(admin: Admin) -> None:
    records = _queue(admin, 5)  # 5 mail items + 10 group items
    store = CounterStore(admin.aws.resources.table, admin.aws.clients.dynamodb, partitions=2)
    sent: list[int] = []

    def count(params: dict[str, Any], **_: Any) -> None:
        sent.append(len(params["TransactItems"]))

    ddb = admin.aws.clients.dynamodb
    ddb.meta.events.register("before-parameter-build.dynamodb.TransactWriteItems", count)
    admin.aws.counter.reset()
    try:
        store.apply(records)
    finally:
        ddb.meta.events.unregister("before-parameter-build.dynamodb.TransactWriteItems", count)
    assert admin.aws.counter.snapshot() == {
        "dynamodb:Query": 1,
        "dynamodb:TransactWriteItems": 1,
    }
    # one checkpoint item + one ADD per distinct key (no marker per record)
    keys = {"grp#queued", "rcpt#queued"} | {f"dom#d{i}.example#queued" for i in range(5)}
    keys |= {f"dom#e{k}.example#queued" for k in range(3)}
    assert sent == [1 + len(keys)]
    # the whole batch again (a retry): one lookup, nothing written
    admin.aws.counter.reset()
    again = store.apply(records)
    assert again.applied == 0 and again.duplicates == 10
    assert admin.aws.counter.snapshot() == {"dynamodb:Query": 1}
    got = store.read()
    assert got.recipients == _expected(5)["recipients"]
    assert got.domains == _expected(5)["domains"]


@pytest.mark.parametrize("crash_at", [1, 2, 3])
def test_bisected_retries_after_a_crash_in_a_large_batch(
    admin: Admin, monkeypatch: pytest.MonkeyPatch, crash_at: int
) -> None:
    """A batch with more counter keys than one transaction holds is added in steps; the
    function dies before the `crash_at`-th transaction; Lambda retries the batch's halves,
    the first half's halves, the batch again, in any order: every record counts once."""
    monkeypatch.setattr(counters_mod, "MAX_TRANSACTION_ITEMS", 8)  # several steps
    records = _queue(admin, 8)  # 24 records, 13 distinct keys: a plan in 2 steps
    store = CounterStore(admin.aws.resources.table, admin.aws.clients.dynamodb, partitions=1)
    ddb = admin.aws.clients.dynamodb
    calls = {"n": 0}

    def crash(**_: Any) -> None:
        calls["n"] += 1
        if calls["n"] == crash_at:
            raise TransientStorageError("the function died here")

    ddb.meta.events.register("before-call.dynamodb.TransactWriteItems", crash)
    try:
        with pytest.raises(TransientStorageError):
            store.apply(records)
    finally:
        ddb.meta.events.unregister("before-call.dynamodb.TransactWriteItems", crash)
    half = len(records) // 2
    quarter = half // 2
    store.apply(records[:quarter])
    store.apply(records[quarter:half])
    store.apply(records[half:])
    store.apply(records[:half])
    store.apply(list(reversed(records)))
    got = store.read()
    assert got.recipients == _expected(8)["recipients"]
    assert got.domains == _expected(8)["domains"]
    assert got.groups == {"queued": 16}
