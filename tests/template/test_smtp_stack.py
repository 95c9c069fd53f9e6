"""SmtpFrontDoor=on deployed into moto's CloudFormation: the ECS Fargate service behind a
Network Load Balancer, read back from moto's ECS, ELBv2, EC2, IAM and Secrets Manager.
Off (the default) deploys none of it.

The front door's smtpd then runs as the task would (the task definition's environment,
moto's endpoint), takes mail over 587 and 465, and its role must grant exactly what its
clients called (as tests/template/test_stack.py checks the functions' roles; what the
run cannot observe is in tests/template/declared.py with its reason)."""

from __future__ import annotations

import ast
import fnmatch
import ipaddress
import json
import smtplib
import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from botocore.client import BaseClient
from mailqueue.compose.smtpd import build_server
from mailqueue.services.ingress.settings import ingress_settings_from_env
from mailqueue.services.smtpd import User, smtpd_settings_from_env
from mailqueue.services.smtpd.credentials import dump_store, hash_password
from mailqueue_local.cfn import StackOutputs, deploy_stack, load_template
from mailqueue_local.tlscert import self_signed

from tests.support import factories as f
from tests.support.aws import REGION, reset_moto, session
from tests.template import iam
from tests.template.conftest import TEMPLATE
from tests.template.declared import SMTPD_DECLARED

SMTP_TYPES = {
    "AWS::ECS::Cluster",
    "AWS::ECS::TaskDefinition",
    "AWS::ECS::Service",
    "AWS::ElasticLoadBalancingV2::LoadBalancer",
    "AWS::ElasticLoadBalancingV2::TargetGroup",
}  # the TCP listeners are left out of moto's deploy (mailqueue_local.cfn.MOTO_SKIPPED)
VPC_CIDR = "10.90.0.0/16"
CLIENTS = "203.0.113.0/24"  # SmtpAllowedCidr narrowed to the clients' range
USER = ("app", "a long enough password")
APP_ARN = "arn:aws:iam::123456789012:role/app"


def client(endpoint: str, name: str) -> Any:
    return session().client(name, endpoint_url=endpoint, region_name=REGION)


def created(endpoint: str, out: StackOutputs) -> dict[str, tuple[str, str]]:
    pages = client(endpoint, "cloudformation").get_paginator("list_stack_resources")
    return {
        r["LogicalResourceId"]: (r["ResourceType"], r["PhysicalResourceId"])
        for page in pages.paginate(StackName=out.stack_name)
        for r in page["StackResourceSummaries"]
    }


@pytest.fixture(scope="module")
def smtp_stack(
    moto_endpoint: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, StackOutputs, Path]]:
    reset_moto(moto_endpoint)
    ec2 = client(moto_endpoint, "ec2")
    vpc = ec2.create_vpc(CidrBlock=VPC_CIDR)["Vpc"]["VpcId"]
    subnets = [
        ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.90.{i}.0/24", AvailabilityZone=az)["Subnet"][
            "SubnetId"
        ]
        for i, az in enumerate(("us-east-1a", "us-east-1b", "us-east-1a", "us-east-1b"))
    ]
    cert, key = self_signed(tmp_path_factory.mktemp("tls"))
    sm = client(moto_endpoint, "secretsmanager")
    tls = sm.create_secret(
        Name="smtpd-tls",
        SecretString=json.dumps({"cert": cert.read_text(), "key": key.read_text()}),
    )["ARN"]
    users = sm.create_secret(
        Name="smtpd-users",
        SecretString=dump_store({USER[0]: User(APP_ARN, hash_password(USER[1], n=2**10))}),
    )["ARN"]
    out = deploy_stack(
        moto_endpoint,
        parameters={
            "Hostname": "mq.test",
            "SenderPolicy": json.dumps([{"principal": APP_ARN, "domains": ["example.org"]}]),
            "SmtpFrontDoor": "on",
            "SmtpImageUri": "123456789012.dkr.ecr.us-east-1.amazonaws.com/mailqueue:1",
            "SmtpVpcId": vpc,
            "SmtpSubnetIds": ",".join(subnets[:2]),
            "SmtpTaskSubnetIds": ",".join(subnets[2:]),
            "SmtpTlsSecretArn": tls,
            "SmtpCredentialsSecretArn": users,
            "SmtpAllowedCidr": CLIENTS,
        },
    )
    yield moto_endpoint, out, cert
    reset_moto(moto_endpoint)


def _container(endpoint: str, res: dict[str, tuple[str, str]]) -> dict[str, Any]:
    td = client(endpoint, "ecs").describe_task_definition(
        taskDefinition=res["SmtpTaskDefinition"][1]
    )
    (container,) = td["taskDefinition"]["containerDefinitions"]
    return dict(container)


