"""S3 objects ingress reads once and removes: client uploads and SES's raw mails.

The adapter translates botocore errors into the core's; the service sees only the
`RawStore` protocol (`ingress.ports`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

from mailqueue.backends.aws.clients import error_code, translate

_MISSING = ("404", "NoSuchKey", "NotFound")


def presigning_client(
    *,
    region: str | None,
    endpoint_url: str | None,
    session: boto3.session.Session | None = None,
) -> Any:
    """An S3 client that presigns with SigV4: S3 refuses SigV2 URLs for newer buckets,
    and botocore still presigns with SigV2 unless told otherwise."""
    cfg = Config(
        signature_version="s3v4",
        s3={"addressing_style": "path"} if endpoint_url else None,
    )
    kw: dict[str, Any] = {"config": cfg}
    if region:
        kw["region_name"] = region
    if endpoint_url:
        kw["endpoint_url"] = endpoint_url
    return (session or boto3.session.Session()).client("s3", **kw)


class S3RawStore:
    """`presigner` builds the client for upload URLs on first use (most calls need none)."""

    def __init__(self, s3: Any, bucket: str, *, presigner: Callable[[], Any] | None = None) -> None:
        self.s3 = s3
        self.bucket = bucket
        self._make_presigner = presigner or (lambda: s3)
        self._presigner: Any = None

    def size(self, key: str) -> int | None:
        with translate("s3:HeadObject"):
            try:
                head = self.s3.head_object(Bucket=self.bucket, Key=key)
            except ClientError as e:
                if error_code(e) in _MISSING:
                    return None
                raise
        return int(head.get("ContentLength", 0))

    def read(self, key: str, limit: int) -> bytes | None:
        with translate("s3:GetObject"):
            try:
                obj = self.s3.get_object(Bucket=self.bucket, Key=key)
            except ClientError as e:
                if error_code(e) in _MISSING:
                    return None
                raise
            body = obj["Body"]
            try:
                data: bytes = body.read(limit + 1)
            finally:
                body.close()
        return data

    def delete(self, key: str) -> None:
        with translate("s3:DeleteObject"):
            self.s3.delete_object(Bucket=self.bucket, Key=key)

    def presign_put(self, key: str, expires: int) -> str:
        """Signed locally (no request): the URL carries our role's signature, not a secret."""
        with translate("s3:PresignPutObject"):
            if self._presigner is None:
                self._presigner = self._make_presigner()
            url: str = self._presigner.generate_presigned_url(
                "put_object",
                Params={"Bucket": self.bucket, "Key": key},
                ExpiresIn=expires,
                HttpMethod="PUT",
            )
        return url
