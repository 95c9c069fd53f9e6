"""Finding 1 of issue 25, reproduced and fixed: the state index's hot key.

Enqueue → claim → result through `AwsStorage` at a steady rate, against moto with the
partition throttle (each key value: 1,000 write units/s ÷ 100 = 10/s). With one key value
per state (`state_shards=1`: the key set of the old layout, `st` ∈ queued | done | …)
a small mail writes `queued` twice (the put, and the result that takes it out; the claim
leaves the index alone — before that change it moved the group out of `queued` and into
`inflight` and back), one unit each, so the layout's ceiling is 10 / 2 = 5 mails/s
(in AWS: 1,000 / 2 = 500 mails/s). Offered 10 mails/s, about half the index writes are
refused. Sharded over 8 key values per state the same load is 1/8 of each key's budget
and nothing is refused. The throttle's clock is the test's (no waiting).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from botocore.config import Config
from mailqueue.backends.aws.backend import AwsStorage
from mailqueue.backends.aws.clients import AwsClients
from mailqueue.core.errors import TransientStorageError
from mailqueue.core.model import Claim, MailRef, Result, utcnow
from mailqueue_local.throttle import PartitionThrottle

from tests.support import factories as f
from tests.support.aws import REGION, AwsEnv, session

OK = Result(250, "2.0.0", "2.0.0 Ok", "mx.example.net")
RATE = 10.0  # mails a second offered
SECONDS = 4.0
SCALE = 100  # 10 write units a second per key value


class Clock:
    def __init__(self) -> None:
        self.t = 5000.0

    def __call__(self) -> float:
        return self.t


def _drive(aws: AwsEnv, shards: int, rate: float = RATE) -> dict[str, Any]:
    clock = Clock()
    throttle = PartitionThrottle(scale=SCALE, clock=clock)
    cfg = Config(retries={"total_max_attempts": 1, "mode": "standard"})
    s = session()
    kw: dict[str, Any] = {"endpoint_url": aws.endpoint, "region_name": REGION, "config": cfg}
    clients = AwsClients(
        s3=aws.clients.s3, dynamodb=s.client("dynamodb", **kw), sqs=aws.clients.sqs
    )
    throttle.install(clients.dynamodb)
    st = AwsStorage(replace(aws.settings, state_shards=shards), clients)
    done = refused_steps = 0
    n = int(rate * SECONDS)
    for _ in range(n):
        clock.t += 1 / rate
        try:
            q = st.enqueue(f.envelope(), f.content(256))
            c = st.send_start(MailRef(q.mail_id, q.groups[0]), utcnow(), lease_seconds=60)
            assert isinstance(c, Claim)
            st.send_done(c, ["r0"], OK)
            done += 1
        except TransientStorageError:
            refused_steps += 1
    rec = throttle.recorder
    uses = rec.uses()
    index_writes = [u for u in uses if u.index and u.kind == "write"]
    refused = [u for u in uses if u.throttled]
    return {
        "offered": n,
        "done": done,
        "rate": done / SECONDS,
        "refused": len(refused),
        "refused_share": len(refused) / max(1, len(index_writes) + len(refused)),
        "refused_on": {(u.index, u.key.split("#")[0]) for u in refused},
        "table_units": rec.by_index()["table"] / max(1, done),
        "index_units": rec.by_index()["by_state"] / max(1, done),
        "hottest": rec.hottest(),
    }


def test_one_key_per_state_is_throttled_at_the_predicted_rate(aws: AwsEnv) -> None:
    # below the ceiling (4 mails/s: 8 units/s on each of `queued` and `inflight`): none
    below = _drive(aws, shards=1, rate=4.0)
    print(f"\n[hot key] one key value per state, 4 mails/s: {below}")
    assert below["refused"] == 0 and below["done"] == below["offered"]
    # above it (10 mails/s: 20 units/s wanted on `queued`): the key takes its budget,
    # the first second's bucket plus 10 units a second, and the rest is refused
    got = _drive(aws, shards=1)
    print(f"[hot key] one key value per state, 10 mails/s: {got}")
    (table, index, key), units = got["hottest"]
    assert index == "by_state" and key.split("#")[0] == "queued"
    assert units == pytest.approx(10 + 10 * SECONDS, abs=2)
    assert got["refused"] > 0
    assert {ix for ix, _ in got["refused_on"]} == {"by_state"}  # the index, not the table
    # at most the layout's ceiling of mails got through: 5/s (+ the first second's bucket)
    assert got["done"] <= (10 / 2) * SECONDS + 10 / 2 + 1


def test_sharded_state_keys_take_the_same_load_unthrottled(aws: AwsEnv) -> None:
    got = _drive(aws, shards=8)
    print(f"\n[hot key] 8 key values per state: {got}")
    assert got["refused"] == 0
    assert got["done"] == got["offered"]
    # a solo mail: put, claim, result on the table; in and out on the index (the claim
    # writes no entry: its lease is not an index key)
    assert got["table_units"] == pytest.approx(3)
    assert got["index_units"] == pytest.approx(2)
