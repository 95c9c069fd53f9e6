"""Issue 28, item 17: checkov's CKV_AWS_18 (no access logging on the S3 bucket) answered by
a parameter: ContentAccessLogging=on logs the content bucket into a bucket of its own,
which only S3's log delivery may write, for this content bucket; docs/deploy.md's
production settings turn it on."""

from __future__ import annotations

from typing import Any

from mailqueue_local.cfn import for_moto

from tests.template.conftest import ROOT


def _resources(template: dict[str, Any], value: str) -> dict[str, Any]:
    tpl, _ = for_moto(template, {"ContentAccessLogging": value})
    resources: dict[str, Any] = tpl["Resources"]
    return resources


def test_off_by_default_adds_nothing(template: dict[str, Any]) -> None:
    assert template["Parameters"]["ContentAccessLogging"]["Default"] == "off"
    res = _resources(template, "off")
    assert "LoggingConfiguration" not in res["ContentBucket"]["Properties"]
    assert "AccessLogBucket" not in res
    assert template["Resources"]["AccessLogBucketPolicy"]["Condition"] == "AccessLogging"


def test_on_logs_the_content_bucket_into_its_own_log_bucket(template: dict[str, Any]) -> None:
    res = _resources(template, "on")
    logging = res["ContentBucket"]["Properties"]["LoggingConfiguration"]
    assert logging["DestinationBucketName"] == {"Ref": "AccessLogBucket"}
    logs = res["AccessLogBucket"]["Properties"]
    # S3's log delivery writes only to SSE-S3 buckets; nothing public; kept a while
    sse = logs["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]
    assert sse["ServerSideEncryptionByDefault"]["SSEAlgorithm"] == "AES256"
    assert all(logs["PublicAccessBlockConfiguration"].values())
    assert logs["LifecycleConfiguration"]["Rules"][0]["ExpirationInDays"] == {
        "Ref": "LogRetentionDays"
    }
    (allow,) = [
        st
        for st in template["Resources"]["AccessLogBucketPolicy"]["Properties"]["PolicyDocument"][
            "Statement"
        ]
        if st["Effect"] == "Allow"
    ]
    assert allow["Principal"] == {"Service": "logging.s3.amazonaws.com"}
    assert allow["Action"] == "s3:PutObject"
    assert allow["Condition"]["ArnLike"]["aws:SourceArn"] == {
        "Fn::GetAtt": ["ContentBucket", "Arn"]
    }


def test_the_documented_production_settings_turn_it_on() -> None:
    text = (ROOT / "docs" / "deploy.md").read_text()
    production = text[text.index("**Production settings.**") :]
    assert "ContentAccessLogging=on" in production.split("```", 3)[1] + production[:400]
