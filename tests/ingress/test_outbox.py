"""TableOutboxEmitter against moto: items, batching, retries of unprocessed items."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from mailqueue.backends.aws.outbox import TableOutboxEmitter
from mailqueue.core.errors import TransientStorageError
from mailqueue.core.events import MailInfo, QueueEvent, dumps

from tests.support.aws import AwsEnv
from tests.support.faults import short_circuit

NOW = datetime(2026, 11, 21, 6, 0, tzinfo=UTC)


def _event(i: int, reason: str = "invalid_address") -> QueueEvent:
    return QueueEvent(
        event_type="Reject",
        mail=MailInfo(message_id=f"M{i}", source="a@example.org", timestamp=NOW,
                      destination=(f"u{i}@example.net",)),
        recipient=None,
        timestamp=NOW,
        discriminator=reason,
        extra={"reason": reason, "field": "recipients[0].address"},
    )


def _outbox(aws: AwsEnv) -> dict[str, dict[str, Any]]:
    items = aws.clients.dynamodb.scan(TableName=aws.resources.table)["Items"]
    return {it["pk"]["S"]: it for it in items if it["pk"]["S"].startswith("E#")}


def _emitter(aws: AwsEnv, **kw: Any) -> TableOutboxEmitter:
    return TableOutboxEmitter(
        aws.resources.table, aws.clients.dynamodb, clock=lambda: NOW, sleep=lambda _: None, **kw
    )


def test_each_event_becomes_one_outbox_item(aws: AwsEnv) -> None:
    events = [_event(i) for i in range(3)]
    _emitter(aws).emit(events)
    items = _outbox(aws)
    assert set(items) == {f"E#{e.event_id}" for e in events}
    for e in events:
        item = items[f"E#{e.event_id}"]
        assert item["sk"] == {"S": "E"}
        assert item["event"]["S"] == dumps(e)
        assert json.loads(item["event"]["S"])["mailqueue"]["reject"]["reason"] == "invalid_address"
        assert item["expires_at"] == {"N": str(int(NOW.timestamp()) + 86400)}
        assert "st" not in item  # never in the state index


def test_more_than_25_events_are_written_in_batches(aws: AwsEnv) -> None:
    aws.counter.reset()
    _emitter(aws).emit(_event(i) for i in range(60))
    assert len(_outbox(aws)) == 60
    assert aws.counter.calls["dynamodb:BatchWriteItem"] == 3


def test_the_same_event_twice_is_one_item(aws: AwsEnv) -> None:
    _emitter(aws).emit([_event(1), _event(1)])
    _emitter(aws).emit([_event(1)])
    assert len(_outbox(aws)) == 1


def test_nothing_to_emit_makes_no_request(aws: AwsEnv) -> None:
    aws.counter.reset()
    _emitter(aws).emit([])
    assert aws.counter.total == 0


def test_unprocessed_items_are_retried(aws: AwsEnv) -> None:
    """The first call processes all but two items (written for real); the retry sends those."""
    emitter = _emitter(aws)
    calls: list[int] = []

    def partially(api: dict[str, Any]) -> dict[str, Any] | None:
        calls.append(len(api["RequestItems"][aws.resources.table]))
        if len(calls) > 1:
            return None  # let moto answer
        reqs = api["RequestItems"][aws.resources.table]
        for r in reqs[2:]:
            aws.clients.dynamodb.put_item(TableName=aws.resources.table,
                                          Item=r["PutRequest"]["Item"])
        return {"UnprocessedItems": {aws.resources.table: reqs[:2]}}

    events = [_event(i) for i in range(5)]
    with short_circuit(aws.clients.dynamodb, "BatchWriteItem", partially):
        emitter.emit(events)
    assert calls == [5, 2]
    assert set(_outbox(aws)) == {f"E#{e.event_id}" for e in events}


def test_items_left_unprocessed_after_retries_raise(aws: AwsEnv) -> None:
    def never(api: dict[str, Any]) -> dict[str, Any]:
        return {"UnprocessedItems": api["RequestItems"]}

    with short_circuit(aws.clients.dynamodb, "BatchWriteItem", never), pytest.raises(
        TransientStorageError
    ):
        _emitter(aws).emit([_event(1)])
    assert _outbox(aws) == {}
