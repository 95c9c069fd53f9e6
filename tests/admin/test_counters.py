"""Size counters from the DynamoDB stream: pure deltas, exactly-once application, and
agreement with a full scan after a random history of deliveries and operator actions."""

from __future__ import annotations

import random
from collections import Counter
from datetime import timedelta
from typing import Any

from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
from mailqueue.admin import Action, Busy, OpContext
from mailqueue.counters import CounterStore, deltas
from mailqueue.errors import NotFound
from mailqueue.model import Claim, GroupState, Result, utcnow
from mailqueue.storage import ClaimRefused

from tests.admin.conftest import ACTOR, Admin
from tests.support.streams import StreamReader, batches

_ser = TypeSerializer()
_deser = TypeDeserializer()


def image(sk: str, st: str | None, *rcpts: tuple[str, str]) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "pk": "M#X",
        "sk": sk,
        "rcpts": {f"r{i}": {"address": a, "state": s} for i, (a, s) in enumerate(rcpts)},
    }
    if st:
        doc["st"] = st
    return {k: _ser.serialize(v) for k, v in doc.items()}


def test_deltas_follow_the_group_state_for_pending_recipients() -> None:
    queued = image("G#a.example", "queued", ("x@a.example", "queued"), ("y@A.example", "queued"))
    claimed = image("G#a.example", "inflight", ("x@a.example", "queued"), ("y@a.example", "queued"))
    assert deltas(None, queued) == {
        "grp#queued": 1,
        "rcpt#queued": 2,
        "dom#a.example#queued": 2,
    }
    assert deltas(queued, claimed) == {
        "grp#queued": -1,
        "grp#inflight": 1,
        "rcpt#queued": -2,
        "rcpt#inflight": 2,
        "dom#a.example#queued": -2,
        "dom#a.example#inflight": 2,
    }
    # one delivered within the claim: final states count as themselves, even while inflight
    partly = image(
        "G#a.example", "inflight", ("x@a.example", "delivered"), ("y@a.example", "queued")
    )
    assert deltas(claimed, partly) == {
        "rcpt#inflight": -1,
        "rcpt#delivered": 1,
        "dom#a.example#inflight": -1,
        "dom#a.example#delivered": 1,
    }
    # an operator claim of a held group: held recipients stay stored held, count inflight
    held = image("G#a.example", "held", ("x@a.example", "held"))
    op_claim = image("G#a.example", "inflight", ("x@a.example", "held"))
    assert deltas(held, op_claim)["rcpt#inflight"] == 1
    # done groups lose `st`: still counted (as done) until cleanup removes them
    done = image("G#a.example", None, ("x@a.example", "delivered"))
    assert deltas(done, None) == {
        "grp#done": -1,
        "rcpt#delivered": -1,
        "dom#a.example#delivered": -1,
    }
    # non-group items and no-op writes change nothing
    assert deltas(None, image("M", None)) == {}
    assert deltas(None, {"pk": {"S": "J#1"}, "sk": {"S": "J"}}) == {}
    assert deltas(queued, queued) == {}


def test_apply_is_exactly_once_whatever_the_batches(admin: Admin) -> None:
    """In the state table itself (the default): its own writes echo on the stream."""
    reader = StreamReader(admin.aws)
    store = CounterStore(admin.aws.resources.table, admin.aws.clients.dynamodb, partitions=3)
    for i in range(6):
        admin.enqueue(f"u{i}@a.example", f"v{i}@b.example")
    records = reader.poll()
    assert len(records) == 18  # 6 mail items + 12 group items
    first = store.apply(records[:7])
    assert first.applied == 4 and first.ignored == 3
    # a retried batch, a bisected retry overlapping it, and a record twice in one call
    again = store.apply(records[:11] + records[10:11])
    assert again.duplicates == 4 + 1 and again.applied == 3
    store.apply(records)
    store.apply(list(reversed(records)))
    counts = store.read()
    assert counts.recipients == {"queued": 12}
    assert counts.groups == {"queued": 12}
    assert counts.domains == {"a.example": {"queued": 6}, "b.example": {"queued": 6}}
    # the counter and marker writes come back on the stream: they change nothing
    echo = store.apply(reader.poll())
    assert echo.applied == 0 and echo.duplicates == 0


def scan_counts(admin: Admin) -> tuple[Counter[str], Counter[str], Counter[tuple[str, str]]]:
    """The same definition, computed from a full table scan."""
    rcpt: Counter[str] = Counter()
    grp: Counter[str] = Counter()
    dom: Counter[tuple[str, str]] = Counter()
    pages = admin.aws.clients.dynamodb.get_paginator("scan").paginate(
        TableName=admin.aws.resources.table
    )
    for page in pages:
        for raw in page["Items"]:
            it = {k: _deser.deserialize(v) for k, v in raw.items()}
            if not str(it["sk"]).startswith("G#"):
                continue
            st = it.get("st")
            grp[st or "done"] += 1
            for r in it["rcpts"].values():
                s = r["state"]
                if s not in ("delivered", "bounced", "deleted") and st == "inflight":
                    s = "inflight"
                rcpt[s] += 1
                dom[(r["address"].rpartition("@")[2].lower(), s)] += 1
    return rcpt, grp, dom


