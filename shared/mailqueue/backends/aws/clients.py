"""boto3 clients and the translation of botocore errors into the core's exceptions."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectTimeoutError,
    EndpointConnectionError,
    ReadTimeoutError,
)
from botocore.exceptions import (
    ConnectionError as BotoConnectionError,
)

from mailqueue.core.errors import PermanentStorageError, TransientStorageError

TRANSIENT_CODES = frozenset(
    {
        "ProvisionedThroughputExceededException",
        "ThrottlingException",
        "Throttling",
        "RequestLimitExceeded",
        "InternalServerError",
        "InternalError",
        "ServiceUnavailable",
        "SlowDown",
        "RequestTimeout",
        "RequestTimeoutException",
        "TransactionInProgressException",
        "TransactionConflictException",
        "LimitExceededException",
        "KMSThrottlingException",
        "AWS.SimpleQueueService.ServiceUnavailable",
        "AWS.SimpleQueueService.InternalError",
    }
)


def error_code(e: ClientError) -> str:
    return str(e.response.get("Error", {}).get("Code", ""))


def is_transient(e: ClientError) -> bool:
    status = int(e.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
    return error_code(e) in TRANSIENT_CODES or status >= 500


@contextmanager
def translate(operation: str) -> Iterator[None]:
    """Map provider errors to TransientStorageError / PermanentStorageError."""
    try:
        yield
    except ClientError as e:
        code = error_code(e)
        if is_transient(e):
            raise TransientStorageError(f"{operation}: {code}") from e
        raise PermanentStorageError(f"{operation}: {code}") from e
    except (
        EndpointConnectionError,
        ConnectTimeoutError,
        ReadTimeoutError,
        BotoConnectionError,
    ) as e:
        raise TransientStorageError(f"{operation}: {type(e).__name__}") from e
    except BotoCoreError as e:
        raise PermanentStorageError(f"{operation}: {type(e).__name__}") from e


BATCH_WRITE_MAX = 25  # DynamoDB: at most 25 put/delete requests per BatchWriteItem
BATCH_WRITE_RETRIES = 8


def batch_write(
    ddb: Any,
    table: str,
    requests: Sequence[dict[str, Any]],
    *,
    what: str = "items",
    sleep: Callable[[float], None] = time.sleep,
    on_call: Callable[[], None] | None = None,
) -> int:
    """BatchWriteItem in chunks of 25; what DynamoDB leaves unprocessed (throttling) is
    sent again after 50 ms doubling to 1 s, then TransientStorageError, so no caller
    takes a partly written batch for a whole one. Returns the number of calls made."""
    calls = 0
    for i in range(0, len(requests), BATCH_WRITE_MAX):
        pending: dict[str, Any] = {table: list(requests[i : i + BATCH_WRITE_MAX])}
        for attempt in range(BATCH_WRITE_RETRIES):
            if on_call is not None:
                on_call()
            with translate("dynamodb:BatchWriteItem"):
                resp = ddb.batch_write_item(RequestItems=pending)
            calls += 1
            pending = resp.get("UnprocessedItems") or {}
            if not pending:
                break
            sleep(min(0.05 * (2**attempt), 1.0))
        else:
            raise TransientStorageError(
                f"dynamodb:BatchWriteItem: unprocessed {what} after retries"
            )
    return calls


class ContentStream:
    """An S3 object body whose read errors are `OSError`s, as a file's are: the core
    reads content streams without knowing botocore (a broken download is temporary)."""

    def __init__(self, body: Any) -> None:
        self._body = body

    def read(self, n: int | None = -1) -> bytes:
        try:
            data: bytes = self._body.read() if n is None or n < 0 else self._body.read(n)
        except BotoCoreError as e:
            raise OSError(f"s3:GetObject body: {type(e).__name__}") from e
        return data

    def close(self) -> None:
        self._body.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._body, name)


@dataclass(frozen=True, slots=True)
class AwsClients:
    s3: Any
    dynamodb: Any
    sqs: Any

    def all(self) -> tuple[Any, ...]:
        return (self.s3, self.dynamodb, self.sqs)


def make_clients(
    *,
    region: str | None = None,
    endpoint_url: str | None = None,
    max_attempts: int = 4,
    connect_timeout: float = 2.0,
    read_timeout: float = 10.0,
    session: boto3.session.Session | None = None,
) -> AwsClients:
    """Clients with bounded retries and timeouts (a Lambda must not hang on AWS)."""
    sess = session or boto3.session.Session()
    cfg = Config(
        retries={"max_attempts": max_attempts, "mode": "standard"},
        connect_timeout=connect_timeout,
        read_timeout=read_timeout,
        s3={"addressing_style": "path"} if endpoint_url else None,
    )
    kw: dict[str, Any] = {"config": cfg}
    if region:
        kw["region_name"] = region
    if endpoint_url:
        kw["endpoint_url"] = endpoint_url
    return AwsClients(
        # SigV4 for S3 explicitly: presigned upload URLs must not fall back to SigV2
        s3=sess.client("s3", **{**kw, "config": cfg.merge(Config(signature_version="s3v4"))}),
        dynamodb=sess.client("dynamodb", **kw),
        sqs=sess.client("sqs", **kw),
    )
