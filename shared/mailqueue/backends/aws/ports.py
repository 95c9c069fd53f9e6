"""The ports of `mailqueue.core.ports` on SQS, through `AwsStorage`'s own senders.

`AwsStorage` already posts and re-arms triggers as part of its transitions, so the
adapters go through it: one place decides which queue a group's trigger or a bounce
goes to, and the limits (12 h a visibility hop, 15 min a delay) are applied there.
"""

from __future__ import annotations

from collections.abc import Sequence

from mailqueue.backends.aws.backend import AwsStorage
from mailqueue.core.model import MailRef, Priority


class SqsTriggers:
    """`Triggers` on the delivery queue."""

    def __init__(self, storage: AwsStorage) -> None:
        self.storage = storage

    def post(
        self,
        refs: Sequence[MailRef],
        delay_seconds: int = 0,
        *,
        priority: Priority = Priority.TRANSACTIONAL,
        pool: str = "",
    ) -> None:
        self.storage.repost(refs, delay_seconds, priority=priority, pool=pool)

    def queue_of(self, source: str | None) -> str | None:
        return self.storage.s.queue_for_source(source)

    def rearm(self, receipt_handle: str, delay_seconds: int, *, queue: str | None = None) -> None:
        self.storage.rearm(receipt_handle, delay_seconds, queue_url=queue)


class SqsBounces:
    """`BounceHandoff` on the bounce queue."""

    def __init__(self, storage: AwsStorage) -> None:
        self.storage = storage

    def post(self, refs: Sequence[MailRef]) -> None:
        self.storage.post_bounce(refs)


__all__ = ["SqsBounces", "SqsTriggers"]
