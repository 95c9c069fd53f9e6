"""Deploys template.yaml into moto's CloudFormation (server mode): one source of truth.

`deploy_stack(endpoint_url)` does what `sam package` + `sam deploy` do, against moto:

1. zips each function's and layer's folder and uploads it to an artifacts bucket in moto
   (so the functions exist in moto's Lambda with the template's resolved environment);
2. translates the SAM template with aws-sam-translator (AWS::Serverless-2016-10-31);
3. leaves out what moto's CloudFormation cannot create (`MOTO_SKIPPED`), and what refers
   to it, saying so in `StackOutputs.skipped`;
4. creates the stack and returns its outputs (a Mapping of output name → value, plus
   the named attributes `table`, `bucket`, `delivery_queue_url`, ...).

The queue's data resources (bucket, table, queues) and the functions' roles and
configuration are created exactly as the template declares them, so a test or `make run`
on this stack uses the template's names, keys, index and environment variables.
"""

from __future__ import annotations

import io
import json
import re
import zipfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import yaml
from mailqueue.backends.aws.resources import CreatedResources

REGION = "us-east-1"
DEFAULT_PARAMETERS: dict[str, str] = {"Hostname": "mailqueue.localhost"}

#: What is left out of the moto deploy, by resource type, and why.
MOTO_SKIPPED: dict[str, str] = {
    "AWS::ApiGatewayV2::Api": "not in moto's CloudFormation (the local API gateway stands in)",
    "AWS::ApiGatewayV2::Stage": "not in moto's CloudFormation",
    "AWS::ApiGatewayV2::Route": "not in moto's CloudFormation",
    "AWS::ApiGatewayV2::Integration": "not in moto's CloudFormation",
    "AWS::ApplicationAutoScaling::ScalableTarget": "not in moto's CloudFormation "
    "(StateTableCapacity=provisioned only; tests/template/test_capacity_mode.py registers "
    "them through the API)",
    "AWS::ApplicationAutoScaling::ScalingPolicy": "not in moto's CloudFormation",
    "AWS::SES::ReceiptRuleSet": "not in moto's CloudFormation",
    "AWS::SES::ReceiptRule": "not in moto's CloudFormation",
    "AWS::S3::BucketPolicy": "not in moto's CloudFormation (moto does not enforce IAM anyway)",
    "AWS::CloudWatch::Alarm": "not in moto's CloudFormation",
    "AWS::EMRServerless::Application": "not in moto's CloudFormation (analytics off by default)",
    "AWS::Scheduler::Schedule": "not in moto's CloudFormation (analytics off by default)",
    "AWS::Lambda::EventInvokeConfig": "not in moto's CloudFormation",
    "AWS::ElasticLoadBalancingV2::Listener": "moto's CloudFormation makes every load "
    "balancer an application one (it ignores Type: network), which refuses the SMTP front "
    "door's TCP listener (SmtpFrontDoor=on only; cfn-lint checks it)",
    "AWS::Lambda::EventSourceMapping": (
        "moto would invoke the function itself (in Docker) on every message; the local "
        "runtime's pollers play Lambda's part instead"
    ),
}

_SUB_VAR = re.compile(r"\$\{([^}!][^}]*)\}")


class _CfnLoader(yaml.SafeLoader):  # type: ignore[misc]
    """PyYAML with CloudFormation's short-form tags (!Ref, !Sub, !GetAtt, ...)."""


def _intrinsic(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> dict[str, Any]:
    name = suffix if suffix in ("Ref", "Condition") else f"Fn::{suffix}"
    value: Any
    if suffix == "GetAtt" and isinstance(node, yaml.ScalarNode):
        value = str(loader.construct_scalar(node)).split(".", 1)
    elif isinstance(node, yaml.ScalarNode):
        value = loader.construct_scalar(node)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)
    return {name: value}


_CfnLoader.add_multi_constructor("!", _intrinsic)


def load_template(path: str | Path) -> dict[str, Any]:
    data = yaml.load(Path(path).read_text(), Loader=_CfnLoader)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: not a template")
    return data


