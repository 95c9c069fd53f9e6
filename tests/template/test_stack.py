"""The template deployed into moto's CloudFormation, and the real handlers run on it.

One stack per module (`mailqueue_local.cfn.deploy_stack`, the SAM template translated by
aws-sam-translator). The end-to-end run takes every name from the stack: the functions'
environment is what CloudFormation resolved for them in moto's Lambda (plus the local
endpoint), so a table, bucket, queue, key, index or variable the template and the code
disagree on fails here. Each function's own clients are watched while it runs, and its
role must grant exactly what they call (tests/template/declared.py lists, with reasons,
what the run cannot observe).
"""

from __future__ import annotations

import base64
import json
import os
import socket
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from types import ModuleType
from typing import Any

import pytest
from mailqueue.backends.aws.accounting import RequestCounter
from mailqueue.backends.aws.backend import AwsStorage
from mailqueue.backends.aws.clients import AwsClients, make_clients
from mailqueue.backends.aws.resources import create_resources
from mailqueue.core.config import StorageSettings, settings_from_env
from mailqueue.core.model import Envelope, MailRef, Recipient, utcnow
from mailqueue.services.admin.service import admin_settings_from_env
from mailqueue.services.bounce import BounceSettings
from mailqueue.services.delivery import DeliverySettings
from mailqueue.services.destinations import DestinationSettings
from mailqueue.services.eventlog import EventWriterSettings
from mailqueue.services.ingress.settings import ingress_settings_from_env
from mailqueue.services.sweeper import SweeperSettings
from mailqueue_local.cfn import MOTO_SKIPPED, StackOutputs, deploy_stack
from mailqueue_local.runtime import LocalContext, SqsPoller

from tests.destinations.receiver import Receiver
from tests.support import factories as f
from tests.support.aws import REGION, AwsEnv, reset_moto, session
from tests.support.events import http_request, http_send, http_upload, send_body, ses_receipt
from tests.support.smtp_peers import Behaviour, SmtpPeer, smtp_sink
from tests.support.streams import StreamReader
from tests.template import iam
from tests.template.declared import BASELINE, DECLARED

FUNCTIONS = {
    "IngressFunction": "ingress",
    "DeliveryFunction": "delivery",
    "BounceFunction": "bounce",
    "SweeperFunction": "sweeper",
    "AdminFunction": "admin",
    "EventsFunction": "events",
    "DestinationsFunction": "destinations",
}
SENDER = "orders@shop.example.org"
MAIL = b"From: Shop <orders@shop.example.org>\r\nSubject: order\r\n\r\nThank you.\r\n"
# 10 KB that zlib cannot shrink: its content goes to S3 (the small ones live in the mail
# item), so the run calls both homes' requests (the least-privilege check below)
BIG = MAIL + f.incompressible(10 * 1024).split(b"\r\n\r\n", 1)[1]
#: What the local run needs besides the stack's environment (the Lambda service provides
#: region and credentials; the endpoint is moto's).
LOCAL_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": REGION,
    "MQ_REGION": REGION,
    "POWERTOOLS_TRACE_DISABLED": "true",
    "POWERTOOLS_DEV": "false",
}
#: The event destinations turned on (EventDestinations): the receiver is plain HTTP on
#: loopback (AWS's would be https://), and the retry backoff is scaled to a second.
DEST_LOCAL_ENV = {
    "EventsFunction": {"MQ_ALLOW_HTTP_LOOPBACK": "true"},
    "DestinationsFunction": {
        "MQ_ALLOW_HTTP_LOOPBACK": "true",
        "MQ_DESTINATION_RETRY_BASE_SECONDS": "1",
        "MQ_DESTINATION_RETRY_MAX_SECONDS": "1",
    },
}
WEBHOOK_KEY = "k" * 32


