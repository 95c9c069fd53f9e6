"""A queued group's index entry may lag its schedule (issue 25: the retry floor).

`by_state` is sorted on `due`; changing a sort key is a delete and a put on the index,
2 write units ($1.25 per million on demand) on every reschedule and every shaping
re-arm. A reschedule to within `index_due_slack_seconds` of the entry's `due` now
leaves the entry alone; the claim and every reader go by the group's own `next_at`,
so the index only has to be a superset (an entry's `due` is never after its group's
`next_at`). Against moto under the limits guard; the index read with a Scan.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from mailqueue.backends.aws.backend import AwsStorage
from mailqueue.backends.aws.limits import item_size
from mailqueue.core.model import (
    Claim,
    GroupState,
    MailRef,
    RecipientState,
    Result,
    utcnow,
)
from mailqueue.core.storage import ClaimRefused
from mailqueue.services.sweeper import Sweeper, SweeperSettings

from tests.support import factories as f
from tests.support.aws import AwsEnv
from tests.test_solo import OK, TEMP, _units


def _entry(aws: AwsEnv, mail_id: str) -> dict[str, Any] | None:
    resp = aws.clients.dynamodb.scan(TableName=aws.resources.table, IndexName="by_state")
    got = [it for it in resp["Items"] if it["pk"]["S"] == f"M#{mail_id}"]
    assert len(got) <= 1, got
    return got[0] if got else None


def _due(aws: AwsEnv, mail_id: str) -> int:
    e = _entry(aws, mail_id)
    assert e is not None
    return int(e["due"]["N"])


def _ms(ts: datetime) -> int:
    return int(ts.timestamp() * 1000)


def _claimed(st: AwsStorage, ref: MailRef, now: datetime) -> Claim:
    c = st.send_start(ref, now, lease_seconds=60)
    assert isinstance(c, Claim), c
    return c


def _deferred(aws: AwsEnv, seconds: float, **settings: Any) -> tuple[AwsStorage, MailRef, int]:
    """A one-recipient mail tried once and deferred `seconds`; its entry's `due` before."""
    st = aws.storage(**settings)
    q = st.enqueue(f.envelope(), f.content())
    ref = MailRef(q.mail_id, q.groups[0])
    before = _due(aws, q.mail_id)
    c = _claimed(st, ref, utcnow())
    st.reschedule(c, {"r0": TEMP}, utcnow() + timedelta(seconds=seconds))
    return st, ref, before


def test_a_reschedule_within_the_slack_leaves_the_entry_and_nothing_is_early(
    aws: AwsEnv,
) -> None:
    st, ref, before = _deferred(aws, 120)
    assert _due(aws, ref.mail_id) == before  # the entry was not moved
    g = st.get_group(ref)
    assert g.state == GroupState.QUEUED
    now = utcnow()
    assert g.next_attempt_at > now + timedelta(seconds=100)
    # the entry's `due` has passed, the group's schedule has not: nobody treats it as due
    early = st.send_start(ref, now, lease_seconds=60)
    assert isinstance(early, ClaimRefused) and early.reason == "not_due"
    assert early.next_attempt_at == g.next_attempt_at
    assert ref not in {x.ref for x in st.list_queue(due_before=now).items}
    assert ref not in {x.ref for x in st.find_inflight(now).items}
    # the browse without a bound still lists it
    assert ref in {x.ref for x in st.list_queue().items}
    # at its time it is due, listed and claimed
    later = g.next_attempt_at + timedelta(milliseconds=1)
    assert ref in {x.ref for x in st.list_queue(due_before=later).items}
    c = _claimed(st, ref, later)
    st.send_done(c, ["r0"], OK)


def test_a_reschedule_beyond_the_slack_moves_the_entry(aws: AwsEnv) -> None:
    st, ref, before = _deferred(aws, 2 * 3600)
    g = st.get_group(ref)
    assert _due(aws, ref.mail_id) == _ms(g.next_attempt_at) > before


def test_with_no_slack_every_reschedule_moves_the_entry(aws: AwsEnv) -> None:
    st, ref, before = _deferred(aws, 60, index_due_slack_seconds=0)
    assert _due(aws, ref.mail_id) == _ms(st.get_group(ref).next_attempt_at) > before


def test_an_earlier_schedule_than_the_entry_moves_it_back(aws: AwsEnv) -> None:
    """The entry must never be after its group's schedule: a group deferred for hours,
    then set to go at once (as an operator's retry-now does), is found again by `due`."""
    st, ref, _ = _deferred(aws, 2 * 3600)
    far = _due(aws, ref.mail_id)
    c = st.admin_claim(ref, utcnow())
    assert isinstance(c, Claim)
    rest = {r.rid: r.with_(state=RecipientState.QUEUED) for r in c.unresolved()}
    st.mark(c, rest, next_attempt_at=utcnow(), op={"action": "retry", "actor": "t", "job": None})
    g = st.get_group(ref)
    assert _due(aws, ref.mail_id) == _ms(g.next_attempt_at) < far


