"""A mail's egress pool decides who sends it: a trigger on another pool's queue is handed
to its own (nothing sent from the wrong address); a paused pool, an operator's pool
suspension, a pool with no delivery here all keep the mail waiting and say why; a cold
pool's spent budget overflows to the pool its schedule names.

The delivery rig on moto (AwsStorage, SQS, the real handler) with the local sink."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

from mailqueue.backends.aws.suspension_store import DynamoSuspensionStore
from mailqueue.core.model import POOL_TAG, MailRef, RecipientState, utcnow
from mailqueue.outbound.suspensions import Suspension
from mailqueue_local.sink import SmtpSink

from tests.events.test_ses_schema import errors, read_log, service
from tests.pools.support import sink_mails
from tests.pools.test_warmup import Clock
from tests.support import factories as f
from tests.support.rigs import DeliveryRig, RigFactory
from tests.support.streams import StreamReader


def _pools(**over: Any) -> str:
    doc: dict[str, Any] = {
        "version": 1,
        "pools": {
            "default": {"addresses": ["127.0.0.2/32"], "bind": "127.0.0.2", "ehlo": "@hostname"},
            "bulk": {"addresses": ["127.0.0.3/32"], "bind": "127.0.0.3", "ehlo": "bulk.mq.test"},
        },
    }
    for name, fields in over.items():
        doc["pools"][name].update(fields)
    return json.dumps(doc)


def _queue(r: DeliveryRig) -> str:
    return str(r.aws.clients.sqs.create_queue(QueueName="mq-pool-bulk")["QueueUrl"])


def _enqueue(r: DeliveryRig, rcpt: str, pool: str | None) -> MailRef:
    env = f.envelope(rcpt)
    if pool is not None:
        from dataclasses import replace

        env = replace(env, tags=((POOL_TAG, pool),))
    q = r.storage().enqueue(env, f.content())
    return MailRef(q.mail_id, rcpt.rpartition("@")[2])


def _depth(r: DeliveryRig, url: str) -> int:
    a = r.aws.clients.sqs.get_queue_attributes(
        QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"]
    )["Attributes"]
    return int(a["ApproximateNumberOfMessages"])


def _last(r: DeliveryRig, ref: MailRef) -> tuple[str, str, str]:
    g = r.group(ref.mail_id, ref.group)
    rc = g.recipients[0]
    assert rc.attempts == 0  # a wait for the pool is not an attempt
    w = g.wait or {}
    return rc.state.value, w.get("status", ""), w.get("text", "")


def test_a_trigger_on_the_wrong_queue_is_handed_to_its_pools_queue(
    rig: RigFactory, tmp_path: Path
) -> None:
    from dataclasses import replace as dc_replace

    sink = SmtpSink(tmp_path / "sink").start()
    try:
        routes = {"default": {"next_hop": f"[127.0.0.1]:{sink.port}"}}
        probe = rig(routes=routes, pools=_pools())
        url = _queue(probe)
        probe.aws.settings = dc_replace(
            probe.aws.settings, pool_queue_urls=json.dumps({"bulk": url})
        )
        r = rig(routes=routes, pools=_pools())
        ref = _enqueue(r, "u@x.example", "bulk")
        assert _depth(r, url) == 1  # enqueue posts to the pool's own queue
        r.repost([ref])  # and a stray trigger on the default queue (an old one, say)
        res = r.poll()  # the default pool's delivery receives it: hands it over
        assert (res.received, res.failed) == (1, 0)
        assert sink_mails(tmp_path / "sink") == []  # nothing left from 127.0.0.2
        assert _depth(r, url) == 2
        assert r.service.pool_queues == frozenset({"bulk"})
    finally:
        sink.stop()


def test_a_paused_pool_or_a_pool_suspension_keeps_the_mail_waiting(
    rig: RigFactory, tmp_path: Path
) -> None:
    sink = SmtpSink(tmp_path / "sink").start()
    try:
        routes = {"default": {"next_hop": f"[127.0.0.1]:{sink.port}"}}
        r = rig(routes=routes, pools=_pools(default={"paused": True}))
        ref = _enqueue(r, "u@x.example", None)
        res = r.poll()
        assert res.received == 1 and sink_mails(tmp_path / "sink") == []
        state, status, text = _last(r, ref)
        assert (state, status) == (RecipientState.QUEUED.value, "4.4.5")
        assert "egress pool default is paused" in text  # the DeliveryDelay's reason
        assert r.group(ref.mail_id, ref.group).next_attempt_at > utcnow()

        # an operator's suspension of one pool: held, then sent once it is lifted
        clock = Clock(utcnow())
        r2 = rig(routes=routes, pools=_pools(), suspension_refresh_seconds=0, clock=clock)
        store = DynamoSuspensionStore(r2.aws.clients.dynamodb, r2.aws.resources.table)
        store.put(Suspension("pool", "default", utcnow().timestamp() + 600))
        ref2 = _enqueue(r2, "v@y.example", None)
        r2.poll()
        assert [s.rcpt for s in sink_mails(tmp_path / "sink")] == []
        assert r2.group(ref2.mail_id, ref2.group).recipients[0].attempts == 0  # not an attempt
        store.delete("pool", "default")
        clock.at += timedelta(seconds=301)  # the held group's recheck (at most 300 s)
        r2.early_receipt(ref2)
        r2.poll()
        assert [(s.rcpt, s.address) for s in sink_mails(tmp_path / "sink")] == [
            ("v@y.example", "127.0.0.2")
        ]
    finally:
        sink.stop()


def test_a_pool_with_no_delivery_here_waits_and_says_so(rig: RigFactory, tmp_path: Path) -> None:
    sink = SmtpSink(tmp_path / "sink").start()
    try:
        routes = {"default": {"next_hop": f"[127.0.0.1]:{sink.port}"}}
        r = rig(routes=routes, pools=_pools())  # no queue for "bulk" in this deployment
        ref = _enqueue(r, "u@x.example", "bulk")
        r.poll()
        assert sink_mails(tmp_path / "sink") == []
        assert _last(r, ref)[1:] == ("4.4.5", "egress pool bulk has no delivery queue")
        ref2 = _enqueue(r, "w@z.example", "gone")  # a pool the file no longer has
        r.poll()
        assert _last(r, ref2)[1:] == ("4.4.5", "egress pool gone is not configured")
    finally:
        sink.stop()


def test_warmup_overflow_sends_the_rest_from_the_pool_it_names(
    rig: RigFactory, tmp_path: Path
) -> None:
    sink = SmtpSink(tmp_path / "sink").start()
    try:
        routes = {"default": {"next_hop": f"[127.0.0.1]:{sink.port}"}}
        warm = {"steps": [{"step": 1, "total": 2, "per_site": 2}], "sites": [],
                "overflow": "default"}  # fmt: skip
        pools = _pools(bulk={"warmup": warm})
        probe = rig(routes=routes, pools=pools)
        url = _queue(probe)
        from dataclasses import replace as dc_replace

        probe.aws.settings = dc_replace(
            probe.aws.settings, pool_queue_urls=json.dumps({"bulk": url})
        )
        default = rig(routes=routes, pools=pools)
        reader = StreamReader(default.aws)
        for i in range(4):
            _enqueue(default, f"u{i}@x{i}.example", "bulk")
        from mailqueue.backends.aws.backend import AwsStorage
        from mailqueue.compose.aws import delivery_service
        from mailqueue.services.delivery import DeliverySettings
        from mailqueue_local.runtime import SqsPoller

        from functions.delivery import app as delivery_app

        bulk_svc = delivery_service(
            DeliverySettings(
                hostname="mq.test", routes=json.dumps(routes), pools=pools, pool="bulk"
            ),  # fmt: skip
            AwsStorage(default.aws.settings, default.aws.clients),
        )
        bulk = SqsPoller(default.aws.clients.sqs, url,
                         lambda e, c: delivery_app.handle(e, c, bulk_svc),
                         function_name="delivery", timeout_seconds=60)  # fmt: skip
        for _ in range(6):
            bulk.poll_once()
            default.poll()
        seen = sink_mails(tmp_path / "sink")
        by = sorted((s.address, s.helo) for s in seen)
        assert len(seen) == 4, by
        assert by.count(("127.0.0.3", "bulk.mq.test")) == 2  # the cold pool's day budget
        assert by.count(("127.0.0.2", "mq.test")) == 2  # the rest overflowed
    finally:
        sink.stop()
    # the events name the pool that sent (SES's sendingPoolName, ours namespaced): the
    # routed one stays in mailqueue:pool, the sender's is the attempt's
    service(default.aws).handle(reader.poll())
    _, docs = read_log(default.aws)
    assert [e for d in docs for e in errors(d)] == []
    deliveries = [d for d in docs if d["eventType"] == "Delivery"]
    assert len(deliveries) == 4
    assert {d["mail"]["tags"]["mailqueue:pool"][0] for d in deliveries} == {"bulk"}
    sent_by = sorted(d["mail"]["tags"]["mailqueue:sending-pool"][0] for d in deliveries)
    assert sent_by == ["bulk", "bulk", "default", "default"]
    assert sorted(d["mailqueue"]["attempt"]["sendingPoolName"] for d in deliveries) == sent_by
