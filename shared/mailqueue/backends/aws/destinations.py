"""The AWS side of event destinations: the outbox queue (SQS), EventBridge and SNS.

EventBridge gets SES's shape in `detail`, with SES's detail-types ("Email Bounced", …:
EventBridge's "Amazon Simple Email Service events" reference) under our own source
(`mailqueue`; `aws.ses` is reserved for AWS). SNS gets the event as the message, as SES's
configuration-set SNS destinations publish it, with the event type as a message attribute
for subscription filter policies."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from mailqueue.core.errors import TransientStorageError
from mailqueue.services.destinations import (
    EVENTBRIDGE_SOURCE,
    MAX_MESSAGE_BYTES,
    Destination,
    DestinationError,
    Envelope,
)

#: SES's EventBridge detail-type per event type; ours keep their own name
DETAIL_TYPES = {
    "Send": "Email Sent",
    "Delivery": "Email Delivered",
    "Bounce": "Email Bounced",
    "Complaint": "Email Complaint Received",
    "Reject": "Email Rejected",
    "DeliveryDelay": "Email Delivery Delayed",
    "Subscription": "Email Subscribed",
}
SQS_BATCH = 10
SQS_BATCH_BYTES = 256 * 1024  # SendMessageBatch: 10 messages and 256 KiB in all


def entry_bytes(entry: dict[str, Any]) -> int:
    """A PutEvents entry's size as EventBridge counts it ("Calculating Amazon EventBridge
    PutEvents event entry size": Time 14 bytes; Source, DetailType, Detail and each of
    Resources their UTF-8 bytes)."""
    n = 14 if entry.get("Time") is not None else 0
    for key in ("Source", "DetailType", "Detail"):
        n += len(str(entry.get(key) or "").encode())
    return n + sum(len(str(r).encode()) for r in entry.get("Resources") or [])


def sns_bytes(message: str, attributes: dict[str, Any]) -> int:
    """What SNS checks against the topic's MaximumMessageSize: the body and the message
    attributes (name, type and value of each)."""
    n = len(message.encode())
    for name, a in attributes.items():
        n += len(name.encode()) + len(a["DataType"].encode()) + len(a["StringValue"].encode())
    return n


class SqsOutbox:
    """EventOutbox on an SQS queue: SendMessageBatch of at most 10 messages and 256 KiB;
    a message the queue refused is a failure of the whole hand-off (the stream batch is
    retried, and the events de-duplicate on their ids)."""

    def __init__(self, sqs: Any, queue_url: str) -> None:
        self.sqs = sqs
        self.queue_url = queue_url

    def put(self, items: Sequence[Envelope]) -> None:
        batch: list[str] = []
        size = 0
        for env in items:
            body = env.encode()
            n = len(body.encode())
            if batch and (len(batch) == SQS_BATCH or size + n > SQS_BATCH_BYTES):
                self._send(batch)
                batch, size = [], 0
            batch.append(body)
            size += n
        if batch:
            self._send(batch)

    def _send(self, bodies: list[str]) -> None:
        entries = [{"Id": str(i), "MessageBody": b} for i, b in enumerate(bodies)]
        try:
            resp = self.sqs.send_message_batch(QueueUrl=self.queue_url, Entries=entries)
        except (BotoCoreError, ClientError) as e:
            raise TransientStorageError(f"destinations outbox: {e}") from e
        if resp.get("Failed"):
            raise TransientStorageError(f"destinations outbox: {len(resp['Failed'])} refused")


class EventBridgeSender:
    def __init__(self, events: Any) -> None:
        self.events = events

    def send(self, dest: Destination, env: Envelope) -> None:
        entry = {
            "Source": EVENTBRIDGE_SOURCE,
            "DetailType": DETAIL_TYPES.get(env.event_type, env.event_type),
            "Detail": json.dumps(env.event, separators=(",", ":")),
            "EventBusName": dest.target,
            "Resources": [],
        }
        if entry_bytes(entry) > MAX_MESSAGE_BYTES:  # refused by EventBridge, however often
            raise DestinationError(f"eventbridge {dest.name}: entry too large", retry=False)
        try:
            # one entry a call (PutEvents takes up to 10): a failure is this event's alone
            resp = self.events.put_events(Entries=[entry])
        except (BotoCoreError, ClientError) as e:
            raise DestinationError(f"eventbridge {dest.name}: {e}") from e
        if resp.get("FailedEntryCount"):
            code = (resp.get("Entries") or [{}])[0].get("ErrorCode", "failed")
            raise DestinationError(f"eventbridge {dest.name}: {code}")


class SnsSender:
    def __init__(self, sns: Any) -> None:
        self.sns = sns

    def send(self, dest: Destination, env: Envelope) -> None:
        message = json.dumps(env.event, separators=(",", ":"))
        attributes = {
            "eventType": {"DataType": "String", "StringValue": env.event_type},
            "eventId": {"DataType": "String", "StringValue": env.event_id or "-"},
        }
        if sns_bytes(message, attributes) > MAX_MESSAGE_BYTES:  # InvalidParameter, always
            raise DestinationError(f"sns {dest.name}: message too large", retry=False)
        try:
            self.sns.publish(TopicArn=dest.target, Message=message, MessageAttributes=attributes)
        except (BotoCoreError, ClientError) as e:
            raise DestinationError(f"sns {dest.name}: {e}") from e


class SqsRetry:
    """What a failed send does to its message: back after `seconds` (the record's
    visibility), or to the dead-letter queue at once when no retry can help."""

    def __init__(self, sqs: Any, queue_url: str, dead_letter_url: str) -> None:
        self.sqs = sqs
        self.queue_url = queue_url
        self.dead_letter_url = dead_letter_url

    def later(self, receipt_handle: str, seconds: int) -> None:
        try:
            self.sqs.change_message_visibility(
                QueueUrl=self.queue_url, ReceiptHandle=receipt_handle, VisibilityTimeout=seconds
            )
        except (BotoCoreError, ClientError) as e:
            raise TransientStorageError(f"destinations: visibility: {e}") from e

    def dead(self, body: str, receipt_handle: str, reason: str) -> None:
        try:
            self.sqs.send_message(
                QueueUrl=self.dead_letter_url,
                MessageBody=body,
                MessageAttributes={"reason": {"DataType": "String", "StringValue": reason[:256]}},
            )
            self.sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=receipt_handle)
        except (BotoCoreError, ClientError) as e:
            raise TransientStorageError(f"destinations: dead letter: {e}") from e
