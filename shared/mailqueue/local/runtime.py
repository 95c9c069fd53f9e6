"""A local Lambda runtime: runs the real handlers with Lambda's trigger semantics.

SQS event source mapping: receive up to `batch_size` messages, invoke the handler with an
SQS event, delete the records not listed in `batchItemFailures` (their visibility stays as
the handler set it), enforce the function timeout through the context's remaining time.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Handler = Callable[[dict[str, Any], Any], Any]


@dataclass
class LocalContext:
    """The parts of Lambda's context object the handlers use."""

    function_name: str
    timeout_seconds: float = 300.0
    memory_limit_in_mb: int = 512
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    started: float = field(default_factory=time.monotonic)

    @property
    def invoked_function_arn(self) -> str:
        return f"arn:aws:lambda:us-east-1:123456789012:function:{self.function_name}"

    @property
    def function_version(self) -> str:
        return "$LATEST"

    @property
    def log_group_name(self) -> str:
        return f"/aws/lambda/{self.function_name}"

    @property
    def log_stream_name(self) -> str:
        return "local"

    def get_remaining_time_in_millis(self) -> int:
        left = self.timeout_seconds - (time.monotonic() - self.started)
        return max(0, int(left * 1000))


def sqs_event(messages: list[dict[str, Any]], queue_arn: str) -> dict[str, Any]:
    """Messages from ReceiveMessage → the Lambda SQS event shape."""
    records = []
    for m in messages:
        attrs = m.get("Attributes", {})
        records.append(
            {
                "messageId": m["MessageId"],
                "receiptHandle": m["ReceiptHandle"],
                "body": m["Body"],
                "attributes": {
                    "ApproximateReceiveCount": attrs.get("ApproximateReceiveCount", "1"),
                    "SentTimestamp": attrs.get("SentTimestamp", "0"),
                    "SenderId": attrs.get("SenderId", "local"),
                    "ApproximateFirstReceiveTimestamp": attrs.get(
                        "ApproximateFirstReceiveTimestamp", "0"
                    ),
                },
                "messageAttributes": {},
                "md5OfBody": m.get("MD5OfBody", ""),
                "eventSource": "aws:sqs",
                "eventSourceARN": queue_arn,
                "awsRegion": "us-east-1",
            }
        )
    return {"Records": records}


@dataclass
class PollResult:
    received: int
    failed: int
    deleted: int
    receipts: list[str]
    error: BaseException | None = None


class SqsPoller:
    """One event source mapping: queue → handler."""

    def __init__(
        self,
        sqs: Any,
        queue_url: str,
        handler: Handler,
        *,
        function_name: str,
        batch_size: int = 10,
        timeout_seconds: float = 300.0,
        wait_seconds: int = 0,
    ) -> None:
        self.sqs = sqs
        self.queue_url = queue_url
        self.handler = handler
        self.function_name = function_name
        self.batch_size = batch_size
        self.timeout_seconds = timeout_seconds
        self.wait_seconds = wait_seconds
        self.queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])[
            "Attributes"
        ]["QueueArn"]

    def poll_once(self) -> PollResult:
        resp = self.sqs.receive_message(
            QueueUrl=self.queue_url,
            MaxNumberOfMessages=self.batch_size,
            WaitTimeSeconds=self.wait_seconds,
            AttributeNames=["All"],
        )
        messages = resp.get("Messages", [])
        if not messages:
            return PollResult(0, 0, 0, [])
        event = sqs_event(messages, self.queue_arn)
        ctx = LocalContext(self.function_name, self.timeout_seconds)
        receipts = [m["ReceiptHandle"] for m in messages]
        try:
            result = self.handler(event, ctx)
        except Exception as e:  # noqa: BLE001 - a crashed invocation: nothing is deleted
            return PollResult(len(messages), len(messages), 0, receipts, e)
        failures = {f["itemIdentifier"] for f in (result or {}).get("batchItemFailures", [])}
        done = [m for m in messages if m["MessageId"] not in failures]
        for i in range(0, len(done), 10):
            chunk = done[i : i + 10]
            self.sqs.delete_message_batch(
                QueueUrl=self.queue_url,
                Entries=[
                    {"Id": str(j), "ReceiptHandle": m["ReceiptHandle"]} for j, m in enumerate(chunk)
                ],
            )
        return PollResult(len(messages), len(failures), len(done), receipts)

    def drain(self, max_polls: int = 100) -> list[PollResult]:
        """Poll until the queue yields nothing visible (tests)."""
        out = []
        for _ in range(max_polls):
            r = self.poll_once()
            if r.received == 0:
                break
            out.append(r)
        return out
