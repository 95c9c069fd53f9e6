"""EgressPools=2 deployed into moto's CloudFormation, direct mode with the template's
network: the added pool has its own delivery queue, event source and function, its own
private subnets whose default routes leave through its own NAT gateways carrying its own
Elastic IPs (never the default pool's), and every function is told the pool's queue.

Read back from moto's EC2, Lambda and SQS (describe_*), not from the template.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from mailqueue.core.config import StorageSettings, settings_from_env
from mailqueue.outbound.doctor import DoctorSettings
from mailqueue.services.delivery import DeliverySettings
from mailqueue_local.cfn import default_template_path, deploy_stack, load_template
from mailqueue_local.wiring import from_template

from tests.support.aws import reset_moto
from tests.template.test_egress_stack import BASE, Deployed, _nat_gateways

POOLS = json.dumps({
    "version": 1,
    "pools": {
        "default": {"addresses": "@nat", "ehlo": "@hostname"},
        "bulk": {"addresses": "@nat", "ehlo": "bulk.mq.test"},
    },
    "routing": {"default": "default", "rules": [{"priority": "bulk", "pool": "bulk"}]},
})  # fmt: skip


@pytest.fixture(scope="module")
def two(moto_endpoint: str) -> Iterator[Deployed]:
    reset_moto(moto_endpoint)
    params = {**BASE, "NatGateways": "2", "EgressPools": "2", "Pool2Name": "bulk", "Pools": POOLS}
    outputs = deploy_stack(moto_endpoint, stack_name="pools2", parameters=params)
    yield Deployed(outputs, moto_endpoint)
    reset_moto(moto_endpoint)


def _env(d: Deployed, lid: str) -> dict[str, str]:
    return {k: str(v) for k, v in d.function(lid)["Environment"]["Variables"].items()}


def test_egress_pool_two_has_its_own_nat_gateways_addresses_subnets_and_routes(
    two: Deployed,
) -> None:
    d = two
    ec2 = d.client("ec2")
    gws = {g["NatGatewayId"]: g for g in _nat_gateways(d)}
    assert len(gws) == 4  # two AZs, each pool its own NAT gateway there
    ip_of = {gid: {a["PublicIp"] for a in g["NatGatewayAddresses"]} for gid, g in gws.items()}
    pool_nats = {d.physical("Pool2NatGatewayA"), d.physical("Pool2NatGatewayB")}
    default_nats = {d.physical("NatGatewayA"), d.physical("NatGatewayB")}
    pool_ips = set().union(*(ip_of[g] for g in pool_nats))
    default_ips = set().union(*(ip_of[g] for g in default_nats))
    assert len(pool_ips) == 2 and not pool_ips & default_ips
    assert set(d.outputs["SendingIps"].split(",")) == default_ips
    assert set(d.outputs["PoolSendingIps"].removeprefix("bulk=").split(",")) == pool_ips

    tables = {
        t["RouteTableId"]: t
        for t in ec2.describe_route_tables(
            Filters=[{"Name": "vpc-id", "Values": [d.outputs["EgressVpcId"]]}]
        )["RouteTables"]
    }
    for x in "AB":
        routes = tables[d.physical(f"Pool2PrivateRouteTable{x}")]["Routes"]
        [default] = [r for r in routes if r.get("DestinationCidrBlock") == "0.0.0.0/0"]
        assert default.get("NatGatewayId") == d.physical(f"Pool2NatGateway{x}")
        assert (
            d.created()[f"Pool2PrivateSubnet{x}Routes"] == "AWS::EC2::SubnetRouteTableAssociation"
        )

    conf = d.function("Pool2DeliveryFunction")
    assert set(conf["VpcConfig"]["SubnetIds"]) == {
        d.physical("Pool2PrivateSubnetA"), d.physical("Pool2PrivateSubnetB")
    }  # fmt: skip
    assert not set(conf["VpcConfig"]["SubnetIds"]) & set(
        d.function("DeliveryFunction")["VpcConfig"]["SubnetIds"]
    )
    subnets = ec2.describe_subnets(SubnetIds=conf["VpcConfig"]["SubnetIds"])["Subnets"]
    assert sorted(s["CidrBlock"] for s in subnets) == ["10.80.64.0/20", "10.80.80.0/20"]


def test_egress_pool_two_has_its_queue_event_source_and_function(two: Deployed) -> None:
    d = two
    queue_url = d.physical("Pool2DeliveryQueue")
    arn = d.client("sqs").get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])[
        "Attributes"
    ]["QueueArn"]
    # moto's CloudFormation leaves event source mappings to the local runtime's pollers
    # (mailqueue_local/cfn.py): the mapping is read from the template as make run does
    physical = {lid: d.physical(lid) for lid in d.created()}
    configs = {lid: d.function(lid) for lid in d.outputs.functions}
    w = from_template(load_template(default_template_path()), physical, configs)
    by_queue = {t.queue_url: t.function for t in w.sqs}
    # locally both functions are the one delivery code (functions/delivery): its handler
    # serves the pool of the queue a batch comes from (below), as each function on AWS
    assert by_queue[queue_url] == by_queue[d.physical("DeliveryQueue")] == "delivery"
    env = _env(d, "Pool2DeliveryFunction")
    storage = settings_from_env(StorageSettings, env=env)
    assert storage.pool_for_source(arn) == "bulk"  # its records are the pool's
    assert storage.pool_for_source(arn.replace("-pool-bulk", "")) is None
    settings = DeliverySettings.from_env(env, pool="bulk")  # what its handler builds
    assert settings.pool_config().pools["bulk"].ehlo_name(settings.hostname) == "bulk.mq.test"
    assert DeliverySettings.from_env(_env(d, "DeliveryFunction")).pool == "default"
    # every function knows the pool's queue: ingress posts there, the sweeper reposts
    for lid in ("IngressFunction", "DeliveryFunction", "SweeperFunction", "AdminFunction"):
        storage = settings_from_env(StorageSettings, env=_env(d, lid))
        assert storage.pool_queues() == {"bulk": queue_url}, lid
    # mailqueue doctor checks the pool's addresses under its own EHLO name
    doctor = DoctorSettings.from_env(_env(d, "AdminFunction")).input()
    [(name, ehlo, ips)] = doctor.pools
    assert (name, ehlo) == ("bulk", "bulk.mq.test")
    assert set(ips) == set(d.outputs["PoolSendingIps"].removeprefix("bulk=").split(","))