@dataclass
class Stack:
    endpoint: str
    outputs: StackOutputs
    clients: AwsClients
    sink: SmtpPeer
    receiver: Receiver  # the webhook destination's
    topic: str  # the SNS destination's
    bus: str  # the EventBridge destination's

    _clients: dict[str, Any] = field(default_factory=dict)

    def client(self, name: str) -> Any:
        if name not in self._clients:
            self._clients[name] = session().client(
                name, endpoint_url=self.endpoint, region_name=REGION
            )
        return self._clients[name]

    def function_env(self, lid: str) -> dict[str, str]:
        """The environment CloudFormation resolved for the function (moto's Lambda)."""
        conf = self.client("lambda").get_function_configuration(
            FunctionName=self.outputs.functions[lid]
        )
        return {k: str(v) for k, v in conf["Environment"]["Variables"].items()}

    def role_policy(self, lid: str) -> iam.Policy:
        conf = self.client("lambda").get_function_configuration(
            FunctionName=self.outputs.functions[lid]
        )
        client = self.client("iam")
        role = conf["Role"].rsplit("/", 1)[1]
        docs = [
            client.get_role_policy(RoleName=role, PolicyName=name)["PolicyDocument"]
            for name in client.list_role_policies(RoleName=role)["PolicyNames"]
        ]
        return iam.Policy.from_documents(docs)

    def aws_env(self) -> AwsEnv:
        res = self.outputs.resources()
        settings = StorageSettings(
            table=res.table,
            bucket=res.bucket,
            delivery_queue_url=res.delivery_queue_url,
            bounce_queue_url=res.bounce_queue_url,
            bulk_delivery_queue_url=res.bulk_delivery_queue_url,
            region=REGION,
            endpoint_url=self.endpoint,
        )
        return AwsEnv(self.endpoint, self.clients, res, settings, RequestCounter())


@pytest.fixture(scope="module")
def stack(moto_endpoint: str) -> Iterator[Stack]:
    behaviour = Behaviour(
        rcpt_replies={
            "bad@example.net": "550 5.1.1 no such user",
            "later@example.org": "451 4.3.0 try again later",
        }
    )
    with smtp_sink(behaviour) as sink:
        reset_moto(moto_endpoint)
        # the event destinations' receivers: a webhook (one 503 first: a retry is seen), the
        # default bus, a topic; the webhook's signing key in Secrets Manager
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
        probe.close()
        receiver = Receiver(port, WEBHOOK_KEY, fail_first=1).start()
        topic = session().client("sns", endpoint_url=moto_endpoint, region_name=REGION)
        topic_arn = topic.create_topic(Name="mail-events")["TopicArn"]
        secrets = session().client("secretsmanager", endpoint_url=moto_endpoint, region_name=REGION)
        # a bus of its own (on the default one, moto fails PutEvents on the stack's
        # schedule rules: "Expr not defined")
        bus = session().client("events", endpoint_url=moto_endpoint, region_name=REGION)
        bus_arn = bus.create_event_bus(Name="mail-events")["EventBusArn"]
        key_arn = secrets.create_secret(
            Name="mq-webhook-keys", SecretString=json.dumps({"app": WEBHOOK_KEY})
        )["ARN"]
        destinations = {
            "destinations": [
                {"name": "app", "type": "webhook", "url": f"http://127.0.0.1:{port}/hooks"},
                {"name": "bus", "type": "eventbridge", "arn": bus_arn},
                {"name": "topic", "type": "sns", "arn": topic_arn},
            ]
        }
        routes = {"default": {"next_hop": f"[127.0.0.1]:{sink.port}", "tls": "none"}}
        routes["example.com"] = routes["default"]  # a receiving domain needs its own route
        outputs = deploy_stack(
            moto_endpoint,
            parameters={
                "Hostname": "mq.test",
                "Routes": json.dumps(routes),
                "ReceivingDomains": "example.com",
                "SenderPolicy": json.dumps(
                    [{"principal": f"{ROLE}/mail-submit/*", "domains": ["*"]}]
                ),
                "AdminPrincipals": OPERATOR,
                "EventDestinations": json.dumps(destinations),
                "EventWebhookSecretArn": key_arn,
                "EventBusArn": bus_arn,
                "EventTopicArn": topic_arn,
            },
        )
        clients = make_clients(endpoint_url=moto_endpoint, region=REGION, session=session())
        try:
            yield Stack(moto_endpoint, outputs, clients, sink, receiver, topic_arn, bus_arn)
        finally:
            receiver.stop()
    reset_moto(moto_endpoint)


