"""EgressMode direct deployed into moto's CloudFormation: the network the template builds
(VPC, subnets per AZ, NAT gateways with Elastic IPs, routes, endpoints) or the operator's
subnets and security groups, and the delivery function attached to it.

moto's EC2 and Lambda record what CloudFormation created, so each check reads the real
resources back (describe_*) rather than the template. Relay mode's absence of all of it
is checked on the relay stack (test_stack.py, test_relay_mode_deploys_no_network).
"""

from __future__ import annotations

import ast
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from mailqueue.outbound.doctor import DoctorSettings
from mailqueue.services.delivery import DeliverySettings
from mailqueue_local.cfn import StackOutputs, deploy_stack

from tests.support.aws import REGION, reset_moto, session

#: Lambda's own list for a VPC-attached function (AWSLambdaVPCAccessExecutionRole).
VPC_ACTIONS = {
    "ec2:CreateNetworkInterface",
    "ec2:DescribeNetworkInterfaces",
    "ec2:DescribeSubnets",
    "ec2:DeleteNetworkInterface",
    "ec2:AssignPrivateIpAddresses",
    "ec2:UnassignPrivateIpAddresses",
}
BASE = {"Hostname": "mq.test", "EgressMode": "direct", "EgressAllow": "127.0.0.1"}


@dataclass
class Deployed:
    outputs: StackOutputs
    endpoint: str
    _listed: dict[str, tuple[str, str]] = field(default_factory=dict)
    _functions: dict[str, dict[str, Any]] = field(default_factory=dict)

    def client(self, name: str) -> Any:
        return session().client(name, endpoint_url=self.endpoint, region_name=REGION)

    def physical(self, lid: str) -> str:
        return self._summaries()[lid][1]

    def created(self) -> dict[str, str]:
        """Logical id → type of what the stack really created."""
        return {lid: kind for lid, (kind, _) in self._summaries().items()}

    def _summaries(self) -> dict[str, tuple[str, str]]:
        if not self._listed:
            pages = self.client("cloudformation").get_paginator("list_stack_resources")
            self._listed = {
                r["LogicalResourceId"]: (r["ResourceType"], r["PhysicalResourceId"])
                for page in pages.paginate(StackName=self.outputs.stack_name)
                for r in page["StackResourceSummaries"]
            }
        return self._listed

    def function(self, lid: str) -> dict[str, Any]:
        if lid not in self._functions:
            self._functions[lid] = self.client("lambda").get_function_configuration(
                FunctionName=self.outputs.functions[lid]
            )
        return self._functions[lid]

    def role_documents(self, lid: str) -> dict[str, dict[str, Any]]:
        client = self.client("iam")
        role = self.function(lid)["Role"].rsplit("/", 1)[1]
        out: dict[str, dict[str, Any]] = {}
        for name in client.list_role_policies(RoleName=role)["PolicyNames"]:
            doc = client.get_role_policy(RoleName=role, PolicyName=name)["PolicyDocument"]
            if isinstance(doc, str):  # moto hands CloudFormation-made documents back as repr
                try:
                    doc = json.loads(doc)
                except ValueError:
                    doc = ast.literal_eval(doc)
            out[name] = doc
        return out


@pytest.fixture(scope="module")
def stacks(moto_endpoint: str) -> Iterator[dict[str, Deployed]]:
    """Three direct-mode stacks in one account: the template's network with 2 NAT
    gateways and interface endpoints, with 3 NAT gateways (a third AZ), and in an
    operator's network made here beforehand."""
    reset_moto(moto_endpoint)
    ec2 = session().client("ec2", endpoint_url=moto_endpoint, region_name=REGION)
    vpc = ec2.create_vpc(CidrBlock="10.9.0.0/16")["Vpc"]["VpcId"]
    given_subnets = [
        ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.9.{i}.0/24", AvailabilityZone=f"{REGION}{az}")[
            "Subnet"
        ]["SubnetId"]
        for i, az in ((1, "a"), (2, "b"))
    ]
    given_sg = ec2.create_security_group(GroupName="ops-mail", Description="ops", VpcId=vpc)[
        "GroupId"
    ]
    out: dict[str, Deployed] = {}
    for name, params in (
        ("own2", {"NatGateways": "2", "InterfaceEndpoints": "true"}),
        ("own3", {"NatGateways": "3", "VpcCidrPrefix": "10.81"}),
        ("own1", {"NatGateways": "1", "VpcCidrPrefix": "10.82"}),
        ("given", {"SubnetIds": ",".join(given_subnets), "SecurityGroupIds": given_sg}),
    ):
        outputs = deploy_stack(moto_endpoint, stack_name=name, parameters={**BASE, **params})
        out[name] = Deployed(outputs, moto_endpoint)
    yield out
    reset_moto(moto_endpoint)


