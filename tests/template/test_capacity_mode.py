"""StateTableCapacity: on demand by default; provisioned with auto scaling on request.

Deployed into moto's CloudFormation and read back (describe_table, Application Auto
Scaling's describe_*), and priced by the cost model from its own formula.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from mailqueue_local.cfn import default_template_path, deploy_stack, load_template

from bench.model import autoscale
from bench.model.bill import model
from bench.model.prices import PRICES, SECONDS_PER_MONTH
from bench.model.report import capacity_report
from bench.model.run import Run
from bench.model.template import Template
from tests.support.aws import REGION, reset_moto, session


def _sub(value: Any, table: str) -> str:
    """`!Sub table/${StateTable}[...]` with the deployed table's name."""
    text = value["Fn::Sub"] if isinstance(value, dict) else value
    return str(text).replace("${StateTable}", table)


def _param(value: Any, params: Any, tpl: dict[str, Any]) -> Any:
    if isinstance(value, dict) and "Ref" in value:
        name = value["Ref"]
        return params.get(name, tpl["Parameters"][name]["Default"])
    return value


@pytest.fixture(scope="module")
def provisioned(moto_endpoint: str) -> Iterator[dict[str, Any]]:
    reset_moto(moto_endpoint)
    out = deploy_stack(
        moto_endpoint,
        stack_name="mqprov",
        parameters={
            "Hostname": "mq.test",
            "StateTableCapacity": "provisioned",
            "StateTableWriteCapacityMin": "12",
            "StateTableReadCapacityMin": "6",
        },
    )

    def client(name: str) -> Any:
        return session().client(name, endpoint_url=moto_endpoint, region_name=REGION)

    table = client("dynamodb").describe_table(TableName=out.table)["Table"]
    # moto's CloudFormation has no Application Auto Scaling: what the template declares
    # (conditions and parameters resolved) is registered through the service's API, whose
    # validation (botocore's enums, moto's resource ids) it must pass
    assert {"StateTableWriteScaling", "StateIndexReadPolicy"} <= set(out.skipped)
    rendered = load_template(default_template_path())
    res = {
        lid: r
        for lid, r in rendered["Resources"].items()
        if r.get("Condition") == "ProvisionedState"  # provisioned: the one condition
    }
    assert rendered["Conditions"]["ProvisionedState"] == {
        "Fn::Equals": [{"Ref": "StateTableCapacity"}, "provisioned"]
    }
    scaling = client("application-autoscaling")
    for r in res.values():
        if r["Type"] == "AWS::ApplicationAutoScaling::ScalableTarget":
            p = r["Properties"]
            scaling.register_scalable_target(
                ServiceNamespace=p["ServiceNamespace"],
                ResourceId=_sub(p["ResourceId"], out.table),
                ScalableDimension=p["ScalableDimension"],
                MinCapacity=int(_param(p["MinCapacity"], out.parameters, rendered)),
                MaxCapacity=int(_param(p["MaxCapacity"], out.parameters, rendered)),
            )
    for lid, r in res.items():
        if r["Type"] == "AWS::ApplicationAutoScaling::ScalingPolicy":
            p = r["Properties"]
            target = res[p["ScalingTargetId"]["Ref"]]["Properties"]
            conf = dict(p["TargetTrackingScalingPolicyConfiguration"])
            conf["TargetValue"] = float(_param(conf["TargetValue"], out.parameters, rendered))
            scaling.put_scaling_policy(
                PolicyName=lid,
                ServiceNamespace=target["ServiceNamespace"],
                ResourceId=_sub(target["ResourceId"], out.table),
                ScalableDimension=target["ScalableDimension"],
                PolicyType=p["PolicyType"],
                TargetTrackingScalingPolicyConfiguration=conf,
            )
    targets = scaling.describe_scalable_targets(ServiceNamespace="dynamodb")["ScalableTargets"]
    policies = scaling.describe_scaling_policies(ServiceNamespace="dynamodb")["ScalingPolicies"]
    yield {"table": table, "targets": targets, "policies": policies, "name": out.table}
    reset_moto(moto_endpoint)


def test_provisioned_capacity_is_set_on_the_table_and_its_index(
    provisioned: dict[str, Any],
) -> None:
    table = provisioned["table"]
    assert table.get("BillingModeSummary", {}).get("BillingMode", "PROVISIONED") == "PROVISIONED"
    assert table["ProvisionedThroughput"]["WriteCapacityUnits"] == 12
    assert table["ProvisionedThroughput"]["ReadCapacityUnits"] == 6
    (gsi,) = table["GlobalSecondaryIndexes"]
    assert gsi["IndexName"] == "by_state"
    assert gsi["ProvisionedThroughput"]["WriteCapacityUnits"] == 12