def default_template_path() -> Path:
    """template.yaml in the working directory, else at the root of this source tree."""
    here = Path("template.yaml")
    if here.exists():
        return here
    return Path(__file__).resolve().parents[3] / "template.yaml"


@dataclass(frozen=True)
class StackOutputs(Mapping[str, str]):
    """The stack's outputs (a Mapping by output name) and the queue's resources by role."""

    stack_name: str
    outputs: Mapping[str, str]
    functions: Mapping[str, str]  # logical id → physical function name
    skipped: tuple[str, ...] = ()  # logical ids left out of the moto deploy
    parameters: Mapping[str, str] = field(default_factory=dict)
    # the translated template's resources: logical id → type (deployed or skipped)
    resource_types: Mapping[str, str] = field(default_factory=dict)

    def __getitem__(self, key: str) -> str:
        return self.outputs[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.outputs)

    def __len__(self) -> int:
        return len(self.outputs)

    @property
    def table(self) -> str:
        return self.outputs["StateTableName"]

    @property
    def bucket(self) -> str:
        return self.outputs["ContentBucketName"]

    @property
    def delivery_queue_url(self) -> str:
        return self.outputs["DeliveryQueueUrl"]

    @property
    def bounce_queue_url(self) -> str:
        return self.outputs["BounceQueueUrl"]

    @property
    def bulk_delivery_queue_url(self) -> str:
        return self.outputs.get("BulkDeliveryQueueUrl", "")

    @property
    def delivery_dlq_url(self) -> str:
        return self.outputs["DeliveryDlqUrl"]

    @property
    def bounce_dlq_url(self) -> str:
        return self.outputs["BounceDlqUrl"]

    def resources(self) -> CreatedResources:
        return CreatedResources(
            table=self.table,
            bucket=self.bucket,
            delivery_queue_url=self.delivery_queue_url,
            bounce_queue_url=self.bounce_queue_url,
            delivery_dlq_url=self.delivery_dlq_url,
            bounce_dlq_url=self.bounce_dlq_url,
            bulk_delivery_queue_url=self.bulk_delivery_queue_url,
            bulk_delivery_dlq_url=self.outputs.get("BulkDeliveryDlqUrl", ""),
        )


class _NoManagedPolicies:
    """The template names no managed policies; the translator must not look any up."""

    def load(self) -> dict[str, str]:
        return {}


def translate(
    template: Mapping[str, Any], parameters: Mapping[str, str], *, region: str = REGION
) -> dict[str, Any]:
    """SAM → plain CloudFormation, as `sam deploy`'s transform does (offline)."""
    from samtranslator.parser.parser import Parser
    from samtranslator.translator.arn_generator import ArnGenerator
    from samtranslator.translator.translator import Translator

    previous = ArnGenerator.BOTO_SESSION_REGION_NAME
    ArnGenerator.BOTO_SESSION_REGION_NAME = region
    try:
        translator = Translator(
            None, Parser(), boto_session=boto3.session.Session(region_name=region)
        )
        out: dict[str, Any] = translator.translate(
            json.loads(json.dumps(template)),
            parameter_values=dict(parameters),
            get_managed_policy_map=_NoManagedPolicies().load,
        )
        return out
    finally:
        ArnGenerator.BOTO_SESSION_REGION_NAME = previous


def references(node: Any) -> set[str]:
    """Logical ids a template fragment refers to (Ref, GetAtt, Sub), pseudo ones excluded."""
    out: set[str] = set()
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "Ref" and isinstance(value, str):
                out.add(value)
            elif key == "Fn::GetAtt":
                target = value[0] if isinstance(value, list) else str(value).split(".", 1)[0]
                out.add(str(target))
            elif key == "Fn::Sub":
                text, local = (value[0], value[1]) if isinstance(value, list) else (value, {})
                out |= {m.split(".", 1)[0] for m in _SUB_VAR.findall(str(text))} - set(local)
                out |= references(local)
            else:
                out |= references(value)
    elif isinstance(node, list):
        for item in node:
            out |= references(item)
    return {r for r in out if not r.startswith("AWS::")}