def subnets_az_of(d: Deployed, subnets: list[dict[str, Any]], x: str) -> str:
    """The AZ of public subnet ``x`` (where NAT gateway ``x`` is)."""
    sid = d.physical(f"PublicSubnet{x}")
    return str(next(s["AvailabilityZone"] for s in subnets if s["SubnetId"] == sid))


def _nat_gateways(d: Deployed) -> list[dict[str, Any]]:
    ids = [d.physical(lid) for lid, t in d.created().items() if t == "AWS::EC2::NatGateway"]
    gws: list[dict[str, Any]] = d.client("ec2").describe_nat_gateways(NatGatewayIds=ids)[
        "NatGateways"
    ]
    return gws


@pytest.mark.parametrize(("name", "azs"), [("own2", 2), ("own3", 3), ("own1", 2)])
def test_own_network_subnets_nat_gateways_and_sending_ips(
    stacks: dict[str, Deployed], name: str, azs: int
) -> None:
    d = stacks[name]
    ec2 = d.client("ec2")
    nats = int(d.outputs.parameters["NatGateways"])
    vpc = d.outputs["EgressVpcId"]
    prefix = d.outputs.parameters.get("VpcCidrPrefix", "10.80")
    assert ec2.describe_vpcs(VpcIds=[vpc])["Vpcs"][0]["CidrBlock"] == f"{prefix}.0.0/16"
    subnets = ec2.describe_subnets(Filters=[{"Name": "vpc-id", "Values": [vpc]}])["Subnets"]
    assert len(subnets) == 2 * azs
    assert len({s["AvailabilityZone"] for s in subnets}) == azs

    # one NAT gateway per AZ asked for, each in a public subnet with its own Elastic IP,
    # and those IPs are the SendingIps output
    gws = _nat_gateways(d)
    assert len(gws) == nats
    public_ids = {d.physical(f"PublicSubnet{x}") for x in "ABC"[:azs]}
    assert {g["SubnetId"] for g in gws} <= public_ids
    nat_ips = {a["PublicIp"] for g in gws for a in g["NatGatewayAddresses"]}
    assert len(nat_ips) == nats
    assert set(d.outputs["SendingIps"].split(",")) == nat_ips
    # and what mailqueue doctor checks (the admin function's MQ_SENDING_IPS)
    admin_env = d.function("AdminFunction")["Environment"]["Variables"]
    assert set(DoctorSettings.from_env(admin_env).input().sending_ips) == nat_ips
    eips = ec2.describe_addresses(PublicIps=sorted(nat_ips))["Addresses"]
    assert {e["Domain"] for e in eips} == {"vpc"}

    # each private subnet's default route leaves through a NAT gateway (its own AZ's when
    # there is one); the public subnets' through the internet gateway
    nat_by_subnet_az = {
        next(s["AvailabilityZone"] for s in subnets if s["SubnetId"] == g["SubnetId"]): g[
            "NatGatewayId"
        ]
        for g in gws
    }
    private = {d.physical(f"PrivateSubnet{x}") for x in "ABC"[:azs]}
    tables = {
        t["RouteTableId"]: t
        for t in ec2.describe_route_tables(Filters=[{"Name": "vpc-id", "Values": [vpc]}])[
            "RouteTables"
        ]
    }
    created = d.created()

    def default_route(lid: str) -> dict[str, Any]:
        routes = tables[d.physical(lid)]["Routes"]
        found = [r for r in routes if r.get("DestinationCidrBlock") == "0.0.0.0/0"]
        assert len(found) == 1, (lid, routes)
        return found[0]

    # (moto keeps CloudFormation's subnet associations apart from describe_route_tables,
    # so the subnet ↔ table pairing is read from the association resources created)
    for x in "ABC"[:azs]:
        assert created[f"PrivateSubnet{x}Routes"] == "AWS::EC2::SubnetRouteTableAssociation"
        assert created[f"PublicSubnet{x}Routes"] == "AWS::EC2::SubnetRouteTableAssociation"
        az = next(
            s["AvailabilityZone"]
            for s in subnets
            if s["SubnetId"] == d.physical(f"PrivateSubnet{x}")
        )
        expected = nat_by_subnet_az.get(az, nat_by_subnet_az[subnets_az_of(d, subnets, "A")])
        assert default_route(f"PrivateRouteTable{x}").get("NatGatewayId") == expected, x
    assert default_route("PublicRouteTable").get("GatewayId", "").startswith("igw-")

    # the delivery function runs in the private subnets with the template's group; the
    # other functions stay outside the VPC
    conf = d.function("DeliveryFunction")
    assert set(conf["VpcConfig"]["SubnetIds"]) == private
    assert conf["VpcConfig"]["SecurityGroupIds"] == [d.physical("DeliverySecurityGroup")]
    for lid in d.outputs.functions:
        if lid != "DeliveryFunction":
            assert not (d.function(lid).get("VpcConfig") or {}).get("SubnetIds"), lid


