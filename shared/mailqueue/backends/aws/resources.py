"""Creates the queue's resources directly (tests and the bootstrap `make run`).

The same names, keys and index as template.yaml declares; `tests/test_template.py` checks
the two agree.
"""

from __future__ import annotations

from dataclasses import dataclass

from mailqueue.backends.aws.clients import AwsClients

TABLE_ATTRIBUTES = [
    {"AttributeName": "pk", "AttributeType": "S"},
    {"AttributeName": "sk", "AttributeType": "S"},
    {"AttributeName": "st", "AttributeType": "S"},
    {"AttributeName": "due", "AttributeType": "N"},
]
TABLE_KEYS = [
    {"AttributeName": "pk", "KeyType": "HASH"},
    {"AttributeName": "sk", "KeyType": "RANGE"},
]
STATE_INDEX = {
    "IndexName": "by_state",
    "KeySchema": [
        {"AttributeName": "st", "KeyType": "HASH"},
        {"AttributeName": "due", "KeyType": "RANGE"},
    ],
    "Projection": {"ProjectionType": "KEYS_ONLY"},
}


@dataclass(frozen=True, slots=True)
class CreatedResources:
    table: str
    bucket: str
    delivery_queue_url: str
    bounce_queue_url: str
    delivery_dlq_url: str
    bounce_dlq_url: str
    bulk_delivery_queue_url: str = ""  # the bulk path (Priority.BULK); "" = none
    bulk_delivery_dlq_url: str = ""


def create_resources(
    clients: AwsClients,
    *,
    prefix: str = "mailqueue",
    delivery_visibility: int = 1800,
    bounce_visibility: int = 1800,
) -> CreatedResources:
    table = f"{prefix}-state"
    bucket = f"{prefix}-content"
    clients.dynamodb.create_table(
        TableName=table,
        AttributeDefinitions=TABLE_ATTRIBUTES,
        KeySchema=TABLE_KEYS,
        GlobalSecondaryIndexes=[STATE_INDEX],
        BillingMode="PAY_PER_REQUEST",
        StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"},
    )
    clients.s3.create_bucket(Bucket=bucket)
    urls: dict[str, str] = {}
    for name, vis in (
        ("delivery", delivery_visibility),
        ("delivery-bulk", delivery_visibility),
        ("bounce", bounce_visibility),
    ):
        dlq = clients.sqs.create_queue(QueueName=f"{prefix}-{name}-dlq")["QueueUrl"]
        dlq_arn = clients.sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])[
            "Attributes"
        ]["QueueArn"]
        import json

        url = clients.sqs.create_queue(
            QueueName=f"{prefix}-{name}",
            Attributes={
                "VisibilityTimeout": str(vis),
                "MessageRetentionPeriod": str(14 * 86400),
                "RedrivePolicy": json.dumps(
                    {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 100}
                ),
            },
        )["QueueUrl"]
        urls[name] = url
        urls[f"{name}-dlq"] = dlq
    return CreatedResources(
        table=table,
        bucket=bucket,
        delivery_queue_url=urls["delivery"],
        bounce_queue_url=urls["bounce"],
        delivery_dlq_url=urls["delivery-dlq"],
        bounce_dlq_url=urls["bounce-dlq"],
        bulk_delivery_queue_url=urls["delivery-bulk"],
        bulk_delivery_dlq_url=urls["delivery-bulk-dlq"],
    )