def test_auto_scaling_tracks_each_capacity_of_the_table_and_the_index(
    provisioned: dict[str, Any],
) -> None:
    name = provisioned["name"]
    got = {(t["ResourceId"], t["ScalableDimension"]): t for t in provisioned["targets"]}
    assert set(got) == {
        (f"table/{name}", "dynamodb:table:WriteCapacityUnits"),
        (f"table/{name}", "dynamodb:table:ReadCapacityUnits"),
        (f"table/{name}/index/by_state", "dynamodb:index:WriteCapacityUnits"),
        (f"table/{name}/index/by_state", "dynamodb:index:ReadCapacityUnits"),
    }
    assert got[(f"table/{name}", "dynamodb:table:WriteCapacityUnits")]["MinCapacity"] == 12
    assert got[(f"table/{name}", "dynamodb:table:WriteCapacityUnits")]["MaxCapacity"] == 4000
    kinds = {
        p["TargetTrackingScalingPolicyConfiguration"]["PredefinedMetricSpecification"][
            "PredefinedMetricType"
        ]
        for p in provisioned["policies"]
    }
    assert kinds == {"DynamoDBWriteCapacityUtilization", "DynamoDBReadCapacityUtilization"}
    assert len(provisioned["policies"]) == 4
    assert all(
        p["TargetTrackingScalingPolicyConfiguration"]["TargetValue"] == 70
        for p in provisioned["policies"]
    )


def test_the_default_is_on_demand_and_the_model_reads_it() -> None:
    tpl = Template.load()
    assert tpl.state_capacity == "on-demand" and tpl.state_min_units == (10, 5)


def _run(mails: int, wru_per_mail: int) -> Run:
    """A run whose only cost inputs are `wru_per_mail` 1 KB writes on the table and the
    index per mail (an INSERT with a `st`/`due` key: one unit on each)."""
    run = Run(mails=mails)
    for i in range(mails * wru_per_mail):
        keys = {"pk": {"S": f"M#{i}"}, "sk": {"S": "G#a.example"}}
        img = {**keys, "st": {"S": "queued"}, "due": {"N": "1"}}
        run.records.append({"eventName": "INSERT", "dynamodb": {"Keys": keys, "NewImage": img}})
    return run


def test_provisioned_capacity_is_priced_by_the_hour_at_the_simulated_utilization() -> None:
    tpl = replace(Template.load(), state_capacity="provisioned")
    run = _run(10, 4)
    volume = 100_000_000
    lines = {x.item: x.per_month for x in model(run, volume, tpl)}
    mean = 4 * volume / SECONDS_PER_MONTH  # 4 units per mail: 400 M units a month
    util = autoscale.average_use(mean, target=0.7, minimum=10, profile=autoscale.PRICED_PROFILE)
    assert 0.5 < util < 0.7
    wcu_h = PRICES["dynamodb_provisioned"]["write_capacity_unit_hour"]
    expected = mean / util * 730 * wcu_h
    table = next(v for k, v in lines.items() if k.startswith("state writes, table"))
    assert table == pytest.approx(expected)
    # a use given by hand (the capacity report's comparison rows) is priced as given
    fixed = {x.item: x.per_month for x in model(run, volume, replace(tpl, state_use=0.5))}
    assert next(v for k, v in fixed.items() if k.startswith("state writes, table")) == (
        pytest.approx(mean / 0.5 * 730 * wcu_h)
    )
    # cheaper than on demand at this volume, dearer at 1 M (the minimum capacity)
    on_demand = replace(tpl, state_capacity="on-demand")
    od = next(
        x.per_month
        for x in model(run, volume, on_demand)
        if x.item.startswith("state writes, table")
    )
    assert table < od
    small = model(run, 1_000_000, tpl)
    floor = next(x.per_month for x in small if x.item.startswith("state writes, table"))
    # the minimum capacity, and a little more where the bulk sends' peaks pass it
    least = tpl.state_min_units[0] * 730 * wcu_h
    assert least <= floor <= least * 1.01


def test_the_capacity_report_prices_each_utilization_and_finds_the_break_even() -> None:
    tpl = Template.load()
    run = _run(10, 8)
    lines = capacity_report(run, tpl)
    rows = [x for x in lines if x.startswith("| one mail per call |")]
    assert [r.split("|")[2].strip() for r in rows] == [
        "on demand",
        "provisioned, simulated use",
        "provisioned, 35% used",
        "provisioned, 50% used",
        "provisioned, 70% used",
    ]
    at_100m = [float(r.split("|")[-2]) for r in rows]
    assert at_100m[2] > at_100m[3] > at_100m[4]  # more use, less per mail
    assert at_100m[4] < at_100m[0]  # at volume, provisioned is the cheaper
    assert at_100m[3] > at_100m[1] > at_100m[4]  # simulated: between 50 % and 70 % use
    assert any(x.startswith("Break-even: at 10 M/month") for x in lines)
