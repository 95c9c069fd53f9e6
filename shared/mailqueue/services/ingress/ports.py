"""The ports ingress stands on besides the event emitter and the suppression store:
the queue core's enqueue side and the objects it reads once (uploads, SES's raw mails).
They belong to this context: only ingress uses them (the AWS adapters implement them).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Protocol

from mailqueue.core.model import Envelope, Group, QueuedMail


class RawStore(Protocol):
    """Objects ingress reads once and removes (uploads, SES's raw mails): S3 on AWS."""

    def size(self, key: str) -> int | None:
        """The object's size, None when there is no such object."""
        ...

    def read(self, key: str, limit: int) -> bytes | None:
        """At most `limit` + 1 bytes (so the caller sees an overflow); None when gone."""
        ...

    def delete(self, key: str) -> None: ...

    def presign_put(self, key: str, expires: int) -> str: ...


class IngressStorage(Protocol):
    """What ingress needs of the queue core (AwsStorage provides it)."""

    def enqueue(
        self,
        envelope: Envelope,
        content: bytes,
        *,
        idempotency_key: str | None = None,
        not_before: datetime | None = None,
    ) -> QueuedMail: ...

    def get_mail(self, mail_id: str) -> tuple[dict[str, Any] | None, list[Group]]: ...

    def validate(self, envelope: Envelope, content: bytes) -> None: ...
