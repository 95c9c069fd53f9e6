"""Crash at every AWS request on the path, then recover as AWS would: nothing lost.

For each scenario the path is first run without a crash to count its AWS requests (K);
then for every k in 1..K a fresh world is killed right after its k-th request and left
to recover (SQS redelivery after the visibility timeout, the sweeper). Invariants:
every deliverable recipient reached SMTP at least once, every failed one is in exactly
one DSN, no DSN went out twice, no recipient is left in a non-final state, no content
is left.
"""

from __future__ import annotations

import sys
from collections import Counter
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from mailqueue.backends.aws.backend import SOLO_MARK, is_solo

from tests.crash.conftest import MAX_GROUP, Peers
from tests.crash.harness import Clients, Injector, World, dsn_recipients, injection_points
from tests.support import factories as f

# a scenario walks every request of its path, one run each (max50: ~50 runs); on a
# shared 2-core machine one took 235 s, near the suite-wide 300 s
pytestmark = pytest.mark.timeout(900)


@dataclass(frozen=True)
class Scenario:
    name: str
    recipients: tuple[str, ...]
    delivered: frozenset[str]
    bounced: frozenset[str]
    temporary_first: bool
    # "small": content in the mail item; "incompressible": content in S3; "citem": 1.5 KB
    # that zlib cannot shrink, a solo item of two units: a content item when unkeyed
    content: str = "small"
    # False: submitted without an idempotency key; one group of small content is then a
    # solo mail (one item; crash points start at its 202, see World.enqueue)
    keyed: bool = True


SCENARIOS = [
    Scenario("deliverable", ("ok@x.example",), frozenset({"ok@x.example"}), frozenset(), False),
    Scenario("temporary", ("later@x.example",), frozenset({"later@x.example"}), frozenset(), True),
    Scenario("permanent", ("bad@x.example",), frozenset(), frozenset({"bad@x.example"}), False),
    Scenario(  # the largest group (one domain, 50 recipients), 512-octet replies
        "max50",
        MAX_GROUP,
        frozenset(a for a in MAX_GROUP if a.startswith(("ok", "later"))),
        frozenset(a for a in MAX_GROUP if a.startswith("bad")),
        True,
    ),
    Scenario(
        "mixed3",
        ("ok@x.example", "bad@x.example", "later@y.example"),
        frozenset({"ok@x.example", "later@y.example"}),
        frozenset({"bad@x.example"}),
        True,
    ),
    Scenario(  # the same with its content in S3 (too large for the mail item)
        "mixed3-s3",
        ("ok@x.example", "bad@x.example", "later@y.example"),
        frozenset({"ok@x.example", "later@y.example"}),
        frozenset({"bad@x.example"}),
        True,
        content="incompressible",
    ),
    # solo mails: one item, the content returned by the claim, expired by TTL if the
    # delete after the last result is cut short
    Scenario(
        "solo-deliverable", ("ok@x.example",), frozenset({"ok@x.example"}), frozenset(), False,
        keyed=False,
    ),
    Scenario(
        "solo-temporary", ("later@x.example",), frozenset({"later@x.example"}), frozenset(),
        True, keyed=False,
    ),
    Scenario(
        "solo-permanent", ("bad@x.example",), frozenset(), frozenset({"bad@x.example"}), False,
        keyed=False,
    ),
    # S3 solo mails (issue 25): one item, the content in S3, deleted after the last result;
    # a delete cut short leaves the object to the orphan finder once the item expired
    Scenario(
        "solo-s3-temporary", ("later@x.example",), frozenset({"later@x.example"}), frozenset(),
        True, content="incompressible", keyed=False,
    ),
    Scenario(
        "solo-s3-permanent", ("bad@x.example",), frozenset(), frozenset({"bad@x.example"}),
        False, content="incompressible", keyed=False,
    ),
    # content items (issue 40): the content in an item of its own, written before the
    # group item, left to TTL after delivery, deleted with the group after a DSN
    Scenario(
        "citem-temporary", ("later@x.example",), frozenset({"later@x.example"}), frozenset(),
        True, content="citem", keyed=False,
    ),
    Scenario(
        "citem-permanent", ("bad@x.example",), frozenset(), frozenset({"bad@x.example"}),
        False, content="citem", keyed=False,
    ),
]  # fmt: skip

_BODIES = {
    "small": lambda: f.content(),
    "incompressible": lambda: f.incompressible(),
    "citem": lambda: f.incompressible(1500),
}


def _key_of(item: dict[str, Any]) -> str:
    key = str(item["content_key"]["S"])
    return key if key != SOLO_MARK else "ddb:M#x|G#x"  # the mark stands for the item


