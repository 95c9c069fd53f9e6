"""AWS-backend specifics: request counts, batching retries, error mapping, SQS effects."""

from __future__ import annotations

import json
import sys
from datetime import timedelta
from typing import Any

import pytest
from mailqueue.backends.aws.accounting import RequestCounter
from mailqueue.backends.aws.clients import make_clients
from mailqueue.core.errors import PermanentStorageError, TransientStorageError
from mailqueue.core.model import Claim, MailRef, RecipientState, Result, utcnow

from tests.support import factories as f
from tests.support.aws import AwsEnv, make_env, session
from tests.support.faults import short_circuit

OK = Result(250, "2.0.0", "Ok", "mx.example.net")
TEMP = Result(451, "4.3.0", "later", "mx.example.net")


def test_enqueue_one_recipient_10kb_takes_three_requests(aws: AwsEnv) -> None:
    st = aws.storage(inline_content_max_bytes=0)  # content in S3
    aws.counter.reset()
    st.enqueue(f.envelope(), f.content(10 * 1024))
    # one group, no idempotency key: an S3 solo mail, one item (issue 25)
    assert aws.counter.snapshot() == {
        "dynamodb:PutItem": 1,
        "s3:PutObject": 1,
        "sqs:SendMessageBatch": 1,
    }
    assert aws.counter.total <= 3


def test_enqueue_100_recipients_over_10_domains(aws: AwsEnv) -> None:
    st = aws.storage(inline_content_max_bytes=0)
    aws.counter.reset()
    q = st.enqueue(f.envelope(*f.spread(100, 10)), f.content(10 * 1024))
    calls = aws.counter.snapshot()
    assert calls["s3:PutObject"] == 1
    assert calls["dynamodb:BatchWriteItem"] <= 4
    assert calls["sqs:SendMessageBatch"] == 1
    assert len(q.groups) == 10
    msgs = _drain(aws, aws.resources.delivery_queue_url)
    assert sorted(m["group"] for m in msgs) == sorted(q.groups)


def test_claim_to_cleanup_request_count(aws: AwsEnv, capsys: pytest.CaptureFixture[str]) -> None:
    st = aws.storage(inline_content_max_bytes=0)
    q = st.enqueue(f.envelope(), f.content(10 * 1024))
    aws.counter.reset()
    c = st.send_start(MailRef(q.mail_id, q.groups[0]), utcnow(), lease_seconds=60)
    assert isinstance(c, Claim)
    st.read_inflight(c).content.read()
    t = st.send_done(c, ["r0"], OK)
    assert t.cleaned
    calls = aws.counter.snapshot()
    # claim (1 update) + content (1 get) + done (1 update) + content delete (1); an S3
    # solo mail's item is left to TTL (issue 25: it was 1 BatchWriteItem deleting the mail
    # item and the group); a one-group mail needs no finish-check query
    assert calls == {
        "dynamodb:UpdateItem": 2,
        "s3:GetObject": 1,
        "s3:DeleteObject": 1,
    }
    # stderr: an xdist worker's stdout is /dev/null, its stderr is make test's
    with capsys.disabled():
        total = aws.counter.total
        print(f"\n[requests] claim→cleanup of one group: {total} {calls}", file=sys.stderr)


def test_the_last_of_several_groups_checks_the_mail_before_cleanup(aws: AwsEnv) -> None:
    st = aws.storage()
    q = st.enqueue(f.envelope("a@x.example", "b@y.example"), f.content())
    claims = [st.send_start(MailRef(q.mail_id, g), utcnow(), lease_seconds=60) for g in q.groups]
    assert all(isinstance(c, Claim) for c in claims)
    aws.counter.reset()
    first = st.send_done(claims[0], ["r0" if q.groups[0] == "x.example" else "r1"], OK)  # type: ignore[arg-type]
    assert not first.mail_finished and aws.counter.calls["dynamodb:Query"] == 1
    assert st.content_exists(q.mail_id)
    last = st.send_done(claims[1], ["r1" if q.groups[1] == "y.example" else "r0"], OK)  # type: ignore[arg-type]
    assert last.mail_finished and last.cleaned
    assert not st.content_exists(q.mail_id)


