"""Ingress test wiring: the real service on the `aws` fixture's moto resources."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import pytest
from mailqueue.core.authz import PERMISSIVE_SENDER_POLICY as PERMISSIVE_SENDERS
from mailqueue.core.events import ListEmitter
from mailqueue.core.model import Claim, MailRef, Result, utcnow
from mailqueue.services.ingress import IngressService, IngressSettings

from functions.ingress import app
from tests.support.aws import AwsEnv, session
from tests.support.lambda_context import LambdaContext

DSN_PRINCIPAL = "arn:aws:sts::123456789012:assumed-role/mailqueue-bounce/bounce"


def stored_once(aws: AwsEnv, mail_id: str, new_objects: set[str]) -> bytes:
    """The mail's content, stored exactly once: in its mail item (small mails) and no S3
    object, or as the one S3 object `content/<id>` and not in the item. Returns it."""
    got = aws.clients.dynamodb.get_item(
        TableName=aws.resources.table,
        Key={"pk": {"S": f"M#{mail_id}"}, "sk": {"S": "M"}},
        ConsistentRead=True,
    )
    inline = "body" in got.get("Item", {})
    key = aws.storage().content_key(mail_id)  # content/<hashed prefix>/<id>
    assert new_objects == (set() if inline else {key}), new_objects
    return bytes(aws.storage().read_content(mail_id).read())


@dataclass
class Trace:
    """Everything the queue stores: content keys, table keys, queued triggers."""

    s3: frozenset[str]
    ddb: frozenset[tuple[str, str]]
    sqs: int

    def new_since(self, before: Trace) -> tuple[set[str], set[tuple[str, str]], int]:
        return set(self.s3 - before.s3), set(self.ddb - before.ddb), self.sqs - before.sqs


def trace(aws: AwsEnv) -> Trace:
    keys: set[str] = set()
    for page in aws.clients.s3.get_paginator("list_objects_v2").paginate(
        Bucket=aws.resources.bucket
    ):
        keys.update(o["Key"] for o in page.get("Contents", []))
    items: set[tuple[str, str]] = set()
    for page in aws.clients.dynamodb.get_paginator("scan").paginate(
        TableName=aws.resources.table, ProjectionExpression="pk, sk"
    ):
        items.update((it["pk"]["S"], it["sk"]["S"]) for it in page["Items"])
    msgs = 0
    for url in (
        aws.resources.delivery_queue_url,
        aws.resources.bulk_delivery_queue_url,  # priority: the bulk path
        aws.resources.bounce_queue_url,
    ):
        attrs = aws.clients.sqs.get_queue_attributes(
            QueueUrl=url,
            AttributeNames=[
                "ApproximateNumberOfMessages",
                "ApproximateNumberOfMessagesNotVisible",
                "ApproximateNumberOfMessagesDelayed",
            ],
        )["Attributes"]
        msgs += sum(int(v) for v in attrs.values())
    return Trace(frozenset(keys), frozenset(items), msgs)


@dataclass
class Ingress:
    """The handler under test, with its collaborators for assertions."""

    aws: AwsEnv
    settings: IngressSettings
    service: IngressService
    events: ListEmitter
    context: LambdaContext

    def __call__(self, event: dict[str, Any]) -> dict[str, Any]:
        return app.handle(event, self.context, self.service)  # type: ignore[arg-type]

    def http(self, event: dict[str, Any]) -> tuple[int, dict[str, Any], dict[str, Any]]:
        """Status, JSON body and headers of an HTTP API answer."""
        resp = self(event)
        return resp["statusCode"], json.loads(resp["body"]), resp.get("headers") or {}

    def trace(self) -> Trace:
        return trace(self.aws)

    def with_settings(self, **changes: Any) -> Ingress:
        settings = replace(self.settings, **changes)
        events = ListEmitter()
        service = app.build_service(settings, self.aws.clients, events, session())
        return Ingress(self.aws, settings, service, events, self.context)

    def rejects(self) -> list[dict[str, Any]]:
        return [e.to_json() for e in self.events.of_type("Reject")]


def deliver_all(aws: AwsEnv, mail_id: str) -> None:
    """Deliver every group through the core, so the mail finishes and is cleaned up."""
    st = aws.storage()
    _, groups = st.get_mail(mail_id)
    for g in groups:
        claim = st.send_start(MailRef(mail_id, g.key), utcnow(), lease_seconds=60)
        assert isinstance(claim, Claim)
        st.send_done(claim, [r.rid for r in g.recipients], Result(250, "2.0.0", "ok"))
    assert not st.content_exists(mail_id)


def make_ingress(aws: AwsEnv, **changes: Any) -> Ingress:
    settings = IngressSettings(
        storage=aws.settings,
        receiving_domains=("example.com",),
        # a receiving domain needs an explicit route (its MX would be SES: a loop)
        routes=json.dumps({"example.com": "[192.0.2.25]:25"}),
        null_sender_principals=(DSN_PRINCIPAL,),
        # every caller may send as any domain here; the policy has its own tests
        sender_policy=PERMISSIVE_SENDERS,
    )
    settings = replace(settings, **changes)
    events = ListEmitter()
    service = app.build_service(settings, aws.clients, events, session())
    return Ingress(aws, settings, service, events, LambdaContext())


@pytest.fixture()
def ingress(aws: AwsEnv) -> Ingress:
    return make_ingress(aws)


@pytest.fixture()
def ingress_factory(aws: AwsEnv) -> Callable[..., Ingress]:
    return lambda **changes: make_ingress(aws, **changes)