# ------------------------------------------------------------------ the deployment
def test_moto_deploy_leaves_out_only_what_moto_cannot_create(stack: Stack) -> None:
    types = dict(stack.outputs.resource_types)
    summaries = stack.client("cloudformation").list_stack_resources(
        StackName=stack.outputs.stack_name
    )["StackResourceSummaries"]
    created = {s["LogicalResourceId"] for s in summaries}
    assert all(s["ResourceStatus"] == "CREATE_COMPLETE" for s in summaries)
    assert created | set(stack.outputs.skipped) == set(types)
    # every data resource, function and role is created as the template declares it
    for lid, kind in types.items():
        # behind EnableAnalytics=false (EMR is not in moto), ContentAccessLogging=off,
        # SmtpFrontDoor=off (tests/template/test_smtp_stack.py deploys it on)
        # and EgressPools=1 (the added pools: tests/template/test_pools_stack.py)
        if lid.startswith(("Analytics", "AccessLog", "Smtp", "Pool")):
            assert lid in stack.outputs.skipped, lid
            continue
        if kind in (
            "AWS::S3::Bucket",
            "AWS::DynamoDB::Table",
            "AWS::SQS::Queue",
            "AWS::Lambda::Function",
            "AWS::IAM::Role",
            "AWS::Lambda::LayerVersion",
        ):
            assert lid in created, lid
    # what is skipped is of a listed type, or the HTTP API's permissions to invoke
    for lid in stack.outputs.skipped:
        assert (
            types[lid] in MOTO_SKIPPED
            or types[lid] == "AWS::Lambda::Permission"
            or lid in ("SubmitterPolicy", "OperatorPolicy")  # name the HTTP API's routes
            or lid.startswith(("Analytics", "AccessLog", "Smtp", "Pool"))  # condition off
            or types[lid].startswith("AWS::EC2::")  # EgressMode relay: no network
            or lid == "Dashboard"  # behind EnableDashboard=false
            or lid == "ListUnsubscribeSecret"  # behind ListUnsubscribeUrl=""
            or lid == "EgressDnssecValidation"  # behind Dane=true in direct mode
        ), lid


def test_relay_mode_deploys_no_network(stack: Stack) -> None:
    """EgressMode relay (the default): no VPC, NAT gateway or Elastic IP, the delivery
    function outside any VPC and without the egress guard (direct: test_egress_stack.py)."""
    summaries = stack.client("cloudformation").list_stack_resources(
        StackName=stack.outputs.stack_name
    )["StackResourceSummaries"]
    assert not [s for s in summaries if s["ResourceType"].startswith("AWS::EC2::")]
    assert "EgressVpc" in stack.outputs.skipped
    assert stack.client("ec2").describe_nat_gateways()["NatGateways"] == []
    assert stack.client("ec2").describe_addresses()["Addresses"] == []
    conf = stack.client("lambda").get_function_configuration(
        FunctionName=stack.outputs.functions["DeliveryFunction"]
    )
    assert not (conf.get("VpcConfig") or {}).get("SubnetIds")
    assert "SendingIps" not in stack.outputs
    env = stack.function_env("DeliveryFunction")
    assert env["MQ_EGRESS_MODE"] == "relay"
    assert DeliverySettings.from_env(env).egress_guard() is None


