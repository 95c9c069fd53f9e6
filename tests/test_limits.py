"""The limit guard (mailqueue.backends.aws.limits): each documented limit refuses a request over it.

Every case sends a request just over one limit through a real boto3 client to moto (the
session-wide guard of tests/conftest.py is on every client): it must fail with the code
and HTTP 400 the service answers, and be recorded. The same request just at the limit
goes through to moto and succeeds. Where moto itself cannot take the at-limit request
(a 300-action UpdateExpression makes moto's parser recurse to a 500; moto refuses items
over 405,000 bytes where DynamoDB's bound is 409,600) the at-limit side is checked with
`check_request`, the same function the guard runs.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from mailqueue.backends.aws import limits as L
from mailqueue.backends.aws.limits import (
    ServiceLimitExceeded,
    check_request,
    item_size,
    update_operators,
)
from mailqueue_local.limitguard import LimitRecorder, install_guard

from tests.support.aws import REGION, AwsEnv, LimitsCheck

KEY = {"pk": {"S": "p"}, "sk": {"S": "s"}}


def _names(n: int, prefix: str = "a") -> list[str]:
    return [f"{prefix}{i}" for i in range(n)]


# --------------------------------------------------------------------------- the cases
Params = Callable[[AwsEnv, bool], dict[str, Any]]  # (env, over) → the request's parameters


@dataclass(frozen=True)
class Case:
    service: str
    operation: str
    rule: str
    code: str
    params: Params
    under_via_moto: bool = True  # False: the at-limit side is checked by check_request

    @property
    def id(self) -> str:
        return f"{self.service}-{self.operation}-{self.rule}"

    def call(self, env: AwsEnv, params: Mapping[str, Any]) -> Any:
        client = getattr(env.clients, self.service)
        method = re.sub(r"(?<!^)([A-Z])", r"_\1", self.operation).lower()
        return getattr(client, method)(**params)


def ddb(operation: str, rule: str, params: Params, under_via_moto: bool = True) -> Case:
    return Case("dynamodb", operation, rule, "ValidationException", params, under_via_moto)


def sqs(operation: str, rule: str, code: str, params: Params) -> Case:
    return Case("sqs", operation, rule, code, params)


def s3(operation: str, rule: str, code: str, params: Params) -> Case:
    return Case("s3", operation, rule, code, params)


def _cond_of_length(n: int) -> str:
    """A ConditionExpression exactly `n` bytes long."""
    head, tail = "attribute_not_exists(", ")"
    return head + "x" * (n - len(head) - len(tail)) + tail


def _put(env: AwsEnv, item: dict[str, Any], **kw: Any) -> dict[str, Any]:
    return {"TableName": env.resources.table, "Item": item, **kw}


def _substitutions(env: AwsEnv, over: bool) -> dict[str, Any]:
    # names {"#a": "a"} = 3 bytes; six values of ":vN" (3 bytes) + a string
    total = L.DDB_SUBSTITUTIONS_MAX_BYTES + (1 if over else 0) - 3
    each, rest = divmod(total - 6 * 3, 6)
    values = {f":v{i}": {"S": "x" * (each + (rest if i == 0 else 0))} for i in range(6)}
    return {
        "TableName": env.resources.table,
        "Key": KEY,
        "ConditionExpression": "attribute_not_exists(#a) OR #a IN (:v0,:v1,:v2,:v3,:v4,:v5)",
        "ExpressionAttributeNames": {"#a": "a"},
        "ExpressionAttributeValues": values,
    }


def _sets(n: int) -> str:
    return "SET " + ", ".join(f"{a} = :v" for a in _names(n))


def _tx_put(env: AwsEnv, i: int, size: int) -> dict[str, Any]:
    pk = f"p{i:03d}"  # item: pk (2 + 4) + sk (2 + 1) + d (1 + len)
    return {"Put": _put(env, {"pk": {"S": pk}, "sk": {"S": "s"}, "d": {"S": "x" * (size - 10)}})}


def _tx_size(env: AwsEnv, over: bool) -> dict[str, Any]:
    big = 400_000  # under moto's own 405,000-byte item bound
    n, rest = divmod(L.DDB_TRANSACT_MAX_BYTES, big)
    items = [_tx_put(env, i, big) for i in range(n)]
    items.append(_tx_put(env, n, rest + (1 if over else 0)))
    return {"TransactItems": items}


DDB_CASES = [
    ddb(
        "PutItem",
        "expression_length",
        lambda env, over: _put(env, KEY, ConditionExpression=_cond_of_length(4096 + over)),
    ),
    ddb(
        "GetItem",
        "placeholder_length",
        lambda env, over: {
            "TableName": env.resources.table,
            "Key": KEY,
            "ProjectionExpression": "#" + "n" * (254 + over),
            "ExpressionAttributeNames": {"#" + "n" * (254 + over): "a"},
        },
    ),
    ddb("DeleteItem", "substitutions_size", _substitutions),
    ddb(
        "UpdateItem",
        "update_operators",
        lambda env, over: {
            "TableName": env.resources.table,
            "Key": KEY,
            "UpdateExpression": _sets(300 + over),
            "ExpressionAttributeValues": {":v": {"S": "x"}},
        },
        under_via_moto=False,
    ),
    ddb(
        "UpdateItem",
        "path_overlap",
        lambda env, over: {
            "TableName": env.resources.table,
            "Key": KEY,
            "UpdateExpression": "SET #x = :v REMOVE " + ("#y" if over else "b"),
            "ExpressionAttributeNames": {"#x": "a", "#y": "a"} if over else {"#x": "a"},
            "ExpressionAttributeValues": {":v": {"S": "x"}},
        },
    ),
    ddb(
        "GetItem",
        "path_overlap",
        lambda env, over: {
            "TableName": env.resources.table,
            "Key": KEY,
            "ProjectionExpression": "a, a.b" if over else "a, b",
        },
    ),
    ddb(
        "Scan",
        "in_operands",
        lambda env, over: {
            "TableName": env.resources.table,
            "FilterExpression": "a IN (" + ",".join(f":v{i}" for i in range(100 + over)) + ")",
            "ExpressionAttributeValues": {f":v{i}": {"S": str(i)} for i in range(100 + over)},
        },
    ),
    ddb(
        "PutItem",
        "item_size",
        lambda env, over: _put(env, {**KEY, "d": {"S": "x" * (L.DDB_ITEM_MAX_BYTES - 7 + over)}}),
        under_via_moto=False,
    ),
    ddb(
        "UpdateItem",
        "item_size",
        lambda env, over: {
            "TableName": env.resources.table,
            "Key": KEY,
            "UpdateExpression": "SET d = :d",
            "ExpressionAttributeValues": {":d": {"S": "x" * (L.DDB_ITEM_MAX_BYTES - 7 + over)}},
        },
        under_via_moto=False,
    ),
    ddb(
        "GetItem",
        "key_length",
        lambda env, over: {
            "TableName": env.resources.table,
            "Key": {"pk": {"S": "é" * 1024 + "x" * over}, "sk": {"S": "s"}},
        },
    ),
    ddb(
        "DeleteItem",
        "key_length",
        lambda env, over: {
            "TableName": env.resources.table,
            "Key": {"pk": {"S": "p"}, "sk": {"S": "x" * (1024 + over)}},
        },
    ),
    ddb(
        "BatchWriteItem",
        "batch_write_requests",
        lambda env, over: {
            "RequestItems": {
                env.resources.table: [
                    {"PutRequest": {"Item": {"pk": {"S": f"p{i}"}, "sk": {"S": "s"}}}}
                    for i in range(25 + over)
                ]
            }
        },
    ),
    ddb(
        "BatchWriteItem",
        "batch_duplicate_keys",
        lambda env, over: {
            "RequestItems": {
                env.resources.table: [
                    {"PutRequest": {"Item": {**KEY, "n": {"N": "1"}}}},
                    {"DeleteRequest": {"Key": KEY if over else {**KEY, "sk": {"S": "t"}}}},
                ]
            }
        },
    ),
    ddb(
        "BatchGetItem",
        "batch_get_keys",
        lambda env, over: {
            "RequestItems": {
                env.resources.table: {
                    "Keys": [{"pk": {"S": f"p{i}"}, "sk": {"S": "s"}} for i in range(100 + over)]
                }
            }
        },
    ),
    ddb(
        "TransactWriteItems",
        "transact_items",
        lambda env, over: {"TransactItems": [_tx_put(env, i, 20) for i in range(100 + over)]},
    ),
    ddb("TransactWriteItems", "transact_size", _tx_size),
    ddb(
        "TransactWriteItems",
        "transact_same_item",
        lambda env, over: {
            "TransactItems": [
                {"Put": _put(env, {**KEY, "n": {"N": "1"}})},
                {
                    "ConditionCheck": {
                        "TableName": env.resources.table,
                        "Key": KEY if over else {**KEY, "sk": {"S": "other"}},
                        "ConditionExpression": "attribute_not_exists(pk)",
                    }
                },
            ]
        },
    ),
]


def _q(env: AwsEnv) -> str:
    return env.resources.delivery_queue_url


def _receipt(env: AwsEnv) -> str:
    env.clients.sqs.send_message(QueueUrl=_q(env), MessageBody="r")
    got = env.clients.sqs.receive_message(QueueUrl=_q(env), WaitTimeSeconds=1)
    return str(got["Messages"][0]["ReceiptHandle"])


def _visibility(over: bool) -> int:
    """12 h counts from the receipt (SQS, and moto, refuse more in total): a little slack."""
    return L.SQS_VISIBILITY_MAX_SECONDS + 1 if over else L.SQS_VISIBILITY_MAX_SECONDS - 60


def _with_attribute(env: AwsEnv, over: bool) -> dict[str, Any]:
    attr = {"t": {"DataType": "String", "StringValue": "v" * 10}}  # 1 + 6 + 10 bytes
    body = "x" * (L.SQS_MESSAGE_MAX_BYTES - 17 + over)
    return {"QueueUrl": _q(env), "MessageBody": body, "MessageAttributes": attr}


def _batch_of(total: int, n: int = 10) -> list[dict[str, Any]]:
    each, rest = divmod(total, n)
    return [
        {"Id": f"m{i}", "MessageBody": "x" * (each + (rest if i == 0 else 0))} for i in range(n)
    ]


SQS_CASES = [
    sqs(
        "SendMessage",
        "message_size",
        "InvalidParameterValue",
        lambda env, over: {"QueueUrl": _q(env), "MessageBody": "€" * 87381 + "x" * (1 + over)},
    ),
    sqs("SendMessage", "message_size", "InvalidParameterValue", _with_attribute),
    sqs(
        "SendMessage",
        "message_characters",
        "InvalidMessageContents",
        lambda env, over: {
            "QueueUrl": _q(env),
            "MessageBody": "a\x01" if over else "a\t\n\r\ue000",
        },
    ),
    sqs(
        "SendMessage",
        "delay_seconds",
        "InvalidParameterValue",
        lambda env, over: {"QueueUrl": _q(env), "MessageBody": "d", "DelaySeconds": 900 + over},
    ),
    sqs(
        "SendMessageBatch",
        "batch_entries",
        "TooManyEntriesInBatchRequest",
        lambda env, over: {"QueueUrl": _q(env), "Entries": _batch_of(100, 10 + over)},
    ),
    sqs(
        "SendMessageBatch",
        "batch_size",
        "BatchRequestTooLong",
        lambda env, over: {"QueueUrl": _q(env), "Entries": _batch_of(L.SQS_BATCH_MAX_BYTES + over)},
    ),
    sqs(
        "SendMessageBatch",
        "batch_ids_distinct",
        "BatchEntryIdsNotDistinct",
        lambda env, over: {
            "QueueUrl": _q(env),
            "Entries": [
                {"Id": "a", "MessageBody": "1"},
                {"Id": "a" if over else "b", "MessageBody": "2"},
            ],
        },
    ),
    sqs(
        "SendMessageBatch",
        "batch_id_format",
        "InvalidBatchEntryId",
        lambda env, over: {
            "QueueUrl": _q(env),
            "Entries": [{"Id": "i" * (80 + over), "MessageBody": "1"}],
        },
    ),
    sqs(
        "SendMessageBatch",
        "delay_seconds",
        "InvalidParameterValue",
        lambda env, over: {
            "QueueUrl": _q(env),
            "Entries": [{"Id": "a", "MessageBody": "1", "DelaySeconds": 900 + over}],
        },
    ),
    sqs(
        "ChangeMessageVisibility",
        "visibility_timeout",
        "InvalidParameterValue",
        lambda env, over: {
            "QueueUrl": _q(env),
            "ReceiptHandle": _receipt(env),
            "VisibilityTimeout": _visibility(over),
        },
    ),
    sqs(
        "ChangeMessageVisibilityBatch",
        "batch_entries",
        "TooManyEntriesInBatchRequest",
        lambda env, over: {
            "QueueUrl": _q(env),
            "Entries": [
                {"Id": f"e{i}", "ReceiptHandle": f"r{i}", "VisibilityTimeout": 1}
                for i in range(10 + over)
            ],
        },
    ),
    sqs(
        "ChangeMessageVisibilityBatch",
        "visibility_timeout",
        "InvalidParameterValue",
        lambda env, over: {
            "QueueUrl": _q(env),
            "Entries": [
                {"Id": "e", "ReceiptHandle": _receipt(env), "VisibilityTimeout": _visibility(over)}
            ],
        },
    ),
    sqs(
        "DeleteMessageBatch",
        "batch_entries",
        "TooManyEntriesInBatchRequest",
        lambda env, over: {
            "QueueUrl": _q(env),
            "Entries": [{"Id": f"e{i}", "ReceiptHandle": f"r{i}"} for i in range(10 + over)],
        },
    ),
    sqs(
        "ReceiveMessage",
        "receive_max_messages",
        "InvalidParameterValue",
        lambda env, over: {
            "QueueUrl": _q(env),
            "MaxNumberOfMessages": 10 + over,
            "WaitTimeSeconds": 0,
        },
    ),
]


def _long_key(over: bool) -> str:
    return "ü" * 512 + "k" * over  # 1,024 bytes of UTF-8 (512 characters), then one more


def _existing(env: AwsEnv, over: bool) -> dict[str, Any]:
    if not over:
        env.clients.s3.put_object(Bucket=env.resources.bucket, Key=_long_key(False), Body=b"1")
    return {"Bucket": env.resources.bucket, "Key": _long_key(over)}


def _source(env: AwsEnv) -> str:
    env.clients.s3.put_object(Bucket=env.resources.bucket, Key="source", Body=b"1")
    return env.resources.bucket


S3_CASES = [
    s3(
        "PutObject",
        "key_length",
        "KeyTooLongError",
        lambda env, over: {"Bucket": env.resources.bucket, "Key": _long_key(over), "Body": b"x"},
    ),
    s3("GetObject", "key_length", "KeyTooLongError", _existing),
    s3("HeadObject", "key_length", "KeyTooLongError", _existing),
    s3(
        "DeleteObject",
        "key_length",
        "KeyTooLongError",
        lambda env, over: {"Bucket": env.resources.bucket, "Key": _long_key(over)},
    ),
    s3(
        "CopyObject",
        "key_length",
        "KeyTooLongError",
        lambda env, over: {
            "Bucket": _source(env),
            "Key": _long_key(over),
            "CopySource": {"Bucket": env.resources.bucket, "Key": "source"},
        },
    ),
    s3(
        "DeleteObjects",
        "delete_objects_keys",
        "MalformedXML",
        lambda env, over: {
            "Bucket": env.resources.bucket,
            "Delete": {"Objects": [{"Key": f"k{i}"} for i in range(1000 + over)], "Quiet": True},
        },
    ),
]

CASES = DDB_CASES + SQS_CASES + S3_CASES


# --------------------------------------------------------------------------- the proofs
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_each_limit_refuses_a_request_just_over_it(
    case: Case, aws: AwsEnv, limits_guard: LimitsCheck
) -> None:
    params = case.params(aws, True)
    sent = sum(aws.counter.sends.values())
    with limits_guard.expect(case.rule) as seen:
        with pytest.raises(ClientError) as refused:
            case.call(aws, params)
    err = refused.value.response
    assert err["Error"]["Code"] == case.code
    assert err["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert [(v.service, v.operation, v.rule) for v in seen] == [
        (case.service, case.operation, case.rule)
    ]
    assert sum(aws.counter.sends.values()) == sent  # answered here: nothing reached moto
    assert aws.counter.calls[f"{case.service}:{case.operation}"] >= 1


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_request_at_the_limit_passes(case: Case, aws: AwsEnv) -> None:
    params = case.params(aws, False)
    if case.under_via_moto:
        case.call(aws, params)  # the guard let it through and moto took it
    else:
        check_request(case.service, case.operation, params)


def test_a_refused_request_writes_nothing(aws: AwsEnv, limits_guard: LimitsCheck) -> None:
    sqs_ = aws.clients.sqs
    with limits_guard.expect("batch_entries"):
        with pytest.raises(sqs_.exceptions.TooManyEntriesInBatchRequest):
            sqs_.send_message_batch(QueueUrl=_q(aws), Entries=_batch_of(11, 11))
    attrs = sqs_.get_queue_attributes(QueueUrl=_q(aws), AttributeNames=["All"])["Attributes"]
    assert attrs["ApproximateNumberOfMessages"] == "0"


def test_a_swallowed_refusal_still_fails_the_test(aws: AwsEnv, limits_guard: LimitsCheck) -> None:
    """Code that catches the ClientError cannot hide the violation from the teardown check."""
    try:
        aws.clients.s3.put_object(Bucket=aws.resources.bucket, Key="k" * 2000, Body=b"")
    except ClientError:
        pass  # what careless code does
    failures = limits_guard.failures()  # what the teardown of this test would report
    assert len(failures) == 1 and "s3:PutObject key_length" in failures[0]
    limits_guard.unexpected.clear()  # here it was the point


def test_install_guard_on_a_client_answers_before_the_network(limits_guard: LimitsCheck) -> None:
    """A refused request never leaves: the endpoint here has nothing listening."""
    recorder = LimitRecorder()
    plain = boto3.session.Session(
        aws_access_key_id="x", aws_secret_access_key="x", region_name=REGION
    ).client("sqs", endpoint_url="http://127.0.0.1:9")
    install_guard(plain, recorder)
    with limits_guard.expect("batch_ids_distinct") as seen:
        with pytest.raises(plain.exceptions.BatchEntryIdsNotDistinct):
            plain.send_message_batch(
                QueueUrl="http://127.0.0.1:9/1/q",
                Entries=[{"Id": "a", "MessageBody": "1"}, {"Id": "a", "MessageBody": "2"}],
            )
    # the session-wide guard came first on this client and owns the request: one record only
    assert len(seen) == 1 and recorder.peek() == []


# ----------------------------------------------------------- the arithmetic, by the docs
def test_item_size_follows_the_documented_formula() -> None:
    item = {
        "s": {"S": "héllo"},  # 1 + 6
        "n": {"N": "-0012.3400"},  # 1 + (4 significant digits: 2 bytes) + 1
        "b": {"B": b"\x00\x01\x02"},  # 1 + 3
        "t": {"BOOL": True},  # 1 + 1
        "z": {"NULL": True},  # 1 + 1
        "l": {"L": [{"S": "ab"}, {"N": "1"}]},  # 1 + 3 + (1 + 2) + (1 + 2)
        "m": {"M": {"k": {"S": "v"}}},  # 1 + 3 + (1 + 1 + 1)
        "ss": {"SS": ["a", "bc"]},  # 2 + 3
    }
    assert item_size(item) == 7 + 4 + 4 + 2 + 2 + 10 + 7 + 5


def test_operators_are_counted_per_action_arithmetic_and_function() -> None:
    expr = (
        "SET a = :x + :y - :z, b = if_not_exists(b, :z), c = list_append(c, :l) REMOVE d ADD e :one"
    )
    # SET: 3 actions + "+" + "-" + 2 functions; REMOVE: 1; ADD: 1
    assert update_operators(expr) == 3 + 2 + 2 + 1 + 1


@pytest.mark.parametrize(
    ("expression", "names", "overlaps"),
    [
        ("SET #a = :v, #b = :v", {"#a": "x", "#b": "x"}, True),  # one attribute, two names
        ("SET a.b = :v, a.c = :v", {}, False),
        ("SET a[1] = :v REMOVE a[2]", {}, False),
        ("SET a = :v REMOVE a[0]", {}, True),
        ("SET a = a + :v", {}, False),  # read on the right: no overlap
        ("ADD n :one DELETE n :s", {}, True),
    ],
)
def test_overlapping_update_paths(expression: str, names: dict[str, str], overlaps: bool) -> None:
    params = {"TableName": "t", "Key": KEY, "UpdateExpression": expression}
    if names:
        params["ExpressionAttributeNames"] = names
    if overlaps:
        with pytest.raises(ServiceLimitExceeded) as e:
            check_request("dynamodb", "UpdateItem", params)
        assert e.value.rule == "path_overlap" and e.value.code == "ValidationException"
    else:
        check_request("dynamodb", "UpdateItem", params)


def test_a_transaction_put_and_update_of_one_item_is_refused_without_a_schema() -> None:
    """The Put's key is taken from the other actions' Keys when no schema is known."""
    params = {
        "TransactItems": [
            {"Put": {"TableName": "t", "Item": {**KEY, "v": {"S": "1"}}}},
            {
                "Update": {
                    "TableName": "t",
                    "Key": KEY,
                    "UpdateExpression": "SET v = :v",
                    "ExpressionAttributeValues": {":v": {"S": "2"}},
                }
            },
        ]
    }
    with pytest.raises(ServiceLimitExceeded) as e:
        check_request("dynamodb", "TransactWriteItems", params)
    assert e.value.rule == "transact_same_item"


def test_the_sort_key_bound_needs_the_schema() -> None:
    """Without the key schema a 1,025-byte sort key is let through (never a false refusal)."""
    params = {"TableName": "t", "Key": {"pk": {"S": "p"}, "sk": {"S": "x" * 1025}}}
    check_request("dynamodb", "GetItem", params)
    with pytest.raises(ServiceLimitExceeded):
        check_request("dynamodb", "GetItem", params, schemas={"t": ("pk", "sk")})


def test_unknown_services_and_operations_pass() -> None:
    check_request("lambda", "Invoke", {"Payload": b"x" * 10_000_000})
    check_request("sqs", "GetQueueUrl", {"QueueName": "q" * 5000})


def test_the_session_wide_guard_reaches_clients_the_handlers_make(
    moto_endpoint: str, limits_guard: LimitsCheck
) -> None:
    """Handlers build clients from a fresh boto3 session (make_clients): guarded too."""
    from mailqueue.backends.aws.clients import make_clients

    clients = make_clients(endpoint_url=moto_endpoint, region=REGION)
    with limits_guard.expect("key_length"):
        with pytest.raises(ClientError) as refused:
            clients.s3.head_object(Bucket="any", Key="k" * 1025)
    assert refused.value.response["Error"]["Code"] == "KeyTooLongError"