def test_counters_equal_a_full_scan_after_random_operations(admin: Admin) -> None:
    rng = random.Random(7)
    reader = StreamReader(admin.aws)
    store = admin.counter_store()
    st = admin.storage
    ctx = OpContext(actor=ACTOR)
    mails: list[str] = []
    claims: list[Claim] = []
    refused: list[str] = []
    domains = ("a.example", "b.example", "c.example")
    for step in range(60):
        op = rng.choice(
            ["enqueue"] * 3
            + ["claim"] * 3
            + ["done", "reschedule", "drop", "cancel", "hold", "release", "delete", "bounce"]
        )
        if op == "enqueue" or not mails:
            rcpts = [f"u{step}x{i}@{rng.choice(domains)}" for i in range(rng.randint(1, 4))]
            mails.append(admin.enqueue(*rcpts).mail_id)
        elif op == "claim":
            queued = st.list_queue(state=GroupState.QUEUED, limit=50).items
            if queued:
                got = st.send_start(rng.choice(queued).ref, utcnow(), lease_seconds=600)
                if not isinstance(got, ClaimRefused):
                    claims.append(got)
        elif op in ("done", "reschedule", "drop", "cancel") and claims:
            claim = claims.pop(rng.randrange(len(claims)))
            rids = [r.rid for r in claim.unresolved()]
            if op == "done":
                st.send_done(claim, rids[: rng.randint(1, len(rids))], Result(250, "2.0.0", "ok"))
                if not claim.released:
                    claims.append(claim)
            elif op == "reschedule":
                st.reschedule(claim, dict.fromkeys(rids, Result(451, "4.3.0", "later")), utcnow())
            elif op == "drop":
                st.drop(claim, dict.fromkeys(rids, Result(550, "5.1.1", "no such user")))
            else:
                st.send_cancel(claim)
        elif op in ("hold", "release", "delete", "bounce"):
            try:
                admin.service.act(rng.choice(mails), Action(op), ctx)
            except (Busy, NotFound) as e:  # a delivery holds it, or it is finished and gone
                refused.append(type(e).__name__)
        if rng.random() < 0.08:  # the consumer runs now and then, batches of any size
            for batch in batches(reader.poll(), rng.randint(5, 100)):
                store.apply(batch)
    # (few, large batches: moto copies the whole table for every transaction)
    records = reader.poll()
    for batch in batches(records, 100):
        store.apply(batch)
        if rng.random() < 0.3:
            store.apply(batch[rng.randrange(len(batch)) :])  # a retried (bisected) batch
    counts = store.read()
    rcpt, grp, dom = scan_counts(admin)
    assert sum(rcpt.values()) > 10 and len(rcpt) >= 3  # a real queue was left behind
    assert counts.recipients == dict(rcpt)
    assert counts.groups == dict(grp)
    assert {(d, s): n for d, v in counts.domains.items() for s, n in v.items()} == dict(dom)
    assert counts.pending() == sum(
        n for s, n in rcpt.items() if s in ("queued", "inflight", "held")
    )


def test_size_reads_the_counters(admin: Admin) -> None:
    reader = StreamReader(admin.aws)
    q = admin.enqueue("bob@example.net", "carol@example.com")
    admin.service.act(q.mail_id, Action.HOLD, OpContext(actor=ACTOR), group="example.com")
    assert admin.service.size().present is False
    store = admin.counter_store()
    store.apply(reader.poll())
    doc = admin.service.size().to_json()
    assert doc["recipients"] == {"held": 1, "queued": 1}
    assert doc["domains"] == {"example.com": {"held": 1}, "example.net": {"queued": 1}}
    assert doc["pending"] == 2 and doc["source"] == "counters"
    # reading costs a fixed number of requests, whatever the queue size
    admin.aws.counter.reset()
    admin.service.size()
    assert admin.aws.counter.total <= admin.settings.counter_partitions


def test_retry_window_does_not_double_count(admin: Admin) -> None:
    """A rescheduled-then-claimed group moves between states without drift."""
    reader = StreamReader(admin.aws)
    store = admin.counter_store()
    q = admin.enqueue("bob@example.net")
    ref = admin.storage.get_mail(q.mail_id)[1][0].ref
    for _ in range(3):
        c = admin.storage.send_start(ref, utcnow(), lease_seconds=60)
        assert not isinstance(c, ClaimRefused)
        admin.storage.reschedule(
            c, {"r0": Result(451, "4.3.0", "x")}, utcnow() - timedelta(seconds=1)
        )
    store.apply(reader.poll())
    assert store.read().recipients == {"queued": 1}
