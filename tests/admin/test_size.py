"""Queue size from the by_state index: the pure count, and agreement with a full scan
after a random history of deliveries and operator actions."""

from __future__ import annotations

import random
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest
from boto3.dynamodb.types import TypeDeserializer
from mailqueue.core.errors import NotFound
from mailqueue.core.model import Claim, GroupState, Result, utcnow
from mailqueue.core.storage import ClaimRefused
from mailqueue.services.admin import Action, Busy, OpContext
from mailqueue.services.admin.size import count_groups

from tests.admin.conftest import ACTOR, Admin


@pytest.fixture()
def admin(aws_admin: Admin) -> Admin:
    """These bodies read DynamoDB items or SQS queues themselves: AWS only."""
    return aws_admin


_deser = TypeDeserializer()


def test_pending_recipients_follow_the_group_state(admin: Admin) -> None:
    q = admin.enqueue("x@a.example", "y@A.example", "z@b.example")
    groups = admin.storage.get_mail(q.mail_id)[1]
    c = count_groups(groups)
    assert c.recipients == {"queued": 3} and c.groups == {"queued": 2}
    assert c.domains == {"a.example": {"queued": 2}, "b.example": {"queued": 1}}
    # claimed: its queued recipients count as inflight; one delivered within the claim
    # counts as delivered
    a = next(g for g in groups if g.key == "a.example")
    claim = admin.storage.send_start(a.ref, utcnow(), lease_seconds=600)
    assert isinstance(claim, Claim)
    admin.storage.send_done(claim, [claim.group.recipients[0].rid], Result(250, "2.0.0", "ok"))
    c = count_groups(admin.storage.get_mail(q.mail_id)[1])
    assert c.recipients == {"inflight": 1, "delivered": 1, "queued": 1}
    assert c.groups == {"inflight": 1, "queued": 1}
    # the same group read twice (the index under two states at once) counts once
    twice = count_groups([*groups, groups[0]])
    assert twice.groups == {"queued": 2} and twice.evaluated == 3


def scan_counts(admin: Admin) -> tuple[Counter[str], Counter[str], Counter[tuple[str, str]]]:
    """The same definition, computed from a full table scan: groups the index holds
    (`st` present)."""
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
            st = str(it.get("st") or "").split("#", 1)[0]  # without its index shard
            if not st:
                continue  # a finished group of a mail still pending: not in the index
            if st == "queued" and it.get("lease_token"):
                st = "inflight"  # claimed: the lease is on the item, not in the index key
            grp[st] += 1
            for r in it["rcpts"].values():
                s = r["state"]
                if s not in ("delivered", "bounced", "deleted") and st == "inflight":
                    s = "inflight"
                rcpt[s] += 1
                dom[(r["address"].rpartition("@")[2].lower(), s)] += 1
    return rcpt, grp, dom


def test_size_equals_a_full_scan_after_random_operations(admin: Admin) -> None:
    rng = random.Random(7)
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
    counts = admin.service.size()
    rcpt, grp, dom = scan_counts(admin)
    assert sum(rcpt.values()) > 10 and len(rcpt) >= 3  # a real queue was left behind
    assert counts.recipients == dict(rcpt)
    assert counts.groups == dict(grp)
    assert {(d, s): n for d, v in counts.domains.items() for s, n in v.items()} == dict(dom)
    assert counts.pending() == sum(
        n for s, n in rcpt.items() if s in ("queued", "inflight", "held")
    )


