"""The small ports the services need besides the storage protocol.

On AWS an SQS queue does these jobs (`mailqueue.backends.aws.ports` adapts them); in one process a
list does (`mailqueue.backends.inprocess`). The services name only these protocols, so the same
delivery, bounce and sweeper code runs on either (tests/delivery, tests/bounce prove it).
The stores delivery reads besides (`mailqueue.services.delivery.DeliveryPorts`) are the
protocols of the outbound modules that own them, so they are gathered there, not here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from mailqueue.core.model import MailRef, Priority


class Triggers(Protocol):
    """What makes a group come up for a delivery attempt (the delivery queue on AWS).

    A trigger is a message naming one group; whoever receives it holds a receipt that
    keeps it away from other receivers until it is deleted or its time runs out. Which
    queue a group's trigger lives on is the adapter's business, never the core's.
    """

    def post(
        self,
        refs: Sequence[MailRef],
        delay_seconds: int = 0,
        *,
        priority: Priority = Priority.TRANSACTIONAL,
        pool: str = "",
    ) -> None:
        """New triggers for these groups of one `priority` and egress `pool` ("": the
        default), due after `delay_seconds` (the adapter may cap the delay; an early
        receipt is re-armed by delivery). The pool's own queue when it has one."""
        ...

    def queue_of(self, source: str | None) -> str | None:
        """The adapter's name for the queue a received trigger came from (`source`: what
        the event source says of it, an eventSourceARN on AWS); None: the default one.
        Kept on the claim, so the group's re-arms use the queue its receipt is valid on."""
        ...

    def rearm(self, receipt_handle: str, delay_seconds: int, *, queue: str | None = None) -> None:
        """Keep the received trigger (from `queue`, see `queue_of`) away for
        `delay_seconds` (capped per hop by the adapter; a longer wait re-arms again on
        each receipt). A receipt no longer good raises a `MailqueueError`; the trigger
        then comes back by itself."""
        ...


class BounceHandoff(Protocol):
    """Hands a group with a DSN due to the bounce path (the bounce queue on AWS)."""

    def post(self, refs: Sequence[MailRef]) -> None: ...


__all__ = ["BounceHandoff", "PollResult", "Triggers"]


@dataclass
class PollResult:
    """One batch's outcome at an event source: received, failed (left for redelivery),
    deleted, the receipts taken, and the error that failed the whole batch if one did."""

    received: int
    failed: int
    deleted: int
    receipts: list[str]
    error: BaseException | None = None
