"""Delivery puts hard-bounced recipients on the suppression list (real SMTP peer, moto)."""

from __future__ import annotations

import time

from mailqueue.backends.aws.suppression_store import DynamoSuppressionStore

from tests.support import factories as f
from tests.support.dns_peer import dns_server
from tests.support.rigs import RigFactory, relay_to
from tests.support.smtp_peers import Behaviour, refused_port, smtp_sink

REPLIES = {
    "gone@x.example": "550 5.1.1 no such user",
    "Moved@X.example": "550 5.1.10 RESOLVER.ADR.RecipientNotFound",
    "policy@x.example": "550 5.7.1 refused by policy",
    "later@x.example": "450 4.2.1 try later",
}


def test_hard_bounces_are_suppressed_with_reason_time_and_source(rig: RigFactory) -> None:
    with smtp_sink(Behaviour(rcpt_replies=REPLIES)) as peer:
        r = rig(routes=relay_to(peer.port), suppression_ttl_days=10)
        before = time.time()
        q = r.aws.storage().enqueue(f.envelope("ok@x.example", *REPLIES), f.content())
        r.poll()
    store = DynamoSuppressionStore(r.aws.clients.dynamodb, r.aws.resources.table)
    every = ["ok@x.example", "gone@x.example", "moved@x.example", "policy@x.example"]
    found = store.get_many([*every, "later@x.example"])
    assert sorted(found) == ["gone@x.example", "moved@x.example"]  # normalised, 5.1.1/5.1.10
    gone = found["gone@x.example"]
    assert (gone.source, gone.status, gone.actor) == (q.mail_id, "5.1.1", "delivery")
    assert gone.reason == "550 5.1.1 no such user"
    assert before - 1 <= gone.added_at <= time.time() + 1
    assert abs(gone.expires_at - gone.added_at - 10 * 86400) < 1


def test_statuses_are_configurable_and_empty_turns_additions_off(rig: RigFactory) -> None:
    with smtp_sink(Behaviour(rcpt_replies=REPLIES)) as peer:
        r = rig(routes=relay_to(peer.port), suppression_statuses="5.7.1")
        r.aws.storage().enqueue(f.envelope(*REPLIES), f.content())
        r.poll()
        store = DynamoSuppressionStore(r.aws.clients.dynamodb, r.aws.resources.table)
        assert sorted(store.get_many([a.lower() for a in REPLIES])) == ["policy@x.example"]
        off = rig(routes=relay_to(peer.port), suppression_statuses="")
        assert off.service.suppression is None
        off.aws.storage().enqueue(f.envelope("gone@x.example"), f.content())
        store.delete("policy@x.example")
        off.poll()
    assert store.get_many(["gone@x.example", "policy@x.example"]) == {}


def test_our_own_verdicts_never_suppress(rig: RigFactory) -> None:
    """A null MX is bounced 5.1.10 by us (code 0), not by the recipient's server: the
    mailbox itself was never refused, so even with 5.1.10 configured nothing is added."""
    with dns_server({"nullmx.example": {"MX": ["0 ."]}}) as dns:
        r = rig(resolver=dns.resolver(), mx_port=refused_port(), suppression_statuses="5.1.10")
        q = r.aws.storage().enqueue(f.envelope("a@nullmx.example"), f.content())
        r.poll()
    assert r.group(q.mail_id, "nullmx.example").recipients[0].last_result.status == "5.1.10"
    store = DynamoSuppressionStore(r.aws.clients.dynamodb, r.aws.resources.table)
    assert store.get_many(["a@nullmx.example"]) == {}
