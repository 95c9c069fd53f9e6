"""EgressMode in the parsed template: relay deploys no network at all, whatever the other
network parameters say; the delivery security group opens only what delivery uses."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from mailqueue_local.cfn import for_moto

RELAY_COMBINATIONS = [
    {"NatGateways": n, "InterfaceEndpoints": e, "EgressMode": "relay"}
    for n, e in itertools.product(["1", "2", "3"], ["true", "false"])
]


@pytest.mark.parametrize("params", RELAY_COMBINATIONS, ids=lambda p: json.dumps(p))
def test_relay_mode_leaves_every_network_resource_out(
    template: dict[str, Any], params: dict[str, str]
) -> None:
    kept, removed = for_moto(template, {"Hostname": "mq.test", **params})
    assert not [lid for lid, r in kept["Resources"].items() if r["Type"].startswith("AWS::EC2::")]
    assert "EgressVpc" in removed and "NatGatewayA" in removed
    delivery = kept["Resources"]["DeliveryFunction"]["Properties"]
    assert "VpcConfig" not in delivery
    role = json.dumps(kept["Resources"]["DeliveryRole"])
    assert "ec2:" not in role
    assert "SendingIps" not in kept.get("Outputs", {})


@pytest.mark.parametrize("nats", ["1", "2", "3"])
def test_direct_mode_builds_one_nat_gateway_and_ip_per_nat(
    template: dict[str, Any], nats: str
) -> None:
    kept, _ = for_moto(
        template, {"Hostname": "mq.test", "EgressMode": "direct", "NatGateways": nats}
    )
    types = [r["Type"] for r in kept["Resources"].values()]
    assert types.count("AWS::EC2::NatGateway") == int(nats)
    assert types.count("AWS::EC2::EIP") == int(nats)
    assert types.count("AWS::EC2::Subnet") == 2 * max(2, int(nats))
    assert "VpcConfig" in kept["Resources"]["DeliveryFunction"]["Properties"]


def test_delivery_security_group_allows_only_what_delivery_uses(template: dict[str, Any]) -> None:
    sg = template["Resources"]["DeliverySecurityGroup"]["Properties"]
    assert "SecurityGroupIngress" not in sg
    rules = {(r["IpProtocol"], r["FromPort"], r["ToPort"]) for r in sg["SecurityGroupEgress"]}
    assert rules == {
        ("tcp", 25, 25),
        ("tcp", 587, 587),
        ("tcp", 443, 443),
        ("udp", 53, 53),
        ("tcp", 53, 53),
    }
    # DNS only to the VPC's resolver, never out
    dns = [r for r in sg["SecurityGroupEgress"] if r["FromPort"] == 53]
    assert all("0.0.0.0/0" not in json.dumps(r["CidrIp"]) for r in dns)


def test_interface_endpoints_accept_https_from_delivery_only(template: dict[str, Any]) -> None:
    sg = template["Resources"]["EndpointSecurityGroup"]["Properties"]
    (rule,) = sg["SecurityGroupIngress"]
    assert (rule["FromPort"], rule["ToPort"]) == (443, 443)
    assert rule["SourceSecurityGroupId"] == {"Ref": "DeliverySecurityGroup"}
