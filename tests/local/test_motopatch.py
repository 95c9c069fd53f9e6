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


def _reads(endpoint: str) -> list[Any]:
    """Every item read the queue makes, on items of every attribute type (binary too)."""
    ddb, _ = _clients(endpoint)
    ddb.create_table(
        TableName="r",
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
            {"AttributeName": "st", "AttributeType": "S"},
            {"AttributeName": "due", "AttributeType": "N"},
        ],
        KeySchema=[
            {"AttributeName": "pk", "KeyType": "HASH"},
            {"AttributeName": "sk", "KeyType": "RANGE"},
        ],
        GlobalSecondaryIndexes=[
            {
                "IndexName": "by_state",
                "KeySchema": [
                    {"AttributeName": "st", "KeyType": "HASH"},
                    {"AttributeName": "due", "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "KEYS_ONLY"},
            }
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    for i in range(12):
        item = {
            **_key(f"m{i:02d}"),
            "st": {"S": f"queued#{i % 3}"},
            "due": {"N": str(1000 + i)},
            "body": {"B": bytes(range(i, i + 40))},
            "bs": {"BS": [b"\x00\xff", bytes([i])]},
            "ss": {"SS": ["x", f"y{i}"]},
            "ns": {"NS": ["1", "2.50"]},
            "n": {"N": "-0.125"},
            "l": {"L": [{"NULL": True}, {"BOOL": False}, {"S": "é€\U0001d538"}]},
            "m": {"M": {"e": {"S": ""}, "r": {"M": {"a": {"S": f"u{i}@example.net"}}}}},
        }
        ddb.put_item(TableName="r", Item=item)
    out: list[Any] = []

    def strip(resp: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in resp.items() if k != "ResponseMetadata"}

    out.append(strip(ddb.get_item(TableName="r", Key=_key("m03"), ConsistentRead=True)))
    out.append(strip(ddb.get_item(TableName="r", Key=_key("nope"))))
    got = ddb.batch_get_item(
        RequestItems={
            "r": {"Keys": [_key(f"m{i:02d}") for i in (5, 1, 99)], "ConsistentRead": True}
        }
    )
    got["Responses"]["r"].sort(key=lambda it: it["pk"]["S"])
    out.append(strip(got))
    first = ddb.scan(TableName="r", IndexName="by_state", Limit=5)
    out.append(strip(first))
    out.append(  # the next page, from the cursor
        strip(
            ddb.scan(
                TableName="r", IndexName="by_state", ExclusiveStartKey=first["LastEvaluatedKey"]
            )
        )
    )
    out.append(strip(ddb.scan(TableName="r", ProjectionExpression="pk, body")))
    q = {
        "KeyConditionExpression": "st = :s",
        "ExpressionAttributeValues": {":s": {"S": "queued#1"}},
    }
    out.append(strip(ddb.query(TableName="r", IndexName="by_state", Limit=2, **q)))
    out.append(strip(ddb.query(TableName="r", IndexName="by_state", Select="COUNT", **q)))
    out.append(
        strip(
            ddb.query(
                TableName="r",
                KeyConditionExpression="pk = :p",
                ExpressionAttributeValues={":p": {"S": "m07"}},
            )
        )
    )
    try:  # an error keeps moto's own serializer
        ddb.query(TableName="missing", KeyConditionExpression="pk = :p", **{
            "ExpressionAttributeValues": {":p": {"S": "x"}}})  # fmt: skip
    except ClientError as e:
        out.append(e.response["Error"]["Code"])
    return out


def test_patched_moto_item_answers_parse_like_unpatched_ones(servers: dict[str, str]) -> None:
    """The direct JSON of item answers (install_fast_item_answers) is what moto's own
    serializer sends, as botocore reads it: items, binary values, cursors, counts."""
    patched, plain = _reads(servers["patched"]), _reads(servers["plain"])
    assert patched == plain
    assert patched[0]["Item"]["body"]["B"] == bytes(range(3, 43))
    assert patched[3]["LastEvaluatedKey"] and patched[6]["LastEvaluatedKey"]
    assert {tuple(sorted(e)) for e in patched[3]["Items"] + patched[4]["Items"]} == {
        ("due", "pk", "sk", "st")
    }  # keys only, all 12 entries over the two pages
    assert len(patched[3]["Items"]) + len(patched[4]["Items"]) == 12
    assert patched[7]["Count"] == 4 and patched[-1] == "ResourceNotFoundException"
