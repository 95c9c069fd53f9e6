"""Solo mails (issue 18, third round): a one-group mail with small content is one item.

Against moto under the limits guard; request counts with the botocore counter, item
sizes read back and priced in write units as DynamoDB does (1 KB each, index included).
"""

from __future__ import annotations

import hashlib
import zlib
from datetime import timedelta
from typing import Any

import pytest
from mailqueue.backends.aws.backend import SOLO_MARK, is_solo, read_inline, solo_key
from mailqueue.backends.aws.limits import item_size
from mailqueue.core.config import ConfigError, StorageSettings
from mailqueue.core.model import Claim, GroupState, MailRef, Result, utcnow
from mailqueue.services.eventlog import SOLO_MARK as EVENTLOG_SOLO_MARK

from tests.support import factories as f
from tests.support.aws import AwsEnv

OK = Result(250, "2.0.0", "2.0.0 Ok: queued as 4XyzABCD1234", "mx.example.net")
TEMP = Result(451, "4.7.1", "4.7.1 try again later", "mx.example.net")
WRITE_UNIT = 1024


def _items(aws: AwsEnv, mail_id: str) -> dict[str, dict[str, Any]]:
    return aws.mail_items(mail_id)


def _indexed(aws: AwsEnv, mail_id: str) -> list[str]:
    """The mail's entries in the by_state index, as `st` values (a scan of the index)."""
    resp = aws.clients.dynamodb.scan(TableName=aws.resources.table, IndexName="by_state")
    return [
        it["st"]["S"].split("#", 1)[0]  # the state, without its index shard
        for it in resp["Items"]
        if it["pk"]["S"] == f"M#{mail_id}"
    ]


def test_a_one_group_small_mail_is_one_item_put_in_one_request(aws: AwsEnv) -> None:
    st = aws.storage()
    body = f.content(10 * 1024)
    aws.counter.reset()
    q = st.enqueue(f.envelope(), body)
    assert aws.counter.snapshot() == {"dynamodb:PutItem": 1, "sqs:SendMessageBatch": 1}
    items = _items(aws, q.mail_id)
    assert list(items) == [f"G#{q.groups[0]}"]  # no mail item
    item = items[f"G#{q.groups[0]}"]
    assert zlib.decompress(item["body"]["B"]) == body
    assert item["content_key"]["S"] == SOLO_MARK  # the key names this item: not stored
    assert st.get_group(MailRef(q.mail_id, q.groups[0])).content_key == solo_key(
        q.mail_id, q.groups[0]
    )
    assert item_size(item) <= st.s.solo_item_max_bytes
    assert _indexed(aws, q.mail_id) == ["queued"]
    # what only keyed retries need, or what is derived, is left out
    assert not {"env_sha", "sha256", "groups", "rcpt_count"} & set(item)


def _expired_left(aws: AwsEnv, mail_id: str) -> dict[str, Any]:
    """The one item a finished solo mail leaves to DynamoDB's TTL: no content, no state
    key (out of by_state), already expired."""
    items = _items(aws, mail_id)
    assert len(items) == 1, items
    (item,) = items.values()
    assert not {"body", "st", "due"} & set(item)
    assert int(item["expires_at"]["N"]) <= utcnow().timestamp()
    return item


def test_claim_returns_the_content_and_the_mail_ends_in_two_requests(aws: AwsEnv) -> None:
    st = aws.storage()
    body = f.content(10 * 1024)
    q = st.enqueue(f.envelope(), body)
    aws.counter.reset()
    c = st.send_start(MailRef(q.mail_id, q.groups[0]), utcnow(), lease_seconds=60)
    assert isinstance(c, Claim)
    mail = st.read_inflight(c)
    assert mail.content.read() == body and mail.size == len(body)
    # a claim leaves the index alone: the lease is on the item, the entry stays `queued`
    assert _indexed(aws, q.mail_id) == ["queued"]
    t = st.send_done(c, ["r0"], OK)
    assert t.mail_finished and t.cleaned  # nothing left to clean: the TTL deletes the item
    # claim (the content comes back with it), the result: no read, no delete
    calls = {k: n for k, n in aws.counter.snapshot().items() if k != "dynamodb:Scan"}
    assert calls == {"dynamodb:UpdateItem": 2}  # (the Scan is the test's own)
    item = _expired_left(aws, q.mail_id)
    assert item["rcpts"]["M"]["r0"]["M"]["state"]["S"] == "delivered"
    assert _indexed(aws, q.mail_id) == []
    assert not st.content_exists(q.mail_id)
    assert list(st.find_pending_cleanup(utcnow() + timedelta(hours=1))) == []
    # what an operator sees until the TTL: the mail, finished, without content
    _, groups = st.get_mail(q.mail_id)
    assert [g.state for g in groups] == [GroupState.DONE]


