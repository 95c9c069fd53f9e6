"""Small mails' content in the mail item (issue 18): where it goes, who reads it, what it costs.

Against moto under the limits guard; request counts with the botocore counter.
"""

from __future__ import annotations

import json
import os
import zlib
from pathlib import Path

import pytest
from mailqueue.backends.aws.backend import INLINE_PREFIX, inline_key
from mailqueue.core.config import ConfigError, StorageSettings
from mailqueue.core.errors import Conflict, NotFound
from mailqueue.core.model import Claim, MailRef, Result, utcnow
from mailqueue.services.eventlog import INLINE_PREFIX as EVENTLOG_INLINE_PREFIX

from tests.support import factories as f
from tests.support.aws import AwsEnv

OK = Result(250, "2.0.0", "Ok", "mx.example.net")
PRICES = Path(__file__).resolve().parents[1] / "bench" / "aws-prices.json"


def _items(aws: AwsEnv, mail_id: str) -> dict[str, dict]:  # type: ignore[type-arg]
    return aws.mail_items(mail_id)


def _content_objects(aws: AwsEnv) -> list[str]:
    got = aws.clients.s3.list_objects_v2(Bucket=aws.resources.bucket, Prefix="content/")
    return [o["Key"] for o in got.get("Contents", [])]


def test_a_small_mail_is_queued_in_two_requests_with_its_content_in_the_mail_item(
    aws: AwsEnv,
) -> None:
    st = aws.storage(solo_item_max_bytes=0)  # one group and small: solo (tests/test_solo.py)
    body = f.content(10 * 1024)  # text: compresses to a few hundred bytes
    aws.counter.reset()
    q = st.enqueue(f.envelope(), body)
    assert aws.counter.snapshot() == {"dynamodb:BatchWriteItem": 1, "sqs:SendMessageBatch": 1}
    assert _content_objects(aws) == []
    items = _items(aws, q.mail_id)
    stored = items["M"]["body"]["B"]
    assert zlib.decompress(stored) == body and len(stored) < len(body) // 10
    assert items["M"]["content_key"]["S"] == inline_key(q.mail_id)
    assert all(it["content_key"]["S"].startswith(INLINE_PREFIX) for it in items.values())
    assert "body" not in items[f"G#{q.groups[0]}"]  # never on a group (rewritten, indexed)


def noise(size: int) -> bytes:
    """Random octets in 76-octet lines (no CR/LF inside): what zlib cannot shrink."""
    raw = bytes(b for b in os.urandom(size * 2) if b not in (10, 13))[:size]
    return b"Subject: x\r\n\r\n" + b"".join(
        raw[i : i + 76] + b"\r\n" for i in range(0, len(raw), 76)
    )


def test_incompressible_or_large_content_stays_in_s3(aws: AwsEnv) -> None:
    st = aws.storage(solo_item_max_bytes=0)  # the mail item's content (not a solo item's)
    noise10 = noise(10 * 1024)
    assert len(zlib.compress(noise10, 6)) > 10 * 1024
    aws.counter.reset()
    q = st.enqueue(f.envelope(), noise10)
    assert aws.counter.calls["s3:PutObject"] == 1
    assert _content_objects(aws) == [st.content_key(q.mail_id)]
    assert "body" not in _items(aws, q.mail_id)["M"]
    assert st.read_content(q.mail_id).read() == noise10
    # a small incompressible mail still fits the item (zlib adds a few bytes)
    small = noise(1024)
    q2 = st.enqueue(f.envelope(), small)
    assert "body" in _items(aws, q2.mail_id)["M"]
    assert st.read_content(q2.mail_id).read() == small


def test_claim_to_cleanup_of_a_small_mail_takes_four_requests(aws: AwsEnv) -> None:
    st = aws.storage(solo_item_max_bytes=0)
    body = f.content(10 * 1024)
    q = st.enqueue(f.envelope(), body)
    aws.counter.reset()
    c = st.send_start(MailRef(q.mail_id, q.groups[0]), utcnow(), lease_seconds=60)
    assert isinstance(c, Claim)
    mail = st.read_inflight(c)
    assert mail.content.read() == body and mail.size == len(body)
    t = st.send_done(c, ["r0"], OK)
    assert t.cleaned
    # claim, content (consistent GetItem), done, deletes of mail item (content) + group
    assert aws.counter.snapshot() == {
        "dynamodb:UpdateItem": 2,
        "dynamodb:GetItem": 1,
        "dynamodb:BatchWriteItem": 1,
    }
    assert _items(aws, q.mail_id) == {}
    assert not st.content_exists(q.mail_id)
    with pytest.raises(NotFound):
        st.read_content(q.mail_id)


def test_content_gone_under_a_live_group_is_not_found(aws: AwsEnv) -> None:
    st = aws.storage(solo_item_max_bytes=0)
    q = st.enqueue(f.envelope(), f.content())
    aws.clients.dynamodb.delete_item(
        TableName=aws.resources.table, Key={"pk": {"S": f"M#{q.mail_id}"}, "sk": {"S": "M"}}
    )
    c = st.send_start(MailRef(q.mail_id, q.groups[0]), utcnow(), lease_seconds=60)
    assert isinstance(c, Claim)
    with pytest.raises(NotFound):
        st.read_inflight(c)


