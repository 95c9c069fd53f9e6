"""checkov's findings on resources outside the SMTP front door, each with its reason.

The front door's resources carry their skips in template.yaml (`Metadata: checkov: skip`,
each with a comment); the resources below belong to other parts of the template, whose
owners may move these into their metadata. tests/template/test_checkov.py fails on a
finding listed nowhere, and on an entry here that checkov no longer reports.
"""

from __future__ import annotations

FUNCTIONS = (
    "IngressFunction",
    "DeliveryFunction",
    "BounceFunction",
    "SweeperFunction",
    "AdminFunction",
    "EventsFunction",
    # the added egress pools' delivery functions (EgressPools 2, 3): DeliveryFunction's
    # twins, with its code, role and settings
    "Pool2DeliveryFunction",
    "Pool3DeliveryFunction",
)
LOG_GROUPS = tuple(f.replace("Function", "LogGroup") for f in FUNCTIONS) + ("ApiAccessLogGroup",)
QUEUES = (
    "DeliveryQueue",
    "DeliveryDeadLetterQueue",
    "BulkDeliveryQueue",
    "BulkDeliveryDeadLetterQueue",
    "BounceQueue",
    "BounceDeadLetterQueue",
    "EventsFailureQueue",
    "IngressFailureQueue",
    "Pool2DeliveryQueue",
    "Pool3DeliveryQueue",
)

#: check id → (logical ids, why the finding is accepted)
TRIAGE: dict[str, tuple[tuple[str, ...], str]] = {
    "CKV_AWS_21": (
        ("ContentBucket", "AccessLogBucket"),
        "no versioning on purpose: a mail's content is deleted once it is finished (and "
        "lifecycle rules expire what is left); versions would keep every body past that",
    ),
    "CKV_AWS_119": (
        ("StateTable",),
        "encrypted at rest with DynamoDB's AWS-owned key; a customer key adds a KMS "
        "request to the table's every access (cost per mail), for no reader we exclude",
    ),
    "CKV_AWS_27": (
        QUEUES,
        "SqsManagedSseEnabled: true (SSE-SQS) on every queue; the check asks for a KMS "
        "key, and the messages are triggers and ids, never content",
    ),
    "CKV_AWS_158": (
        LOG_GROUPS,
        "CloudWatch Logs encrypts every log group at rest; no body, password or (at INFO) "
        "address is logged, so a KMS key of ours would add cost and a key policy only",
    ),
    "CKV_AWS_149": (
        ("ListUnsubscribeSecret",),
        "encrypted with Secrets Manager's aws/secretsmanager key; only the ingress role "
        "may read it (its policy names the secret)",
    ),
    "CKV_AWS_116": (
        FUNCTIONS,
        "the SQS and stream consumers' failures go to their sources' dead-letter queues "
        "and on-failure destinations; ingress's async (SES) invocations have an "
        "EventInvokeConfig destination; a function DLQ would duplicate them",
    ),
    "CKV_AWS_117": (
        tuple(f for f in FUNCTIONS if not f.endswith("DeliveryFunction")),
        "no VPC needed: these reach only AWS APIs over TLS with IAM; the delivery "
        "function runs in one with EgressMode=direct (its sending IPs)",
    ),
    "CKV_AWS_115": (
        FUNCTIONS,
        "reserved concurrency is set where a priority path needs its own share "
        "(tests/template/test_template.py); elsewhere it would only cap the account's pool",
    ),
    "CKV_AWS_173": (
        FUNCTIONS,
        "the environment holds names, ARNs and policy, no secret (secrets are read from "
        "Secrets Manager at run time); Lambda encrypts it at rest with its own key",
    ),
}