def test_unprocessed_items_are_retried_not_dropped(aws: AwsEnv) -> None:
    """The first BatchWriteItem really writes half and reports the other half unprocessed."""
    st = aws.storage()
    plain = make_clients(endpoint_url=aws.endpoint, region="us-east-1", session=session())
    calls = {"n": 0}

    def half(params: dict[str, Any]) -> dict[str, Any] | None:
        calls["n"] += 1
        if calls["n"] > 1:
            return None
        ((table, reqs),) = params["RequestItems"].items()
        keep, rest = reqs[: len(reqs) // 2], reqs[len(reqs) // 2 :]
        plain.dynamodb.batch_write_item(RequestItems={table: keep})
        return {"UnprocessedItems": {table: rest}}

    with short_circuit(aws.clients.dynamodb, "BatchWriteItem", half):
        q = st.enqueue(f.envelope(*f.spread(20, 10)), f.content())
    assert calls["n"] == 2
    _, groups = st.get_mail(q.mail_id)
    assert sorted(g.key for g in groups) == sorted(q.groups) and len(groups) == 10


def test_failed_sqs_batch_entries_are_retried(aws: AwsEnv) -> None:
    st = aws.storage()
    calls = {"n": 0}

    def fail_some(params: dict[str, Any]) -> dict[str, Any] | None:
        calls["n"] += 1
        if calls["n"] > 1:
            return None
        return {
            "Successful": [],
            "Failed": [
                {"Id": e["Id"], "SenderFault": False, "Code": "InternalError"}
                for e in params["Entries"]
            ],
        }

    with short_circuit(aws.clients.sqs, "SendMessageBatch", fail_some):
        q = st.enqueue(f.envelope(*f.spread(3, 3)), f.content())
    assert calls["n"] == 2
    assert sorted(m["group"] for m in _drain(aws, aws.resources.delivery_queue_url)) == sorted(
        q.groups
    )


def test_throttling_maps_to_a_transient_error(moto_endpoint: str) -> None:
    from botocore.exceptions import ClientError

    env = make_env_fresh(moto_endpoint)
    st = env.storage()

    def throttle(params: dict[str, Any]) -> dict[str, Any]:
        raise ClientError(
            {
                "Error": {"Code": "ProvisionedThroughputExceededException", "Message": "slow"},
                "ResponseMetadata": {"HTTPStatusCode": 400},
            },
            "UpdateItem",
        )

    with (
        short_circuit(env.clients.dynamodb, "UpdateItem", throttle),
        pytest.raises(TransientStorageError) as err,
    ):
        st.send_start(MailRef("m", "g"), utcnow(), lease_seconds=60)
    assert isinstance(err.value.__cause__, ClientError)


def test_access_denied_maps_to_a_permanent_error(aws: AwsEnv) -> None:
    from dataclasses import replace

    from mailqueue.backends.aws.backend import AwsStorage

    st = AwsStorage(replace(aws.settings, table="no-such-table"), aws.clients)
    with pytest.raises(PermanentStorageError):
        st.send_start(MailRef("m", "g"), utcnow(), lease_seconds=60)


def test_reschedule_sets_the_trigger_visibility(aws: AwsEnv) -> None:
    st = aws.storage()
    q = st.enqueue(f.envelope(), f.content())
    msg = aws.clients.sqs.receive_message(
        QueueUrl=aws.resources.delivery_queue_url, MaxNumberOfMessages=1, WaitTimeSeconds=1
    )["Messages"][0]
    c = st.send_start(
        MailRef(q.mail_id, q.groups[0]),
        utcnow(),
        lease_seconds=60,
        receipt_handle=msg["ReceiptHandle"],
    )
    assert isinstance(c, Claim)
    aws.counter.reset()
    st.reschedule(c, {"r0": TEMP}, utcnow() + timedelta(hours=20))
    assert aws.counter.calls["sqs:ChangeMessageVisibility"] == 1
    # capped at 12 h: the message is invisible now
    again = aws.clients.sqs.receive_message(
        QueueUrl=aws.resources.delivery_queue_url, MaxNumberOfMessages=1, WaitTimeSeconds=0
    )
    assert "Messages" not in again


def test_send_cancel_makes_the_trigger_visible_again(aws: AwsEnv) -> None:
    st = aws.storage()
    q = st.enqueue(f.envelope(), f.content())
    msg = aws.clients.sqs.receive_message(
        QueueUrl=aws.resources.delivery_queue_url, MaxNumberOfMessages=1, VisibilityTimeout=600
    )["Messages"][0]
    c = st.send_start(
        MailRef(q.mail_id, q.groups[0]),
        utcnow(),
        lease_seconds=60,
        receipt_handle=msg["ReceiptHandle"],
    )
    assert isinstance(c, Claim)
    st.send_cancel(c)
    again = aws.clients.sqs.receive_message(
        QueueUrl=aws.resources.delivery_queue_url, MaxNumberOfMessages=1, WaitTimeSeconds=1
    )
    assert json.loads(again["Messages"][0]["Body"])["mail_id"] == q.mail_id


def test_drop_posts_to_the_bounce_queue(aws: AwsEnv) -> None:
    st = aws.storage()
    q = st.enqueue(f.envelope(), f.content())
    c = st.send_start(MailRef(q.mail_id, q.groups[0]), utcnow(), lease_seconds=60)
    assert isinstance(c, Claim)
    st.drop(c, {"r0": Result(550, "5.1.1", "unknown")})
    msgs = _drain(aws, aws.resources.bounce_queue_url)
    assert msgs == [{"v": 1, "mail_id": q.mail_id, "group": q.groups[0]}]


def test_counter_counts_calls_by_service() -> None:
    c = RequestCounter()
    c.calls.update({"s3:PutObject": 2, "sqs:SendMessageBatch": 1})
    assert c.by_service() == {"s3": 2, "sqs": 1} and c.total == 3


def make_env_fresh(endpoint: str) -> AwsEnv:
    from tests.support.aws import reset_moto

    reset_moto(endpoint)
    return make_env(endpoint)


def _drain(aws: AwsEnv, url: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    while True:
        resp = aws.clients.sqs.receive_message(
            QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=0
        )
        msgs = resp.get("Messages", [])
        if not msgs:
            return out
        for m in msgs:
            out.append(json.loads(m["Body"]))
            aws.clients.sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])