def test_stack_resources_agree_with_create_resources(stack: Stack) -> None:
    """The direct path (`create_resources`, tests and `make run` without CloudFormation)
    makes the same table and queues the template does."""
    direct = create_resources(stack.clients, prefix="direct")
    ddb, sqs = stack.clients.dynamodb, stack.clients.sqs

    def table(name: str) -> dict[str, Any]:
        t = ddb.describe_table(TableName=name)["Table"]
        return {
            "attrs": sorted(t["AttributeDefinitions"], key=str),
            "keys": t["KeySchema"],
            "gsi": [
                {k: g[k] for k in ("IndexName", "KeySchema", "Projection")}
                for g in t["GlobalSecondaryIndexes"]
            ],
            "stream": t["StreamSpecification"],
            "billing": t.get("BillingModeSummary", {}).get("BillingMode", "PAY_PER_REQUEST"),
        }

    def queue(url: str) -> dict[str, Any]:
        a = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
        redrive = json.loads(a["RedrivePolicy"])
        return {
            "visibility": a["VisibilityTimeout"],
            "retention": a["MessageRetentionPeriod"],
            "max_receive": int(redrive["maxReceiveCount"]),
            "dlq_name": redrive["deadLetterTargetArn"].rsplit(":", 1)[1].split("-", 1)[1],
        }

    out = stack.outputs
    assert table(out.table) == table(direct.table)
    assert queue(out.delivery_queue_url) == queue(direct.delivery_queue_url)
    assert queue(out.bulk_delivery_queue_url) == queue(direct.bulk_delivery_queue_url)
    assert queue(out.bounce_queue_url) == queue(direct.bounce_queue_url)


def test_function_environments_build_their_settings(stack: Stack) -> None:
    out = stack.outputs
    for lid in FUNCTIONS:
        env = {**stack.function_env(lid), "MQ_ENDPOINT_URL": stack.endpoint}
        storage = settings_from_env(StorageSettings, env=env)
        assert (storage.table, storage.bucket) == (out.table, out.bucket)
        assert storage.delivery_queue_url == out.delivery_queue_url
        assert storage.bounce_queue_url == out.bounce_queue_url
        assert storage.bulk_delivery_queue_url == out.bulk_delivery_queue_url
        if lid == "IngressFunction":
            ingress = ingress_settings_from_env(env)
            assert ingress.receiving_domains == ("example.com",)
            assert ingress.routing_table() is not None
        elif lid == "DeliveryFunction":
            delivery = DeliverySettings.from_env(env)
            assert delivery.hostname == "mq.test"
            assert delivery.routing_table().lookup("example.net") is not None
            assert delivery.lease_seconds == storage.lease_seconds
        elif lid == "BounceFunction":
            assert settings_from_env(BounceSettings, env=env).hostname == "mq.test"
        elif lid == "SweeperFunction":
            assert settings_from_env(SweeperSettings, env=env).max_queue_lifetime_seconds == 432000
        elif lid == "AdminFunction":
            assert admin_settings_from_env(env).job_runner == "lambda"
        elif lid == "DestinationsFunction":
            env.update(DEST_LOCAL_ENV[lid])
            dest = settings_from_env(DestinationSettings, env=env)
            assert _name(dest.destinations_queue_url) == _name(_queue_url(stack, "destinations"))
            assert _name(dest.destinations_dlq_url) == _name(_queue_url(stack, "destinations-dlq"))
            assert dest.webhook_keys.startswith("secretsmanager:arn:aws:secretsmanager:")
        else:
            env.update(DEST_LOCAL_ENV[lid])
            ev = settings_from_env(EventWriterSettings, env=env, bucket=storage.bucket)
            assert ev.hostname == "mq.test"
            assert _name(ev.destinations_queue_url) == _name(_queue_url(stack, "destinations"))
            assert [d.name for d in ev.destinations()] == ["app", "bus", "topic"]


