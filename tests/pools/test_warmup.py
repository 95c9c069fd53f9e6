"""A cold pool is capped at its warm-up day's budget, in total and per big receiver; the
rest waits (a DeliveryDelay with the reason: nothing refused) and goes the next day.

Real SMTP sinks on loopback (the local stack's sink: it files the peer address), the
delivery service on both backends (AwsStorage on moto with the DynamoDB counters, and
FsStorage with the in-process ones), a clock the test advances by a day. Moto's queue
runs on real time, so the re-armed triggers of the waiting mail would come back in
~14 h: the sweeper, on the advanced clock, finds them overdue and re-posts them (its
lost-trigger path), which stands in for the hours passing.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

from mailqueue.compose.aws import sweeper as aws_sweeper
from mailqueue.core.errors import NotFound
from mailqueue.core.model import MailRef, RecipientState
from mailqueue.services.sweeper import Sweeper, SweeperSettings, SweepStats
from mailqueue_local.sink import SmtpSink

from tests.events.test_ses_schema import errors, read_log, service
from tests.pools.support import sink_mails
from tests.support import factories as f
from tests.support.aws import AwsEnv
from tests.support.rigs import DeliveryRig, RigFactory, both_backends
from tests.support.streams import StreamReader

START = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)


class Clock:
    def __init__(self, at: datetime) -> None:
        self.at = at

    def __call__(self) -> datetime:
        return self.at


def cold_pool(total: int, per_site: int, sites: list[str]) -> str:
    return json.dumps(
        {
            "version": 1,
            "pools": {
                "cold": {
                    "addresses": ["127.0.0.2/32"],
                    "bind": "127.0.0.2",
                    "ehlo": "cold.mq.test",
                    "warmup": {
                        "steps": [
                            {"step": 1, "total": total, "per_site": per_site},
                            {"step": 2, "total": total * 10, "per_site": per_site * 10},
                        ],
                        "sites": sites,
                    },
                }
            },
            "routing": {"default": "cold"},
        }
    )


def drain(r: DeliveryRig, limit: int = 40) -> None:
    """Poll until no trigger is visible (every due group tried or waiting)."""
    for _ in range(limit):
        if r.poll().received == 0 and r.visible_triggers() == 0:
            return
    raise AssertionError("the queue did not drain")


def sweep(r: DeliveryRig, clock: Clock) -> int:
    if r.backend.aws is not None:
        sw = aws_sweeper(SweeperSettings(), r.storage(), clock=clock)
    else:
        ip = r.backend.ip  # type: ignore[attr-defined]
        sw = Sweeper(SweeperSettings(), r.storage(), triggers=ip.triggers, bounces=ip.bounces,
                     clock=clock)  # fmt: skip
    stats = SweepStats()
    sw.repost_lost_triggers(stats, lambda: 60.0)
    return stats.triggers_reposted


def waiting(r: DeliveryRig, refs: list[MailRef]) -> list[tuple[str, str, str]]:
    out = []
    for ref in refs:
        try:
            g = r.group(ref.mail_id, ref.group)
        except NotFound:  # finished and cleaned up (the filesystem queue)
            continue
        for rc in g.recipients:
            if rc.state == RecipientState.QUEUED:
                # a wait is not an attempt: its reason is the group's, not a result
                assert rc.attempts == 0 and rc.last_result is None, rc
                w = g.wait or {}
                out.append((rc.address, w.get("status", ""), w.get("text", "")))
    return out


@both_backends
def test_warmup_caps_a_cold_pool_at_its_days_total_and_sends_the_rest_the_next_day(
    rig: RigFactory, tmp_path: Path
) -> None:
    clock = Clock(START)
    sink = SmtpSink(tmp_path / "sink").start()
    try:
        r = rig(routes={"default": {"next_hop": f"[127.0.0.1]:{sink.port}"}},
                pools=cold_pool(4, 4, []), pool="cold", clock=clock)  # fmt: skip
        st = r.storage()
        refs = []
        for i in range(7):
            q = st.enqueue(f.envelope(f"u{i}@x{i}.example"), f.content())
            refs.append(MailRef(q.mail_id, f"x{i}.example"))
        drain(r)
        day1 = sink_mails(tmp_path / "sink")
        assert len(day1) == 4, day1  # the day's budget, not one more
        wait = waiting(r, refs)
        assert len(wait) == 3
        assert {s for _, s, _ in wait} == {"4.4.5"}
        assert all("warm-up: pool cold has sent its 4 mails of ramp step 1" in t
                   for _, _, t in wait), wait  # fmt: skip
        assert r.service.warmup is not None
        show = r.service.warmup.progress(r.service.pool).to_json()
        assert (show["step"], show["total"], show["sent"]) == (1, 4, 4)
        # delivery counted the four sends in the guard under the pool (the ramp's hold)
        assert r.service.reputation is not None
        assert r.service.reputation.standing("pool", "cold").sends == 4
        # nothing comes back the same day: a poll now finds nothing due
        assert r.poll().received == 0
        clock.at = START + timedelta(days=1)
        assert sweep(r, clock) == 3
        drain(r)
    finally:
        sink.stop()
    seen = sink_mails(tmp_path / "sink")
    counts = Counter(s.rcpt for s in seen)
    assert counts == Counter({f"u{i}@x{i}.example": 1 for i in range(7)})  # none lost or twice
    assert {s.address for s in seen} == {"127.0.0.2"}
    assert waiting(r, refs) == []
    show = r.service.warmup.progress(r.service.pool).to_json()
    assert (show["day"], show["step"], show["total"], show["sent"]) == ("2026-12-03", 2, 40, 3)


def test_warmup_caps_each_big_receiver_at_its_share_of_the_day(
    rig: RigFactory, tmp_path: Path
) -> None:
    clock = Clock(START)
    big = SmtpSink(tmp_path / "big").start()  # a big receiver: site mx:127.0.0.1
    small = SmtpSink(tmp_path / "small", host="127.0.0.5").start()  # another site
    try:
        routes = {
            "big.example": {"next_hop": f"[127.0.0.1]:{big.port}"},
            "small.example": {"next_hop": f"[127.0.0.5]:{small.port}"},
        }
        pools = cold_pool(10, 2, ["mx:127.0.0.1"])
        r = rig(routes=routes, pools=pools, pool="cold", clock=clock, shaping=True)
        st = r.storage()
        refs = []
        for i in range(4):
            for d in ("big", "small"):
                q = st.enqueue(f.envelope(f"u{i}@{d}.example"), f.content())
                refs.append(MailRef(q.mail_id, f"{d}.example"))
        drain(r)
        assert len(sink_mails(tmp_path / "big")) == 2  # its per-site cap
        assert len(sink_mails(tmp_path / "small")) == 4  # not a capped receiver
        wait = waiting(r, refs)
        assert len(wait) == 2 and all(a.endswith("@big.example") for a, _, _ in wait), wait
        assert all("to mx:127.0.0.1 of ramp step 1" in t for _, _, t in wait), wait
        clock.at = START + timedelta(days=1)
        assert sweep(r, clock) == 2
        drain(r)
    finally:
        big.stop()
        small.stop()
    got = Counter(s.rcpt for s in sink_mails(tmp_path / "big") + sink_mails(tmp_path / "small"))
    assert got == Counter({f"u{i}@{d}.example": 1 for i in range(4) for d in ("big", "small")})




def test_warmup_wait_is_not_an_attempt_and_the_event_log_says_why(
    rig: RigFactory, aws: AwsEnv, tmp_path: Path
) -> None:
    """A mail waiting for the day's budget: attempts unchanged (0), no attempt in its
    history, and one DeliveryDelay (SES's SendingDeferral) whose diagnostic is the
    reason; the same mail's Delivery the next day is its attempt number 1."""
    clock = Clock(START)
    reader = StreamReader(aws)
    sink = SmtpSink(tmp_path / "sink").start()
    try:
        r = rig(routes={"default": {"next_hop": f"[127.0.0.1]:{sink.port}"}},
                pools=cold_pool(1, 1, []), pool="cold", clock=clock)  # fmt: skip
        st = r.storage()
        refs = []
        for i in range(2):
            q = st.enqueue(f.envelope(f"u{i}@x{i}.example"), f.content())
            refs.append(MailRef(q.mail_id, f"x{i}.example"))
        drain(r)
        wait = waiting(r, refs)  # asserts attempts 0 and no result
        assert len(wait) == 1
        late = next(ref for ref in refs if r.group(ref.mail_id, ref.group).wait)
        g = r.group(late.mail_id, late.group)
        assert g.history == () and g.recipients[0].attempts == 0
        assert g.next_attempt_at >= START + timedelta(hours=14)  # the next UTC day
        clock.at = START + timedelta(days=1)
        assert sweep(r, clock) == 1
        drain(r)
    finally:
        sink.stop()
    assert len(sink_mails(tmp_path / "sink")) == 2
    service(aws).handle(reader.poll())
    _, docs = read_log(aws)
    assert [e for d in docs for e in errors(d)] == []
    mine = [d for d in docs if d["mail"]["messageId"] == late.mail_id]
    assert [d["eventType"] for d in mine] == ["Send", "DeliveryDelay", "Delivery"], mine
    delay = mine[1]["deliveryDelay"]
    assert delay["delayType"] == "SendingDeferral"
    rec = delay["delayedRecipients"][0]
    assert rec["status"] == "4.4.5"
    assert "warm-up: pool cold has sent its 1 mails of ramp step 1" in rec["diagnosticCode"]
    assert "attempt" not in mine[1]["mailqueue"]  # no attempt was made
    assert mine[1]["mailqueue"]["wait"]["until"].startswith("2026-12-03")
    assert mine[1]["mailqueue"]["nextAttemptAt"].startswith("2026-12-03")
    assert mine[2]["mailqueue"]["attempt"]["number"] == 1  # the wait did not count
