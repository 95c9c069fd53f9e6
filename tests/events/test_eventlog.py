"""Events derived from the table's real change stream (moto), written to S3 as JSON lines."""

from __future__ import annotations

from datetime import timedelta

import pytest
from mailqueue.compose.events import event_writer
from mailqueue.core.model import Claim, MailRef, Result, utcnow
from mailqueue.services.eventlog import (
    EventWriterService,
    EventWriterSettings,
    iter_jsonl,
)

from functions.events import app as events_app
from tests.support import factories as f
from tests.support.aws import AwsEnv
from tests.support.lambda_context import LambdaContext
from tests.support.streams import StreamReader

OK = Result(250, "2.0.0", "Ok: queued as 1", "mx.x.example")
TEMP = Result(451, "4.3.0", "try later", "mx.x.example")
PERM = Result(550, "5.1.1", "user unknown", "mx.x.example")


def _events(aws: AwsEnv) -> list[dict]:  # type: ignore[type-arg]
    out = []
    listing = aws.clients.s3.list_objects_v2(Bucket=aws.resources.bucket, Prefix="events/")
    for obj in listing.get("Contents", []):
        body = aws.clients.s3.get_object(Bucket=aws.resources.bucket, Key=obj["Key"])["Body"]
        out.extend(iter_jsonl(body.read()))
    return out


def _service(aws: AwsEnv) -> EventWriterService:
    return event_writer(
        EventWriterSettings(bucket=aws.resources.bucket, hostname="mq.test"),
        aws.clients.s3,
        aws.clients.dynamodb,
        aws.resources.table,
    )


def test_a_mail_life_becomes_ses_shaped_events(aws: AwsEnv) -> None:
    st = aws.storage()
    reader = StreamReader(aws)
    q = st.enqueue(f.envelope("ok@x.example", "bad@x.example", "slow@x.example"), f.content())
    c = st.send_start(MailRef(q.mail_id, "x.example"), utcnow(), lease_seconds=60)
    assert isinstance(c, Claim)
    st.send_done(c, ["r0"], OK, tls=True)
    st.drop(c, {"r1": PERM})
    st.reschedule(c, {"r2": TEMP}, utcnow() + timedelta(minutes=5))
    records = reader.poll()
    result = events_app.handle({"Records": records}, LambdaContext(), _service(aws))
    assert result["events"] == 4  # one Send for the mail, then one per recipient outcome
    evs = _events(aws)
    kinds = sorted((e["eventType"], _rcpt(e)) for e in evs)
    assert kinds == [
        ("Bounce", "bad@x.example"),
        ("Delivery", "ok@x.example"),
        ("DeliveryDelay", "slow@x.example"),
        ("Send", None),
    ]
    by = {e["eventType"]: e for e in evs}
    assert sorted(by["Send"]["mail"]["destination"]) == [
        "bad@x.example",
        "ok@x.example",
        "slow@x.example",
    ]
    assert by["Delivery"]["delivery"]["smtpResponse"] == "250 Ok: queued as 1"
    att = by["Delivery"]["mailqueue"]["attempt"]
    assert att["number"] == 1 and att["tls"] is True
    b = by["Bounce"]["bounce"]
    assert b["bounceType"] == "Permanent" and b["bounceSubType"] == "NoEmail"
    assert b["bouncedRecipients"][0]["status"] == "5.1.1"
    assert by["DeliveryDelay"]["deliveryDelay"]["delayedRecipients"][0]["status"] == "4.3.0"
    assert all(e["mail"]["messageId"] == q.mail_id for e in evs)
    assert len({e["mailqueue"]["eventId"] for e in evs}) == 4


def _rcpt(e: dict) -> str | None:  # type: ignore[type-arg]
    for obj, key in (
        ("delivery", "recipients"),
        ("bounce", "bouncedRecipients"),
        ("deliveryDelay", "delayedRecipients"),
    ):
        if obj in e:
            r = e[obj][key][0]
            return r if isinstance(r, str) else r["emailAddress"]
    return None


def test_a_retried_batch_overwrites_instead_of_duplicating(aws: AwsEnv) -> None:
    st = aws.storage()
    reader = StreamReader(aws)
    st.enqueue(f.envelope("a@x.example", "b@y.example"), f.content())
    records = reader.poll()
    svc = _service(aws)
    first = svc.handle(records)
    second = svc.handle(records)  # Lambda retries the same batch
    assert first["objects"] == second["objects"]
    evs = _events(aws)  # one Send for the mail, with both destinations, written once
    assert len(evs) == 1 and evs[0]["eventType"] == "Send"
    assert sorted(evs[0]["mail"]["destination"]) == ["a@x.example", "b@y.example"]


