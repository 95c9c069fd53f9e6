"""The event writer's adapters on AWS: the state table's DynamoDB stream as a
`ChangeSource`, S3 objects as the `EventSink`, content starts read from S3 (a ranged GET)
or from the item that holds a small mail's content."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from boto3.dynamodb.types import TypeDeserializer

from mailqueue.backends.aws.clients import translate
from mailqueue.backends.aws.items import INLINE_PREFIX, _plain, object_key, read_inline
from mailqueue.core.errors import PermanentStorageError
from mailqueue.core.events import HEADER_READ_MAX, QueueEvent, header_section, unpack_headers
from mailqueue.services.eventlog import encode_lines, partition_of

__all__ = [
    "ContentHeaders",
    "DynamoStreamSource",
    "S3EventWriter",
    "batch_id",
    "inline_reader",
    "plain_image",
    "stored_headers",
]

_deser = TypeDeserializer()
# Characters an event object key may hold: safe for S3A (Hadoop paths), Athena and Glue.
_KEY_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")


def plain_image(image: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A stream image (DynamoDB JSON) as plain Python values (ints for numbers)."""
    if not image:
        return None
    return {k: _plain(_deser.deserialize(v)) for k, v in image.items()}


def stored_headers(records: Iterable[Mapping[str, Any]]) -> dict[str, bytes]:
    """Mail id -> header section, from the mail items' INSERTs in `records`: their `hdrs`
    (content in S3), or the start of the content the item itself holds (`body`, zlib:
    a small mail's content in the mail item, or in a solo mail's only group item)."""
    out: dict[str, bytes] = {}
    for rec in records:
        if rec.get("eventName") != "INSERT":
            continue
        new = (rec.get("dynamodb") or {}).get("NewImage") or {}
        pk = str((new.get("pk") or {}).get("S", ""))
        sk = str((new.get("sk") or {}).get("S", ""))
        # a mail item, or a solo mail's group item (its content, or its header section)
        solo = sk.startswith("G#") and ("body" in new or "hdrs" in new)
        if not pk.startswith("M#") or not (sk == "M" or solo):
            continue
        block: bytes | None = None
        if "hdrs" in new:
            block = unpack_headers(_deser.deserialize(new["hdrs"]))
        elif "body" in new and "B" in new["body"]:
            data = unpack_headers(_deser.deserialize(new["body"]))
            block = header_section(data) if data is not None else None
        if block is not None:
            out[pk[2:]] = block
    return out


class S3EventWriter:
    """Writes one gzip JSON-lines object per (batch, partition hour).

    The key is derived from the batch's first sequence number, so a retried batch
    overwrites its own objects instead of adding copies.
    """

    def __init__(self, s3: Any, bucket: str, prefix: str = "events/") -> None:
        self.s3 = s3
        self.bucket = bucket
        self.prefix = prefix

    def write(self, events: Sequence[QueueEvent], batch_id: str) -> list[str]:
        if not set(batch_id) <= _KEY_SAFE:
            raise ValueError(f"unsafe characters in batch id {batch_id!r}")
        by_part: dict[str, list[QueueEvent]] = {}
        for e in events:
            by_part.setdefault(partition_of(e.timestamp), []).append(e)
        keys = []
        for part, evs in sorted(by_part.items()):
            key = f"{self.prefix}{part}/{batch_id}.json.gz"
            with translate("s3:PutObject"):
                self.s3.put_object(
                    Bucket=self.bucket,
                    Key=key,
                    Body=encode_lines(evs),
                    ContentType="application/x-ndjson",
                    ContentEncoding="gzip",
                )
            keys.append(key)
        return keys


def batch_id(records: Sequence[Mapping[str, Any]]) -> str:
    """`<stream digest>-<first sequence number>`: deterministic per batch (a retry
    overwrites), and only letters, digits and `-` (stream labels hold colons, which
    Hadoop/S3A, Athena and Glue handle badly)."""
    if not records:
        return "empty"
    first = records[0]
    seq = str(first.get("dynamodb", {}).get("SequenceNumber", "0"))
    arn = str(first.get("eventSourceARN", "")) or "local"
    digest = hashlib.sha256(arn.encode()).hexdigest()[:12]
    safe_seq = "".join(c for c in seq if c.isascii() and c.isalnum()) or "0"
    return f"{digest}-{safe_seq}"


class DynamoStreamSource:
    """The table's stream records (DynamoDB JSON images) as a `ChangeSource`."""

    def changes(
        self, records: Sequence[Mapping[str, Any]]
    ) -> list[tuple[dict[str, Any] | None, dict[str, Any] | None]]:
        out = []
        for rec in records:
            ddb = rec.get("dynamodb", {})
            out.append((plain_image(ddb.get("OldImage")), plain_image(ddb.get("NewImage"))))
        return out

    def stored_headers(self, records: Sequence[Mapping[str, Any]]) -> dict[str, bytes]:
        return stored_headers(records)

    def batch_id(self, records: Sequence[Mapping[str, Any]]) -> str:
        return batch_id(records)


class ContentHeaders:
    """The start of a mail's content: a ranged S3 GET, or the item holding it inline."""

    def __init__(
        self,
        s3: Any,
        bucket: str,
        inline_content: Callable[[str], bytes | None] | None = None,
    ) -> None:
        self.s3 = s3
        self.bucket = bucket
        self.inline_content = inline_content

    def read(self, content_key: str) -> bytes | None:
        try:
            if content_key.startswith(INLINE_PREFIX):  # content in the mail item
                if self.inline_content is None:
                    return None
                data = self.inline_content(content_key)
                return None if data is None else header_section(data)
            with translate("s3:GetObject"):
                body: bytes = self.s3.get_object(
                    Bucket=self.bucket,
                    Key=object_key(content_key),
                    Range=f"bytes=0-{HEADER_READ_MAX - 1}",
                )["Body"].read()
            return body
        except PermanentStorageError:  # deleted already, or no permission: no headers
            return None


def inline_reader(dynamodb: Any, table: str) -> Callable[[str], bytes | None]:
    def read(key: str) -> bytes | None:
        return read_inline(dynamodb, table, key)

    return read