def _name(queue_url: str) -> str:
    """A queue's account and name (CloudFormation resolves its URL as AWS's, not moto's)."""
    return "/".join(queue_url.rsplit("/", 2)[1:])


def _queue_url(stack: Stack, suffix: str) -> str:
    name = f"{stack.outputs.stack_name}-{suffix}"
    return str(stack.clients.sqs.get_queue_url(QueueName=name)["QueueUrl"])


# ------------------------------------------------------------------ end to end
@dataclass
class Functions:
    """Runs the real `app.handler`s one at a time with the stack's environment."""

    stack: Stack
    logs: dict[str, iam.CallLog] = field(default_factory=dict)

    def env(self, lid: str) -> dict[str, str]:
        env = {**self.stack.function_env(lid), **LOCAL_ENV}
        env["MQ_ENDPOINT_URL"] = self.stack.endpoint
        env.update(DEST_LOCAL_ENV.get(lid, {}))
        if lid == "AdminFunction":
            env["MQ_JOB_RUNNER"] = "inline"  # moto cannot run Lambda code
        return env

    @contextmanager
    def active(self, lid: str) -> Iterator[tuple[ModuleType, LocalContext]]:
        import importlib

        app = importlib.import_module(f"functions.{FUNCTIONS[lid]}.app")
        ctx = LocalContext(self.stack.outputs.functions[lid], 60.0)
        saved = dict(os.environ)
        os.environ.update(self.env(lid))
        _clear_caches(app)
        try:
            # build the function's service as its handler does, then watch its clients
            if lid == "AdminFunction":
                root: Any = app.default_api(ctx.invoked_function_arn)
            elif lid == "SweeperFunction":
                root = app.default_sweeper()
            else:
                root = app.default_service()
            log = self.logs.setdefault(lid, iam.CallLog())
            clients = list(iam.clients_of(root))
            assert clients, f"{lid}: no AWS clients found"
            log.attach(*clients)
            yield app, ctx
        finally:
            _clear_caches(app)
            os.environ.clear()
            os.environ.update(saved)

    def invoke(self, lid: str, event: dict[str, Any]) -> Any:
        with self.active(lid) as (app, ctx):
            return app.handler(event, ctx)

    def drain(self, lid: str, queue_url: str, polls: int = 20) -> int:
        """Lambda's SQS mapping: poll until the queue has nothing visible; records seen."""
        seen = 0
        with self.active(lid) as (app, _):
            poller = SqsPoller(
                self.stack.clients.sqs,
                queue_url,
                app.handler,
                function_name=self.stack.outputs.functions[lid],
                timeout_seconds=60,
            )
            for _ in range(polls):
                r = poller.poll_once()
                if r.error is not None:
                    raise r.error
                if not r.received:
                    return seen
                seen += r.received
        raise AssertionError(f"{queue_url} still had messages after {polls} polls")


def _clear_caches(module: ModuleType) -> None:
    for value in vars(module).values():
        clear = getattr(value, "cache_clear", None)
        if callable(clear):
            clear()


ROLE = "arn:aws:sts::123456789012:assumed-role"
OPERATOR = f"{ROLE}/mailqueue-ops/alice"