def test_size_reads_the_index(admin: Admin) -> None:
    q = admin.enqueue("bob@example.net", "carol@example.com")
    admin.service.act(q.mail_id, Action.HOLD, OpContext(actor=ACTOR), group="example.com")
    admin.aws.counter.reset()
    doc = admin.service.size().to_json()
    assert doc["recipients"] == {"held": 1, "queued": 1}
    assert doc["domains"] == {"example.com": {"held": 1}, "example.net": {"queued": 1}}
    assert doc["pending"] == 2 and doc["source"] == "index" and doc["evaluated"] == 2
    # the index is small: it is read whole in one Scan page (index_walk: issue 43 item
    # 15; it was one Query per state key value, 6 × 65), once for the whole size (one
    # read scope: core.storage.read_scope; it was one Scan per state, 5) and no shard is
    # queried; the index holds keys only, so each group is read back (BatchGetItem) once
    # a size: `inflight`'s walk of the `queued` entries again (a claim leaves the index
    # alone) is served from the queued page's reads (it was read back twice, 3 reads)
    assert admin.aws.counter.snapshot() == {
        "dynamodb:Scan": 1,
        "dynamodb:BatchGetItem": 2,
    }


def test_size_of_a_large_index_queries_every_shard(admin: Admin) -> None:
    """Past the snapshot's page (here: 1 entry), every state key value is queried as
    before, WALK_CONCURRENCY at a time, and the counts are the same."""
    q = admin.enqueue("bob@example.net", "carol@example.com")
    admin.service.act(q.mail_id, Action.HOLD, OpContext(actor=ACTOR), group="example.com")
    admin.service.storage.index_snapshot_limit = 1  # type: ignore[attr-defined]
    admin.aws.counter.reset()
    doc = admin.service.size().to_json()
    assert doc["recipients"] == {"held": 1, "queued": 1}
    shards = admin.aws.settings.state_shards
    assert admin.aws.counter.snapshot() == {
        "dynamodb:Scan": 1,  # finds the index larger than its page, once a size
        "dynamodb:Query": 6 * (shards + 1),
        "dynamodb:BatchGetItem": 2,  # each group once a size (was 3: queued twice)
    }


def test_size_pages_through_the_index(admin: Admin) -> None:
    """More groups than one page (the page size made small): every page is read, and a
    group is counted once."""
    from mailqueue.services.admin.service import QueueAdmin

    for i in range(7):
        admin.enqueue(f"u{i}@a.example")
    walk = QueueAdmin.walk

    def small_pages(self: QueueAdmin, states: Any, pos: Any, limit: int) -> Any:
        return walk(self, states, pos, 3)

    from mailqueue.backends.aws import index_walk

    for snapshot_limit in (500, 1):  # served from one Scan; by shard Queries (index_walk)
        admin.service.storage.index_snapshot_limit = snapshot_limit  # type: ignore[attr-defined]
        try:
            QueueAdmin.walk = small_pages  # type: ignore[method-assign]
            admin.aws.counter.reset()
            c = admin.service.size()
        finally:
            QueueAdmin.walk = walk  # type: ignore[method-assign]
        assert c.recipients == {"queued": 7} and c.groups == {"queued": 7}
        queries = admin.aws.counter.calls["dynamodb:Query"]
        if snapshot_limit > 1:
            assert queries == 0
            continue
        # every key value of the 5 states read (each shard and the unsharded value), the
        # queued ones twice (inflight's walk: a claimed group keeps its queued entry),
        # plus, for each page of 3 that fills inside a window of concurrent Queries, the
        # window's later shards read again on the next page, and one more Query where a
        # page ends inside a shard
        keys = 6 * (admin.aws.settings.state_shards + 1)
        pages = 2 * 3  # queued and inflight's walk: 7 groups in pages of 3
        assert keys <= queries <= keys + pages * index_walk.WALK_CONCURRENCY


def test_retry_window_does_not_double_count(admin: Admin) -> None:
    """A rescheduled-then-claimed group moves between states without drift."""
    q = admin.enqueue("bob@example.net")
    ref = admin.storage.get_mail(q.mail_id)[1][0].ref
    for _ in range(3):
        c = admin.storage.send_start(ref, utcnow(), lease_seconds=60)
        assert not isinstance(c, ClaimRefused)
        admin.storage.reschedule(
            c, {"r0": Result(451, "4.3.0", "x")}, utcnow() - timedelta(seconds=1)
        )
    assert admin.service.size().recipients == {"queued": 1}
