"""A pool's `max_per_second` holds over every site together, not per site only: two
sites that could each take 50/s share the pool's 2/s.

The delivery rig on moto (the limiter's items in the state table), two real SMTP sinks
on loopback (two sites), the times the sinks filed each mail."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from mailqueue.core.config import ConfigError
from mailqueue.services.delivery import DeliverySettings
from mailqueue_local.sink import SmtpSink

from bench.shaping import max_in_window
from tests.pools.support import sink_mails
from tests.support import factories as f
from tests.support.rigs import RigFactory

RATE = 2.0


def _pools(rate: float | None) -> str:
    pool: dict[str, object] = {"addresses": ["127.0.0.2/32"], "bind": "127.0.0.2",
                               "ehlo": "tx.mq.test"}  # fmt: skip
    if rate is not None:
        pool["max_per_second"] = rate
    return json.dumps({"version": 1, "pools": {"tx": pool}, "routing": {"default": "tx"}})


def _send(rig: RigFactory, tmp_path: Path, rate: float | None) -> list[float]:
    a = SmtpSink(tmp_path / "a").start()
    b = SmtpSink(tmp_path / "b", host="127.0.0.5").start()
    try:
        routes = {"a.example": {"next_hop": f"[127.0.0.1]:{a.port}"},
                  "b.example": {"next_hop": f"[127.0.0.5]:{b.port}"}}  # fmt: skip
        r = rig(routes=routes, pools=_pools(rate), pool="tx", shaping=True)
        st = r.storage()
        for i in range(5):
            for d in ("a", "b"):
                st.enqueue(f.envelope(f"u{i}@{d}.example"), f.content())
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if len(sink_mails(tmp_path / "a")) + len(sink_mails(tmp_path / "b")) == 10:
                break
            if r.poll().received == 0:
                time.sleep(0.2)  # postponed triggers come back after their wait
    finally:
        a.stop()
        b.stop()
    seen = sink_mails(tmp_path / "a") + sink_mails(tmp_path / "b")
    assert sorted(s.rcpt for s in seen) == sorted(
        f"u{i}@{d}.example" for i in range(5) for d in ("a", "b")
    )  # every mail once, none lost
    assert {s.address for s in seen} == {"127.0.0.2"}
    return [s.at for s in seen]


def test_egress_pool_total_rate_holds_across_sites(rig: RigFactory, tmp_path: Path) -> None:
    times = _send(rig, tmp_path, RATE)
    # GCRA at 2/s with a burst of one: at most 1 + 2 in any second, 10 mails over >= 4 s
    assert max_in_window(times, 1.0) <= 3, sorted(times)
    assert max(times) - min(times) >= (10 - 1) / RATE - 0.6, sorted(times)


def test_without_a_pool_total_the_two_sites_send_at_once(rig: RigFactory, tmp_path: Path) -> None:
    """The control: each site alone allows 50/s, so the same ten mails leave together."""
    times = _send(rig, tmp_path, None)
    assert max_in_window(times, 1.0) > 3, sorted(times)


def test_a_pool_total_needs_the_limiter() -> None:
    with pytest.raises(ConfigError, match="max_per_second: shaping must be on"):
        DeliverySettings(hostname="mq.test", pools=_pools(RATE), pool="tx")