def _http(resp: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    return int(resp["statusCode"]), json.loads(resp["body"])


def _admin(
    method: str, path: str, query: dict[str, str] | None = None, body: dict[str, Any] | None = None
) -> dict[str, Any]:
    event = http_request(method, path, principal=OPERATOR)
    event["queryStringParameters"] = query or None
    event["rawQueryString"] = "&".join(f"{k}={v}" for k, v in (query or {}).items())
    if body is not None:
        event["body"] = json.dumps(body)
        event["isBase64Encoded"] = False
    return event


@dataclass
class Run:
    functions: Functions
    mails: dict[str, str]
    answers: dict[str, Any]


@pytest.fixture(scope="module")
def run(stack: Stack) -> Run:
    """Every function once over the stack: HTTP and SES ingress, delivery to the sink,
    a bounce and its DSN, a crashed delivery recovered by the sweeper, operator actions,
    the event writer over the table's stream."""
    fx = Functions(stack)
    out = stack.outputs
    s3, sqs = stack.clients.s3, stack.clients.sqs
    mails: dict[str, str] = {}
    answers: dict[str, Any] = {}

    # a delivery that crashed mid-attempt an hour ago: claimed, its trigger consumed
    env = stack.aws_env()
    past = utcnow() - timedelta(hours=1)
    crashed = AwsStorage(env.settings, stack.clients, clock=lambda: past).enqueue(
        Envelope(sender=SENDER, recipients=(Recipient(rid="", address="crash@example.org"),)),
        MAIL,
    )
    mails["crashed"] = crashed.mail_id
    msg = sqs.receive_message(QueueUrl=out.delivery_queue_url)["Messages"][0]
    sqs.delete_message(QueueUrl=out.delivery_queue_url, ReceiptHandle=msg["ReceiptHandle"])
    claim = env.storage().send_start(
        MailRef(crashed.mail_id, crashed.groups[0]), past + timedelta(minutes=1), lease_seconds=60
    )
    assert not hasattr(claim, "reason"), claim

    # ingress (one warm container), HTTP: inline content to a deliverable and a refused
    # recipient; the client's retry (same Idempotency-Key) finds the mail stored
    body = send_body(
        sender=SENDER,
        recipients=["good@example.net", "bad@example.net"],
        content=base64.b64encode(BIG).decode(),
        ret="FULL",  # the DSN returns BIG: it is large, in S3 too
        envid="order-1",
    )
    with fx.active("IngressFunction") as (ingress, ctx):
        for _ in range(2):
            status, answer = _http(ingress.handler(http_send(body, key="order-1"), ctx))
            assert status == 202, answer
        mails["http"] = answer["mail_id"]
        # priority: a bulk mail takes the bulk queue and its own event source
        bulk = send_body(
            sender=SENDER,
            recipients=["bulk@example.net"],
            content=base64.b64encode(MAIL).decode(),
            priority="bulk",
        )
        status, answer = _http(ingress.handler(http_send(bulk, key="bulk-1"), ctx))
        assert status == 202, answer
        mails["bulk"] = answer["mail_id"]

        # upload: presigned PUT, then submit by upload id (a recipient that defers)
        status, up = _http(ingress.handler(http_upload(), ctx))
        assert status == 201, up
        put = urllib.request.Request(
            up["url"], data=BIG, method="PUT", headers={"Content-Type": "message/rfc822"}
        )
        with urllib.request.urlopen(put, timeout=10) as resp:
            assert resp.status == 200
        upload_body = send_body(
            sender=SENDER, recipients=["later@example.org"], content=None, upload_id=up["upload_id"]
        )
        status, answer = _http(ingress.handler(http_send(upload_body, key="upload-1"), ctx))
        assert status == 202, answer
        mails["upload"] = answer["mail_id"]

        # SES: the receipt rule's S3 action stored the raw mail, its Lambda action calls
        s3.put_object(Bucket=out.bucket, Key="ses-inbound/ses-message-1", Body=MAIL)
        event = ses_receipt(message_id="ses-message-1", recipients=["support@example.com"])
        answers["ses"] = ingress.handler(event, ctx)

    # delivery → sink; the refused recipient's report → bounce → its DSN → delivery
    answers["delivered"] = fx.drain("DeliveryFunction", out.delivery_queue_url)
    answers["bounced"] = fx.drain("BounceFunction", out.bounce_queue_url)
    fx.drain("DeliveryFunction", out.delivery_queue_url)
    answers["bulk_delivered"] = fx.drain("DeliveryFunction", out.bulk_delivery_queue_url)

    # the operator (one warm container): size, browse, inspect with body, hold, release, a
    # bulk job, delete
    up_id = mails["upload"]
    with fx.active("AdminFunction") as (admin, ctx):
        answers["admin"] = [
            _http(admin.handler(event, ctx))
            for event in (
                _admin("GET", "/v1/queue/size"),
                _admin("GET", "/v1/queue/mails", {"domain": "example.org"}),
                _admin("GET", f"/v1/queue/mails/{up_id}", {"body": "true"}),
                _admin("POST", f"/v1/queue/mails/{up_id}/hold"),
                _admin("POST", f"/v1/queue/mails/{up_id}/release"),
                _admin(
                    "POST",
                    "/v1/queue/jobs",
                    body={"action": "hold", "filter": {"domain": "none.example"}},
                ),
                _admin("DELETE", f"/v1/queue/mails/{up_id}"),
            )
        ]

    # the sweeper (with the daily orphan pass) recovers the crashed attempt
    answers["sweep"] = fx.invoke("SweeperFunction", {"orphans": True})
    fx.drain("DeliveryFunction", out.delivery_queue_url)

    # the event writer over everything the table's stream recorded, in small batches (in
    # one batch of everything, a mail's counter changes would cancel out to nothing)
    records = StreamReader(env).poll()
    answers["stream_records"] = len(records)
    with fx.active("EventsFunction") as (app, ctx):
        answers["events"] = [
            app.handler({"Records": records[i : i + 10]}, ctx) for i in range(0, len(records), 10)
        ]

    # the destinations function over the outbox the event writer handed each event to,
    # once per destination; the webhook's one 503 comes back after its (1 s) backoff
    outbox = _queue_url(stack, "destinations")
    deadline = time.monotonic() + 60
    answers["destination_records"] = 0
    while time.monotonic() < deadline:
        answers["destination_records"] += fx.drain("DestinationsFunction", outbox)
        if _visible(stack, outbox) + _in_flight(stack, outbox) == 0:
            break
        time.sleep(0.5)
    return Run(fx, mails, answers)


def _keys(stack: Stack, prefix: str) -> list[str]:
    resp = stack.clients.s3.list_objects_v2(Bucket=stack.outputs.bucket, Prefix=prefix)
    return [o["Key"] for o in resp.get("Contents", [])]


def _visible(stack: Stack, url: str) -> int:
    attrs = stack.clients.sqs.get_queue_attributes(
        QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"]
    )["Attributes"]
    return int(attrs["ApproximateNumberOfMessages"])


def _in_flight(stack: Stack, url: str) -> int:
    attrs = stack.clients.sqs.get_queue_attributes(
        QueueUrl=url, AttributeNames=["ApproximateNumberOfMessagesNotVisible"]
    )["Attributes"]
    return int(attrs["ApproximateNumberOfMessagesNotVisible"])


def test_event_destinations_on_the_stack(stack: Stack, run: Run) -> None:
    """Every event the writer logged reached each destination: the webhook signed (after
    one 503 and its retry), the bus and the topic once each; nothing dead-lettered."""
    events = sum(a["events"] for a in run.answers["events"])
    assert events > 0
    assert sum(a["destinations"] for a in run.answers["events"]) == 3 * events
    got = stack.receiver.unique()
    assert len(got) == events and stack.receiver.bad_signatures == 0
    assert len(stack.receiver.posts) == events  # the 503'd one once more, accepted once
    assert run.answers["destination_records"] == 3 * events + 1
    calls = run.functions.logs["DestinationsFunction"].calls
    put = [p for svc, op, p in calls if (svc, op) == ("events", "PutEvents")]
    published = [p for svc, op, p in calls if (svc, op) == ("sns", "Publish")]
    assert len(put) == len(published) == events
    assert {p["Entries"][0]["EventBusName"] for p in put} == {stack.bus}
    assert {p["TopicArn"] for p in published} == {stack.topic}
    assert sorted(json.loads(p["Message"])["mailqueue"]["eventId"] for p in published) == sorted(
        got
    )
    retried = [p for svc, op, p in calls if (svc, op) == ("sqs", "ChangeMessageVisibility")]
    assert [p["VisibilityTimeout"] for p in retried] == [1]  # the backoff, scaled
    assert _visible(stack, _queue_url(stack, "destinations-dlq")) == 0


def test_end_to_end_on_the_stack(stack: Stack, run: Run) -> None:
    got = {(tuple(m.rcpt_tos), m.mail_from) for m in stack.sink.messages}
    assert (("good@example.net",), SENDER) in got
    assert (("support@example.com",), "alice@sender.example.org") in got
    assert (("crash@example.org",), SENDER) in got  # recovered by the sweeper
    assert (("bulk@example.net",), SENDER) in got and run.answers["bulk_delivered"] == 1
    dsns = [m for m in stack.sink.messages if m.mail_from in ("", "<>") and m.rcpt_tos == [SENDER]]
    assert len(dsns) == 1 and b"bad@example.net" in dsns[0].content
    assert len(dsns[0].content) > len(BIG)  # RET=FULL: the S3-held content returned
    (good,) = [m for m in stack.sink.messages if m.rcpt_tos == ["good@example.net"]]
    assert BIG.split(b"\r\n\r\n", 1)[1] in good.content  # delivered from S3, whole
    assert all(
        r == "later@example.org" or "later@example.org" not in m.rcpt_tos
        for m in stack.sink.messages
        for r in m.rcpt_tos
    )
    assert run.answers["ses"] == {"disposition": "CONTINUE"}
    assert run.answers["sweep"]["stats"]["LeasesRecovered"] == 1
    statuses = [s for s, _ in run.answers["admin"]]
    assert statuses == [200, 200, 200, 200, 200, 202, 200], run.answers["admin"]
    inspected = run.answers["admin"][2][1]
    assert "Thank you." in json.dumps(inspected)
    # nothing left behind: every mail finished (or was deleted) and cleaned, raw objects
    # and uploads removed, no dead letters
    assert _keys(stack, "content/") == []
    assert _keys(stack, "ses-inbound/") == []
    assert _keys(stack, "uploads/") == []
    out = stack.outputs
    assert _visible(stack, out.delivery_dlq_url) == 0
    assert _visible(stack, out.outputs["BulkDeliveryDlqUrl"]) == 0
    assert _visible(stack, out.bounce_dlq_url) == 0
    # the event writer wrote its objects where the lifecycle rule expects them
    events = _keys(stack, "events/dt=")
    assert events and all("/hr=" in k for k in events)
    assert sum(a["events"] for a in run.answers["events"]) > 0


@pytest.mark.parametrize("lid", list(FUNCTIONS))
def test_role_grants_exactly_what_the_code_calls(stack: Stack, run: Run, lid: str) -> None:
    log = run.functions.logs[lid]
    assert log.calls, f"{lid} made no AWS call in the end-to-end run"
    policy = stack.role_policy(lid)
    needed = {pair for svc, op, params in log.calls for pair in iam.required(svc, op, params)}
    lacking = sorted(p for p in needed if not policy.allows(*p))
    assert not lacking, f"{lid}'s role lacks {lacking}"
    declared = {**BASELINE, **DECLARED.get(lid, {})}
    unneeded = []
    for statement, action in policy.grants():
        observed = any(a.lower() == action.lower() and statement.allows(a, r) for a, r in needed)
        if not observed and (statement.sid, action) not in declared:
            unneeded.append(f"{statement.sid}: {action}")
    assert not unneeded, (
        f"{lid}'s role grants {unneeded}, which the code did not call: remove them, or list "
        "them with the reason in tests/template/declared.py"
    )
    granted = {(s.sid, a) for s, a in policy.grants()}
    stale = sorted(set(declared) - granted)
    assert not stale, f"tests/template/declared.py lists {stale} for {lid}: not granted"
    assert all(reason.strip() for reason in declared.values())
