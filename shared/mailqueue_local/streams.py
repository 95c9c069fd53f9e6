"""A DynamoDB stream event source mapping, run locally against moto's stream API.

Reads the table's stream with the `dynamodbstreams` client and invokes a function with
Lambda-shaped stream events (``Records[{eventID, eventName, eventSource "aws:dynamodb",
eventSourceARN, dynamodb{Keys, NewImage, OldImage, SequenceNumber, SizeBytes,
StreamViewType}}]``), with Lambda's stream semantics:

* records of a shard are handed over in order, in batches of at most `batch_size`;
* a batch that fails (the function raised) is retried from its first record, so the
  shard waits behind it (`maximum_retry_attempts`, -1 = until it succeeds, as Lambda's
  default); `bisect_on_error` halves a failing batch to isolate the bad record;
* with `ReportBatchItemFailures`, a response ``{"batchItemFailures": [{"itemIdentifier":
  <SequenceNumber>}]}`` checkpoints before the lowest failed sequence number, and only
  the records from there on are retried;
* a batch discarded after its retries is logged with its sequence range and, when the
  mapping has an on-failure destination (`on_discard`), described to it as Lambda does
  (``DDBStreamBatchInfo``: shard, first and last sequence number, batch size).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from mailqueue_local.runtime import REGION, Handler, LocalContext

log = logging.getLogger(__name__)


def lambda_record(raw: dict[str, Any], stream_arn: str, region: str = REGION) -> dict[str, Any]:
    """A GetRecords record → the record of a Lambda DynamoDB stream event."""
    ddb = dict(raw["dynamodb"])
    created = ddb.get("ApproximateCreationDateTime")
    if isinstance(created, datetime):  # boto3 parses it; Lambda hands over epoch seconds
        ddb["ApproximateCreationDateTime"] = int(created.timestamp())
    return {
        "eventID": raw["eventID"],
        "eventName": raw["eventName"],
        "eventVersion": raw.get("eventVersion", "1.1"),
        "eventSource": "aws:dynamodb",
        "awsRegion": raw.get("awsRegion", region),
        "dynamodb": ddb,
        "eventSourceARN": stream_arn,
    }


def stream_arn_of(dynamodb: Any, table: str) -> str | None:
    """The table's current stream, or None when it has no stream."""
    desc = dynamodb.describe_table(TableName=table)["Table"]
    spec = desc.get("StreamSpecification") or {}
    arn = desc.get("LatestStreamArn")
    if not arn or spec.get("StreamEnabled") is False:
        return None
    return str(arn)


@dataclass
class _Shard:
    shard_id: str
    parent: str | None
    iterator: str | None = None
    resume_at: str | None = None  # AT_SEQUENCE_NUMBER for the next iterator
    limit: int = 0
    attempts: int = 0
    not_before: float = 0.0
    closed: bool = False


@dataclass
class StreamPollResult:
    received: int = 0  # records handed to the function
    failed: int = 0  # records that will be retried
    discarded: int = 0  # records given up on after the retries
    errors: list[BaseException] = field(default_factory=list)


