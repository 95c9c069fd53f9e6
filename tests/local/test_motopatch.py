"""The local stack's moto transaction patch changes cost, not outcomes: patched and
unpatched moto servers (child processes, never this test process's moto) end in the same
table and the same stream after the same transactions, committed and rolled back."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from mailqueue_local.stack import MotoProcess

TABLE = "t"


@pytest.fixture()
def servers(tmp_path: Path) -> Iterator[dict[str, str]]:
    procs = {
        "patched": MotoProcess("127.0.0.1", 0, tmp_path / "patched.log", patched=True),
        "plain": MotoProcess("127.0.0.1", 0, tmp_path / "plain.log", patched=False),
    }
    try:
        yield {name: p.start() for name, p in procs.items()}
    finally:
        for p in procs.values():
            p.stop()
    assert all(p.proc is not None and p.proc.poll() is not None for p in procs.values())


def _clients(endpoint: str) -> tuple[Any, Any]:
    s = boto3.session.Session(
        aws_access_key_id="testing", aws_secret_access_key="testing", region_name="us-east-1"
    )
    return (
        s.client("dynamodb", endpoint_url=endpoint),
        s.client("dynamodbstreams", endpoint_url=endpoint),
    )


def _key(pk: str) -> dict[str, Any]:
    return {"pk": {"S": pk}, "sk": {"S": "x"}}


def _scenario(endpoint: str) -> tuple[list[Any], list[Any], list[str]]:
    ddb, streams = _clients(endpoint)
    ddb.create_table(
        TableName=TABLE,
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ],
        KeySchema=[
            {"AttributeName": "pk", "KeyType": "HASH"},
            {"AttributeName": "sk", "KeyType": "RANGE"},
        ],
        BillingMode="PAY_PER_REQUEST",
        StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"},
    )
    for pk in ("a", "b"):
        ddb.put_item(TableName=TABLE, Item={**_key(pk), "n": {"N": "1"}})

    def update(pk: str, by: int) -> dict[str, Any]:
        return {
            "Update": {
                "TableName": TABLE,
                "Key": _key(pk),
                "UpdateExpression": "SET n = n + :d",
                "ExpressionAttributeValues": {":d": {"N": str(by)}},
            }
        }

    def put_new(pk: str) -> dict[str, Any]:
        return {
            "Put": {
                "TableName": TABLE,
                "Item": {**_key(pk), "n": {"N": "0"}},
                "ConditionExpression": "attribute_not_exists(pk)",
            }
        }

    outcomes = []
    for actions in (
        [update("a", 1), put_new("c")],  # commits
        [update("a", 10), put_new("c")],  # c exists: cancelled, a's update undone
        [
            {"Delete": {"TableName": TABLE, "Key": _key("b")}},
            {
                "ConditionCheck": {
                    "TableName": TABLE,
                    "Key": _key("zz"),
                    "ConditionExpression": "attribute_exists(pk)",
                }
            },
        ],  # cancelled: b stays
        [put_new("d"), {"Put": {"TableName": TABLE, "Item": {**_key("d"), "n": {"N": "9"}}}}],
        [update("b", 5), put_new("e"), update("a", 100)],  # commits
    ):
        try:
            ddb.transact_write_items(TransactItems=actions)
            outcomes.append("ok")
        except ClientError as e:
            reasons = [r.get("Code") for r in e.response.get("CancellationReasons", [])]
            outcomes.append(f"{e.response['Error']['Code']} {reasons}")
    items = sorted(ddb.scan(TableName=TABLE)["Items"], key=lambda i: i["pk"]["S"])
    arn = ddb.describe_table(TableName=TABLE)["Table"]["LatestStreamArn"]
    shard = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"][0]["ShardId"]
    it = streams.get_shard_iterator(StreamArn=arn, ShardId=shard, ShardIteratorType="TRIM_HORIZON")[
        "ShardIterator"
    ]
    records = [
        (r["eventName"], r["dynamodb"]["Keys"], r["dynamodb"].get("NewImage"))
        for r in streams.get_records(ShardIterator=it, Limit=1000)["Records"]
    ]
    return items, records, outcomes


def test_patched_moto_transactions_end_like_unpatched_ones(
    servers: dict[str, str], limits_guard: Any
) -> None:
    # the scenario sends transactions AWS refuses on purpose (one item twice)
    with limits_guard.expect("transact_same_item"):
        patched = _scenario(servers["patched"])
        plain = _scenario(servers["plain"])
    assert patched == plain
    items, records, outcomes = patched
    assert outcomes[0] == "ok" and outcomes[4] == "ok"
    assert all(
        o.startswith(("TransactionCanceledException", "ValidationException")) for o in outcomes[1:4]
    )
    assert {i["pk"]["S"]: i["n"]["N"] for i in items} == {
        "a": "102",
        "b": "6",
        "c": "0",
        "e": "0",
    }
    # the stream holds the committed writes only: 2 puts, then 2 + 3 from the commits
    assert len(records) == 7
