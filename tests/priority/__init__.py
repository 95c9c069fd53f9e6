"""Priority (issue 17 item 7): transactional and bulk mail on two delivery paths."""

from __future__ import annotations

import json
from typing import Any

from tests.support.aws import AwsEnv


def queue_depth(aws: AwsEnv, url: str) -> int:
    """Every message the queue holds: visible, in flight and delayed."""
    attrs = aws.clients.sqs.get_queue_attributes(
        QueueUrl=url,
        AttributeNames=[
            "ApproximateNumberOfMessages",
            "ApproximateNumberOfMessagesNotVisible",
            "ApproximateNumberOfMessagesDelayed",
        ],
    )["Attributes"]
    return sum(int(v) for v in attrs.values())


def depths(aws: AwsEnv) -> dict[str, int]:
    r = aws.resources
    return {
        "transactional": queue_depth(aws, r.delivery_queue_url),
        "bulk": queue_depth(aws, r.bulk_delivery_queue_url),
    }


def drain(aws: AwsEnv, url: str) -> list[dict[str, Any]]:
    """The visible trigger bodies of a queue, deleted as read."""
    out: list[dict[str, Any]] = []
    while True:
        resp = aws.clients.sqs.receive_message(
            QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=0
        )
        msgs = resp.get("Messages") or []
        if not msgs:
            return out
        for m in msgs:
            out.append(json.loads(m["Body"]))
            aws.clients.sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