def test_a_lease_that_died_after_a_lagging_reschedule_is_recovered(aws: AwsEnv) -> None:
    """The sweeper's lease recovery reads entries by `due`: one that lags still finds a
    group whose delivery died after its second claim."""
    st, ref, before = _deferred(aws, 120)
    g = st.get_group(ref)
    at = g.next_attempt_at + timedelta(seconds=1)
    _claimed(st, ref, at)  # ... and the holder dies
    assert _due(aws, ref.mail_id) == before
    after_lease = at + timedelta(seconds=61)
    assert [x.ref for x in st.find_inflight(after_lease).items] == [ref]

    class Posted:
        refs: list[MailRef] = []

        def post(self, refs: list[MailRef], **_: Any) -> None:
            self.refs.extend(refs)

    sweeper = Sweeper(
        SweeperSettings(), st, triggers=Posted(), bounces=Posted(), clock=lambda: after_lease
    )
    stats = sweeper.run()
    assert stats.leases_recovered == 1
    c = _claimed(st, ref, after_lease)
    st.send_done(c, ["r0"], OK)


@pytest.mark.parametrize("kind", ["solo", "s3 solo"])
def test_a_retried_solo_mail_costs_one_unit_a_write_and_two_index_writes(
    aws: AwsEnv, kind: str
) -> None:
    """Put, claim, reschedule, claim, result: one write unit each for an S3 solo mail
    (its final image keeps the last attempt only), and the index written twice (the put,
    and the result taking it out): before, the reschedule moved the entry (2 more) and
    the result, carrying both attempts, took 2 units."""
    st = aws.storage()
    body = f.content() if kind == "solo" else f.incompressible(30 * 1024)
    q = st.enqueue(f.envelope(), body)
    ref = MailRef(q.mail_id, q.groups[0])
    gk = f"G#{q.groups[0]}"
    images = [aws.mail_items(q.mail_id)[gk]]
    entries = [_entry(aws, q.mail_id)]
    c = _claimed(st, ref, utcnow())
    images.append(aws.mail_items(q.mail_id)[gk])
    # a greylisting reply as long as real ones
    grey = Result(
        451,
        "4.7.1",
        "4.7.1 <r0@example.net>: Recipient address rejected: Greylisted, "
        "see https://postgrey.schweikert.ch/help/example.net.html",
        "mx.example.net",
    )
    st.reschedule(c, {"r0": grey}, utcnow() + timedelta(seconds=300))
    images.append(aws.mail_items(q.mail_id)[gk])
    entries.append(_entry(aws, q.mail_id))
    at = st.get_group(ref).next_attempt_at + timedelta(seconds=1)
    c = _claimed(st, ref, at)
    images.append(aws.mail_items(q.mail_id)[gk])
    t = st.send_done(c, ["r0"], OK)
    assert t.mail_finished
    images.append(aws.mail_items(q.mail_id)[gk])
    entries.append(_entry(aws, q.mail_id))
    units = [_units(item_size(images[0]))] + [
        _units(max(item_size(a), item_size(b))) for a, b in zip(images, images[1:], strict=False)
    ]
    if kind == "s3 solo":
        assert units == [1, 1, 1, 1, 1], [item_size(i) for i in images]
    else:  # the content rides in the item until the result drops it: the result costs
        # what the second claim did, no more (it was one unit more with both attempts)
        assert units[-1] <= units[-2], [item_size(i) for i in images]
        assert item_size(images[-1]) < 1024
    assert entries[0] == entries[1] and entries[2] is None  # put; kept; removed
    final = images[-1]
    assert [a["M"]["number"]["N"] for a in final["history"]["L"]] == ["2"]
    assert final["rcpts"]["M"]["r0"]["M"]["attempts"]["N"] == "2"


def test_a_finished_group_of_a_larger_mail_keeps_its_last_attempt_only(aws: AwsEnv) -> None:
    """A group of a two-group mail, retried once, then delivered: its `done` image (and
    the delete that cleans it later, priced on the same image) keeps only the last
    attempt, so the result costs the write unit its claim used."""
    st = aws.storage()
    q = st.enqueue(f.envelope("bob@example.net", "carol@example.com"), f.content(3000))
    g0 = sorted(q.groups)[0]
    ref = MailRef(q.mail_id, g0)
    c = _claimed(st, ref, utcnow())
    st.reschedule(c, {r.rid: TEMP for r in c.group.pending()}, utcnow() + timedelta(seconds=300))
    claim_at = st.get_group(ref).next_attempt_at + timedelta(seconds=1)
    c = _claimed(st, ref, claim_at)
    claimed = aws.mail_items(q.mail_id)[f"G#{g0}"]
    assert len(claimed["history"]["L"]) == 1
    t = st.send_done(c, [r.rid for r in c.group.pending()], OK)
    assert not t.mail_finished
    done = aws.mail_items(q.mail_id)[f"G#{g0}"]
    assert [a["M"]["number"]["N"] for a in done["history"]["L"]] == ["2"]
    assert _units(max(item_size(claimed), item_size(done))) == _units(item_size(claimed))