def test_events_are_partitioned_by_date_and_hour(aws: AwsEnv) -> None:
    st = aws.storage()
    reader = StreamReader(aws)
    st.enqueue(f.envelope(), f.content())
    out = _service(aws).handle(reader.poll())
    (key,) = out["objects"]
    now = utcnow()
    assert key.startswith(f"events/dt={now:%Y-%m-%d}/hr=") and key.endswith(".json.gz")


def test_the_writer_writes_nothing_to_the_table(aws: AwsEnv) -> None:
    """No queue-size counters any more (size reads the index): a batch costs the event
    log's PUT and no DynamoDB request at all."""
    st = aws.storage()
    reader = StreamReader(aws)
    st.enqueue(f.envelope("a@x.example", "b@x.example", "c@y.example"), f.content())
    records = reader.poll()
    aws.counter.reset()
    _service(aws).handle(records)
    assert not [k for k in aws.counter.calls if k.startswith("dynamodb:")]
    assert aws.counter.calls["s3:PutObject"] == 1


def _send(aws: AwsEnv) -> dict:  # type: ignore[type-arg]
    (send,) = [e for e in _events(aws) if e["eventType"] == "Send"]
    return send


def _mail_item(aws: AwsEnv, mail_id: str) -> dict:  # type: ignore[type-arg]
    got = aws.clients.dynamodb.get_item(
        TableName=aws.resources.table,
        Key={"pk": {"S": f"M#{mail_id}"}, "sk": {"S": "M"}},
        ConsistentRead=True,
    )
    return dict(got["Item"])


def _holder(aws: AwsEnv, mail_id: str, solo: bool) -> dict:  # type: ignore[type-arg]
    """The item holding a mail's fields: its mail item, or an S3 solo's only group item."""
    if not solo:
        return _mail_item(aws, mail_id)
    (item,) = aws.mail_items(mail_id).values()
    return dict(item)


@pytest.mark.parametrize("solo", [False, True])
def test_send_headers_come_from_the_mail_item_without_an_s3_get(aws: AwsEnv, solo: bool) -> None:
    """The header section is stored on the mail item (`hdrs`), or on an S3 solo mail's
    one item, while it stays within one write unit (an S3 solo's through its claim); its
    INSERT in the batch gives the Send its headers with no S3 request, and the same
    headers as the ranged GET of the content. (A keyed mail keeps its mail item.)"""
    from mailqueue.backends.aws.items import CLAIM_GROWTH
    from mailqueue.backends.aws.limits import item_size

    st = aws.storage(inline_content_max_bytes=0)  # content in S3
    reader = StreamReader(aws)
    kw = {} if solo else {"idempotency_key": "hdrs-1"}
    q = st.enqueue(f.envelope(), f.content(subject="stored"), **kw)  # type: ignore[arg-type]
    item = _holder(aws, q.mail_id, solo)
    assert "hdrs" in item and item_size(item) <= 1024 - (CLAIM_GROWTH if solo else 0)
    records = reader.poll()
    aws.counter.reset()
    _service(aws).handle(records)
    assert aws.counter.calls["s3:GetObject"] == 0
    send = _send(aws)
    assert send["mail"]["commonHeaders"]["subject"] == "stored"
    names = [h["name"] for h in send["mail"]["headers"]]
    assert names == ["From", "To", "Subject", "Message-ID", "Date"]
    assert send["mail"]["headersTruncated"] is False
    # the same Send from the content (the GET path: no stored header section)
    for key in [
        o["Key"]
        for o in aws.clients.s3.list_objects_v2(Bucket=aws.resources.bucket, Prefix="events/")[
            "Contents"
        ]
    ]:
        aws.clients.s3.delete_object(Bucket=aws.resources.bucket, Key=key)
    groups_only = [r for r in records if r["dynamodb"]["Keys"]["sk"]["S"] != "M"]
    for r in groups_only:
        (r["dynamodb"].get("NewImage") or {}).pop("hdrs", None)
    aws.counter.reset()
    _service(aws).handle(groups_only)
    assert aws.counter.calls["s3:GetObject"] == 1
    assert _send(aws)["mail"]["headers"] == send["mail"]["headers"]


