"""Grants the end-to-end test cannot observe, each with the reason the function needs it.

The least-privilege check (test_stack.py) accepts a role's (statement Sid, action) only
if the function's own clients made a call that needs it during the end-to-end run, or it
is listed here. An entry here whose statement no longer grants the action fails the
check too (stale entries do not linger).
"""

from __future__ import annotations

ESM_SQS = "Lambda's SQS event source mapping polls with the function's role"
NOT_FOUND = (
    "S3 answers 404 (not 403) for a missing key only to callers with s3:ListBucket; the "
    "code relies on NoSuchKey/404 (content gone, upload replayed, SES retry)"
)

#: Every function: Lambda's runtime writes logs and X-Ray segments with the role.
BASELINE: dict[tuple[str, str], str] = {
    ("Logs", "logs:CreateLogStream"): "the Lambda runtime writes the function's log",
    ("Logs", "logs:PutLogEvents"): "the Lambda runtime writes the function's log",
    ("Tracing", "xray:PutTraceSegments"): "Tracing: Active (X-Ray has no resource-level auth)",
    ("Tracing", "xray:PutTelemetryRecords"): "Tracing: Active",
}

DECLARED: dict[str, dict[tuple[str, str], str]] = {
    "IngressFunction": {
        ("State", "dynamodb:UpdateItem"): (
            "received complaints and late bounces ADD to the reputation counters (REP# items, "
            "outbound/reputation.py) when ReputationGuards=true; the e2e stack leaves it false"
        ),
        ("ReturnPathKeys", "secretsmanager:GetSecretValue"): (
            "reports to a VERP return path are verified with the key ring "
            "(MQ_RETURN_PATH_KEYS, services/feedback); the e2e stack sets no return-path policy"
        ),
        ("UnsubscribeKeys", "secretsmanager:GetSecretValue"): (
            "GET|POST /u/{token} read the unsubscribe links' HMAC key (ListUnsubscribeUrl "
            "set); the e2e stack sets no ListUnsubscribeUrl (Powertools' own client)"
        ),
        ("Uploads", "s3:PutObject"): (
            "the presigned URL of POST /v1/uploads is signed with the ingress role, so the "
            "client's PUT is authorised as the role's s3:PutObject (presigning calls no API)"
        ),
        ("MissingKeysAre404", "s3:ListBucket"): NOT_FOUND,
        ("AsyncFailures", "sqs:SendMessage"): (
            "Lambda's on-failure destination for SES (async) invocations sends with the role"
        ),
    },
    "DeliveryFunction": {
        ("PollTriggers", "sqs:ReceiveMessage"): ESM_SQS,
        ("PollTriggers", "sqs:DeleteMessage"): ESM_SQS,
        ("PollTriggers", "sqs:GetQueueAttributes"): ESM_SQS,
        ("Triggers", "sqs:SendMessage"): (
            "a re-arm whose receipt handle expired posts a fresh trigger to the delivery "
            "queue (backend._rearm); the e2e observes only the bounce queue's"
        ),
        ("MissingKeysAre404", "s3:ListBucket"): NOT_FOUND,
        ("State", "dynamodb:DeleteItem"): (
            "MQ_SOLO_DELETE=true deletes a finished solo mail's item at once; by default "
            "DynamoDB's TTL does (StorageSettings.solo_delete)"
        ),
        ("RelayCredentials", "secretsmanager:GetSecretValue"): (
            "a route with credentials 'secretsmanager:<id>' (Powertools' own client)"
        ),
        ("RelayCredentialsSsm", "ssm:GetParameter"): (
            "a route with credentials 'ssm:<name>' (Powertools' own client)"
        ),
    },
    "BounceFunction": {
        ("State", "dynamodb:PutItem"): (
            "a DSN whose content fits the mail item (zlib ≤ 4 KB: RET=HDRS, or a small "
            "original) is enqueued keyed with a conditional PutItem; the e2e's one DSN "
            "returns a 10 KB incompressible original in full, so it goes to S3"
        ),
        ("PollReports", "sqs:ReceiveMessage"): ESM_SQS,
        ("PollReports", "sqs:DeleteMessage"): ESM_SQS,
        ("PollReports", "sqs:GetQueueAttributes"): ESM_SQS,
        ("MissingKeysAre404", "s3:ListBucket"): NOT_FOUND,
        ("State", "dynamodb:DeleteItem"): (
            "a DSN's release (dsn_sent -> settle) that finishes a mail of several groups "
            "takes its mail item by a conditional DeleteItem (AwsStorage.cleanup); the "
            "e2e's bounced mail has one group"
        ),
    },
    "SweeperFunction": {
        ("StateIndex", "dynamodb:Query"): (
            "a by_state index past one Scan page (> 500 entries) is walked by shard Queries "
            "(index_walk.py); the e2e's index is small"
        ),
        ("State", "dynamodb:BatchGetItem"): (
            "find_orphans checks content older than orphan_grace (>= 1 h) against the "
            "table; the e2e has none that old"
        ),
        ("State", "dynamodb:BatchWriteItem"): (
            "cleanup of finished mails the finishing function could not clean (after "
            "cleanup_grace, 5 min)"
        ),
        ("Content", "s3:DeleteObject"): "the same cleanup (and orphans older than 36 h)",
        ("State", "dynamodb:Query"): "cleanup and find_orphans read a mail's items",
        ("State", "dynamodb:DeleteItem"): (
            "with MQ_SOLO_DELETE=true, a solo mail the sweeper finishes (expired, "
            "NOTIFY=NEVER) is deleted at once; by default DynamoDB's TTL does"
        ),
        ("State", "dynamodb:PutItem"): (
            "an expired keyed mail of several groups: its last group's finisher makes the "
            "mail item a tombstone under a condition (AwsStorage._take_mail_item)"
        ),
    },
    "AdminFunction": {
        ("StateIndex", "dynamodb:Query"): (
            "a by_state index past one Scan page (> 500 entries) is walked by shard Queries "
            "(index_walk.py); the e2e's index is small"
        ),
        ("RunJobs", "lambda:InvokeFunction"): (
            "bulk jobs run in async self-invocations (MQ_JOB_RUNNER=lambda); the e2e runs "
            "them inline because moto cannot run Lambda code"
        ),
        ("MissingKeysAre404", "s3:ListBucket"): NOT_FOUND,
        ("DkimKeys", "secretsmanager:GetSecretValue"): (
            "GET /v1/queue/doctor reads each configured DKIM key to derive its public record; "
            "the e2e stack configures no DKIM domains"
        ),
        ("DkimKeysSsm", "ssm:GetParameter"): "the same, with DKIM keys in SSM (MQ_DKIM_KEY_STORE)",
        ("State", "dynamodb:BatchGetItem"): (
            "GET /v1/queue/suppressions/{address} reads the entry (tests/suppression/); the "
            "e2e makes no suppression-list requests"
        ),
        ("State", "dynamodb:DeleteItem"): (
            "DELETE /v1/queue/suppressions/{address} removes an entry (tests/suppression/)"
        ),
    },
    "EventsFunction": {
        ("InlineHeaders", "dynamodb:GetItem"): (
            "a small mail's headers from its mail item only when the item's INSERT fell "
            "into another stream batch (it usually arrives with the group items)"
        ),
        ("HeadersOfSend", "s3:GetObject"): (
            "only for a mail item without `hdrs` (its headers too large for one write unit) "
            "or whose INSERT fell into another stream batch; the e2e's mails have `hdrs`"
        ),
        ("ReadStream", "dynamodb:DescribeStream"): "the stream event source mapping",
        ("ReadStream", "dynamodb:GetRecords"): "the stream event source mapping",
        ("ReadStream", "dynamodb:GetShardIterator"): "the stream event source mapping",
        ("ListStreams", "dynamodb:ListStreams"): "the stream event source mapping",
        ("Failures", "sqs:SendMessage"): (
            "the mapping's on-failure destination (batches given up after retries)"
        ),
    },
    "DestinationsFunction": {
        ("Outbox", "sqs:ReceiveMessage"): ESM_SQS,
        ("Outbox", "sqs:DeleteMessage"): ESM_SQS,
        ("Outbox", "sqs:GetQueueAttributes"): ESM_SQS,
        ("DeadLetters", "sqs:SendMessage"): (
            "an event whose last attempt failed, or that its receiver refused with a 4xx no "
            "retry fixes, moves to the dead-letter queue (tests/destinations, on moto); the "
            "e2e's receiver takes every event after one 503"
        ),
        ("WebhookKeys", "secretsmanager:GetSecretValue"): (
            "the webhooks' signing keys are read once while the service is built, by a "
            "client it does not keep (so not among the clients watched)"
        ),
    },
}

#: The SMTP front door's task role (tests/template/test_smtp_stack.py): ECS, not Lambda,
#: so no BASELINE (the awslogs driver writes with the execution role).
SMTPD_DECLARED: dict[tuple[str, str], str] = {
    ("ReturnPathKeys", "secretsmanager:GetSecretValue"): (
        "with ReturnPathPolicy set, the ingress service smtpd runs reads the return-path "
        "key ring (MQ_RETURN_PATH_KEYS); the stack under test sets no return-path policy"
    ),
}
