"""SmtpFrontDoor=on deployed into moto's CloudFormation: the ECS Fargate service behind a
Network Load Balancer, read back from moto's ECS, ELBv2, EC2 and Secrets Manager. Off
(the default) deploys none of it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from mailqueue_local.cfn import StackOutputs, deploy_stack

from tests.support.aws import REGION, reset_moto, session

SMTP_TYPES = {
    "AWS::ECS::Cluster",
    "AWS::ECS::TaskDefinition",
    "AWS::ECS::Service",
    "AWS::ElasticLoadBalancingV2::LoadBalancer",
    "AWS::ElasticLoadBalancingV2::TargetGroup",
}  # the TCP listener is left out of moto's deploy (mailqueue_local.cfn.MOTO_SKIPPED)


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
def smtp_stack(moto_endpoint: str) -> Iterator[tuple[str, StackOutputs]]:
    reset_moto(moto_endpoint)
    ec2 = client(moto_endpoint, "ec2")
    vpc = ec2.create_vpc(CidrBlock="10.90.0.0/16")["Vpc"]["VpcId"]
    subnets = [
        ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.90.{i}.0/24", AvailabilityZone=az)["Subnet"][
            "SubnetId"
        ]
        for i, az in enumerate(("us-east-1a", "us-east-1b"))
    ]
    sm = client(moto_endpoint, "secretsmanager")
    tls = sm.create_secret(
        Name="smtpd-tls", SecretString=json.dumps({"cert": "PEM", "key": "PEM"})
    )["ARN"]
    users = sm.create_secret(Name="smtpd-users", SecretString='{"users": {}}')["ARN"]
    out = deploy_stack(
        moto_endpoint,
        parameters={
            "Hostname": "mq.test",
            "SmtpFrontDoor": "on",
            "SmtpImageUri": "123456789012.dkr.ecr.us-east-1.amazonaws.com/mailqueue:1",
            "SmtpVpcId": vpc,
            "SmtpSubnetIds": ",".join(subnets),
            "SmtpTlsSecretArn": tls,
            "SmtpCredentialsSecretArn": users,
        },
    )
    yield moto_endpoint, out
    reset_moto(moto_endpoint)


def test_front_door_is_a_fargate_service_behind_an_nlb(
    smtp_stack: tuple[str, StackOutputs],
) -> None:
    endpoint, out = smtp_stack
    res = created(endpoint, out)
    types = {kind for kind, _ in res.values()}
    assert SMTP_TYPES <= types, sorted(types)
    ecs = client(endpoint, "ecs")
    cluster = res["SmtpCluster"][1]
    (svc,) = ecs.describe_services(cluster=cluster, services=[res["SmtpService"][1]])["services"]
    assert svc["desiredCount"] == 2  # (moto's CloudFormation drops LaunchType, LoadBalancers)
    td = ecs.describe_task_definition(taskDefinition=res["SmtpTaskDefinition"][1])
    (container,) = td["taskDefinition"]["containerDefinitions"]
    env = {e["name"]: e["value"] for e in container["environment"]}
    # the ingress function's storage names, resolved by CloudFormation
    assert env["MQ_TABLE"] == out.table and env["MQ_BUCKET"] == out.bucket
    assert env["MQ_DELIVERY_QUEUE_URL"] == out.delivery_queue_url
    assert env["MQ_SMTPD_CREDENTIALS"].startswith("secretsmanager:arn:aws:secretsmanager:")
    assert container["command"] == ["mailqueue", "smtpd"]
    users = out.parameters["SmtpCredentialsSecretArn"]
    assert env["MQ_SMTPD_CREDENTIALS"] == f"secretsmanager:{users}"
    elb = client(endpoint, "elbv2")
    (lb,) = elb.describe_load_balancers(LoadBalancerArns=[res["SmtpLoadBalancer"][1]])[
        "LoadBalancers"
    ]
    assert lb["Scheme"] == "internet-facing"  # (moto records Type network as application)
    (tg,) = elb.describe_target_groups(TargetGroupArns=[res["SmtpTargetGroup"][1]])["TargetGroups"]
    assert (tg["Protocol"], tg["Port"], tg["TargetType"]) == ("TCP", 587, "ip")
    assert "SmtpListener" in out.skipped
    assert out.outputs["SmtpEndpoint"].endswith(":587")


def test_off_by_default_deploys_none_of_it(moto_endpoint: str) -> None:
    reset_moto(moto_endpoint)
    out = deploy_stack(moto_endpoint, parameters={"Hostname": "mq.test"})
    types = {kind for kind, _ in created(moto_endpoint, out).values()}
    assert not (SMTP_TYPES & types)
    smtp = {lid for lid in out.resource_types if lid.startswith("Smtp")}
    assert smtp and smtp <= set(out.skipped)  # every one behind the false condition
    assert "SmtpEndpoint" not in out.outputs
    reset_moto(moto_endpoint)
