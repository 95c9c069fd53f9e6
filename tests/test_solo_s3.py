"""S3 solo mails (issue 25): a one-group mail whose content is in S3 is one item too.

Against moto under the limits guard; request counts with the botocore counter, item
sizes read back and priced in write units as DynamoDB does (1 KB each). Before, such a
mail wrote a mail item and a group item, moved the group in the index at its result and
deleted both: 6 table and 4 index units. Now: put, claim, result, 1 unit each, and 2
index units (its put; the result takes it out), the item left to TTL.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from mailqueue.backends.aws.eventlog import ContentHeaders, stored_headers
from mailqueue.backends.aws.items import CLAIM_GROWTH, is_s3_solo, is_solo, object_key
from mailqueue.backends.aws.limits import item_size
from mailqueue.core.events import HEADER_READ_MAX, header_section
from mailqueue.core.model import Claim, GroupState, MailRef, utcnow

from tests.support import factories as f
from tests.support.aws import AwsEnv
from tests.support.faults import InjectedCrash, short_circuit
from tests.test_solo import OK, TEMP, WRITE_UNIT, _indexed, _items, _units


def _objects(aws: AwsEnv) -> list[str]:
    resp = aws.clients.s3.list_objects_v2(Bucket=aws.resources.bucket, Prefix="content/")
    return [o["Key"] for o in resp.get("Contents", [])]


def test_a_one_group_mail_in_s3_is_one_item_with_its_headers(aws: AwsEnv) -> None:
    st = aws.storage()
    body = f.incompressible(40 * 1024)
    aws.counter.reset()
    q = st.enqueue(f.envelope(), body)
    assert aws.counter.snapshot() == {
        "s3:PutObject": 1,
        "dynamodb:PutItem": 1,
        "sqs:SendMessageBatch": 1,
    }
    items = _items(aws, q.mail_id)
    assert list(items) == [f"G#{q.groups[0]}"]  # no mail item
    item = items[f"G#{q.groups[0]}"]
    key = item["content_key"]["S"]
    assert is_s3_solo(key) and is_solo(key)
    assert _objects(aws) == [object_key(key)] and object_key(key).startswith("content/")
    assert "body" not in item and item["hdrs"]["S"].startswith("Subject: noise")
    # within one write unit through its claim
    assert item_size(item) <= WRITE_UNIT - CLAIM_GROWTH
    assert _indexed(aws, q.mail_id) == ["queued"]
    assert not {"env_sha", "sha256", "groups", "rcpt_count"} & set(item)


def test_delivered_it_leaves_the_index_its_object_goes_and_each_write_is_one_unit(
    aws: AwsEnv,
) -> None:
    st = aws.storage()
    body = f.incompressible(40 * 1024)
    q = st.enqueue(f.envelope(), body)
    gk = f"G#{q.groups[0]}"
    put = _items(aws, q.mail_id)[gk]
    aws.counter.reset()
    c = st.send_start(MailRef(q.mail_id, q.groups[0]), utcnow(), lease_seconds=60)
    assert isinstance(c, Claim)
    assert aws.counter.snapshot() == {"dynamodb:UpdateItem": 1}
    claimed = _items(aws, q.mail_id)[gk]
    aws.counter.reset()
    mail = st.read_inflight(c)
    assert mail.content.read() == body and mail.size == len(body)
    t = st.send_done(c, ["r0"], OK)
    assert t.mail_finished and t.cleaned
    # the result, the content's read and its delete: no mail item to read or delete
    calls = aws.counter.snapshot()
    assert calls == {"dynamodb:UpdateItem": 1, "s3:GetObject": 1, "s3:DeleteObject": 1}
    done = _items(aws, q.mail_id)[gk]
    assert not {"st", "due", "hdrs", "body"} & set(done)
    assert int(done["expires_at"]["N"]) <= utcnow().timestamp()
    assert done["rcpts"]["M"]["r0"]["M"]["state"]["S"] == "delivered"
    assert _objects(aws) == [] and _indexed(aws, q.mail_id) == []
    # put, claim, result: a write is priced on the larger of its images
    units = [_units(item_size(put)), _units(max(item_size(put), item_size(claimed)))]
    units.append(_units(max(item_size(claimed), item_size(done))))
    assert units == [1, 1, 1], units
    assert list(st.find_pending_cleanup(utcnow() + timedelta(hours=1), orphans=False)) == []
    _, groups = st.get_mail(q.mail_id)
    assert [g.state for g in groups] == [GroupState.DONE]


def test_readers_see_an_s3_solo_mail_as_a_mail(aws: AwsEnv) -> None:
    """get_mail, read_content, content_exists, the events function's header readers."""
    st = aws.storage()
    body = f.incompressible(20 * 1024, subject="solo in s3")
    q = st.enqueue(f.envelope(), body)
    mail, groups = st.get_mail(q.mail_id)
    assert mail is not None and is_s3_solo(mail["content_key"])
    assert mail["groups"] == list(q.groups) and mail["rcpt_count"] == 1
    assert int(mail["size"]) == len(body)
    assert [g.key for g in groups] == list(q.groups)
    assert st.content_exists(q.mail_id)
    assert st.read_content(q.mail_id).read() == body
    # the events function: the Send's headers from the INSERT image, or one ranged GET
    item = _items(aws, q.mail_id)[f"G#{q.groups[0]}"]
    rec = {"eventName": "INSERT", "dynamodb": {"NewImage": item}}
    assert stored_headers([rec]) == {q.mail_id: header_section(body)}
    reader = ContentHeaders(aws.clients.s3, aws.resources.bucket)
    assert reader.read(mail["content_key"]) == body[:HEADER_READ_MAX]


