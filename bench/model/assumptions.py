"""What the cost model assumes rather than measures (printed with its figures)."""

from __future__ import annotations

#: What is assumed rather than measured (printed with the model).
ASSUMPTIONS = {
    "stream_shards": 4,  # an on-demand table starts with 4 partitions (4,000 WRU/s)
    "esm_pollers_per_queue": 5,  # Lambda's SQS event source: 5 long-polling pollers
    "long_poll_seconds": 20,
    "platform_log_bytes_per_invocation": 0,  # set from the REPORT line format below
    "cw_log_event_overhead_bytes": 26,  # CloudWatch Logs bills 26 B per event on top
    "api_requests_per_mail": 1,  # one mail per API call, under 512 KB
    "smtp_ms_per_mail_relay": 30,  # SMTP exchange with an in-region relay, TLS amortised
    # a direct MX on the internet: issue 25's figure ("hundreds of ms"; ~400 ms per
    # transaction), not measured here (no internet from this machine); Lambda bills the wait
    "smtp_ms_per_mail_direct": 400,
    # a failed conditional write bills the larger of the item's and the write's size
    # (DynamoDB developer guide, "read/write operations"); a cancelled transaction's items
    # are counted at twice that (transactional writes bill 2x): assumed
    # StateTableCapacity=provisioned: the traffic over a week that auto scaling follows
    # (bench/model/autoscale.py simulates its documented rules on it and gives the average use
    # of what is provisioned, per table and index): a weekday curve 4:1, weekends at 60 %,
    # a bulk hour a weekday (a tenth of the day's mail), three 20-minute bulk sends a day
    "provisioned_traffic_profile": "bursty",
    # DynamoDB's TTL deletes an expired item "typically within a few days"; 2 assumed (the
    # developer guide's "Using time to live (TTL) in DynamoDB" gives no bound). An item
    # left to TTL (a content item, a finished solo item) is stored until then
    "ttl_delete_lag_days": 2.0,
    # DynamoDB stores 100 bytes of overhead per item on top of its attributes (developer
    # guide, "Item sizes and formats": storage is billed on the item plus 100 bytes)
    "item_storage_overhead_bytes": 100,
}
#: AWS's answer time per request inside a region (typical published figures), added to the
#: handler's own CPU time to get a Lambda duration (moto's answer time is not AWS's).
LATENCY_MS = {"dynamodb": 6.0, "sqs": 8.0, "s3:PutObject": 20.0, "s3": 12.0}
# Lambda's own lines per invocation (START / END / REPORT), at their usual lengths
_PLATFORM_LINES = (
    "START RequestId: 8f5c2a9e-1b2c-4d3e-9f00-0123456789ab Version: $LATEST\n"
    "END RequestId: 8f5c2a9e-1b2c-4d3e-9f00-0123456789ab\n"
    "REPORT RequestId: 8f5c2a9e-1b2c-4d3e-9f00-0123456789ab\tDuration: 123.45 ms\t"
    "Billed Duration: 124 ms\tMemory Size: 512 MB\tMax Memory Used: 98 MB\t\n"
)
ASSUMPTIONS["platform_log_bytes_per_invocation"] = len(_PLATFORM_LINES)