def _condition(node: Any, conditions: Mapping[str, Any], params: Mapping[str, Any]) -> Any:
    """Evaluate the simple condition forms the template uses; None when unsure."""
    if isinstance(node, dict) and len(node) == 1:
        ((key, arg),) = node.items()
        if key == "Ref":
            return params.get(arg)
        if key == "Condition":
            return _condition(conditions.get(arg), conditions, params)
        if key == "Fn::Equals":
            a, b = (_condition(x, conditions, params) for x in arg)
            return None if a is None or b is None else str(a) == str(b)
        if key == "Fn::Not":
            v = _condition(arg[0], conditions, params)
            return None if v is None else not v
        if key in ("Fn::And", "Fn::Or"):
            vals = [_condition(x, conditions, params) for x in arg]
            if any(v is None for v in vals):
                return None
            return all(vals) if key == "Fn::And" else any(vals)
        return None
    return node


def condition_off(
    template: Mapping[str, Any], params: Mapping[str, Any] | None = None
) -> frozenset[str]:
    """Logical ids of the resources a false condition leaves out under `params` (the
    parameters' defaults otherwise): what a model of the deployed stack must not count."""
    conditions = template.get("Conditions") or {}
    values = {k: v.get("Default") for k, v in (template.get("Parameters") or {}).items()} | dict(
        params or {}
    )
    return frozenset(
        lid
        for lid, r in (template.get("Resources") or {}).items()
        if "Condition" in r
        and _condition({"Condition": r["Condition"]}, conditions, values) is False
    )


_NO_VALUE = object()


def _resolve_ifs(node: Any, conditions: Mapping[str, Any], params: Mapping[str, Any]) -> Any:
    """Replace each Fn::If whose condition is known by its branch (AWS::NoValue drops the
    key or item), so what a false condition turns off is not referred to any more."""
    if isinstance(node, dict):
        if len(node) == 1 and "Fn::If" in node:
            name, yes, no = node["Fn::If"]
            value = _condition({"Condition": name}, conditions, params)
            if value is not None:
                return _resolve_ifs(yes if value else no, conditions, params)
        if node == {"Ref": "AWS::NoValue"}:
            return _NO_VALUE
        out = {k: _resolve_ifs(v, conditions, params) for k, v in node.items()}
        return {k: v for k, v in out.items() if v is not _NO_VALUE}
    if isinstance(node, list):
        items = [_resolve_ifs(v, conditions, params) for v in node]
        return [v for v in items if v is not _NO_VALUE]
    return node


