"""template.yaml against the code: names, keys, index, prefixes, settings, timeouts, pins.

Static checks on the parsed SAM template (fast, no AWS). What needs CloudFormation to
resolve (the environment the functions really get) is checked on the moto-deployed stack
in test_stack.py.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import re
import tomllib
from datetime import timedelta
from typing import Any

import pytest
from mailqueue.backends.aws.resources import STATE_INDEX, TABLE_ATTRIBUTES, TABLE_KEYS
from mailqueue.core.config import StorageSettings
from mailqueue.core.policy import RetryPolicy, backoff
from mailqueue.outbound.doctor import DoctorSettings
from mailqueue.services.admin.service import AdminSettings
from mailqueue.services.bounce import BounceSettings
from mailqueue.services.delivery import DeliverySettings
from mailqueue.services.destinations import DestinationSettings
from mailqueue.services.eventlog import EventWriterSettings
from mailqueue.services.ingress.settings import IngressSettings
from mailqueue.services.sweeper import SweeperSettings
from mailqueue.services.unsubscribe import UnsubscribeSettings

from tests.template.conftest import ROOT

#: Each function's settings dataclasses: the MQ_* variables it reads are their fields.
SETTINGS: dict[str, tuple[type[Any], ...]] = {
    "IngressFunction": (StorageSettings, IngressSettings, UnsubscribeSettings),
    "DeliveryFunction": (StorageSettings, DeliverySettings),
    "BounceFunction": (StorageSettings, BounceSettings),
    "SweeperFunction": (StorageSettings, SweeperSettings),
    "AdminFunction": (StorageSettings, AdminSettings, DoctorSettings),
    "EventsFunction": (StorageSettings, EventWriterSettings),
    "DestinationsFunction": (StorageSettings, DestinationSettings),
}
#: SQS event sources: queue → the function consuming it.
CONSUMERS = {
    "DeliveryQueue": "DeliveryFunction",
    "BulkDeliveryQueue": "DeliveryFunction",  # priority: the bulk path, same function
    "BounceQueue": "BounceFunction",
    "DestinationsQueue": "DestinationsFunction",
}
NO_VALUE = {"Ref": "AWS::NoValue"}
DATA_PREFIXES = (
    "s3:",
    "dynamodb:",
    "sqs:",
    "secretsmanager:",
    "ssm:",
    "lambda:",
    "kms:",
    "events:",
    "sns:",
)


def resources(template: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in template["Resources"].items() if v["Type"] == kind}


def props(template: dict[str, Any], lid: str) -> dict[str, Any]:
    p: dict[str, Any] = template["Resources"][lid].get("Properties", {})
    return p


def function_props(template: dict[str, Any], lid: str) -> dict[str, Any]:
    """A function's properties with Globals applied (maps merged, as SAM does)."""
    merged = dict(template.get("Globals", {}).get("Function", {}))
    own = props(template, lid)
    for key, value in own.items():
        if key == "Environment":
            variables = {
                **merged.get("Environment", {}).get("Variables", {}),
                **value.get("Variables", {}),
            }
            merged["Environment"] = {"Variables": variables}
        else:
            merged[key] = value
    return merged


def env_names(template: dict[str, Any], lid: str) -> set[str]:
    return set(function_props(template, lid).get("Environment", {}).get("Variables", {}))


def fields_of(*classes: type[Any]) -> set[str]:
    return {f"MQ_{f.name.upper()}" for c in classes for f in dataclasses.fields(c)}


