"""The local stream event source mapping, against moto's DynamoDB stream (server mode)."""

from __future__ import annotations

from typing import Any

import pytest
from mailqueue_local.streams import StreamPoller, stream_arn_of

from tests.support.aws import REGION, AwsEnv, session


class Recorder:
    """A function for the mapping: records batches, fails as told."""

    def __init__(self, fail: Any = None) -> None:
        self.batches: list[list[dict[str, Any]]] = []
        self.fail = fail  # callable(records) -> None | dict (a response) | raises

    def __call__(self, event: dict[str, Any], context: Any) -> Any:
        records = event["Records"]
        self.batches.append(records)
        assert context.get_remaining_time_in_millis() > 0
        return self.fail(records) if self.fail else None

    def keys(self) -> list[list[str]]:
        return [[r["dynamodb"]["Keys"]["sk"]["S"] for r in b] for b in self.batches]


def _put(aws: AwsEnv, *sks: str) -> None:
    for sk in sks:
        aws.clients.dynamodb.put_item(
            TableName=aws.resources.table,
            Item={"pk": {"S": "T#1"}, "sk": {"S": sk}, "v": {"N": "1"}},
        )


def _poller(aws: AwsEnv, fn: Recorder, **kw: Any) -> StreamPoller:
    arn = stream_arn_of(aws.clients.dynamodb, aws.resources.table)
    assert arn is not None
    streams = session().client("dynamodbstreams", endpoint_url=aws.endpoint, region_name=REGION)
    kw.setdefault("retry_delay", lambda n: 0.0)
    return StreamPoller(streams, arn, fn, function_name="mailqueue-events", **kw)


def test_records_arrive_in_order_in_lambda_shape(aws: AwsEnv) -> None:
    fn = Recorder()
    poller = _poller(aws, fn, batch_size=2)
    _put(aws, "a", "b", "c")
    aws.clients.dynamodb.update_item(
        TableName=aws.resources.table,
        Key={"pk": {"S": "T#1"}, "sk": {"S": "a"}},
        UpdateExpression="SET v = :v",
        ExpressionAttributeValues={":v": {"N": "2"}},
    )
    aws.clients.dynamodb.delete_item(
        TableName=aws.resources.table, Key={"pk": {"S": "T#1"}, "sk": {"S": "b"}}
    )
    results = poller.drain()
    assert [r.received for r in results] == [2, 2, 1]
    assert fn.keys() == [["a", "b"], ["c", "a"], ["b"]]
    records = [r for b in fn.batches for r in b]
    assert [r["eventName"] for r in records] == ["INSERT"] * 3 + ["MODIFY", "REMOVE"]
    modify = records[3]
    assert modify["eventSource"] == "aws:dynamodb"
    assert modify["eventSourceARN"] == poller.stream_arn
    assert modify["dynamodb"]["NewImage"]["v"] == {"N": "2"}
    assert modify["dynamodb"]["OldImage"]["v"] == {"N": "1"}
    assert modify["dynamodb"]["StreamViewType"] == "NEW_AND_OLD_IMAGES"
    assert isinstance(modify["dynamodb"]["ApproximateCreationDateTime"], int)
    assert "NewImage" not in records[4]["dynamodb"]
    seqs = [int(r["dynamodb"]["SequenceNumber"]) for r in records]
    assert seqs == sorted(seqs) and len(set(seqs)) == 5
    # nothing new: nothing handed over again
    assert poller.poll_once().received == 0
    _put(aws, "d")
    assert poller.poll_once().received == 1 and fn.keys()[-1] == ["d"]


def test_a_failing_batch_is_retried_from_its_first_record(aws: AwsEnv) -> None:
    calls = {"n": 0}

    def fail_twice(records: list[dict[str, Any]]) -> None:
        calls["n"] += 1
        if calls["n"] <= 2:
            raise RuntimeError("downstream unavailable")

    fn = Recorder(fail_twice)
    poller = _poller(aws, fn)
    _put(aws, "a", "b", "c")
    first = poller.poll_once()
    assert (first.received, first.failed, len(first.errors)) == (3, 3, 1)
    assert poller.poll_once().failed == 3
    assert poller.poll_once().failed == 0
    assert fn.keys() == [["a", "b", "c"]] * 3  # the same batch, in order, until it succeeds
    assert poller.poll_once().received == 0


def test_partial_batch_failure_checkpoints_before_the_failed_record(aws: AwsEnv) -> None:
    def fail_b_once(records: list[dict[str, Any]]) -> dict[str, Any]:
        for r in records:
            if r["dynamodb"]["Keys"]["sk"]["S"] == "b" and not getattr(fail_b_once, "done", False):
                fail_b_once.done = True  # type: ignore[attr-defined]
                return {"batchItemFailures": [{"itemIdentifier": r["dynamodb"]["SequenceNumber"]}]}
        return {"batchItemFailures": []}

    fn = Recorder(fail_b_once)
    poller = _poller(aws, fn)
    _put(aws, "a", "b", "c")
    r = poller.poll_once()
    assert (r.received, r.failed) == (3, 2)
    poller.poll_once()
    assert fn.keys() == [["a", "b", "c"], ["b", "c"]]  # "a" is not handed over again


def test_bisect_isolates_a_bad_record_and_retries_are_bounded(aws: AwsEnv) -> None:
    def poison(records: list[dict[str, Any]]) -> None:
        if any(r["dynamodb"]["Keys"]["sk"]["S"] == "c" for r in records):
            raise ValueError("cannot handle c")

    fn = Recorder(poison)
    poller = _poller(aws, fn, bisect_on_error=True, maximum_retry_attempts=2)
    _put(aws, "a", "b", "c", "d")
    results = poller.drain(max_polls=20)
    assert sum(r.discarded for r in results) >= 1
    handled_ok = [b for b in fn.keys() if "c" not in b]
    assert ["a", "b"] in handled_ok  # the good half went through on its own
    assert any(b == ["c"] for b in fn.keys())  # the bad record isolated
    assert "d" in [k for b in handled_ok for k in b]  # and the stream moved on past it
    assert poller.poll_once().received == 0


def test_stream_arn_is_none_without_a_stream(aws: AwsEnv) -> None:
    aws.clients.dynamodb.create_table(
        TableName="no-stream",
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        BillingMode="PAY_PER_REQUEST",
    )
    assert stream_arn_of(aws.clients.dynamodb, "no-stream") is None
    assert stream_arn_of(aws.clients.dynamodb, aws.resources.table) is not None


def test_bad_configuration_is_refused(aws: AwsEnv) -> None:
    with pytest.raises(ValueError):
        _poller(aws, Recorder(), starting_position="AT_TIMESTAMP")
    with pytest.raises(ValueError):
        _poller(aws, Recorder(), batch_size=0)
