"""What a function's code asks of AWS, as IAM sees it, and what its role allows.

`CallLog` hooks botocore's ``before-parameter-build`` event on a function's own clients (found by
walking its service object, as the handler built it) and records each API call with its
parameters; `required()` maps the calls to IAM (action, resource ARN) pairs, the way IAM
authorises them (HeadObject is s3:GetObject, SendMessageBatch is sqs:SendMessage,
TransactWriteItems is its items' PutItem/UpdateItem, ...). `Policy` evaluates a role's
Allow statements (wildcards in actions and resources; conditions only narrow, and are
not evaluated here).
"""

from __future__ import annotations

import ast
import fnmatch
import json
import types
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from botocore.client import BaseClient

REGION = "us-east-1"
ACCOUNT = "123456789012"

_RENAMED = {
    ("s3", "HeadObject"): "s3:GetObject",
    ("s3", "ListObjectsV2"): "s3:ListBucket",
    ("s3", "ListObjects"): "s3:ListBucket",
    ("sqs", "SendMessageBatch"): "sqs:SendMessage",
    ("sqs", "DeleteMessageBatch"): "sqs:DeleteMessage",
    ("sqs", "ChangeMessageVisibilityBatch"): "sqs:ChangeMessageVisibility",
    ("lambda", "Invoke"): "lambda:InvokeFunction",
}
_LEAVES = (str, bytes, int, float, bool, type(None), type, types.ModuleType, types.FunctionType)
_TRANSACT = {
    "Put": "dynamodb:PutItem",
    "Update": "dynamodb:UpdateItem",
    "Delete": "dynamodb:DeleteItem",
    "ConditionCheck": "dynamodb:ConditionCheckItem",
}


def clients_of(root: Any, _seen: set[int] | None = None, _depth: int = 8) -> Iterator[BaseClient]:
    """Every botocore client reachable from `root`'s attributes (services, adapters)."""
    seen = _seen if _seen is not None else set()
    if _depth <= 0 or id(root) in seen or isinstance(root, _LEAVES):
        return
    seen.add(id(root))
    if isinstance(root, BaseClient):
        yield root
        return
    if isinstance(root, dict):
        children: list[Any] = list(root.values())
    elif isinstance(root, list | tuple | set | frozenset):
        children = list(root)
    else:
        children = list(getattr(root, "__dict__", {}).values())
        for cls in type(root).__mro__:
            for slot in getattr(cls, "__slots__", ()):
                if hasattr(root, slot):
                    children.append(getattr(root, slot))
    for child in children:
        yield from clients_of(child, seen, _depth - 1)


@dataclass
class CallLog:
    calls: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)

    def attach(self, *clients: BaseClient) -> CallLog:
        for c in clients:
            c.meta.events.register("before-parameter-build.*.*", self._on_call)
        return self

    def _on_call(self, model: Any, params: dict[str, Any], **_: Any) -> None:
        self.calls.append((model.service_model.service_name, model.name, params))

    def operations(self) -> set[str]:
        return {f"{svc}:{op}" for svc, op, _ in self.calls}


def queue_arn(url: str) -> str:
    account, name = url.rstrip("/").split("/")[-2:]
    return f"arn:aws:sqs:{REGION}:{account}:{name}"


def table_arn(name: str) -> str:
    return f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{name}"


def required(service: str, op: str, params: dict[str, Any]) -> list[tuple[str, str]]:
    """The IAM (action, resource) pairs one API call needs."""
    action = _RENAMED.get((service, op), f"{service}:{op}")
    if service == "s3":
        bucket = params["Bucket"]
        if action == "s3:ListBucket":
            return [(action, f"arn:aws:s3:::{bucket}")]
        return [(action, f"arn:aws:s3:::{bucket}/{params['Key']}")]
    if service == "sqs":
        return [(action, queue_arn(params["QueueUrl"]))]
    if service == "dynamodb":
        if op == "TransactWriteItems":
            out = []
            for item in params["TransactItems"]:
                [(kind, body)] = item.items()
                out.append((_TRANSACT[kind], table_arn(body["TableName"])))
            return out
        if op in ("BatchWriteItem", "BatchGetItem"):
            return [(action, table_arn(t)) for t in params["RequestItems"]]
        arn = table_arn(params["TableName"])
        if params.get("IndexName"):
            arn += f"/index/{params['IndexName']}"
        return [(action, arn)]
    if service == "secretsmanager":
        sid = params["SecretId"]
        arn = (
            sid
            if sid.startswith("arn:")
            else f"arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:{sid}"
        )
        return [(action, arn)]
    if service == "lambda":
        name = params["FunctionName"]
        arn = (
            name
            if name.startswith("arn:")
            else (f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{name}")
        )
        return [(action, arn)]
    if service == "events" and op == "PutEvents":  # each entry's bus (the default one unnamed)
        out = []
        for e in params["Entries"]:
            bus = e.get("EventBusName") or "default"
            arn = (
                bus
                if bus.startswith("arn:")
                else f"arn:aws:events:{REGION}:{ACCOUNT}:event-bus/{bus}"
            )
            out.append((action, arn))
        return out
    if service == "sns" and op == "Publish":
        return [(action, params["TopicArn"])]
    raise AssertionError(f"no IAM mapping for {service}:{op}: add one to tests/template/iam.py")


@dataclass(frozen=True)
class Statement:
    sid: str
    actions: tuple[str, ...]
    resources: tuple[str, ...]
    conditional: bool

    def allows(self, action: str, resource: str) -> bool:
        return any(fnmatch.fnmatchcase(action.lower(), a.lower()) for a in self.actions) and any(
            fnmatch.fnmatchcase(resource, r) for r in self.resources
        )


@dataclass(frozen=True)
class Policy:
    statements: tuple[Statement, ...]

    @classmethod
    def from_documents(cls, docs: list[Any]) -> Policy:
        out = []
        for doc in docs:
            if isinstance(doc, str):  # moto hands CloudFormation-made documents back as repr
                try:
                    doc = json.loads(doc)
                except ValueError:
                    doc = ast.literal_eval(doc)
            for st in doc["Statement"]:
                assert st["Effect"] == "Allow", st
                out.append(
                    Statement(
                        sid=st["Sid"],
                        actions=tuple(_list(st["Action"])),
                        resources=tuple(_list(st["Resource"])),
                        conditional="Condition" in st,
                    )
                )
        return cls(tuple(out))

    def allows(self, action: str, resource: str) -> bool:
        return any(s.allows(action, resource) for s in self.statements)

    def grants(self) -> Iterator[tuple[Statement, str]]:
        for s in self.statements:
            for a in s.actions:
                yield s, a


def _list(value: Any) -> list[str]:
    return [str(v) for v in (value if isinstance(value, list) else [value])]