def test_front_door_is_a_fargate_service_behind_an_nlb(
    smtp_stack: tuple[str, StackOutputs, Path],
) -> None:
    endpoint, out, _ = smtp_stack
    res = created(endpoint, out)
    types = {kind for kind, _ in res.values()}
    assert SMTP_TYPES <= types, sorted(types)
    ecs = client(endpoint, "ecs")
    cluster = res["SmtpCluster"][1]
    (svc,) = ecs.describe_services(cluster=cluster, services=[res["SmtpService"][1]])["services"]
    assert svc["desiredCount"] == 2  # (moto's CloudFormation drops LaunchType, LoadBalancers)
    container = _container(endpoint, res)
    env = {e["name"]: e["value"] for e in container["environment"]}
    # the ingress function's storage names, resolved by CloudFormation
    assert env["MQ_TABLE"] == out.table and env["MQ_BUCKET"] == out.bucket
    assert env["MQ_DELIVERY_QUEUE_URL"] == out.delivery_queue_url
    assert container["command"] == ["mailqueue", "smtpd"]
    users = out.parameters["SmtpCredentialsSecretArn"]
    assert env["MQ_SMTPD_CREDENTIALS"] == f"secretsmanager:{users}"
    elb = client(endpoint, "elbv2")
    (lb,) = elb.describe_load_balancers(LoadBalancerArns=[res["SmtpLoadBalancer"][1]])[
        "LoadBalancers"
    ]
    assert lb["Scheme"] == "internet-facing"  # (moto records Type network as application)
    groups = [res[g][1] for g in ("SmtpTargetGroup", "SmtpTlsTargetGroup")]
    tgs = elb.describe_target_groups(TargetGroupArns=groups)["TargetGroups"]
    assert sorted((tg["Protocol"], tg["Port"], tg["TargetType"]) for tg in tgs) == [
        ("TCP", 465, "ip"),
        ("TCP", 587, "ip"),
    ]
    assert {"SmtpListener", "SmtpTlsListener"} <= set(out.skipped)
    assert out.outputs["SmtpEndpoint"].endswith(":587")
    assert out.outputs["SmtpTlsEndpoint"].endswith(":465")


def test_the_task_has_465_and_the_return_path_settings(
    smtp_stack: tuple[str, StackOutputs, Path],
) -> None:
    """Item 10: 465 mapped and listened on; the return-path policy and keys set as on
    the ingress function (the receiving listener's reports, the VERP return paths)."""
    endpoint, out, _ = smtp_stack
    container = _container(endpoint, created(endpoint, out))
    env = {e["name"]: e["value"] for e in container["environment"]}
    assert env["MQ_SMTPD_PORT"] == "587" and env["MQ_SMTPD_TLS_PORT"] == "465"
    ports = sorted(p["containerPort"] for p in container["portMappings"])
    assert ports == [465, 587]
    assert "MQ_RETURN_PATH_POLICY" in env and "MQ_RETURN_PATH_KEYS" in env
    settings = smtpd_settings_from_env(env)
    assert (settings.port, settings.tls_port, settings.host) == (587, 465, "0.0.0.0")


def test_the_health_check_reads_the_greeting(smtp_stack: tuple[str, StackOutputs, Path]) -> None:
    """Item 8: a container health check (the NLB's TCP check cannot read a banner);
    tests/smtpd/test_check.py runs this command against the server."""
    endpoint, out, _ = smtp_stack
    container = _container(endpoint, created(endpoint, out))
    hc = container["healthCheck"]
    assert hc["command"] == ["CMD", "mailqueue", "smtpd", "--check"]
    assert hc["timeout"] >= 6 and hc["retries"] >= 1


# ------------------------------------------------------------------ network (items 6, 7)
def _rules(ec2: Any, group_id: str) -> list[dict[str, Any]]:
    (sg,) = ec2.describe_security_groups(GroupIds=[group_id])["SecurityGroups"]
    return list(sg["IpPermissions"])


def _admits(rules: list[dict[str, Any]], port: int, *, ip: str, groups: set[str]) -> bool:
    """Whether a TCP connection to `port` from `ip`, sent by an interface in `groups`,
    is admitted by these ingress rules (EC2's security-group semantics)."""
    for r in rules:
        if r.get("IpProtocol") not in ("tcp", "-1"):
            continue
        if r.get("IpProtocol") == "tcp" and not r["FromPort"] <= port <= r["ToPort"]:
            continue
        if any(
            ipaddress.ip_address(ip) in ipaddress.ip_network(x["CidrIp"])
            for x in r.get("IpRanges", [])
        ):
            return True
        if any(p["GroupId"] in groups for p in r.get("UserIdGroupPairs", [])):
            return True
    return False