def test_a_deferred_s3_solo_mail_stays_one_item_and_its_retry_reads_the_object(
    aws: AwsEnv,
) -> None:
    st = aws.storage()
    body = f.incompressible(30 * 1024)
    q = st.enqueue(f.envelope(), body)
    ref = MailRef(q.mail_id, q.groups[0])
    gk = f"G#{q.groups[0]}"
    c = st.send_start(ref, utcnow(), lease_seconds=60)
    assert isinstance(c, Claim)
    claimed = _items(aws, q.mail_id)[gk]
    assert "hdrs" in claimed
    t = st.reschedule(c, {"r0": TEMP}, utcnow() + timedelta(seconds=1))
    assert t.group.state == GroupState.QUEUED and not t.cleaned
    assert list(_items(aws, q.mail_id)) == [gk]
    # the header section served the Send (the INSERT's image): the first result drops
    # it, so the reschedule, priced on the larger image, stays one write unit
    deferred = _items(aws, q.mail_id)[gk]
    assert "hdrs" not in deferred
    assert _units(max(item_size(claimed), item_size(deferred))) == 1
    assert len(_objects(aws)) == 1
    c2 = st.send_start(ref, utcnow() + timedelta(seconds=2), lease_seconds=60)
    assert isinstance(c2, Claim)
    assert st.read_inflight(c2).content.read() == body
    st.send_done(c2, ["r0"], OK)
    assert _objects(aws) == []


def test_an_object_left_by_a_cut_short_delete_is_an_orphan_once_the_item_expired(
    aws: AwsEnv,
) -> None:
    """The result is recorded, the DeleteObject after it never happens: the finished item
    is out of the index (the sweeper's cleanup pass cannot see it), so the orphan finder
    must treat the expired item as gone and remove the object, then the item."""
    st = aws.storage()
    q = st.enqueue(f.envelope(), f.incompressible(20 * 1024))
    c = st.send_start(MailRef(q.mail_id, q.groups[0]), utcnow(), lease_seconds=60)
    assert isinstance(c, Claim)

    def die(_: dict[str, Any]) -> None:
        raise InjectedCrash("stop before the object's delete")

    with short_circuit(aws.clients.s3, "DeleteObject", die), pytest.raises(InjectedCrash):
        st.send_done(c, ["r0"], OK)
    assert len(_objects(aws)) == 1
    # within the grace: nothing to do yet
    assert list(st.find_pending_cleanup(utcnow() + timedelta(hours=1))) == []
    found = list(st.find_pending_cleanup(utcnow() + timedelta(hours=37)))
    assert [(p.mail_id, p.reason) for p in found] == [(q.mail_id, "orphan")]
    assert st.cleanup(q.mail_id)
    assert _objects(aws) == [] and _items(aws, q.mail_id) == {}


def test_a_queued_s3_solo_mail_is_never_an_orphan(aws: AwsEnv) -> None:
    st = aws.storage()
    q = st.enqueue(f.envelope(), f.incompressible(20 * 1024))
    assert list(st.find_pending_cleanup(utcnow() + timedelta(days=30))) == []
    assert st.content_exists(q.mail_id)


@pytest.mark.parametrize(
    ("why", "kw", "envelope"),
    [
        ("keyed", {"idempotency_key": "k-s3"}, ("bob@example.net",)),
        ("two groups", {}, ("bob@example.net", "carol@example.com")),
    ],
)
def test_what_is_not_an_s3_solo_keeps_its_mail_item(
    aws: AwsEnv, why: str, kw: dict[str, str], envelope: tuple[str, ...]
) -> None:
    st = aws.storage()
    q = st.enqueue(f.envelope(*envelope), f.incompressible(20 * 1024), **kw)  # type: ignore[arg-type]
    items = _items(aws, q.mail_id)
    assert "M" in items, why
    assert not any(is_solo(it["content_key"]["S"]) for it in items.values())


def test_the_largest_group_in_s3_is_one_item_delivered_and_recorded_once(aws: AwsEnv) -> None:
    """The edge: a group of `group_recipient_limit` recipients with long addresses and
    content in S3 (no key) is one item of many write units, without `hdrs` (no room in
    its first unit), delivered with one claim and one result, then out of the index."""
    st = aws.storage()
    n = st.group_recipient_limit
    rcpts = tuple(f"{'r' * 60}{i:02d}@{'d' * 40}.example" for i in range(n))
    body = f.incompressible(60 * 1024)
    q = st.enqueue(f.envelope(*rcpts), body)
    assert len(q.groups) == 1
    gk = f"G#{q.groups[0]}"
    items = _items(aws, q.mail_id)
    assert list(items) == [gk]
    item = items[gk]
    assert is_s3_solo(item["content_key"]["S"]) and "hdrs" not in item
    assert len(item["rcpts"]["M"]) == n and item_size(item) > WRITE_UNIT
    c = st.send_start(MailRef(q.mail_id, q.groups[0]), utcnow(), lease_seconds=60)
    assert isinstance(c, Claim)
    assert st.read_inflight(c).content.read() == body
    t = st.send_done(c, [r.rid for r in c.group.recipients], OK)
    assert t.mail_finished and t.cleaned
    done = _items(aws, q.mail_id)[gk]
    states = {r["M"]["state"]["S"] for r in done["rcpts"]["M"].values()}
    assert states == {"delivered"} and "st" not in done
    assert _objects(aws) == [] and _indexed(aws, q.mail_id) == []