def test_a_dsn_flag_cleared_by_the_bounce_path_mid_attempt_is_not_written_back(
    aws: AwsEnv,
) -> None:
    """A transition writes each changed recipient whole; if the bounce path cleared a
    recipient's `dsn_pending` while the attempt ran (it needs no lease), the write must not
    put the flag back (a second delay DSN), and must still record the attempt."""
    st = aws.storage()
    q = st.enqueue(f.envelope("a@x.example", "b@x.example"), f.content())
    ref = MailRef(q.mail_id, "x.example")
    c1 = st.send_start(ref, utcnow(), lease_seconds=60)
    assert isinstance(c1, Claim)
    temp = Result(451, "4.3.0", "later", "mx.x.example")
    t1 = st.reschedule(c1, {"r0": temp, "r1": temp}, utcnow(), delay_warning=True)
    assert [r.dsn_pending for r in t1.group.recipients] == ["delayed", "delayed"]
    c2 = st.send_start(ref, utcnow() + timedelta(seconds=1), lease_seconds=60)
    assert isinstance(c2, Claim)
    assert st.dsn_sent(ref, ["r0", "r1"], "delayed") is not None  # the bounce path, meanwhile
    ok = Result(250, "2.0.0", "ok", "mx.x.example")
    st.send_done(c2, ["r0"], ok)
    t = st.reschedule(c2, {"r1": temp}, utcnow() + timedelta(minutes=5))
    assert t.released
    stored = {r.rid: r for r in st.get_group(ref).recipients}
    assert stored["r0"].dsn_pending is None and stored["r1"].dsn_pending is None
    assert stored["r0"].attempts == 2 and stored["r1"].attempts == 2
    assert [a.number for a in st.get_group(ref).history] == [1, 2]