@dataclass
class Outcome:
    requests: int
    duplicates: int
    seen: list[str]


def run(clients: Clients, peers: Peers, sc: Scenario, crash_at: int) -> Outcome:
    starts = (len(peers.ok.messages), len(peers.failing.messages))
    inj = Injector(crash_at=crash_at)
    w = World(
        clients,
        peers.ok.port,
        inj,
        failing_port=peers.failing.port if sc.temporary_first else None,
    )
    body = _BODIES[sc.content]()
    mail_id = w.enqueue(
        f.envelope(*sc.recipients), body, key=f"{sc.name}-{crash_at}" if sc.keyed else None
    )
    if not sc.keyed:
        got_items = [it for it in w.items() if it["pk"]["S"] == f"M#{mail_id}"]
        want = ["C", "G#x.example"] if sc.content == "citem" else ["G#x.example"]
        assert sorted(it["sk"]["S"] for it in got_items) == want, "not a solo mail"
    w.run_until_quiet()
    msgs = peers.ok.messages[starts[0] :] + peers.failing.messages[starts[1] :]
    originals = [m for m in msgs if m.mail_from not in ("", "<>")]
    dsns = [m for m in msgs if m.mail_from in ("", "<>")]
    got = Counter(r for m in originals for r in m.rcpt_tos)
    where = f"{sc.name} crash@{crash_at} ({inj.seen[crash_at - 1] if crash_at else '-'})"
    for r in sc.delivered:
        assert got[r] >= 1, f"{where}: {r} never delivered"
    for r in sc.bounced:
        assert got[r] == 0, f"{where}: {r} should have bounced"
    assert len(dsns) == (1 if sc.bounced else 0), f"{where}: {len(dsns)} DSNs"
    if dsns:
        assert sorted(dsn_recipients(dsns[0].content)) == sorted(sc.bounced), where
        assert dsns[0].rcpt_tos == ["alice@example.org"], where
    if w.content_objects() and sc.content == "incompressible" and not sc.keyed:
        # an S3 solo mail whose object delete was cut short after its last result: the
        # orphan finder's, once the orphan grace (36 h) has passed
        w.clock.advance(timedelta(hours=37))
        w.injector.armed = False
        w.step(w.sweep)
    assert w.content_objects() == [], f"{where}: content left behind"
    # a mail's own items are gone (tombstones aside); what outlives a mail by design, such
    # as the suppression entry a 5.1.1 leaves, is not its state
    mail_items = [it for it in w.items() if it["pk"]["S"].startswith("M#")]
    # a solo mail whose delete was cut short is left expired and out of the state index:
    # DynamoDB's TTL deletes it (moto does not run TTL, so it is counted here, not removed)
    now_s = w.clock().timestamp()
    expired = [
        it
        for it in mail_items
        if "st" not in it and "expires_at" in it and int(it["expires_at"]["N"]) <= now_s
    ]
    assert all(is_solo(_key_of(it)) and not {"body", "hdrs"} & set(it) for it in expired), (
        f"{where}: a non-solo item, or content, left to TTL"
    )
    # a delivered mail's content item waits for its TTL (moto runs none): no later than
    # the mail's lifetime and margin from now, and only once no group of it is left
    keep = w.storage.s.max_queue_lifetime_seconds + w.storage.s.content_item_margin_seconds
    citems = [it for it in mail_items if it["sk"]["S"] == "C"]
    for it in citems:
        assert int(it["expires_at"]["N"]) <= now_s + keep, f"{where}: content kept too long"
    left = [it for it in mail_items if "tomb" not in it and it not in expired + citems]
    assert left == [], f"{where}: state left behind"
    return Outcome(len(inj.seen), sum(n - 1 for n in got.values() if n > 1), list(inj.seen))


@pytest.mark.parametrize("sc", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_crash_at_every_request(
    clients: Clients, peers: Peers, sc: Scenario, capsys: pytest.CaptureFixture[str]
) -> None:
    base = run(clients, peers, sc, 0)
    assert base.duplicates == 0
    dups = 0
    points = injection_points(base.seen)
    for k in points:
        dups += run(clients, peers, sc, k).duplicates
    # A crash lands after a request, so never between a peer's 250 and the write that
    # records it (the qmail window): a recorded recipient is never sent again.
    assert dups == 0
    with capsys.disabled():
        print(
            f"\n[crash] {sc.name}: {len(points)} of {base.requests} crash points covered, 0 lost, "
            f"{dups} duplicate deliveries",
            file=sys.stderr,  # an xdist worker's stdout is /dev/null
        )
