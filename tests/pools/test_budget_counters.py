"""The warm-up budget counters on every store: a take is atomic (threads at once never
pass the cap together), counters are durable (a new adapter on the same store reads
them), and the ramp item moves only from the date it was read at."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from mailqueue.backends.aws.budget_store import DynamoBudgetCounters
from mailqueue.backends.fs_budget import FsBudgetCounters
from mailqueue.backends.inprocess import MemoryBudgetCounters

from tests.support.aws import AwsEnv


@pytest.fixture(params=["memory", "fs", "aws"])
def make(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], Any]:
    if request.param == "memory":
        one = MemoryBudgetCounters()
        return lambda: one  # one process: the same object is the store
    if request.param == "fs":
        return lambda: FsBudgetCounters(tmp_path)
    aws: AwsEnv = request.getfixturevalue("aws")
    return lambda: DynamoBudgetCounters(aws.clients.dynamodb, aws.resources.table)


def test_takes_at_once_never_pass_the_cap(make: Callable[[], Any]) -> None:
    limit, threads, each = 25, 6, 8
    got: list[bool] = []
    lock = threading.Lock()

    def run() -> None:
        c = make()  # each its own adapter (a container each)
        for _ in range(each):
            ok = c.take("cold|2026-12-02", limit, 3600)
            with lock:
                got.append(ok)

    ts = [threading.Thread(target=run) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert got.count(True) == limit and len(got) == threads * each
    assert make().get(["cold|2026-12-02", "nothing"]) == {"cold|2026-12-02": limit}


def test_give_back_add_and_the_ramp_item(make: Callable[[], Any]) -> None:
    c = make()
    assert c.take("p|d|google", 1, 60) and not c.take("p|d|google", 1, 60)
    c.give_back("p|d|google")
    assert c.take("p|d|google", 1, 60)
    c.give_back("p|d|none")  # never below zero
    assert make().get(["p|d|none"]).get("p|d|none", 0) == 0
    c.add("p|d|!bounced", 3, 60)
    c.add("p|d|!bounced", 2, 60)
    assert make().get(["p|d|!bounced"]) == {"p|d|!bounced": 5}
    assert c.ramp("p") is None
    assert c.set_ramp("p", "2026-12-02", 1, None)
    assert not c.set_ramp("p", "2026-12-02", 1, None)  # another container set it first
    assert not c.set_ramp("p", "2026-12-03", 2, "2026-12-01")
    assert c.set_ramp("p", "2026-12-03", 2, "2026-12-02")
    assert make().ramp("p") == ("2026-12-03", 2)
