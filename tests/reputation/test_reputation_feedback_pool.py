"""Late feedback counts against the egress pool that sent the mail (issues 41 and 42): the
origin delivery leaves names the sending pool, the state table keeps it, and a complaint
read back through it reaches the pool's counters, which a warming pool's ramp holds on."""

from __future__ import annotations

import time
from collections import Counter

from mailqueue.backends.aws.reputation_store import DynamoReputationStore
from mailqueue.backends.inprocess import InProcess
from mailqueue.core.events import ListEmitter
from mailqueue.outbound.reputation import (
    Counts,
    MemoryReputationStore,
    Origin,
    ReputationGuard,
    Thresholds,
)
from mailqueue.services.feedback.service import FeedbackService, FeedbackSettings, Outcome

from tests.support.aws import AwsEnv

P = "sha256:0123456789abcdef"
T = Thresholds(min_sends=4, window_sends=100, evaluate_seconds=0)


def test_the_state_table_keeps_the_origins_pool(aws: AwsEnv) -> None:
    store = DynamoReputationStore(aws.clients.dynamodb, aws.resources.table)
    expires = int(time.time()) + 3600
    store.remember(
        [
            Origin("m-pooled", P, "news@shop.example", 1_700_000_000.0, pool="warm"),
            Origin("m-default", P, "news@shop.example", 1_700_000_000.0),
        ],
        expires,
    )
    got = store.origin("m-pooled")
    assert got is not None and (got.pool, got.principal, got.sender) == (
        "warm",
        P,
        "news@shop.example",
    )
    plain = store.origin("m-default")
    assert plain is not None and plain.pool == ""


def test_reputation_feedback_a_complaint_counts_against_the_sending_pool() -> None:
    ip = InProcess.new()
    store = MemoryReputationStore()
    delivery = ReputationGuard(store, ip.suspensions, T, remember=True)
    origin = Origin("m1", P, "news@shop.example", 1_700_000_000.0, pool="warm")
    delivery.note(P, "news@shop.example", Counts(sends=5), "warm", origin=origin)
    delivery.flush()
    guard = ReputationGuard(store, ip.suspensions, T)  # the feedback service's (ingress)
    fb = FeedbackService(
        FeedbackSettings(frozenset({"b.example.org"})),
        lambda: None,  # type: ignore[arg-type,return-value]  # no report decoded here
        None,  # type: ignore[arg-type]  # no mail read: the origin is given
        ListEmitter(),
        reputation=guard,
    )
    remembered = store.origin("m1")
    assert remembered is not None and remembered.pool == "warm"
    out = Outcome(Counter(), [], [], [(remembered, ["complaint"])])
    fb._count(out)
    assert out.counts["reputation_counted"] == 1
    for scope, target in (("pool", "warm"), ("principal", P), ("sender_domain", "shop.example")):
        st = guard.standing(scope, target)  # type: ignore[arg-type]
        assert (st.sends, st.complaints) == (5, 1), scope
