"""Mail of two priority classes leaves from two egress pools' source addresses, each at
its own per-(pool, site) rate.

Real ingress on moto chooses the pool at enqueue (routing policy: bulk -> pool `bulk`,
else `tx`) and posts each trigger to its pool's queue; one delivery consumer per pool
binds the pool's loopback address (127.0.0.2, 127.0.0.3) and says its EHLO name; the
local stack's SMTP sink files the peer address of each transaction. Both pools send to
the same site (the sink), `tx` limited to 8/s and `bulk` to 2/s there (burst 1): if the
limit were kept per site only, one bucket would hold both pools.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from mailqueue_local.sink import SmtpSink

from tests.ingress.conftest import Ingress
from tests.pools.support import (
    NO_BACKOFF,
    Seen,
    consumers,
    pool_queues,
    sink_mails,
    submit,
    wait_for,
)
from tests.support.aws import AwsEnv

N = 10  # mails of each class
TX_RATE, BULK_RATE = 8.0, 2.0
JITTER = 0.25  # seconds: SMTP latency between a permit and the sink's clock
SITE_RULES = json.dumps({"version": 1, "default": {"max_connections": 4}})


def pools_file(tx_rate: float, bulk_rate: float) -> str:
    def limits(rate: float) -> dict[str, object]:
        return {"default": {"rates": [{"messages": int(rate), "per": "1s", "burst": 1}]}}

    return json.dumps(
        {
            "version": 1,
            "pools": {
                "tx": {"addresses": ["127.0.0.2/32"], "bind": "127.0.0.2",
                       "ehlo": "tx.mq.test", "limits": limits(tx_rate)},
                "bulk": {"addresses": ["127.0.0.3/32"], "bind": "127.0.0.3",
                         "ehlo": "bulk.mq.test", "limits": limits(bulk_rate)},
            },
            "routing": {"default": "tx", "rules": [{"priority": "bulk", "pool": "bulk"}]},
        }
    )  # fmt: skip


def test_egress_pools_send_each_class_from_its_own_address_at_its_own_site_rate(
    ingress_factory: Callable[..., Ingress], aws: AwsEnv, tmp_path: Path
) -> None:
    pools = pools_file(TX_RATE, BULK_RATE)
    storage, queues = pool_queues(aws, ["tx", "bulk"])
    ing = ingress_factory(storage=storage, pools=pools)
    sink = SmtpSink(tmp_path / "sink").start()
    try:
        for i in range(N):
            submit(ing, f"news{i}@example.net", priority="bulk")
            submit(ing, f"receipt{i}@example.net")
        # every mail's pool is on the mail (its tag), its trigger on that pool's queue
        depth = {
            p: int(aws.clients.sqs.get_queue_attributes(
                QueueUrl=u, AttributeNames=["ApproximateNumberOfMessages"]
            )["Attributes"]["ApproximateNumberOfMessages"])
            for p, u in queues.items()
        }  # fmt: skip
        assert depth == {"tx": N, "bulk": N}
        with consumers(
            aws, storage, queues, sink.port, pools,
            shaping=True, shaping_rules=SITE_RULES, backoff_rules=NO_BACKOFF,
        ):  # fmt: skip
            assert wait_for(lambda: len(sink_mails(tmp_path / "sink")) >= 2 * N, 120)
    finally:
        sink.stop()
    seen = sink_mails(tmp_path / "sink")
    counts = Counter(s.rcpt for s in seen)
    assert set(counts) == {f"news{i}@example.net" for i in range(N)} | {
        f"receipt{i}@example.net" for i in range(N)
    }
    assert set(counts.values()) == {1}, counts  # nothing lost, nothing twice
    by_class = {
        "bulk": [s for s in seen if s.rcpt.startswith("news")],
        "tx": [s for s in seen if s.rcpt.startswith("receipt")],
    }
    assert {(s.address, s.helo) for s in by_class["tx"]} == {("127.0.0.2", "tx.mq.test")}
    assert {(s.address, s.helo) for s in by_class["bulk"]} == {("127.0.0.3", "bulk.mq.test")}
    tx, bulk = _span(by_class["tx"]), _span(by_class["bulk"])
    print(f"spans: tx {tx:.2f} s, bulk {bulk:.2f} s for {N} mails each")
    # each pool within its own limit at the shared site: the limiter spaces permits
    # 1/rate apart (burst 1), the sink's clock sees them up to JITTER off each way
    assert tx >= (N - 1) / TX_RATE - JITTER, tx
    assert bulk >= (N - 1) / BULK_RATE - JITTER, bulk
    # and tx is not held to bulk's bucket at the same site: at 2/s it would need 4.5 s
    assert tx < (N - 1) / BULK_RATE - JITTER, (tx, bulk)


def _span(seen: list[Seen]) -> float:
    times = sorted(s.at for s in seen)
    return times[-1] - times[0]
