"""Reads the table's DynamoDB stream from the moto server, as Lambda would hand it over.

`StreamReader(env).poll()` returns the records written since the previous poll, shaped
like the records of a Lambda DynamoDB stream event (`eventID`, `eventName`,
`eventSourceARN`, `dynamodb.Keys/NewImage/OldImage/SequenceNumber`), so stream consumers
(the event writer) are tested with what they will really receive.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from tests.support.aws import REGION, AwsEnv, session


class StreamReader:
    def __init__(self, env: AwsEnv, table: str | None = None) -> None:
        self.client = session().client(
            "dynamodbstreams", endpoint_url=env.endpoint, region_name=REGION
        )
        name = table or env.resources.table
        desc = env.clients.dynamodb.describe_table(TableName=name)["Table"]
        self.stream_arn: str = desc["LatestStreamArn"]
        self._iterators: dict[str, str] = {}

    def _shards(self) -> list[str]:
        desc = self.client.describe_stream(StreamArn=self.stream_arn)["StreamDescription"]
        return [s["ShardId"] for s in desc.get("Shards", [])]

    def poll(self, limit: int = 1000) -> list[dict[str, Any]]:
        """Every record not returned before, oldest first."""
        out: list[dict[str, Any]] = []
        for shard in self._shards():
            it = (
                self._iterators.get(shard)
                or self.client.get_shard_iterator(
                    StreamArn=self.stream_arn, ShardId=shard, ShardIteratorType="TRIM_HORIZON"
                )["ShardIterator"]
            )
            while True:
                resp = self.client.get_records(ShardIterator=it, Limit=limit)
                records = resp.get("Records", [])
                it = resp["NextShardIterator"]
                out.extend(self._lambda_shape(r) for r in records)
                if len(records) < limit:
                    break
            self._iterators[shard] = it
        return out

    def _lambda_shape(self, r: dict[str, Any]) -> dict[str, Any]:
        ddb = dict(r["dynamodb"])
        created = ddb.get("ApproximateCreationDateTime")
        if created is not None and not isinstance(created, int | float):
            ddb["ApproximateCreationDateTime"] = int(created.timestamp())
        return {
            "eventID": r["eventID"],
            "eventName": r["eventName"],
            "eventVersion": r.get("eventVersion", "1.1"),
            "eventSource": "aws:dynamodb",
            "awsRegion": r.get("awsRegion", REGION),
            "dynamodb": ddb,
            "eventSourceARN": self.stream_arn,
        }


def batches(records: list[dict[str, Any]], size: int) -> Iterator[list[dict[str, Any]]]:
    """Records cut into Lambda-sized batches."""
    for i in range(0, len(records), size):
        yield records[i : i + size]
