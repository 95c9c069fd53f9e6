"""Content items (issue 40): a one-group mail whose solo item would take more than one
write unit keeps its content in an item of its own (`M#<id>`/`C`), and its group item
stays within one write unit through the claim, the result and a retry.

Against moto under the limits guard (tests/support/aws.py); request counts with the
botocore counter, sizes as DynamoDB prices them (`item_size`, 1 KB a write unit).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from mailqueue.backends.aws.backend import content_item_key, is_content_item
from mailqueue.backends.aws.limits import item_size
from mailqueue.core.config import ConfigError, StorageSettings
from mailqueue.core.errors import NotFound
from mailqueue.core.model import Claim, GroupState, MailRef, RecipientState, Result, utcnow

from tests.support import factories as f
from tests.support.aws import AwsEnv
from tests.support.faults import InjectedCrash, short_circuit

OK = Result(250, "2.0.0", "2.0.0 Ok: queued as 4XyzABCD1234", "mx.example.net")
TEMP = Result(451, "4.7.1", "4.7.1 try again later", "mx.example.net")
PERM = Result(550, "5.1.1", "5.1.1 no such user", "mx.example.net")
UNIT = 1024


def _units(it: dict[str, Any]) -> int:
    return -(-item_size(it) // UNIT)


def _citem(aws: AwsEnv, mail_id: str) -> dict[str, Any] | None:
    return aws.clients.dynamodb.get_item(
        TableName=aws.resources.table,
        Key={"pk": {"S": f"M#{mail_id}"}, "sk": {"S": "C"}},
        ConsistentRead=True,
    ).get("Item")


def _enqueued(aws: AwsEnv, body: bytes | None = None, **kw: Any) -> tuple[Any, bytes, Any]:
    st = aws.storage(**kw)
    body = body if body is not None else f.incompressible(1500)  # a solo item of 2 units
    return st, body, st.enqueue(f.envelope(), body)


def test_a_mail_over_one_unit_is_a_content_item_then_a_group_item_of_one_unit(
    aws: AwsEnv,
) -> None:
    st = aws.storage()
    body = f.incompressible(1500)
    aws.counter.reset()
    before = utcnow()
    q = st.enqueue(f.envelope(), body)
    calls = aws.counter.snapshot()
    assert calls == {"dynamodb:PutItem": 2, "sqs:SendMessageBatch": 1}, calls
    items = aws.mail_items(q.mail_id)
    assert set(items) == {"C", f"G#{q.groups[0]}"}  # no mail item
    group = items[f"G#{q.groups[0]}"]
    assert group["content_key"]["S"] == content_item_key(q.mail_id)
    assert is_content_item(group["content_key"]["S"]) and "body" not in group
    assert _units(group) == 1 and _units(items["C"]) == 2
    # kept for the mail's lifetime and the margin from when it is due, then TTL
    keep = st.s.max_queue_lifetime_seconds + st.s.content_item_margin_seconds
    ttl = int(items["C"]["expires_at"]["N"])
    assert before.timestamp() + keep - 1 <= ttl <= utcnow().timestamp() + keep
    # the group item carries the header section for the Send (no read for it)
    assert "hdrs" in group


def test_the_content_is_written_before_the_group_that_names_it(aws: AwsEnv) -> None:
    """The group's PutItem fails: the content item is there, named by no group and
    expiring; nothing was triggered and the caller is not told the mail was queued."""
    st = aws.storage()
    puts: list[str] = []

    def second_put(params: dict[str, Any]) -> None:
        puts.append(params["Item"]["sk"]["S"])
        if params["Item"]["sk"]["S"].startswith("G#"):
            raise InjectedCrash("died writing the group")

    aws.counter.reset()
    with short_circuit(aws.clients.dynamodb, "PutItem", second_put):
        with pytest.raises(InjectedCrash):
            st.enqueue(f.envelope(), f.incompressible(1500))
    assert puts == ["C", puts[1]] and puts[1].startswith("G#")
    assert "sqs:SendMessageBatch" not in aws.counter.snapshot()
    assert not st.list_queue().items


def test_claim_reads_the_content_once_and_every_group_write_is_one_unit(aws: AwsEnv) -> None:
    st, body, q = _enqueued(aws)
    ref = MailRef(q.mail_id, q.groups[0])
    gk = f"G#{q.groups[0]}"
    c = st.send_start(ref, utcnow(), lease_seconds=60)
    assert isinstance(c, Claim)
    assert _units(aws.mail_items(q.mail_id)[gk]) == 1
    aws.counter.reset()
    assert st.read_inflight(c).content.read() == body
    assert aws.counter.snapshot() == {"dynamodb:GetItem": 1}
    # a retry: the reschedule and the second claim stay within one unit
    st.reschedule(c, {"r0": TEMP}, utcnow() + timedelta(seconds=1))
    assert _units(aws.mail_items(q.mail_id)[gk]) == 1
    c2 = st.send_start(ref, utcnow() + timedelta(seconds=2), lease_seconds=60)
    assert isinstance(c2, Claim)
    assert _units(aws.mail_items(q.mail_id)[gk]) == 1
    assert st.read_inflight(c2).content.read() == body
    t = st.send_done(c2, ["r0"], OK)
    assert t.mail_finished and t.cleaned
    items = aws.mail_items(q.mail_id)
    assert _units(items[gk]) == 1 and "st" not in items[gk]  # out of the index, expired
    # delivered: the content item waits for its TTL, served by no read of the queue
    assert "C" in items
    assert not st.content_exists(q.mail_id)
    with pytest.raises(NotFound):
        st.read_content(q.mail_id)
    assert list(st.find_pending_cleanup(utcnow() + timedelta(hours=1))) == []


def test_content_item_delete_deletes_it_at_the_result(aws: AwsEnv) -> None:
    st, _, q = _enqueued(aws, content_item_delete=True)
    c = st.send_start(MailRef(q.mail_id, q.groups[0]), utcnow(), lease_seconds=60)
    assert isinstance(c, Claim)
    st.read_inflight(c)
    aws.counter.reset()
    st.send_done(c, ["r0"], OK)
    assert aws.counter.snapshot() == {"dynamodb:UpdateItem": 1, "dynamodb:DeleteItem": 1}
    assert _citem(aws, q.mail_id) is None


def test_a_bounced_mail_keeps_its_content_for_the_dsn_then_the_cleanup_deletes_it(
    aws: AwsEnv,
) -> None:
    st, body, q = _enqueued(aws)
    c = st.send_start(MailRef(q.mail_id, q.groups[0]), utcnow(), lease_seconds=60)
    assert isinstance(c, Claim)
    t = st.drop(c, {"r0": PERM})
    assert t.group.state == GroupState.DSN
    assert st.content_exists(q.mail_id)
    assert st.read_content(q.mail_id).read() == body  # what the DSN returns
    t2 = st.dsn_sent(MailRef(q.mail_id, q.groups[0]), ["r0"], "failed")
    assert t2 is not None and t2.mail_finished and t2.cleaned
    assert aws.mail_items(q.mail_id) == {}


def test_a_hold_keeps_the_content_as_long_as_s3_keeps_content(aws: AwsEnv) -> None:
    """An operator hold has no lifetime: the content item is kept
    `content_expiration_days` from the hold, written before the hold."""
    st, body, q = _enqueued(aws)
    ref = MailRef(q.mail_id, q.groups[0])
    first = int(_citem(aws, q.mail_id)["expires_at"]["N"])  # type: ignore[index]
    admin = st.admin_claim(ref, utcnow())
    assert isinstance(admin, Claim)
    order: list[str] = []

    def note(params: dict[str, Any]) -> None:
        order.append(params["Key"]["sk"]["S"])

    with short_circuit(aws.clients.dynamodb, "UpdateItem", note):
        st.mark(
            admin,
            {r.rid: r.with_(state=RecipientState.HELD) for r in admin.unresolved()},
            op={"action": "hold", "actor": "test", "job": None},
        )
    assert order[0] == "C" and order[-1].startswith("G#")
    kept = int(_citem(aws, q.mail_id)["expires_at"]["N"])  # type: ignore[index]
    assert kept >= utcnow().timestamp() + st.s.content_expiration_days * 86400 - 5
    assert kept > first
    assert st.read_content(q.mail_id).read() == body


def test_a_group_held_for_unrecorded_claims_keeps_its_content(aws: AwsEnv) -> None:
    st, _, q = _enqueued(aws)
    ref = MailRef(q.mail_id, q.groups[0])
    now = utcnow()
    for i in range(st.s.max_unrecorded_claims):  # claims that record nothing
        c = st.send_start(ref, now + timedelta(seconds=120 * i), lease_seconds=60)
        assert isinstance(c, Claim), c
    got = st.send_start(
        ref, now + timedelta(seconds=120 * st.s.max_unrecorded_claims), lease_seconds=60
    )
    assert not isinstance(got, Claim) and got.reason == "held"
    kept = int(_citem(aws, q.mail_id)["expires_at"]["N"])  # type: ignore[index]
    assert kept >= utcnow().timestamp() + st.s.content_expiration_days * 86400 - 5


@pytest.mark.parametrize(
    ("why", "kw", "body"),
    [
        ("within one unit: a solo item", {}, None),
        ("content items off", {"content_item_max_bytes": 0}, "big"),
        ("solo off", {"solo_item_max_bytes": 0}, "big"),
        ("content in S3", {"inline_content_max_bytes": 0}, "big"),
        ("past the content item's limit", {"content_item_max_bytes": 1024}, "big"),
    ],
)
def test_what_is_not_a_content_item(
    aws: AwsEnv, why: str, kw: dict[str, Any], body: str | None
) -> None:
    st = aws.storage(**kw)
    q = st.enqueue(f.envelope(), f.content(600) if body is None else f.incompressible(1500))
    items = aws.mail_items(q.mail_id)
    assert "C" not in items, why
    assert not any(is_content_item(it.get("content_key", {}).get("S")) for it in items.values())


def test_content_items_hold_what_s3_held_up_to_their_limit(aws: AwsEnv) -> None:
    """Content past the mail item's 4 KB (zlib) but within the content item's 5 KB is no
    longer an S3 object: one PUT ($5/M) and one GET less."""
    st, body, q = _enqueued(aws, f.incompressible(4500))
    items = aws.mail_items(q.mail_id)
    assert "C" in items and _units(items["C"]) == 5
    assert aws.clients.s3.list_objects_v2(Bucket=aws.resources.bucket).get("KeyCount", 0) == 0
    c = st.send_start(MailRef(q.mail_id, q.groups[0]), utcnow(), lease_seconds=60)
    assert isinstance(c, Claim)
    assert st.read_inflight(c).content.read() == body


def test_the_settings_are_bounded() -> None:
    base = {"table": "t", "bucket": "b", "delivery_queue_url": "d", "bounce_queue_url": "q"}
    for bad in (
        {"content_item_max_bytes": -1},
        {"content_item_max_bytes": 70_000},
        {"content_item_margin_seconds": 60},
        {"max_queue_lifetime_seconds": 0},
        {"content_expiration_days": 1},
    ):
        with pytest.raises(ConfigError):
            StorageSettings(**base, **bad)  # type: ignore[arg-type]


def test_the_events_functions_stream_filter_leaves_content_items_out(aws: AwsEnv) -> None:
    """The template's filter (Lambda event filtering, as bench.model.stream evaluates it)
    passes a group item's INSERT and no content item's INSERT or TTL REMOVE: a content
    item costs the events function nothing."""
    from bench.model.stream import matches
    from bench.model.template import Template

    filters = Template.load().events_filters
    assert filters
    st, _, q = _enqueued(aws)
    items = aws.mail_items(q.mail_id)

    def record(name: str, sk: str) -> dict[str, Any]:
        keys = {"pk": items[sk]["pk"], "sk": items[sk]["sk"]}
        return {"eventName": name, "dynamodb": {"Keys": keys, "NewImage": items[sk]}}

    group = f"G#{q.groups[0]}"
    assert any(matches(flt, record("INSERT", group)) for flt in filters)
    for name in ("INSERT", "REMOVE"):
        assert not any(matches(flt, record(name, "C")) for flt in filters), name