def test_a_dsn_flag_still_pending_mid_attempt_is_kept(aws: AwsEnv) -> None:
    """The guard's other side: a flag nobody cleared stays, so its DSN is still sent."""
    st = aws.storage()
    q = st.enqueue(f.envelope("a@x.example"), f.content())
    ref = MailRef(q.mail_id, "x.example")
    c1 = st.send_start(ref, utcnow(), lease_seconds=60)
    assert isinstance(c1, Claim)
    temp = Result(451, "4.3.0", "later", "mx.x.example")
    st.reschedule(c1, {"r0": temp}, utcnow(), delay_warning=True)
    c2 = st.send_start(ref, utcnow() + timedelta(seconds=1), lease_seconds=60)
    assert isinstance(c2, Claim)
    st.reschedule(c2, {"r0": temp}, utcnow() + timedelta(minutes=5))
    assert st.get_group(ref).recipients[0].dsn_pending == "delayed"


def test_a_group_claimed_again_and_again_with_nothing_recorded_is_held(aws: AwsEnv) -> None:
    """The mail-bomb guard: if recording keeps failing after SMTP (a lease expires each
    time and the sweeper hands the group out again), the group is parked for an operator
    after `max_unrecorded_claims` claims rather than sent every lease period forever."""
    st = aws.storage(max_unrecorded_claims=3)
    q = st.enqueue(f.envelope("a@x.example"), f.content())
    ref = MailRef(q.mail_id, "x.example")
    now = utcnow()
    for i in range(3):  # three attempts whose results were never recorded
        c = st.send_start(ref, now + timedelta(seconds=61 * i), lease_seconds=60)
        assert isinstance(c, Claim), c
    refused = st.send_start(ref, now + timedelta(seconds=61 * 3), lease_seconds=60)
    assert not isinstance(refused, Claim) and refused.reason == "held"
    g = st.get_group(ref)
    assert g.state.value == "held"
    item = aws.clients.dynamodb.get_item(
        TableName=aws.settings.table,
        Key={"pk": {"S": f"M#{q.mail_id}"}, "sk": {"S": "G#x.example"}},
    )["Item"]
    assert item["op"]["M"]["actor"]["S"] == "mailqueue:unrecorded-attempts"
    # an operator releases it: the count starts again and delivery can claim it
    admin = st.admin_claim(ref, utcnow())
    assert isinstance(admin, Claim)
    st.mark(admin, {r.rid: r.with_(state=RecipientState.QUEUED) for r in admin.unresolved()})
    again = st.send_start(ref, utcnow() + timedelta(seconds=1), lease_seconds=60)
    assert isinstance(again, Claim)


def test_a_recorded_attempt_resets_the_unrecorded_count(aws: AwsEnv) -> None:
    st = aws.storage(max_unrecorded_claims=2)
    q = st.enqueue(f.envelope("a@x.example"), f.content())
    ref = MailRef(q.mail_id, "x.example")
    temp = Result(451, "4.3.0", "later", "mx.x.example")
    now = utcnow()
    for i in range(4):  # every attempt recorded: never held
        c = st.send_start(ref, now + timedelta(seconds=10 * i), lease_seconds=60)
        assert isinstance(c, Claim), (i, c)
        st.reschedule(c, {"r0": temp}, now + timedelta(seconds=10 * i + 5))
    assert st.get_group(ref).state.value == "queued"


def test_startup_refuses_a_group_size_whose_worst_write_does_not_fit(aws: AwsEnv) -> None:
    """50 fits (the default); 150 would overflow a 4 KB expression or the 400 KB item with
    512-octet replies for everyone, so the storage refuses to start with it."""
    from mailqueue.backends.aws.capacity import max_group_size, worst_case
    from mailqueue.core.config import ConfigError

    st = aws.storage()
    cap = worst_case(st, 50)
    assert cap.ok and cap.update_expression < 4096 and cap.item_bytes < 400 * 1024
    largest = max_group_size(st)
    assert 50 <= largest < 150
    assert not worst_case(st, largest + 1).ok
    with pytest.raises(ConfigError, match=f"largest that fits is {largest}"):
        aws.storage(group_recipient_limit=150)