def test_readers_other_than_delivery_see_the_content_and_get_mail_hides_it(aws: AwsEnv) -> None:
    st = aws.storage()
    body = f.content(2048, subject="inline")
    q = st.enqueue(f.envelope("a@x.example", "b@y.example"), body)
    assert st.content_exists(q.mail_id)
    assert st.read_content(q.mail_id).read() == body
    mail, groups = st.get_mail(q.mail_id)
    assert mail is not None and "body" not in mail and len(groups) == 2
    # several groups: the content outlives the first finished group, goes with the last
    claims = [st.send_start(MailRef(q.mail_id, g), utcnow(), lease_seconds=60) for g in q.groups]
    assert all(isinstance(c, Claim) for c in claims)
    first = st.send_done(claims[0], [claims[0].group.recipients[0].rid], OK)  # type: ignore[union-attr]
    assert not first.mail_finished and st.read_content(q.mail_id).read() == body
    last = st.send_done(claims[1], [claims[1].group.recipients[0].rid], OK)  # type: ignore[union-attr]
    assert last.cleaned and _items(aws, q.mail_id) == {}


def test_a_keyed_small_mail_writes_its_item_first_and_answers_retries_from_it(
    aws: AwsEnv,
) -> None:
    st = aws.storage()
    body = f.content(3000)
    aws.counter.reset()
    q = st.enqueue(f.envelope(), body, idempotency_key="k-1")
    # conditional PutItem of the mail item (content) replaces GetItem + S3 PutObject
    assert aws.counter.snapshot() == {
        "dynamodb:PutItem": 1,
        "dynamodb:BatchWriteItem": 1,
        "sqs:SendMessageBatch": 1,
    }
    again = st.enqueue(f.envelope(), body, idempotency_key="k-1")
    assert again.duplicate and again.mail_id == q.mail_id
    assert set(_items(aws, q.mail_id)) == {"M", f"G#{q.groups[0]}"}
    with pytest.raises(Conflict):
        st.enqueue(f.envelope(), f.content(3000, subject="other"), idempotency_key="k-1")
    with pytest.raises(Conflict):
        st.enqueue(f.envelope("c@z.example"), body, idempotency_key="k-1")
    # finished: a tombstone without the content answers a late retry
    c = st.send_start(MailRef(q.mail_id, q.groups[0]), utcnow(), lease_seconds=60)
    assert isinstance(c, Claim)
    assert st.send_done(c, ["r0"], OK).cleaned
    items = _items(aws, q.mail_id)
    assert set(items) == {"M"} and "tomb" in items["M"] and "body" not in items["M"]
    late = st.enqueue(f.envelope(), body, idempotency_key="k-1")
    assert late.duplicate and set(_items(aws, q.mail_id)) == {"M"}


def test_a_keyed_retry_after_a_crash_between_item_and_groups_finishes_the_mail(
    aws: AwsEnv,
) -> None:
    st = aws.storage()
    body = f.content(2000)
    q = st.enqueue(f.envelope("a@x.example", "b@y.example"), body, idempotency_key="k-2")
    # as if the first call died after its PutItem: the groups never landed
    for g in q.groups:
        aws.clients.dynamodb.delete_item(
            TableName=aws.resources.table,
            Key={"pk": {"S": f"M#{q.mail_id}"}, "sk": {"S": f"G#{g}"}},
        )
    again = st.enqueue(f.envelope("a@x.example", "b@y.example"), body, idempotency_key="k-2")
    assert again.duplicate
    assert set(_items(aws, q.mail_id)) == {"M", *(f"G#{g}" for g in q.groups)}
    c = st.send_start(MailRef(q.mail_id, q.groups[0]), utcnow(), lease_seconds=60)
    assert isinstance(c, Claim) and st.read_inflight(c).content.read() == body


def test_zero_turns_it_off_and_the_setting_is_bounded(aws: AwsEnv) -> None:
    st = aws.storage(inline_content_max_bytes=0)
    q = st.enqueue(f.envelope(), f.content(100))
    assert _content_objects(aws) == [st.content_key(q.mail_id)]
    with pytest.raises(ConfigError):
        aws.storage(inline_content_max_bytes=70_000)
    assert isinstance(st.s, StorageSettings)


def test_the_default_threshold_is_the_largest_whole_kb_that_pays() -> None:
    """Inline content of c bytes adds at most ceil(c/1 KB) write units to the mail item
    (whose own bytes are < 1 KB), paid on the put and on the delete, and makes each
    consistent read of the item (delivery, the events function's header read) up to
    ceil((1 KB + c)/4 KB) read units; S3 costs a PUT and those two GETs (deletes are
    free). The default is the largest whole KB at which inline is the cheaper."""
    p = json.loads(PRICES.read_text())
    wru = p["dynamodb_on_demand"]["write_request_unit_per_million"]
    rru = p["dynamodb_on_demand"]["read_request_unit_per_million"]
    s3 = p["s3_standard"]["put_copy_post_list_per_1000"] * 1000 + 2 * (
        p["s3_standard"]["get_per_1000"] * 1000
    )

    def inline(c: int) -> float:
        return 2 * -(-c // 1024) * wru + 2 * -(-(1024 + c) // 4096) * rru

    default = StorageSettings.__dataclass_fields__["inline_content_max_bytes"].default
    assert default % 1024 == 0
    assert inline(default) < s3, (inline(default), s3)
    assert inline(default + 1024) > s3, (inline(default + 1024), s3)


def test_the_events_function_knows_the_inline_prefix() -> None:
    assert EVENTLOG_INLINE_PREFIX == INLINE_PREFIX