@pytest.mark.parametrize("solo", [False, True])
def test_large_headers_stay_off_the_mail_item(aws: AwsEnv, solo: bool) -> None:
    """Headers too large for the mail item's write unit even compressed are not stored
    (a second write unit on its put and delete would cost more than the GET saved); the
    Send still gets them, from the content."""
    import random

    from mailqueue.backends.aws.limits import item_size

    rng = random.Random(1)
    noise = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(3000))
    big = "".join(
        f"X-Noise-{i}: {noise[i * 500 : (i + 1) * 500]}\r\n" for i in range(6)
    ).encode() + f.content(subject="big")
    st = aws.storage(inline_content_max_bytes=0)  # content in S3
    reader = StreamReader(aws)
    kw = {} if solo else {"idempotency_key": "hdrs-2"}
    q = st.enqueue(f.envelope(), big, **kw)  # type: ignore[arg-type]
    item = _holder(aws, q.mail_id, solo)
    assert "hdrs" not in item and item_size(item) <= 1024
    aws.counter.reset()
    _service(aws).handle(reader.poll())
    assert aws.counter.calls["s3:GetObject"] == 1
    send = _send(aws)
    assert send["mail"]["commonHeaders"]["subject"] == "big"
    assert send["mail"]["headers"][0]["name"] == "X-Noise-0"


@pytest.mark.parametrize("solo", [False, True])
def test_send_headers_of_a_small_mail_come_from_its_content_in_the_insert(
    aws: AwsEnv, solo: bool
) -> None:
    """A small mail's content is in its mail item (`body`), or in its only group item (a
    solo mail); that INSERT in the batch gives the Send its headers with no read at all
    (no GetItem, no GET), no `hdrs` besides."""
    st = aws.storage(solo_item_max_bytes=896 if solo else 0)
    reader = StreamReader(aws)
    q = st.enqueue(f.envelope(), f.content(subject="inline"))
    if solo:
        item = aws.clients.dynamodb.get_item(
            TableName=aws.resources.table,
            Key={"pk": {"S": f"M#{q.mail_id}"}, "sk": {"S": f"G#{q.groups[0]}"}},
        )["Item"]
        assert "Item" not in aws.clients.dynamodb.get_item(
            TableName=aws.resources.table, Key={"pk": {"S": f"M#{q.mail_id}"}, "sk": {"S": "M"}}
        )
    else:
        item = _mail_item(aws, q.mail_id)
    assert "body" in item and "hdrs" not in item
    records = reader.poll()
    aws.counter.reset()
    _service(aws).handle(records)
    assert aws.counter.total == 1 and aws.counter.calls["s3:PutObject"] == 1  # the log
    send = _send(aws)
    assert send["mail"]["commonHeaders"]["subject"] == "inline"
    assert [h["name"] for h in send["mail"]["headers"]] == [
        "From",
        "To",
        "Subject",
        "Message-ID",
        "Date",
    ]


def test_header_sections_are_packed_as_text_or_compressed() -> None:
    from mailqueue.core.events import header_section, pack_headers, unpack_headers

    msg = b"Subject: a\r\nTo: b@example.net\r\n\r\nbody\r\n"
    assert header_section(msg) == b"Subject: a\r\nTo: b@example.net\r\n\r\n"
    assert header_section(b"Subject: a\n\nbody") == b"Subject: a\n\n"
    assert pack_headers(msg, 100) == "Subject: a\r\nTo: b@example.net\r\n\r\n"
    assert pack_headers(msg, 10) is None
    # too long as text, short compressed: stored compressed
    long = b"Subject: " + b"ab" * 400 + b"\r\n\r\n"
    packed = pack_headers(long, 200)
    assert isinstance(packed, bytes) and unpack_headers(packed) == long
    # not UTF-8: compressed, whatever the room
    latin = b"Subject: caf\xe9\r\n\r\n"
    packed = pack_headers(latin, 1000)
    assert isinstance(packed, bytes) and unpack_headers(packed) == latin


def test_send_headers_of_a_content_item_mail_come_from_its_group_item(aws: AwsEnv) -> None:
    """A one-group mail over one write unit keeps its content in a content item (issue
    40), which the stream's filter leaves out; its group item carries the header section
    (`hdrs`), so the Send needs no read of the content."""
    st = aws.storage()
    reader = StreamReader(aws)
    body = f.incompressible(1500)
    q = st.enqueue(f.envelope(), body)
    item = aws.clients.dynamodb.get_item(
        TableName=aws.resources.table,
        Key={"pk": {"S": f"M#{q.mail_id}"}, "sk": {"S": f"G#{q.groups[0]}"}},
    )["Item"]
    assert item["content_key"]["S"].endswith("|C") and "hdrs" in item and "body" not in item
    records = reader.poll()
    aws.counter.reset()
    _service(aws).handle(records)
    assert aws.counter.total == 1 and aws.counter.calls["s3:PutObject"] == 1  # the log
    send = _send(aws)
    subject = next(h["value"] for h in send["mail"]["headers"] if h["name"] == "Subject")
    assert send["mail"]["commonHeaders"]["subject"] == subject
    assert send["mail"]["messageId"] and send["mail"]["source"] == "alice@example.org"