def roles(template: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Function logical id → the statements of its role's inline policies."""
    out: dict[str, list[dict[str, Any]]] = {}
    for fid in resources(template, "AWS::Serverless::Function"):
        role = props(template, fid)["Role"]["Fn::GetAtt"][0]
        statements: list[dict[str, Any]] = []
        for pol in props(template, role).get("Policies", []):
            # a policy behind a condition (Fn::If, e.g. EgressMode direct): its branches
            for doc in pol["Fn::If"][1:] if "Fn::If" in pol else [pol]:
                if doc != {"Ref": "AWS::NoValue"}:
                    for st in doc["PolicyDocument"]["Statement"]:
                        # a statement behind a condition (e.g. HasEventBus): its branches
                        branches = st["Fn::If"][1:] if "Fn::If" in st else [st]
                        statements += [b for b in branches if b != NO_VALUE]
        out[fid] = statements
    return out


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


# ------------------------------------------------------------------ table and queues
def test_table_matches_resources_py(template: dict[str, Any]) -> None:
    table = props(template, "StateTable")
    assert sorted(table["AttributeDefinitions"], key=str) == sorted(TABLE_ATTRIBUTES, key=str)
    assert table["KeySchema"] == TABLE_KEYS
    # capacity is a deployment choice (StateTableCapacity): on demand unless provisioned,
    # then the same minimum on the table and the index (tests/template/test_capacity_mode.py)
    provisioned = {
        "ReadCapacityUnits": {"Ref": "StateTableReadCapacityMin"},
        "WriteCapacityUnits": {"Ref": "StateTableWriteCapacityMin"},
    }
    throughput = {"Fn::If": ["ProvisionedState", provisioned, {"Ref": "AWS::NoValue"}]}
    (index,) = table["GlobalSecondaryIndexes"]
    # the projection is a parameter (a stack from before keys-only keeps ALL: deploy.md),
    # whose default is what resources.py creates
    projection = {"ProjectionType": {"Ref": "StateIndexProjection"}}
    assert index == {**STATE_INDEX, "Projection": projection, "ProvisionedThroughput": throughput}
    param = template["Parameters"]["StateIndexProjection"]
    assert param["Default"] == STATE_INDEX["Projection"]["ProjectionType"] == "KEYS_ONLY"
    assert sorted(param["AllowedValues"]) == ["ALL", "KEYS_ONLY"]
    assert table["BillingMode"] == {
        "Fn::If": ["ProvisionedState", "PROVISIONED", "PAY_PER_REQUEST"]
    }
    assert table["ProvisionedThroughput"] == throughput
    assert table["StreamSpecification"] == {"StreamViewType": "NEW_AND_OLD_IMAGES"}
    assert table["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
    # the attribute backend.py writes on finished items and outbox.py on events
    assert table["TimeToLiveSpecification"] == {"AttributeName": "expires_at", "Enabled": True}


def test_stateful_resources_survive_stack_deletion(template: dict[str, Any]) -> None:
    for lid in ("StateTable", "ContentBucket"):
        res = template["Resources"][lid]
        assert res.get("DeletionPolicy") == "Retain", lid
        assert res.get("UpdateReplacePolicy") == "Retain", lid


def test_queues_redrive_retention_and_visibility(template: dict[str, Any]) -> None:
    mappings = resources(template, "AWS::Lambda::EventSourceMapping")
    for queue, fid in CONSUMERS.items():
        q = props(template, queue)
        assert q["MessageRetentionPeriod"] == 14 * 86400
        assert q["RedrivePolicy"]["maxReceiveCount"] == 100
        dlq = q["RedrivePolicy"]["deadLetterTargetArn"]["Fn::GetAtt"][0]
        assert props(template, dlq)["MessageRetentionPeriod"] == 14 * 86400
        timeout = function_props(template, fid)["Timeout"]
        assert q["VisibilityTimeout"] >= 6 * timeout, f"{queue}: visibility < 6 x {fid} timeout"
        [esm] = [
            m["Properties"]
            for m in mappings.values()
            if m["Properties"]["EventSourceArn"] == {"Fn::GetAtt": [queue, "Arn"]}
        ]
        assert esm["FunctionName"] == {"Ref": fid}
        assert esm["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
        assert esm["BatchSize"] == 10


def test_max_receive_count_exceeds_the_receives_a_mail_needs(template: dict[str, Any]) -> None:
    """Every attempt and every 12 h re-arm hop is a receive: the default retry policy
    must finish (deliver or expire) a group well before SQS gives its trigger up."""
    p = template["Parameters"]
    policy = RetryPolicy(
        minimal_backoff=timedelta(seconds=p["RetryMinBackoffSeconds"]["Default"]),
        maximal_backoff=timedelta(seconds=p["RetryMaxBackoffSeconds"]["Default"]),
        maximal_queue_lifetime=timedelta(seconds=p["MaxQueueLifetimeSeconds"]["Default"]),
    )
    receives, age = 0, timedelta(0)
    while True:
        receives += 1
        wait = backoff(receives, age, policy)
        if wait is None:
            break
        receives += int(wait.total_seconds() // (12 * 3600))  # re-arm hops
        age += wait
    for queue in ("DeliveryQueue", "BulkDeliveryQueue"):
        limit = props(template, queue)["RedrivePolicy"]["maxReceiveCount"]
        assert receives * 2 <= limit, f"{queue}: {receives} receives under the default policy"


def test_lease_outlives_the_delivery_timeout(template: dict[str, Any]) -> None:
    env = function_props(template, "DeliveryFunction")["Environment"]["Variables"]
    timeout = function_props(template, "DeliveryFunction")["Timeout"]
    assert int(env["MQ_LEASE_SECONDS"]) >= timeout + 30
    assert DeliverySettings(lease_seconds=int(env["MQ_LEASE_SECONDS"])).lease_seconds


def test_event_destinations_are_off_by_default_and_retry_past_a_day(
    template: dict[str, Any],
) -> None:
    """Every destinations resource is behind EventDestinations (empty by default: the S3
    event log only). With it on, a failed send is retried for more than a day and then
    dead-lettered by the function itself (with its reason) well before SQS's backstop,
    and a batch of sends that each hang to their timeout fits the function's timeout."""
    assert template["Parameters"]["EventDestinations"]["Default"] == ""
    assert template["Conditions"]["HasEventDestinations"] == {
        "Fn::Not": [{"Fn::Equals": [{"Ref": "EventDestinations"}, ""]}]
    }
    dest = {lid for lid in template["Resources"] if lid.startswith("Destinations")}
    assert dest == {
        "DestinationsQueue",
        "DestinationsDeadLetterQueue",
        "DestinationsDeadLetterAlarm",
        "DestinationsErrorsAlarm",
        "DestinationsFunction",
        "DestinationsLogGroup",
        "DestinationsEventSource",
        "DestinationsRole",
    }
    for lid in dest:
        assert template["Resources"][lid].get("Condition") == "HasEventDestinations", lid
    events_env = props(template, "EventsFunction")["Environment"]["Variables"]
    assert events_env["MQ_EVENT_DESTINATIONS"] == {"Ref": "EventDestinations"}
    assert events_env["MQ_DESTINATIONS_QUEUE_URL"] == {
        "Fn::If": ["HasEventDestinations", {"Ref": "DestinationsQueue"}, ""]
    }
    fn = function_props(template, "DestinationsFunction")
    env = fn["Environment"]["Variables"]
    assert env["MQ_DESTINATIONS_QUEUE_URL"] == {"Ref": "DestinationsQueue"}
    assert env["MQ_DESTINATIONS_DLQ_URL"] == {"Ref": "DestinationsDeadLetterQueue"}
    s = DestinationSettings()  # the template sets none of the retry knobs: the defaults
    assert not {"MQ_DESTINATION_MAX_ATTEMPTS", "MQ_DESTINATION_RETRY_BASE_SECONDS"} & set(env)
    assert s.retry_span_seconds() > 24 * 3600
    queue = props(template, "DestinationsQueue")
    assert s.destination_max_attempts < queue["RedrivePolicy"]["maxReceiveCount"]
    assert queue["MessageRetentionPeriod"] > s.retry_span_seconds() + 24 * 3600
    (esm,) = [
        m["Properties"]
        for m in resources(template, "AWS::Lambda::EventSourceMapping").values()
        if m["Properties"]["EventSourceArn"] == {"Fn::GetAtt": ["DestinationsQueue", "Arn"]}
    ]
    assert esm["BatchSize"] * s.webhook_timeout_seconds + 10 <= fn["Timeout"]
    # the event writer may send to the outbox only with destinations on
    outbox = [
        st
        for pol in props(template, "EventsRole")["Policies"]
        for st in pol["PolicyDocument"]["Statement"]
        if "Fn::If" in st
    ]
    assert [st["Fn::If"][0] for st in outbox] == ["HasEventDestinations"]
    assert outbox[0]["Fn::If"][1]["Resource"] == {"Fn::GetAtt": ["DestinationsQueue", "Arn"]}
    # PutEvents and Publish only to the bus and topic named, and only when one is
    grants = {
        st["Fn::If"][1]["Sid"]: st["Fn::If"]
        for st in props(template, "DestinationsRole")["Policies"][0]["PolicyDocument"]["Statement"]
        if "Fn::If" in st
    }
    assert grants["EventBus"][0] == "HasEventBus"
    assert grants["EventBus"][1]["Action"] == "events:PutEvents"
    assert grants["EventBus"][1]["Resource"] == {"Ref": "EventBusArn"}
    assert grants["EventTopic"][0] == "HasEventTopic"
    assert grants["EventTopic"][1]["Action"] == "sns:Publish"
    assert grants["EventTopic"][1]["Resource"] == {"Ref": "EventTopicArn"}


# ------------------------------------------------------------------ functions
def test_every_function_folder_is_deployed(template: dict[str, Any]) -> None:
    folders = {p.name for p in (ROOT / "functions").iterdir() if (p / "app.py").exists()}
    declared = {}
    for lid in resources(template, "AWS::Serverless::Function"):
        fp = function_props(template, lid)
        m = re.fullmatch(r"functions/([a-z_]+)/", fp["CodeUri"])
        assert m, f"{lid}: CodeUri {fp['CodeUri']}"
        if re.fullmatch(r"Pool\d+DeliveryFunction", lid):
            # an added egress pool's delivery (EgressPools): the delivery code again
            assert m.group(1) == "delivery", lid
        else:
            declared[m.group(1)] = lid
        assert fp["Runtime"] == "python3.12"
        assert fp["Architectures"] == ["arm64"]
        assert fp["Handler"] == "app.handler"
        assert fp["Layers"] == [{"Ref": "DepsLayer"}, {"Ref": "MailqueueLayer"}]
        assert fp["LoggingConfig"]["LogGroup"]["Ref"] in template["Resources"]
    assert set(declared) == folders
    assert set(declared.values()) == set(SETTINGS)
    for name in declared:
        app = importlib.import_module(f"functions.{name}.app")
        assert callable(app.handler), name


def test_environment_variables_are_settings_the_code_reads(template: dict[str, Any]) -> None:
    globals_ = set(template["Globals"]["Function"]["Environment"]["Variables"])
    read_by_someone = set().union(*(fields_of(*c) for c in SETTINGS.values()))
    for var in globals_:
        if var.startswith("MQ_"):
            assert var in read_by_someone, f"Globals {var}: no function reads it"
    for fid, classes in SETTINGS.items():
        own = set(props(template, fid).get("Environment", {}).get("Variables", {}))
        for var in own:
            if var.startswith("MQ_"):
                assert var in fields_of(*classes), f"{fid} gets {var} but never reads it"
        have = env_names(template, fid)
        for cls in classes:
            for f in dataclasses.fields(cls):
                missing = dataclasses.MISSING
                required = f.default is missing and f.default_factory is missing
                if required and f.name != "storage":
                    assert f"MQ_{f.name.upper()}" in have or (
                        cls is EventWriterSettings and f.name == "bucket"
                    ), f"{fid}: {cls.__name__}.{f.name} is required"
        # no credentials in the environment, ever: they come from Secrets Manager / SSM
        assert not {v for v in have if re.search(r"PASSWORD|SECRET|TOKEN|CREDENTIAL", v)}


def test_timeouts_fit_their_triggers(template: dict[str, Any]) -> None:
    sweeper = function_props(template, "SweeperFunction")
    assert sweeper["Timeout"] < 300  # under the 5-minute schedule
    assert function_props(template, "IngressFunction")["Timeout"] <= 30  # API Gateway's limit
    schedules = {
        e["Properties"]["Schedule"]: json.loads(e["Properties"]["Input"])
        for e in sweeper["Events"].values()
        if e["Type"] == "Schedule"
    }
    assert schedules == {"rate(5 minutes)": {"orphans": False}, "rate(1 day)": {"orphans": True}}


def test_http_api_routes_and_iam_auth(template: dict[str, Any]) -> None:
    api = props(template, "HttpApi")
    assert api["Auth"] == {"EnableIamAuthorizer": True, "DefaultAuthorizer": "AWS_IAM"}
    routes = {
        (e["Properties"]["Method"], e["Properties"]["Path"]): fid
        for fid in SETTINGS
        for e in function_props(template, fid).get("Events", {}).values()
        if e["Type"] == "HttpApi"
    }
    assert routes == {
        ("POST", "/v1/messages"): "IngressFunction",
        ("POST", "/v1/messages/batch"): "IngressFunction",
        ("POST", "/v1/uploads"): "IngressFunction",
        ("ANY", "/v1/queue/{proxy+}"): "AdminFunction",
        ("GET", "/u/{token}"): "IngressFunction",  # one-click unsubscribe (RFC 8058)
        ("POST", "/u/{token}"): "IngressFunction",
    }
    for fid in SETTINGS:
        for e in function_props(template, fid).get("Events", {}).values():
            p = e.get("Properties", {})
            if p.get("Path") == "/u/{token}":  # public by design: the token's HMAC is the check
                assert p.get("Auth") == {"Authorizer": "NONE"}
                continue
            assert "Auth" not in p, f"{fid}: a route overriding IAM auth"


def _invoke_arns(template: dict[str, Any], lid: str) -> list[str]:
    statements = props(template, lid)["PolicyDocument"]["Statement"]
    out = []
    for st in statements:
        assert st["Effect"] == "Allow" and st["Action"] == "execute-api:Invoke", lid
        out += [r["Fn::Sub"] for r in as_list(st["Resource"])]
    return out


def test_submitters_and_operators_get_route_scoped_policies(template: dict[str, Any]) -> None:
    """A submitter's policy names the three submission routes and nothing under /v1/queue;
    the operator's names only /v1/queue/...; both are stack outputs to attach."""
    prefix = "arn:${AWS::Partition}:execute-api:${AWS::Region}:${AWS::AccountId}:${HttpApi}/*/"
    submit = _invoke_arns(template, "SubmitterPolicy")
    assert submit == [
        prefix + "POST/v1/messages",
        prefix + "POST/v1/messages/batch",
        prefix + "POST/v1/uploads",
    ]
    operate = _invoke_arns(template, "OperatorPolicy")
    assert operate == [prefix + "*/v1/queue/*"]
    # an ARN pattern for Invoke matches as a glob: no submitter grant reaches the admin routes
    from fnmatch import fnmatchcase

    admin_route = prefix.replace("${", "").replace("}", "") + "GET/v1/queue/mails/x"
    assert not any(fnmatchcase(admin_route, a.replace("${", "").replace("}", "")) for a in submit)
    assert fnmatchcase(admin_route, operate[0].replace("${", "").replace("}", ""))
    outputs = template["Outputs"]
    assert outputs["SubmitterPolicyArn"]["Value"] == {"Ref": "SubmitterPolicy"}
    assert outputs["OperatorPolicyArn"]["Value"] == {"Ref": "OperatorPolicy"}
    env = function_props(template, "AdminFunction")["Environment"]["Variables"]
    assert env["MQ_ADMIN_PRINCIPALS"] == {"Ref": "AdminPrincipals"}
    assert template["Parameters"]["AdminPrincipals"]["Default"] == ""  # nobody by default
    assert template["Parameters"]["SenderPolicy"]["Default"] == "[]"  # no sender by default


# ------------------------------------------------------------------ bucket
def test_bucket_lifecycle_covers_every_prefix_the_code_writes(template: dict[str, Any]) -> None:
    bucket = props(template, "ContentBucket")
    rules = {r.get("Prefix", ""): r for r in bucket["LifecycleConfiguration"]["Rules"]}
    storage_prefix = StorageSettings.__dataclass_fields__["content_prefix"].default
    ingress = IngressSettings.__dataclass_fields__
    assert rules[storage_prefix]["ExpirationInDays"] == {"Ref": "ContentExpirationDays"}
    assert rules[ingress["upload_prefix"].default]["ExpirationInDays"] == 1
    assert rules[ingress["ses_prefix"].default]["ExpirationInDays"] == {
        "Ref": "SesInboundExpirationDays"
    }
    events = rules[EventWriterSettings.__dataclass_fields__["prefix"].default]
    assert events["Transitions"][0]["TransitionInDays"] == {"Ref": "EventsTransitionDays"}
    assert rules[""]["AbortIncompleteMultipartUpload"] == {"DaysAfterInitiation": 1}
    # the content backstop must not cut into a mail's queue lifetime
    params = template["Parameters"]
    lifetime_days = params["MaxQueueLifetimeSeconds"]["MaxValue"] / 86400
    assert params["ContentExpirationDays"]["Default"] > lifetime_days
    assert "LOSES ITS CONTENT" in params["ContentExpirationDays"]["Description"]


def test_bucket_is_private_encrypted_and_tls_only(template: dict[str, Any]) -> None:
    bucket = props(template, "ContentBucket")
    assert all(bucket["PublicAccessBlockConfiguration"].values())
    assert len(bucket["PublicAccessBlockConfiguration"]) == 4
    enc = bucket["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]
    assert enc["ServerSideEncryptionByDefault"]["SSEAlgorithm"] in ("AES256", "aws:kms")
    statements = props(template, "ContentBucketPolicy")["PolicyDocument"]["Statement"]
    [tls] = [s for s in statements if isinstance(s, dict) and s.get("Sid") == "TlsOnly"]
    assert tls["Effect"] == "Deny" and tls["Action"] == "s3:*"
    assert tls["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}


def test_ses_receipt_rule_stores_where_ingress_reads(template: dict[str, Any]) -> None:
    rule = template["Resources"]["InboundRule"]
    assert rule["Condition"] == "ReceivingEnabled"
    actions = rule["Properties"]["Rule"]["Actions"]
    assert (
        actions[0]["S3Action"]["ObjectKeyPrefix"]
        == IngressSettings.__dataclass_fields__["ses_prefix"].default
    )
    assert actions[1]["LambdaAction"]["FunctionArn"] == {"Fn::GetAtt": ["IngressFunction", "Arn"]}
    assert template["Resources"]["IngressSesPermission"]["Condition"] == "ReceivingEnabled"
    # the rule set also holds the bounce domains' rule (test_feedback_receipt.py)
    assert template["Resources"]["InboundRuleSet"]["Condition"] == "AnyReceiving"


# ------------------------------------------------------------------ IAM, alarms
def test_no_data_action_on_every_resource(template: dict[str, Any]) -> None:
    for fid, statements in roles(template).items():
        for st in statements:
            if "*" in as_list(st["Resource"]):
                data = [a for a in as_list(st["Action"]) if a.startswith(DATA_PREFIXES)]
                assert not data, f"{fid} {st.get('Sid')}: {data} on *"
            assert all("*" not in a for a in as_list(st["Action"])), f"{fid}: wildcard action"
            assert st["Effect"] == "Allow" and st.get("Sid"), f"{fid}: unnamed statement"


def test_relay_credentials_are_read_from_secrets_only_by_delivery(template: dict[str, Any]) -> None:
    for fid, statements in roles(template).items():
        actions = {a for st in statements for a in as_list(st["Action"])}
        secret = {"secretsmanager:GetSecretValue", "ssm:GetParameter"} & actions
        # the added egress pools' delivery functions share DeliveryFunction's role
        readers = ("DeliveryFunction", "AdminFunction", "IngressFunction", "DestinationsFunction",
                   "Pool2DeliveryFunction", "Pool3DeliveryFunction")  # fmt: skip
        assert bool(secret) == (fid in readers), fid
    # the destinations function reads the webhooks' signing keys only, from the one secret
    # EventWebhookSecretArn names, and only when it names one
    policy = props(template, "DestinationsRole")["Policies"][0]["PolicyDocument"]["Statement"]
    conditional = {st["Fn::If"][1]["Sid"]: st["Fn::If"] for st in policy if "Fn::If" in st}
    keys = [
        st
        for st in roles(template)["DestinationsFunction"]
        if {"secretsmanager:GetSecretValue", "ssm:GetParameter"} & set(as_list(st["Action"]))
    ]
    assert [(st["Sid"], st["Action"], st["Resource"]) for st in keys] == [
        ("WebhookKeys", "secretsmanager:GetSecretValue", {"Ref": "EventWebhookSecretArn"})
    ]
    assert conditional["WebhookKeys"][0] == "HasWebhookSecret"
    assert conditional["WebhookKeys"][2] == NO_VALUE
    # ingress reads only the unsubscribe links' HMAC key (the /u/{token} routes) and the
    # return-path keys (feedback reports to a VERP address are verified with them)
    ingress = [
        st
        for st in roles(template)["IngressFunction"]
        if {"secretsmanager:GetSecretValue", "ssm:GetParameter"} & set(as_list(st["Action"]))
    ]
    by_sid = {st["Sid"]: st for st in ingress}
    assert sorted(by_sid) == ["ReturnPathKeys", "UnsubscribeKeys"]
    unsub = by_sid["UnsubscribeKeys"]["Resource"]["Fn::Sub"]
    assert unsub.endswith("${SecretsPrefix}list-unsubscribe-*")
    assert by_sid["ReturnPathKeys"]["Resource"]["Fn::Sub"].endswith("${SecretsPrefix}return-path*")
    # the admin function (doctor) reads the DKIM keys only, not the relay credentials
    admin = [
        st
        for st in roles(template)["AdminFunction"]
        if {"secretsmanager:GetSecretValue", "ssm:GetParameter"} & set(as_list(st["Action"]))
    ]
    assert {st["Sid"] for st in admin} == {"DkimKeys", "DkimKeysSsm"}
    for st in admin:
        assert st["Resource"]["Fn::Sub"].endswith("${SecretsPrefix}dkim/*"), st
    delivery = {st["Sid"]: st for st in roles(template)["DeliveryFunction"]}
    assert "secret:${SecretsPrefix}*" in delivery["RelayCredentials"]["Resource"]["Fn::Sub"]
    assert "parameter/${SecretsPrefix}*" in delivery["RelayCredentialsSsm"]["Resource"]["Fn::Sub"]


def test_every_function_and_dead_letter_queue_has_an_alarm(template: dict[str, Any]) -> None:
    alarms = resources(template, "AWS::CloudWatch::Alarm").values()
    watched = {
        (a["Properties"]["MetricName"], json.dumps(a["Properties"]["Dimensions"][0]["Value"]))
        for a in alarms
    }
    for fid in SETTINGS:
        assert ("Errors", json.dumps({"Ref": fid})) in watched, fid
    queues = resources(template, "AWS::SQS::Queue")
    sinks = [q for q in queues if "RedrivePolicy" not in queues[q]["Properties"]]
    assert len(sinks) == 6  # 5 + the event destinations' (behind HasEventDestinations)
    for q in sinks:
        value = json.dumps({"Fn::GetAtt": [q, "QueueName"]})
        assert ("ApproximateNumberOfMessagesVisible", value) in watched, q
    for queue in ("DeliveryQueue", "BulkDeliveryQueue"):
        delivery = json.dumps({"Fn::GetAtt": [queue, "QueueName"]})
        assert ("ApproximateAgeOfOldestMessage", delivery) in watched, queue


def test_priority_paths_have_their_own_concurrency(template: dict[str, Any]) -> None:
    """Transactional and bulk triggers are consumed by the same function through two
    event sources, each capped by its own parameter, so a bulk backlog can never take
    the transactional path's pollers (docs/operations.md "Priority")."""
    mappings = resources(template, "AWS::Lambda::EventSourceMapping").values()
    caps = {
        m["Properties"]["EventSourceArn"]["Fn::GetAtt"][0]: m["Properties"]["ScalingConfig"][
            "MaximumConcurrency"
        ]
        for m in mappings
        if m["Properties"].get("FunctionName") == {"Ref": "DeliveryFunction"}
    }
    assert caps == {
        "DeliveryQueue": {"Ref": "DeliveryMaxConcurrency"},
        "BulkDeliveryQueue": {"Ref": "BulkDeliveryMaxConcurrency"},
    }
    env = template["Globals"]["Function"]["Environment"]["Variables"]
    assert env["MQ_BULK_DELIVERY_QUEUE_URL"] == {"Ref": "BulkDeliveryQueue"}


# ------------------------------------------------------------------ layers
def _pins(lines: list[str]) -> dict[str, str]:
    out = {}
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"unpinned: {line}"
            out[name.strip().lower()] = version.strip()
    return out


def test_deps_layer_pins_the_runtime_dependencies() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    runtime = _pins(project["dependencies"])
    dev = _pins(project["optional-dependencies"]["dev"])
    layer = _pins((ROOT / "layers/deps/requirements.txt").read_text().splitlines())
    assert {k: layer.get(k) for k in runtime} == runtime
    # the X-Ray SDK (Powertools' Tracer needs it in Lambda) at the version tests use
    assert layer.pop("aws-xray-sdk") == dev["aws-xray-sdk"]
    assert set(layer) == set(runtime)


def test_layers_are_built_by_sam(template: dict[str, Any]) -> None:
    deps = template["Resources"]["DepsLayer"]
    own = template["Resources"]["MailqueueLayer"]
    assert deps["Metadata"]["BuildMethod"] == "python3.12"
    assert own["Metadata"]["BuildMethod"] == "makefile"
    for layer in (deps, own):
        assert layer["Metadata"]["BuildArchitecture"] == "arm64"
        assert layer["Properties"]["CompatibleArchitectures"] == ["arm64"]
        assert layer["Properties"]["CompatibleRuntimes"] == ["python3.12"]
    makefile = (ROOT / own["Properties"]["ContentUri"] / "Makefile").read_text()
    assert "build-MailqueueLayer:" in makefile and "--no-deps" in makefile


@pytest.mark.parametrize("name", ["Hostname"])
def test_required_parameters_have_no_default(template: dict[str, Any], name: str) -> None:
    assert "Default" not in template["Parameters"][name]


def test_analytics_schedule_runs_the_job_with_arguments_it_accepts(
    template: dict[str, Any],
) -> None:
    """The daily run's arguments go through the job's own parser, and the runtime is a
    Spark 4 release (the job uses Spark 4 APIs: groupingSets, try_cast)."""
    from mq_pipeline.job import parse_args

    label = template["Parameters"]["EmrReleaseLabel"]["Default"]
    assert re.fullmatch(r"emr-spark-(\d+)\.\d+\.\d+", label), label
    assert int(label.split("-")[2].split(".")[0]) >= 8  # emr-spark-8.x = Spark 4.0
    sub = props(template, "AnalyticsDailyRun")["Target"]["Input"]["Fn::Sub"]
    text, names = sub
    for name in names:
        text = text.replace("${" + name + "}", "bucket")
    text = re.sub(r"\$\{[^}]+\}", "x", text)
    job = json.loads(text)["JobDriver"]["SparkSubmit"]
    assert job["EntryPoint"] == "s3://bucket/pipeline/main.py"
    assert "--py-files s3://bucket/pipeline/mq_pipeline.zip" in job["SparkSubmitParameters"]
    cfg = parse_args(job["EntryPointArguments"])
    assert cfg.events == "s3://bucket/events/"
    day = cfg.rng.start.date().isoformat() if cfg.rng.start else None
    assert cfg.out == f"s3://bucket/reports/daily/dt={day}/"