def test_health_checks_reach_the_tasks_whatever_the_allowed_cidr(
    smtp_stack: tuple[str, StackOutputs, Path],
) -> None:
    """Item 6: with SmtpAllowedCidr narrowed to the clients' range, the NLB's health
    checks (from its own addresses in the VPC, with its security group) still reach the
    tasks on 587 and 465; clients in the range reach the NLB, others do not; a client
    that goes to a task's own address, past the NLB, is not admitted."""
    endpoint, out, _ = smtp_stack
    res = created(endpoint, out)
    ec2, elb = client(endpoint, "ec2"), client(endpoint, "elbv2")
    (lb,) = elb.describe_load_balancers(LoadBalancerArns=[res["SmtpLoadBalancer"][1]])[
        "LoadBalancers"
    ]
    nlb_groups = set(lb.get("SecurityGroups", []))
    assert nlb_groups == {res["SmtpLoadBalancerSecurityGroup"][1]}
    tasks = _rules(ec2, res["SmtpSecurityGroup"][1])
    nlb = _rules(ec2, res["SmtpLoadBalancerSecurityGroup"][1])
    health_check_source = "10.90.0.17"  # an NLB address in its subnet
    for port in (587, 465):
        assert _admits(tasks, port, ip=health_check_source, groups=nlb_groups), port
        assert _admits(nlb, port, ip="203.0.113.9", groups=set()), port
        assert not _admits(nlb, port, ip="198.51.100.9", groups=set()), port
        # straight to a task (its public IP with SmtpAssignPublicIp=ENABLED), no NLB
        assert not _admits(tasks, port, ip="203.0.113.9", groups=set()), port
    assert not _admits(tasks, 25, ip=health_check_source, groups=nlb_groups)


def test_tasks_are_private_by_default() -> None:
    """Item 7: no public address on a task unless asked for, in subnets of their own
    (moto's ECS keeps no network configuration, so this reads the template)."""
    t = load_template(TEMPLATE)
    assert t["Parameters"]["SmtpAssignPublicIp"]["Default"] == "DISABLED"
    vpc = t["Resources"]["SmtpService"]["Properties"]["NetworkConfiguration"]["AwsvpcConfiguration"]
    assert vpc["AssignPublicIp"] == {"Ref": "SmtpAssignPublicIp"}
    assert vpc["Subnets"] == {
        "Fn::Split": [
            ",",
            {
                "Fn::If": [
                    "SmtpOwnTaskSubnets",
                    {"Ref": "SmtpTaskSubnetIds"},
                    {"Ref": "SmtpSubnetIds"},
                ]
            },
        ]
    }
    assert t["Resources"]["SmtpLoadBalancer"]["Properties"]["Scheme"] == "internet-facing"


# ------------------------------------------------------------------ the task role (item 9)
@contextmanager
def recording() -> Iterator[list[tuple[str, str, dict[str, Any]]]]:
    """Every AWS API call this process makes while inside (the server's clients and the
    ones compose.smtpd makes for the secrets at start)."""
    calls: list[tuple[str, str, dict[str, Any]]] = []
    original = BaseClient._make_api_call

    def record(self: BaseClient, operation: str, params: dict[str, Any]) -> Any:
        calls.append((self.meta.service_model.service_name, operation, dict(params)))
        return original(self, operation, params)

    BaseClient._make_api_call = record
    try:
        yield calls
    finally:
        BaseClient._make_api_call = original


def _documents(endpoint: str, role: str) -> list[Any]:
    c = client(endpoint, "iam")
    return [
        c.get_role_policy(RoleName=role, PolicyName=name)["PolicyDocument"]
        for name in c.list_role_policies(RoleName=role)["PolicyNames"]
    ]


def _role_policy(endpoint: str, role: str) -> iam.Policy:
    return iam.Policy.from_documents(_documents(endpoint, role))


def _statements(endpoint: str, role: str) -> list[dict[str, Any]]:
    out = []
    for doc in _documents(endpoint, role):
        if isinstance(doc, str):  # moto hands CloudFormation-made documents back as repr
            try:
                doc = json.loads(doc)
            except ValueError:
                doc = ast.literal_eval(doc)
        out += doc["Statement"]
    return out