class StreamPoller:
    """One stream event source mapping: the table's stream → a function."""

    def __init__(
        self,
        streams: Any,
        stream_arn: str,
        handler: Handler,
        *,
        function_name: str,
        batch_size: int = 100,
        timeout_seconds: float = 60.0,
        starting_position: str = "TRIM_HORIZON",
        maximum_retry_attempts: int = -1,
        bisect_on_error: bool = False,
        report_batch_item_failures: bool = True,
        retry_delay: Callable[[int], float] = lambda n: min(30.0, 0.5 * 2 ** (n - 1)),
        region: str = REGION,
        shard_refresh_seconds: float = 10.0,
        on_discard: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        if starting_position not in ("TRIM_HORIZON", "LATEST"):
            raise ValueError("starting_position must be TRIM_HORIZON or LATEST")
        if not 1 <= batch_size <= 10000:
            raise ValueError("batch_size must be within 1..10000")
        self.streams = streams
        self.stream_arn = stream_arn
        self.handler = handler
        self.function_name = function_name
        self.batch_size = batch_size
        self.timeout_seconds = timeout_seconds
        self.starting_position = starting_position
        self.maximum_retry_attempts = maximum_retry_attempts
        self.bisect_on_error = bisect_on_error
        self.report_batch_item_failures = report_batch_item_failures
        self.retry_delay = retry_delay
        self.region = region
        self.shard_refresh_seconds = shard_refresh_seconds
        self.on_discard = on_discard  # the mapping's on-failure destination
        self._shards: dict[str, _Shard] = {}
        self._refreshed = 0.0

    # ------------------------------------------------------------------ shards
    def _refresh(self) -> None:
        now = time.monotonic()
        if self._shards and now - self._refreshed < self.shard_refresh_seconds:
            return
        self._refreshed = now
        desc = self.streams.describe_stream(StreamArn=self.stream_arn)["StreamDescription"]
        for s in desc.get("Shards", []):
            sid = s["ShardId"]
            if sid not in self._shards:
                self._shards[sid] = _Shard(sid, s.get("ParentShardId"), limit=self.batch_size)

    def _ready(self, shard: _Shard) -> bool:
        """A child shard waits until its parent is read to the end (record order)."""
        parent = self._shards.get(shard.parent) if shard.parent else None
        return not shard.closed and (parent is None or parent.closed)

    def _iterator(self, shard: _Shard) -> str:
        if shard.iterator is not None:
            return shard.iterator
        if shard.resume_at is not None:
            resp = self.streams.get_shard_iterator(
                StreamArn=self.stream_arn,
                ShardId=shard.shard_id,
                ShardIteratorType="AT_SEQUENCE_NUMBER",
                SequenceNumber=shard.resume_at,
            )
        else:
            resp = self.streams.get_shard_iterator(
                StreamArn=self.stream_arn,
                ShardId=shard.shard_id,
                ShardIteratorType=self.starting_position,
            )
        shard.iterator = str(resp["ShardIterator"])
        return shard.iterator

    # ------------------------------------------------------------------ polling
    def poll_once(self) -> StreamPollResult:
        """One GetRecords per ready shard, and one invocation per non-empty batch."""
        self._refresh()
        out = StreamPollResult()
        now = time.monotonic()
        for shard in list(self._shards.values()):
            if not self._ready(shard) or now < shard.not_before:
                continue
            resp = self.streams.get_records(ShardIterator=self._iterator(shard), Limit=shard.limit)
            records = resp.get("Records", [])
            next_iterator = resp.get("NextShardIterator")
            if not records:
                shard.iterator = next_iterator
                shard.closed = next_iterator is None
                continue
            self._invoke(shard, records, next_iterator, out)
        return out

    def _invoke(
        self,
        shard: _Shard,
        records: list[dict[str, Any]],
        next_iterator: str | None,
        out: StreamPollResult,
    ) -> None:
        event = {"Records": [lambda_record(r, self.stream_arn, self.region) for r in records]}
        seqs = [str(r["dynamodb"]["SequenceNumber"]) for r in records]
        ctx = LocalContext(self.function_name, self.timeout_seconds)
        out.received += len(records)
        error: BaseException | None = None
        failed_from: str | None = None
        try:
            result = self.handler(event, ctx)
        except Exception as e:  # noqa: BLE001 - the batch is retried, the error reported
            error = e
            failed_from = seqs[0]
        else:
            failed_from = self._first_failure(result, seqs)
        if failed_from is None:
            shard.iterator = next_iterator
            shard.closed = next_iterator is None
            shard.resume_at = None
            shard.attempts = 0
            shard.limit = self.batch_size
            return
        if error is not None:
            out.errors.append(error)
        kept = seqs[seqs.index(failed_from) :]
        shard.attempts += 1
        if 0 <= self.maximum_retry_attempts < shard.attempts:
            log.error(
                "%s: discarding %d stream record(s) %s..%s after %d attempt(s)",
                self.function_name,
                len(kept),
                kept[0],
                kept[-1],
                shard.attempts,
            )
            out.discarded += len(kept)
            if self.on_discard is not None:
                failed = records[seqs.index(failed_from) :]
                self.on_discard(self.failure_record(shard, failed, error is not None))
            shard.iterator = next_iterator
            shard.closed = next_iterator is None
            shard.resume_at = None
            shard.attempts = 0
            shard.limit = self.batch_size
            return
        out.failed += len(kept)
        if error is not None and self.bisect_on_error and len(records) > 1:
            shard.limit = max(1, len(records) // 2)
        shard.iterator = None  # re-read from the first failed record
        shard.resume_at = failed_from
        shard.not_before = time.monotonic() + self.retry_delay(shard.attempts)

    def failure_record(
        self, shard: _Shard, records: list[dict[str, Any]], function_error: bool
    ) -> dict[str, Any]:
        """What Lambda sends a stream mapping's on-failure destination: where the batch was."""

        def arrival(r: dict[str, Any]) -> str:
            t = r["dynamodb"].get("ApproximateCreationDateTime")
            return (t if isinstance(t, datetime) else datetime.now(UTC)).isoformat()

        return {
            "requestContext": {
                "requestId": str(uuid.uuid4()),
                "functionArn": LocalContext(self.function_name).invoked_function_arn,
                "condition": "RetryAttemptsExhausted",
                "approximateInvokeCount": shard.attempts,
            },
            "responseContext": {
                "statusCode": 200,
                "executedVersion": "$LATEST",
                **({"functionError": "Unhandled"} if function_error else {}),
            },
            "version": "1.0",
            "timestamp": datetime.now(UTC).isoformat(),
            "DDBStreamBatchInfo": {
                "shardId": shard.shard_id,
                "startSequenceNumber": str(records[0]["dynamodb"]["SequenceNumber"]),
                "endSequenceNumber": str(records[-1]["dynamodb"]["SequenceNumber"]),
                "approximateArrivalOfFirstRecord": arrival(records[0]),
                "approximateArrivalOfLastRecord": arrival(records[-1]),
                "batchSize": len(records),
                "streamArn": self.stream_arn,
            },
        }

    def _first_failure(self, result: Any, seqs: list[str]) -> str | None:
        """The lowest failed sequence number of a partial response, or None (all done)."""
        if not self.report_batch_item_failures or not isinstance(result, dict):
            return None
        failures = result.get("batchItemFailures") or []
        if not failures:
            return None
        ids = [str(f.get("itemIdentifier") or "") for f in failures if isinstance(f, dict)]
        if any(i not in seqs for i in ids) or not ids:
            return seqs[0]  # an unknown or empty identifier fails the whole batch, as Lambda
        return min(ids, key=seqs.index)

    def drain(self, max_polls: int = 100) -> list[StreamPollResult]:
        """Poll until a round hands over nothing (tests)."""
        out = []
        for _ in range(max_polls):
            r = self.poll_once()
            if r.received == 0:
                break
            out.append(r)
        return out

    def step(self) -> float:
        """For a `Loop`: poll, report errors, and wait a little when the stream is idle."""
        r = self.poll_once()
        for e in r.errors:
            log.error(
                "%s: invocation failed (%s: %s); the batch will be retried",
                self.function_name,
                type(e).__name__,
                e,
            )
        return 0.0 if r.received and not r.failed else 0.5
