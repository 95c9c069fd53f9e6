"""moto, like DynamoDB, must apply each conditional write atomically.

DynamoDB checks a ConditionExpression and writes the item as one step; moto's server
answers requests on several threads and checks then writes without a lock, so two
concurrent conditional creates of one item can both succeed there (measured: 19 wins
for 10 items with 6 racing threads). The shaping tests race real workers on purpose,
so here moto's DynamoDB handler runs one request at a time, as DynamoDB behaves per item.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from moto.dynamodb.responses import DynamoHandler

_LOCK = threading.Lock()


@pytest.fixture(autouse=True)
def atomic_dynamodb(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    original = DynamoHandler.call_action

    def call_action(self: Any) -> Any:
        with _LOCK:
            return original(self)

    monkeypatch.setattr(DynamoHandler, "call_action", call_action)
    yield
