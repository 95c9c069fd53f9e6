"""Issue 43 item 14: a trigger delivered twice (SQS is at least once; moto's unlocked
ReceiveMessage hands one message to two polls at once) must not lose the group's trigger.

The holder re-arms its trigger by ChangeMessageVisibility on its own receipt handle (the
same message, not a new one: `AwsStorage._rearm`); the copy, refused as ``claimed``,
reported success, so its event source mapping deleted the message (SQS and moto delete on
any receipt handle of a message) after the holder had re-armed it, and the group waited
for the sweeper's lost-trigger pass (15 min). A refused copy now leaves the message as it
is (its record is reported failed: Lambda then neither deletes it nor changes its
visibility), so whatever the holder set stands.

The duplicate is a real one: the same message received twice from the queue (two receipt
handles), each handed to the real delivery handler as Lambda would, the copy while the
holder is in its SMTP transaction (the peer takes 2 s before its 451), the copy's
DeleteMessage done after the holder re-armed, which is the order that lost the trigger."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from mailqueue_local.runtime import LocalContext, sqs_event

from tests.support import factories as f
from tests.support.rigs import RigFactory, relay_to
from tests.support.smtp_peers import Behaviour, SmtpPeer, smtp_sink


@pytest.fixture()
def slow_deferring_peer() -> Iterator[SmtpPeer]:
    with smtp_sink(Behaviour(final_reply="451 4.3.0 try later", data_delay=2.0)) as p:
        yield p


def _esm_delete(sqs: Any, url: str, messages: list[dict[str, Any]], result: Any) -> None:
    """What Lambda's event source mapping does after the invocation: delete the records
    not reported in batchItemFailures."""
    failed = {x["itemIdentifier"] for x in (result or {}).get("batchItemFailures", [])}
    for m in messages:
        if m["MessageId"] not in failed:
            sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])


def _in_queue(sqs: Any, url: str) -> int:
    a = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    return sum(
        int(a[k])
        for k in (
            "ApproximateNumberOfMessages",
            "ApproximateNumberOfMessagesNotVisible",
            "ApproximateNumberOfMessagesDelayed",
        )
    )


def test_a_copy_refused_as_claimed_never_deletes_the_holders_trigger(
    rig: RigFactory, slow_deferring_peer: SmtpPeer
) -> None:
    r = rig(routes=relay_to(slow_deferring_peer.port))
    sqs, url = r.aws.clients.sqs, r.aws.resources.delivery_queue_url
    q = r.storage().enqueue(f.envelope("bob@x.example"), f.content())
    # the same message to two consumers: the first receive leaves it visible
    first = sqs.receive_message(
        QueueUrl=url, VisibilityTimeout=0, AttributeNames=["All"], WaitTimeSeconds=1
    )["Messages"]
    second = sqs.receive_message(
        QueueUrl=url, VisibilityTimeout=300, AttributeNames=["All"], WaitTimeSeconds=1
    )["Messages"]
    assert [m["MessageId"] for m in first] == [m["MessageId"] for m in second]
    assert first[0]["ReceiptHandle"] != second[0]["ReceiptHandle"]
    arn = r.poller.queue_arn  # type: ignore[attr-defined]
    handler = r.poller.handler  # type: ignore[attr-defined]

    holder: list[Any] = []
    a = threading.Thread(
        target=lambda: holder.append(handler(sqs_event(first, arn), LocalContext("delivery", 60)))
    )
    a.start()
    group = q.groups[0]
    deadline = time.monotonic() + 20
    while r.group(q.mail_id, group).lease_until is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert r.group(q.mail_id, group).lease_until is not None, "the holder never claimed"
    copy = handler(sqs_event(second, arn), LocalContext("delivery", 60))  # refused: claimed
    a.join(30)
    assert holder, "the holder's invocation did not finish"
    _esm_delete(sqs, url, first, holder[0])  # the holder kept its record (re-armed)
    _esm_delete(sqs, url, second, copy)  # the copy's mapping, after the re-arm
    g = r.group(q.mail_id, group)
    assert g.state.value == "queued" and g.lease_until is None  # deferred by the 451
    assert _in_queue(sqs, url) == 1, "the group was left without a trigger"