@pytest.mark.parametrize("name", ["own2", "own3", "own1"])
def test_gateway_endpoints_always_interface_endpoints_by_parameter(
    stacks: dict[str, Deployed], name: str
) -> None:
    d = stacks[name]
    vpc = d.outputs["EgressVpcId"]
    eps = d.client("ec2").describe_vpc_endpoints(Filters=[{"Name": "vpc-id", "Values": [vpc]}])[
        "VpcEndpoints"
    ]
    by_service = {e["ServiceName"].rsplit(".", 1)[1]: e for e in eps}
    private_tables = {
        d.physical(f"PrivateRouteTable{x}") for x in "ABC"[: 3 if name == "own3" else 2]
    }
    for svc in ("s3", "dynamodb"):
        assert by_service[svc]["VpcEndpointType"] == "Gateway"
        assert set(by_service[svc]["RouteTableIds"]) == private_tables
    interface = {s for s, e in by_service.items() if e["VpcEndpointType"] == "Interface"}
    if d.outputs.parameters.get("InterfaceEndpoints") == "true":
        assert interface == {"sqs", "secretsmanager"}
        assert all(by_service[s]["PrivateDnsEnabled"] for s in interface)
    else:
        assert interface == set()


def test_operator_network_is_used_and_nothing_is_built(stacks: dict[str, Deployed]) -> None:
    d = stacks["given"]
    params = d.outputs.parameters
    conf = d.function("DeliveryFunction")
    assert conf["VpcConfig"]["SubnetIds"] == params["SubnetIds"].split(",")
    assert conf["VpcConfig"]["SecurityGroupIds"] == [params["SecurityGroupIds"]]
    network_types = {t for t in d.created().values() if t.startswith("AWS::EC2::")}
    assert network_types == set()
    assert "SendingIps" not in d.outputs and "EgressVpcId" not in d.outputs


@pytest.mark.parametrize("name", ["own2", "given"])
def test_direct_mode_settings_and_vpc_permissions(stacks: dict[str, Deployed], name: str) -> None:
    d = stacks[name]
    env = {k: str(v) for k, v in d.function("DeliveryFunction")["Environment"]["Variables"].items()}
    settings = DeliverySettings.from_env(env)
    assert settings.egress_mode == "direct"
    guard = settings.egress_guard()
    assert guard is not None
    assert guard.refusal("10.0.0.1") == "private address"
    assert guard.refusal("127.0.0.1") is None  # EgressAllow
    docs = d.role_documents("DeliveryFunction")
    vpc = [s for s in docs["delivery-vpc"]["Statement"] if s["Sid"] == "VpcNetworkInterfaces"]
    assert len(vpc) == 1 and set(vpc[0]["Action"]) == VPC_ACTIONS
    # only the delivery function's role may manage network interfaces
    for lid in d.outputs.functions:
        if lid != "DeliveryFunction":
            actions = json.dumps(d.role_documents(lid))
            assert "ec2:" not in actions, lid
