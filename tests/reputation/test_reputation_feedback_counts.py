"""What the reputation guard counts (issue 42, deliverable 1): only hard bounces toward the
bounce rate, as SES counts them; soft bounces and one-click unsubscribes counted apart,
attributed to the original mail's principal and sender domain through its origin."""

from __future__ import annotations

import json

from mailqueue.backends.inprocess import InProcess, MemorySuppressionStore
from mailqueue.core.events import ListEmitter
from mailqueue.core.model import Result
from mailqueue.outbound import unsubscribe as unsub
from mailqueue.outbound.reputation import (
    Counts,
    MemoryReputationStore,
    Origin,
    ReputationGuard,
    Thresholds,
    counts_of,
    feedback_counts,
)
from mailqueue.services.unsubscribe import UnsubscribeService, UnsubscribeSettings

from tests.unsubscribe.test_token_and_scope import K1, keys

P = "sha256:0123456789abcdef"
T = Thresholds(min_sends=4, window_sends=100, evaluate_seconds=0)


def test_delivery_results_split_hard_and_soft_as_ses() -> None:
    results = {
        "a": Result(250, "2.0.0", "ok"),
        "b": Result(550, "5.1.1", "no such user"),  # Permanent / NoEmail
        "c": Result(554, "5.7.1", "policy"),  # Permanent / General
        "d": Result(552, "5.2.2", "mailbox full"),  # SES: Transient / MailboxFull
        "e": Result(552, "5.3.4", "too large"),  # SES: Transient / MessageTooLarge
        "f": Result(0, "4.4.7", "expired"),  # our verdict, not a send
        "g": Result(0, "5.4.4", "no route"),  # our verdict: a send, no remote bounce
    }
    c = counts_of(results)
    assert (c.sends, c.bounces, c.soft_bounces, c.complaints) == (6, 2, 2, 0)


def test_late_feedback_kinds() -> None:
    c = feedback_counts(["bounce", "soft_bounce", "complaint", "complaint", "unsubscribe"])
    assert c == Counts(sends=0, bounces=1, complaints=2, soft_bounces=1, unsubscribes=1)


def test_soft_bounces_and_unsubscribes_are_shown_never_judged() -> None:
    ip = InProcess.new()
    g = ReputationGuard(MemoryReputationStore(), ip.suspensions, T)
    g.note(P, "news@shop.example", Counts(sends=10, soft_bounces=9, unsubscribes=9))
    (st, _) = g.flush()
    assert (st.verdict, st.soft_bounces, st.unsubscribes, st.bounce_rate) == ("ok", 9, 9, 0.0)
    g.note(P, "news@shop.example", Counts(bounces=1))  # 1 hard in 10 = 10 %: pause
    assert {s.verdict for s in g.flush()} == {"pause"}


def test_reputation_feedback_an_unsubscribe_counts_against_the_mails_origin() -> None:
    """Delivery left the finished mail's origin; the one-click POST about it counts one
    unsubscribe against that principal and sender domain, once however often it is
    posted, and its Subscription event carries the mail's sender and principal."""
    ip = InProcess.new()
    store = MemoryReputationStore()
    delivery = ReputationGuard(store, ip.suspensions, T, remember=True)
    delivery.note(
        P,
        "news@shop.example",
        Counts(sends=5),
        origin=Origin("m1", P, "news@shop.example", 1_700_000_000.0),
    )
    delivery.flush()
    guard = ReputationGuard(store, ip.suspensions, T)  # the unsubscribe route's
    s = UnsubscribeSettings(list_unsubscribe_keys=json.dumps({"k1": K1}), list_unsubscribe_kid="k1")
    events = ListEmitter()
    svc = UnsubscribeService(
        s, MemorySuppressionStore(), events, reputation=guard, clock=lambda: 20001 * 86400.0
    )
    token = unsub.make_token(
        keys(),
        unsub.Unsubscription(
            "m1", "reader@example.net", "sender_domain", "shop.example", 20000, "k1"
        ),
    )
    for _ in range(2):
        page = svc.handle(
            "POST",
            token,
            source_ip="192.0.2.1",
            body=b"List-Unsubscribe=One-Click",
            content_type="application/x-www-form-urlencoded",
        )
        assert page.status == 200
    for scope, target in (("principal", P), ("sender_domain", "shop.example")):
        st = guard.standing(scope, target)  # type: ignore[arg-type]
        assert (st.sends, st.unsubscribes, st.bounces, st.complaints) == (5, 1, 0, 0), scope
    (ev,) = events.events
    doc = ev.to_json()
    assert doc["mail"]["source"] == "news@shop.example"
    assert doc["mail"]["tags"]["mailqueue:principal"] == [P]
    assert doc["mail"]["timestamp"].startswith("2023-11-14T22:13:20")