def for_moto(
    template: Mapping[str, Any], params: Mapping[str, Any] | None = None
) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The template without what moto cannot create, what refers to that, and what a
    false condition turns off."""
    tpl: dict[str, Any] = json.loads(json.dumps(template))
    resources: dict[str, Any] = tpl["Resources"]
    conditions = tpl.get("Conditions") or {}
    values = {k: v.get("Default") for k, v in (tpl.get("Parameters") or {}).items()} | dict(
        params or {}
    )
    removed = {lid for lid, r in resources.items() if r.get("Type") in MOTO_SKIPPED}
    removed |= {
        lid
        for lid, r in resources.items()
        if "Condition" in r
        and _condition({"Condition": r["Condition"]}, conditions, values) is False
    }
    for lid in list(resources):
        resources[lid] = _resolve_ifs(resources[lid], conditions, values)
    changed = True
    while changed:
        changed = False
        for lid, res in resources.items():
            if lid in removed:
                continue
            if references({k: v for k, v in res.items() if k != "DependsOn"}) & removed:
                removed.add(lid)
                changed = True
    for lid in removed:
        del resources[lid]
    for res in resources.values():
        deps = res.get("DependsOn")
        if deps is not None:
            kept = [d for d in ([deps] if isinstance(deps, str) else deps) if d not in removed]
            if kept:
                res["DependsOn"] = kept
            else:
                del res["DependsOn"]
    outputs = tpl.get("Outputs") or {}
    for name in list(outputs):
        outputs[name] = _resolve_ifs(outputs[name], conditions, values)
    off = {
        n
        for n, o in outputs.items()
        if "Condition" in o
        and _condition({"Condition": o["Condition"]}, conditions, values) is False
    }
    for name in [n for n, o in outputs.items() if references(o) & removed or n in off]:
        del outputs[name]
    return tpl, tuple(sorted(removed))


def _zip_folder(folder: Path) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for p in sorted(folder.rglob("*")):
            if p.is_file() and "__pycache__" not in p.parts:
                zf.write(p, p.relative_to(folder).as_posix())
    return buf.getvalue()


def package(
    template: Mapping[str, Any], root: Path, s3: Any, bucket: str, prefix: str
) -> dict[str, Any]:
    """Local CodeUri/ContentUri folders → zips in `bucket`, the template pointing at them."""
    tpl: dict[str, Any] = json.loads(json.dumps(template))
    for lid, res in tpl["Resources"].items():
        prop = {
            "AWS::Serverless::Function": "CodeUri",
            "AWS::Serverless::LayerVersion": "ContentUri",
        }.get(res.get("Type", ""))
        props = res.get("Properties") or {}
        uri = props.get(prop) if prop else None
        if not isinstance(uri, str) or uri.startswith("s3://"):
            continue
        folder = (root / uri).resolve()
        if not folder.is_dir():
            raise FileNotFoundError(f"{lid}: {prop} {uri} is not a folder")
        key = f"{prefix}/{lid}.zip"
        s3.put_object(Bucket=bucket, Key=key, Body=_zip_folder(folder))
        props[prop] = f"s3://{bucket}/{key}"
    return tpl


def deploy_stack(
    endpoint_url: str,
    *,
    stack_name: str = "mailqueue",
    parameters: Mapping[str, str] | None = None,
    template_path: str | Path | None = None,
    region: str = REGION,
    session: boto3.session.Session | None = None,
) -> StackOutputs:
    """Create the stack in the moto server at `endpoint_url`; its outputs."""
    path = Path(template_path) if template_path else default_template_path()
    params = {**DEFAULT_PARAMETERS, **(parameters or {})}
    sess = session or boto3.session.Session(
        aws_access_key_id="testing", aws_secret_access_key="testing", region_name=region
    )
    kw: dict[str, Any] = {"endpoint_url": endpoint_url, "region_name": region}
    s3 = sess.client("s3", **kw)
    cfn = sess.client("cloudformation", **kw)

    artifacts = f"{stack_name}-artifacts"
    s3.create_bucket(Bucket=artifacts)
    packaged = package(load_template(path), path.resolve().parent, s3, artifacts, stack_name)
    translated = translate(packaged, params, region=region)
    deployable, skipped = for_moto(translated, params)
    declared = deployable.get("Parameters") or {}
    cfn.create_stack(
        StackName=stack_name,
        TemplateBody=json.dumps(deployable),
        Parameters=[
            {"ParameterKey": k, "ParameterValue": str(v)}
            for k, v in params.items()
            if k in declared
        ],
        Capabilities=["CAPABILITY_IAM", "CAPABILITY_AUTO_EXPAND"],
    )
    stack = cfn.describe_stacks(StackName=stack_name)["Stacks"][0]
    if stack["StackStatus"] != "CREATE_COMPLETE":
        events = cfn.describe_stack_events(StackName=stack_name)["StackEvents"]
        reasons = [e.get("ResourceStatusReason") for e in events if e.get("ResourceStatusReason")]
        raise RuntimeError(f"stack {stack_name}: {stack['StackStatus']}: {reasons[:3]}")
    outputs = {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}
    functions: dict[str, str] = {}
    for page in cfn.get_paginator("list_stack_resources").paginate(StackName=stack_name):
        for r in page["StackResourceSummaries"]:
            if r["ResourceType"] == "AWS::Lambda::Function":
                functions[r["LogicalResourceId"]] = r["PhysicalResourceId"]
    return StackOutputs(
        stack_name=stack_name,
        outputs=outputs,
        functions=functions,
        skipped=skipped,
        parameters=params,
        resource_types={lid: r["Type"] for lid, r in translated["Resources"].items()},
    )
