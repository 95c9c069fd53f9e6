"""The write-sharded state index (issue 25): `st` = "<state>#<shard>".

Readers walk every shard with a cursor that holds the shard and its position; an item
written before sharding (bare `st = queued`) is still listed, counted and claimed, and
moves to its shard at its next release (a claim leaves the index alone); one claimed before
that change (`st = inflight#<shard>`) is found when its lease ends, claimed, finished.
Against moto under the limits guard.
"""

from __future__ import annotations

from datetime import timedelta

from mailqueue.backends.aws.items import state_key, state_of
from mailqueue.core.model import Claim, GroupState, MailRef, Result, from_iso, to_iso, utcnow
from mailqueue.core.storage import ClaimRefused

from tests.support import factories as f
from tests.support.aws import AwsEnv

OK = Result(250, "2.0.0", "2.0.0 Ok", "mx.example.net")


def test_list_queue_pages_over_every_shard_once(aws: AwsEnv) -> None:
    st = aws.storage(state_shards=4)
    ids = {st.enqueue(f.envelope(), f.content(256)).mail_id for _ in range(9)}
    shards = {
        aws.mail_items(i)[next(iter(aws.mail_items(i)))]["st"]["S"].split("#")[1] for i in ids
    }
    assert len(shards) > 1  # spread over several key values
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        page = st.list_queue(limit=2, cursor=cursor)
        pages += 1
        assert len(page.items) <= 2
        seen += [g.mail_id for g in page.items]
        cursor = page.cursor
        if not cursor:
            break
    assert sorted(seen) == sorted(ids)  # each exactly once
    assert pages >= 5
    assert st.count_state(GroupState.QUEUED) == 9
    assert all(g.state == GroupState.QUEUED for g in st.list_queue(limit=100).items)


def test_an_item_written_before_sharding_is_read_claimed_and_moved(aws: AwsEnv) -> None:
    st = aws.storage(state_shards=4)
    q = st.enqueue(f.envelope(), f.content(256))
    key = {"pk": {"S": f"M#{q.mail_id}"}, "sk": {"S": f"G#{q.groups[0]}"}}
    aws.clients.dynamodb.update_item(  # as the previous version wrote it
        TableName=aws.resources.table,
        Key=key,
        UpdateExpression="SET st = :q",
        ExpressionAttributeValues={":q": {"S": "queued"}},
    )
    assert [g.mail_id for g in st.list_queue().items] == [q.mail_id]
    assert st.count_state(GroupState.QUEUED) == 1
    c = st.send_start(MailRef(q.mail_id, q.groups[0]), utcnow(), lease_seconds=60)
    assert isinstance(c, Claim)
    item = aws.mail_items(q.mail_id)[f"G#{q.groups[0]}"]
    assert item["st"]["S"] == "queued" and "lease_ms" in item  # a claim leaves the index
    assert st.list_queue().items == ()  # claimed: inflight, not queued
    assert [g.mail_id for g in st.find_inflight(utcnow().replace(year=2100)).items] == [q.mail_id]
    st.send_cancel(c)  # a release writes the state: into its shard
    item = aws.mail_items(q.mail_id)[f"G#{q.groups[0]}"]
    assert item["st"]["S"] == state_key("queued", q.mail_id, 4)
    assert not {"lease_ms", "lease_token"} & set(item)
    c = st.send_start(MailRef(q.mail_id, q.groups[0]), utcnow(), lease_seconds=60)
    assert isinstance(c, Claim)
    st.send_done(c, ["r0"], OK)
    assert st.count_state(GroupState.INFLIGHT) == 0


def test_an_item_claimed_before_the_claim_left_the_index(aws: AwsEnv) -> None:
    """`st = inflight#<shard>`, `due` = the lease's end, `lease_until` (ISO), as the
    previous version claimed: found when its lease ends, claimed again, finished."""
    st = aws.storage(state_shards=4)
    q = st.enqueue(f.envelope(), f.content(256))
    ref = MailRef(q.mail_id, q.groups[0])
    now = utcnow()
    end = now + timedelta(seconds=30)
    aws.clients.dynamodb.update_item(
        TableName=aws.resources.table,
        Key={"pk": {"S": f"M#{q.mail_id}"}, "sk": {"S": f"G#{q.groups[0]}"}},
        UpdateExpression="SET st = :st, due = :due, lease_token = :t, lease_until = :lu",
        ExpressionAttributeValues={
            ":st": {"S": state_key("inflight", q.mail_id, 4)},
            ":due": {"N": str(int(end.timestamp() * 1000))},
            ":t": {"S": "0123456789abcdef"},
            ":lu": {"S": to_iso(end)},
        },
    )
    g = st.get_group(ref)
    assert g.state == GroupState.INFLIGHT and g.lease_until == from_iso(to_iso(end))
    assert st.find_inflight(now).items == ()
    refused = st.send_start(ref, now, lease_seconds=60)
    assert isinstance(refused, ClaimRefused) and refused.reason == "claimed"
    later = end + timedelta(seconds=1)
    assert [x.mail_id for x in st.find_inflight(later).items] == [q.mail_id]
    assert st.count_state(GroupState.INFLIGHT) == 1
    c = st.send_start(ref, later, lease_seconds=60)
    assert isinstance(c, Claim)
    st.send_done(c, ["r0"], OK)
    assert st.count_state(GroupState.INFLIGHT) == 0
    assert st.get_group(ref).state == GroupState.DONE


def test_more_shards_on_a_live_table_still_read_what_fewer_wrote(aws: AwsEnv) -> None:
    few = aws.storage(state_shards=2)
    ids = {few.enqueue(f.envelope(), f.content(256)).mail_id for _ in range(5)}
    st = aws.storage(state_shards=8)
    assert {g.mail_id for g in st.list_queue(limit=100).items} == ids
    for i in ids:
        (item,) = aws.mail_items(i).values()
        assert state_of(item["st"]["S"]) == "queued"