def test_task_role_grants_exactly_what_smtpd_calls(
    smtp_stack: tuple[str, StackOutputs, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    endpoint, out, cert = smtp_stack
    res = created(endpoint, out)
    container = _container(endpoint, res)
    env = {e["name"]: e["value"] for e in container["environment"]}
    env["MQ_ENDPOINT_URL"] = endpoint
    for k, v in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}.items():
        monkeypatch.setenv(k, v)
    ctx = ssl.create_default_context(cafile=str(cert))
    big = (
        b"From: a@example.org\r\nSubject: big\r\n\r\n"
        + f.incompressible(10 * 1024).split(b"\r\n\r\n", 1)[1]
    )
    small = b"From: a@example.org\r\nSubject: small\r\n\r\nhello\r\n"
    with recording() as calls:
        smtpd = smtpd_settings_from_env(env, host="127.0.0.1", port=0, tls_port=0)
        server = build_server(smtpd, ingress_settings_from_env(env)).start()
        try:
            port, tls_port = server.port_of("submission"), server.port_of("submissions")
            assert port and tls_port
            c = smtplib.SMTP("127.0.0.1", port, timeout=10)
            c.ehlo("client.example")
            c.starttls(context=ctx)
            c.ehlo("client.example")
            c.login(*USER)
            assert c.mail("x@example.net")[0] == 550  # the sender policy: a Reject event
            c.mail("a@example.org")
            c.rcpt("b@example.net")
            assert c.data(big)[0] == 250  # content to S3
            c.quit()
            c = smtplib.SMTP_SSL("127.0.0.1", tls_port, timeout=10, context=ctx)
            c.ehlo("client.example")
            c.login(*USER)
            c.mail("a@example.org")
            c.rcpt("b@example.net")
            c.rcpt("c@example.com")
            assert c.data(small)[0] == 250  # content in the mail item
            c.quit()
        finally:
            server.stop()
    assert calls, "smtpd made no AWS call"
    needed = {pair for svc, op, params in calls for pair in iam.required(svc, op, params)}
    policy = _role_policy(endpoint, res["SmtpTaskRole"][1])
    lacking = sorted(p for p in needed if not policy.allows(*p))
    assert not lacking, f"SmtpTaskRole lacks {lacking}"
    unneeded = []
    for statement, action in policy.grants():
        observed = any(a.lower() == action.lower() and statement.allows(a, r) for a, r in needed)
        if not observed and (statement.sid, action) not in SMTPD_DECLARED:
            unneeded.append(f"{statement.sid}: {action}")
    assert not unneeded, (
        f"SmtpTaskRole grants {unneeded}, which smtpd did not call: remove them, or list "
        "them with the reason in tests/template/declared.py (SMTPD_DECLARED)"
    )
    granted = {(s.sid, a) for s, a in policy.grants()}
    stale = sorted(set(SMTPD_DECLARED) - granted)
    assert not stale, f"SMTPD_DECLARED lists {stale}: not granted"
    for forbidden in ("s3:ListBucket", "s3:DeleteObject", "dynamodb:DeleteItem"):
        assert not any(a.lower() == forbidden.lower() for _, a in policy.grants()), forbidden
    # BatchWriteItem (puts and deletes alike) only on the keys smtpd writes, puts only
    (state,) = [st for st in _statements(endpoint, res["SmtpTaskRole"][1]) if st["Sid"] == "State"]
    patterns = state["Condition"]["ForAllValues:StringLike"]["dynamodb:LeadingKeys"]
    writes = [(op, p) for _, op, p in calls if op in ("BatchWriteItem", "PutItem")]
    assert {op for op, _ in writes} == {"BatchWriteItem", "PutItem"}
    for op, params in writes:
        reqs = [r for rs in params.get("RequestItems", {}).values() for r in rs]
        assert all(list(r) == ["PutRequest"] for r in reqs), reqs
        items = [r["PutRequest"]["Item"] for r in reqs] or [params["Item"]]
        for item in items:
            pk = item["pk"]["S"]
            assert any(fnmatch.fnmatchcase(pk, pat) for pat in patterns), (op, pk, patterns)


def test_off_by_default_deploys_none_of_it(moto_endpoint: str) -> None:
    reset_moto(moto_endpoint)
    out = deploy_stack(moto_endpoint, parameters={"Hostname": "mq.test"})
    types = {kind for kind, _ in created(moto_endpoint, out).values()}
    assert not (SMTP_TYPES & types)
    smtp = {lid for lid in out.resource_types if lid.startswith("Smtp")}
    assert smtp and smtp <= set(out.skipped)  # every one behind the false condition
    assert "SmtpEndpoint" not in out.outputs
    reset_moto(moto_endpoint)