def test_solo_delete_deletes_the_finished_item_at_once(aws: AwsEnv) -> None:
    st = aws.storage(solo_delete=True)
    q = st.enqueue(f.envelope(), f.content(10 * 1024))
    c = st.send_start(MailRef(q.mail_id, q.groups[0]), utcnow(), lease_seconds=60)
    assert isinstance(c, Claim)
    aws.counter.reset()
    t = st.send_done(c, ["r0"], OK)
    assert t.mail_finished and t.cleaned
    assert aws.counter.snapshot() == {"dynamodb:UpdateItem": 1, "dynamodb:DeleteItem": 1}
    assert _items(aws, q.mail_id) == {}


def _units(size: int) -> int:
    return -(-size // WRITE_UNIT)


@pytest.mark.parametrize("content_bytes", [1500, 3000])
def test_a_content_item_costs_fewer_write_units_than_a_solo_item_and_two_items(
    aws: AwsEnv, content_bytes: int
) -> None:
    """Write units per delivered mail, table and by_state index (projection KEYS_ONLY: one
    unit per index entry written, whatever the item's size), priced from the sizes of the
    items the code wrote, read back after each step (the image the cleanup deletes is
    caught by cutting the cleanup short). Content of 2 and of 4 write units, stored three
    ways: a solo item (content items off), a content item and a group item of one unit
    (the default, issue 40), a mail item and a group item (solo off)."""
    from tests.support.faults import InjectedCrash, short_circuit

    body = f.incompressible(content_bytes)

    def die(_: dict[str, Any]) -> None:
        raise InjectedCrash("stop before the cleanup")

    def run(**settings: Any) -> tuple[int, int, int, float]:
        st = aws.storage(solo_delete=True, **settings)
        q = st.enqueue(f.envelope(), body)
        gk = f"G#{q.groups[0]}"
        put = _items(aws, q.mail_id)
        c = st.send_start(MailRef(q.mail_id, q.groups[0]), utcnow(), lease_seconds=60)
        assert isinstance(c, Claim)
        claimed = _items(aws, q.mail_id)[gk]
        aws.counter.reset()
        assert st.read_inflight(c).content.read() == body
        reads = aws.counter.snapshot().get("dynamodb:GetItem", 0)
        with (
            short_circuit(aws.clients.dynamodb, "DeleteItem", die),
            short_circuit(aws.clients.dynamodb, "BatchWriteItem", die),
            pytest.raises(InjectedCrash),
        ):
            st.send_done(c, ["r0"], OK)
        done = _items(aws, q.mail_id)[gk]
        assert st.cleanup(q.mail_id) and _items(aws, q.mail_id) == {}
        g0, g1 = (_units(item_size(it)) for it in (put[gk], claimed))
        g2 = max(g1, _units(item_size(done)))  # a write is priced on the larger image
        m = _units(item_size(put["M"])) if "M" in put else 0
        cu = _units(item_size(put["C"])) if "C" in put else 0  # deleted by TTL: free
        deletes = m + _units(item_size(done))
        table = m + cu + g0 + g1 + g2  # puts, claim, result (the deletes apart)
        # an index entry's units: the whole item (ALL) or its keys (KEYS_ONLY), as the
        # table the stack created declares
        proj = next(
            ix["Projection"]["ProjectionType"]
            for ix in aws.clients.dynamodb.describe_table(TableName=aws.resources.table)["Table"][
                "GlobalSecondaryIndexes"
            ]
            if ix["IndexName"] == "by_state"
        )
        i0, i1, i2 = (
            _units(item_size(it)) if proj == "ALL" else 1 for it in (put[gk], claimed, done)
        )
        if "M" not in put:  # the result takes it out of the index (and drops the content)
            assert "st" not in done and "body" not in done
            # the claim adds <= 128 bytes: at most one more unit (just under a boundary)
            assert g0 <= g1 <= g0 + 1, (g0, g1)
            index = i0 + i0  # put, left on the result (the claim writes no entry)
        else:  # moved on the result (queued -> done), deleted by the cleanup
            index = i0 + (i0 + i2) + i2
        if "C" in put:  # every write of the group item is one unit; the content is read
            assert (g0, g1, g2) == (1, 1, 1) and reads == 1, (g0, g1, g2, reads)
        # a consistent read of up to 4 KB is one read unit, a fifth of a write unit's price
        return table, index, deletes, reads * 0.125 / 0.625

    solo = run(content_item_max_bytes=0)
    citem = run()
    two = run(solo_item_max_bytes=0)
    assert 2 * 3 <= solo[0] <= 4 * 3, solo  # a solo item of 2 to 4 units: 3 writes each
    assert solo[2] == citem[2] == 1  # the done group item's delete (solo_delete)
    # by default a finished solo item and a content item are left to DynamoDB's TTL (no
    # write unit); the two items are deleted (mail item and group), as the cleanup does
    whole = {k: v[0] + v[1] + v[3] for k, v in (("solo", solo), ("citem", citem))}
    assert whole["citem"] < whole["solo"] < two[0] + two[1] + two[2], (solo, citem, two)


def test_the_solo_limit_leaves_room_for_the_lease_in_the_same_write_units(aws: AwsEnv) -> None:
    """The default is 4 KB less what a claim adds (lease, token, times, counters): a
    claim never takes the largest solo item past 4 write units."""
    st = aws.storage()
    assert st.s.solo_item_max_bytes == 4 * WRITE_UNIT - 128
    bodies = (f.content(600), f.incompressible(1500), f.incompressible(3200))
    for body in (*bodies, f.content(3000, subject="x" * 200)):
        q = st.enqueue(f.envelope(), body)
        gk = f"G#{q.groups[0]}"
        before = _items(aws, q.mail_id).get(gk)
        if before is None or not is_solo(before["content_key"]["S"]):
            continue
        st.send_start(MailRef(q.mail_id, q.groups[0]), utcnow(), lease_seconds=60)
        after = _items(aws, q.mail_id)[gk]
        growth = item_size(after) - item_size(before)
        assert 0 < growth <= 128, growth
        assert item_size(after) <= 4 * WRITE_UNIT  # the largest solo item stays in 4 units


@pytest.mark.parametrize(
    ("why", "kw", "envelope", "body"),
    [
        ("keyed", {"idempotency_key": "k-1"}, ("bob@example.net",), 1024),
        ("two groups", {}, ("bob@example.net", "carol@example.com"), 1024),
    ],
)
def test_what_is_not_solo_keeps_its_mail_item(
    aws: AwsEnv, why: str, kw: dict[str, str], envelope: tuple[str, ...], body: int
) -> None:
    st = aws.storage()
    q = st.enqueue(f.envelope(*envelope), f.content(body), **kw)  # type: ignore[arg-type]
    items = _items(aws, q.mail_id)
    assert "M" in items, why
    assert not any(is_solo(it["content_key"]["S"]) for it in items.values())


def test_zero_turns_it_off_and_the_setting_is_bounded(aws: AwsEnv) -> None:
    st = aws.storage(solo_item_max_bytes=0)
    q = st.enqueue(f.envelope(), f.content())
    assert set(_items(aws, q.mail_id)) == {"M", f"G#{q.groups[0]}"}
    base = {"table": "t", "bucket": "b", "delivery_queue_url": "d", "bounce_queue_url": "q"}
    with pytest.raises(ConfigError):
        StorageSettings(**base, solo_item_max_bytes=-1)  # type: ignore[arg-type]


def test_readers_see_a_solo_mail_as_a_mail(aws: AwsEnv) -> None:
    """get_mail, read_content, content_exists, the events function's reader."""
    st = aws.storage()
    body = f.content(2048, subject="solo")
    q = st.enqueue(f.envelope(), body)
    mail, groups = st.get_mail(q.mail_id)
    assert mail is not None and "body" not in mail
    assert mail["sha256"] == hashlib.sha256(body).hexdigest()
    assert mail["groups"] == list(q.groups) and mail["rcpt_count"] == 1
    assert mail["sender"] == "alice@example.org" and int(mail["size"]) == len(body)
    assert [g.key for g in groups] == list(q.groups)
    assert st.content_exists(q.mail_id)
    assert st.read_content(q.mail_id).read() == body
    key = solo_key(q.mail_id, q.groups[0])
    assert read_inline(aws.clients.dynamodb, aws.resources.table, key) == body


def test_a_deferred_solo_mail_stays_one_item_and_its_retry_brings_the_content(
    aws: AwsEnv,
) -> None:
    st = aws.storage()
    body = f.content(1024)
    q = st.enqueue(f.envelope(), body)
    ref = MailRef(q.mail_id, q.groups[0])
    c = st.send_start(ref, utcnow(), lease_seconds=60)
    assert isinstance(c, Claim)
    t = st.reschedule(c, {"r0": TEMP}, utcnow() + timedelta(seconds=1))
    assert t.group.state == GroupState.QUEUED and not t.cleaned
    assert _indexed(aws, q.mail_id) == ["queued"]
    aws.counter.reset()
    c2 = st.send_start(ref, utcnow() + timedelta(seconds=2), lease_seconds=60)
    assert isinstance(c2, Claim)
    assert st.read_inflight(c2).content.read() == body
    assert aws.counter.snapshot() == {"dynamodb:UpdateItem": 1}
    st.send_done(c2, ["r0"], OK)
    _expired_left(aws, q.mail_id)


def test_the_events_function_knows_the_solo_mark() -> None:
    assert EVENTLOG_SOLO_MARK == SOLO_MARK
