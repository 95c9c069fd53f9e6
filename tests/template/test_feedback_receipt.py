"""The SES receipt rule for the bounce domains (issue 27): receivers' reports on the VERP
return paths reach ingress, which hands them to services/feedback.

Static checks on the parsed template: off by default (BounceDomains empty), the rule
stores the whole report where ingress reads it before invoking ingress, and SES may
invoke ingress for this rule only (SourceAccount and the rule's ARN).
"""

from __future__ import annotations

from typing import Any

from mailqueue.services.ingress.settings import IngressSettings

FEEDBACK_RULE_ARN = (
    "arn:${AWS::Partition}:ses:${AWS::Region}:${AWS::AccountId}:receipt-rule-set/"
    "${AWS::StackName}-inbound:receipt-rule/${AWS::StackName}-feedback"
)


def test_off_by_default_and_only_with_a_return_path_policy(template: dict[str, Any]) -> None:
    p = template["Parameters"]["BounceDomains"]
    assert (p["Type"], p["Default"]) == ("String", "")
    cond = template["Conditions"]
    assert cond["FeedbackReceiving"] == {
        "Fn::Not": [{"Fn::Equals": [{"Ref": "BounceDomains"}, ""]}]
    }
    # the rule set exists for either kind of receiving
    assert cond["AnyReceiving"] == {
        "Fn::Or": [{"Condition": "ReceivingEnabled"}, {"Condition": "FeedbackReceiving"}]
    }
    assert template["Resources"]["InboundRuleSet"]["Condition"] == "AnyReceiving"
    assert template["Outputs"]["ActivateRuleSetCommand"]["Condition"] == "AnyReceiving"
    rule = template["Rules"]["BounceDomainsNeedAPolicy"]
    assert rule["RuleCondition"] == cond["FeedbackReceiving"]
    needs = rule["Assertions"][0]["Assert"]["Fn::And"]
    assert {n["Fn::Not"][0]["Fn::Equals"][0]["Ref"] for n in needs} == {
        "ReturnPathPolicy", "ReturnPathKeys"
    }


def test_bounce_domain_rule_stores_the_report_then_invokes_ingress(
    template: dict[str, Any],
) -> None:
    res = template["Resources"]
    fb = res["FeedbackRule"]
    assert (fb["Type"], fb["Condition"]) == ("AWS::SES::ReceiptRule", "FeedbackReceiving")
    props = fb["Properties"]
    assert props["RuleSetName"] == {"Ref": "InboundRuleSet"}
    rule = props["Rule"]
    assert rule["Enabled"] is True
    assert rule["Name"] == {"Fn::Sub": "${AWS::StackName}-feedback"}
    assert rule["Recipients"] == {"Fn::Split": [",", {"Ref": "BounceDomains"}]}
    s3, invoke = rule["Actions"]  # S3 first: the feedback service reads the whole report
    assert s3["S3Action"]["BucketName"] == {"Ref": "ContentBucket"}
    assert (
        s3["S3Action"]["ObjectKeyPrefix"]
        == IngressSettings.__dataclass_fields__["ses_prefix"].default
    )
    # the feedback service runs in the ingress function (its SES path)
    assert invoke["LambdaAction"] == {
        "FunctionArn": {"Fn::GetAtt": ["IngressFunction", "Arn"]},
        "InvocationType": "Event",
    }
    # placed after the receiving domains' rule when that one exists
    assert props["After"] == {
        "Fn::If": ["ReceivingEnabled", {"Ref": "InboundRule"}, {"Ref": "AWS::NoValue"}]
    }
    assert set(fb["DependsOn"]) == {"ContentBucketPolicy", "IngressFeedbackSesPermission"}


def test_ses_may_invoke_ingress_and_store_for_this_rule_only(template: dict[str, Any]) -> None:
    res = template["Resources"]
    perm = res["IngressFeedbackSesPermission"]
    assert perm["Condition"] == "FeedbackReceiving"
    p = perm["Properties"]
    assert p["Principal"] == "ses.amazonaws.com"
    assert p["Action"] == "lambda:InvokeFunction"
    assert p["FunctionName"] == {"Ref": "IngressFunction"}
    assert p["SourceAccount"] == {"Ref": "AWS::AccountId"}
    assert p["SourceArn"] == {"Fn::Sub": FEEDBACK_RULE_ARN}
    statements = res["ContentBucketPolicy"]["Properties"]["PolicyDocument"]["Statement"]
    [ses] = [
        s["Fn::If"] for s in statements if isinstance(s, dict) and "Fn::If" in s
        and s["Fn::If"][1].get("Sid") == "SesStoresInbound"
    ]
    assert ses[0] == "AnyReceiving"
    cond = ses[1]["Condition"]
    assert cond["StringEquals"] == {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}
    assert {"Fn::Sub": FEEDBACK_RULE_ARN} in cond["ArnLike"]["aws:SourceArn"]
    assert ses[1]["Resource"] == {"Fn::Sub": "${ContentBucket.Arn}/ses-inbound/*"}
