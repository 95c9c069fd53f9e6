"""The storage protocol: the primitives of a classic MTA queue (kannader, qmail).

Every primitive either succeeds or raises an error the caller may retry
(`TransientStorageError`); none leaves state half-changed in a way that the sweeper
cannot finish. Claims are leases: a crashed holder's claim expires and is taken over.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime
from typing import Any, BinaryIO, Protocol, runtime_checkable

from mailqueue.core.model import (
    Claim,
    Envelope,
    Group,
    GroupState,
    MailRef,
    Page,
    QueuedMail,
    Result,
)

#: the cache of the read scope in force, if any (see `read_scope`)
_READ_SCOPE: ContextVar[dict[str, Any] | None] = ContextVar("mailqueue_read_scope", default=None)


@contextmanager
def read_scope() -> Iterator[None]:
    """One operator read (a browse page, a size, a shape) over several `list_queue` calls.

    Within it a storage may answer them from one read of its index and read each group
    once (`size` walks five states, and a claimed group's `queued` entry again for
    `inflight`): the answers are those of reading everything at the scope's start, which
    an eventually consistent index never promised better than. Outside a scope nothing
    is kept (issue 43 item 15)."""
    token = _READ_SCOPE.set({})
    try:
        yield
    finally:
        _READ_SCOPE.reset(token)


def read_scope_cache() -> dict[str, Any] | None:
    """The scope's cache for a storage to keep its reads in; None outside a scope."""
    return _READ_SCOPE.get()


@dataclass(frozen=True, slots=True)
class ClaimRefused:
    """Why `send_start` did not claim: never an error, the caller skips the record.

    reason: "not_due" (queued, next attempt later: re-arm until `next_attempt_at`),
    "claimed" (someone else holds a live lease), "held" (operator hold),
    "finished" (nothing left to deliver), "gone" (no such group).
    """

    reason: str
    next_attempt_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class InflightMail:
    """What an attempt needs: the claimed group and a stream of the stored content."""

    group: Group
    content: BinaryIO
    size: int


@dataclass(frozen=True, slots=True)
class PendingCleanup:
    mail_id: str
    reason: str  # "finished" (all recipients final) | "orphan" (content without state)


@dataclass(frozen=True, slots=True)
class Transition:
    """What a state-changing call did, so the caller can emit events and route follow-ups."""

    group: Group  # the group after the change
    released: bool  # the lease was released by this call (no recipient left unresolved)
    mail_finished: bool  # every group of the mail is final and needs no DSN
    # cleanup ran to completion as part of this call: nothing is left for anyone to clean
    # (a finished solo mail's expired item, without content, is DynamoDB's TTL's)
    cleaned: bool


@runtime_checkable
class Storage(Protocol):
    def enqueue(
        self,
        envelope: Envelope,
        content: bytes,
        *,
        idempotency_key: str | None = None,
        not_before: datetime | None = None,
    ) -> QueuedMail:
        """Store content, then one state item per destination group, then post the triggers.

        Returns only after all three are durable. Atomicity: content is written once
        (conditional create); state items are written in batches (unprocessed items are
        retried); triggers are posted last. A crash in between leaves content without
        state (removed by `cleanup` after a grace period) or state without a trigger
        (found by `list_queue` and re-posted by the sweeper): never a lost accepted mail.
        Retry: with the same `idempotency_key`, a retried call stores nothing twice and
        returns the first answer (`duplicate=True`); the same key with other content
        raises `Conflict`. Without a key every call is a new mail.
        """
        ...

    def list_queue(
        self,
        *,
        state: GroupState = GroupState.QUEUED,
        due_before: datetime | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> Page:
        """Groups in `state`, ordered by their due time (next attempt; lease end for inflight).

        Read-only, served by an index (never a table scan); eventually consistent, so a
        group that changed a moment ago may appear in its old state. Items are `Group`s.
        """
        ...

    def find_inflight(self, now: datetime, *, limit: int = 100, cursor: str | None = None) -> Page:
        """Groups whose lease expired before `now` (the holder crashed or ran out of time).

        Only expired leases are returned; live ones never. Items are `Group`s.
        """
        ...

    def find_pending_cleanup(
        self,
        now: datetime,
        *,
        grace_seconds: int = 300,
        orphan_grace_seconds: int = 129600,
        orphans: bool = True,
    ) -> Iterator[PendingCleanup]:
        """Mails whose cleanup did not complete: finished mails older than `grace_seconds`,
        and (with `orphans`) content with no state older than `orphan_grace_seconds` (36 h,
        as qmail). The orphan part lists the content prefix, so schedule it rarely."""
        ...

    def send_start(
        self,
        ref: MailRef,
        now: datetime,
        *,
        lease_seconds: int,
        receipt_handle: str | None = None,
    ) -> Claim | ClaimRefused:
        """Claim a group for one attempt: one atomic conditional write.

        Succeeds when the group is queued and due, or inflight with an expired lease
        (crash takeover). Otherwise returns `ClaimRefused` (not an error): a second claim
        of the same group is refused while the first lease lives.
        """
        ...

    def read_inflight(self, claim: Claim) -> InflightMail:
        """The claimed group's envelope and a stream of the content (never buffered twice).

        Raises `NotFound` if the content is gone (the mail was deleted meanwhile).
        Read-only: may be repeated freely.
        """
        ...

    def send_done(
        self, claim: Claim, rids: Sequence[str], result: Result, *, tls: bool = False
    ) -> Transition:
        """The attempt delivered to `rids`: they become `delivered` (atomic, one write).

        Recipients asking NOTIFY=SUCCESS get a success DSN due. When no recipient of the
        claim is left unresolved the lease is released; when the whole mail is final,
        cleanup runs. Raises `LeaseLost` if the lease is no longer ours. Retrying with
        the same claim after a success raises `LeaseLost` once released (the first call
        already recorded the result).
        """
        ...

    def send_cancel(self, claim: Claim) -> Group:
        """Give the claim back untouched: no attempt counted, due again now.

        Unresolved recipients return to `queued`; the trigger is made visible again (or
        re-posted). Raises `LeaseLost` if the lease is not ours any more.
        """
        ...

    def reschedule(
        self,
        claim: Claim,
        results: dict[str, Result],
        next_attempt_at: datetime,
        *,
        delay_warning: bool = False,
        tls: bool = False,
    ) -> Transition:
        """Temporary failure for these recipients: attempts+1, `next_attempt_at` later.

        Atomic per call. The trigger's visibility is set to min(delay, 12 h) (longer
        waits re-arm on each receipt). `delay_warning` marks the recipients for one
        delay DSN. Raises `LeaseLost` if the lease is not ours.
        """
        ...

    def drop(self, claim: Claim, results: dict[str, Result], *, tls: bool = False) -> Transition:
        """Give up on these recipients (permanent failure or lifetime over): `bounced`.

        A DSN is due unless the sender is null or NOTIFY=NEVER; the group is posted to
        the bounce queue after the state write. Raises `LeaseLost` if not ours.
        """
        ...

    def cleanup(self, mail_id: str) -> bool:
        """Remove what a finished mail no longer needs: content, then state items.

        Only when every recipient is final and no DSN is pending (returns False and
        changes nothing otherwise). Idempotent: a repeat after success returns True.
        """
        ...


@runtime_checkable
class QueueStorage(Storage, Protocol):
    """The primitives plus what the delivery, bounce and sweeper services use besides
    them (both `AwsStorage` and `FsStorage` provide it). `tls` on the recording calls
    above is what the attempt's history keeps."""

    @property
    def group_recipient_limit(self) -> int:
        """Recipients per group at most (shaping checks its per-connection limits)."""
        ...

    def get_mail(self, mail_id: str) -> tuple[dict[str, Any] | None, list[Group]]:
        """The mail's summary (None if only groups are left) and its groups, read
        consistently. Raises `NotFound` if neither exists."""
        ...

    def read_content(self, mail_id: str) -> BinaryIO:
        """A stream of the stored content (the caller closes it). Raises `NotFound`."""
        ...

    def postpone(
        self,
        claim: Claim,
        delay_seconds: int,
        *,
        reservation: str | None = None,
        wait: Result | None = None,
    ) -> Group:
        """Give a claimed group back untried for `delay_seconds`: no attempt, no event;
        its trigger comes back after the delay (traffic shaping, suspensions).
        `reservation`: kept with the group (its `reservation` on the next claim),
        replacing any earlier one; None clears it. Same request as without.
        `wait`: why it waits (kept as the group's `wait`, in the same write): still no
        attempt, but the event log makes it a DeliveryDelay (an egress pool's wait)."""
        ...

    def dsn_sent(self, ref: MailRef, rids: Sequence[str], kind: str) -> Transition | None:
        """The DSN of `kind` for `rids` is queued: clear their pending flag (each only if
        still `kind`, so a repeat is a no-op: None) and settle the group."""
        ...

    def settle(self, group: Group) -> Transition:
        """Move a group at rest to the state its recipients imply; a finished mail is
        cleaned. Idempotent (finishes a `dsn_sent` cut short by a crash)."""
        ...

    def find_orphans(self, older_than: datetime) -> Iterator[PendingCleanup]:
        """Content with no state, stored before `older_than` (an enqueue that died)."""
        ...


__all__ = [
    "ClaimRefused",
    "InflightMail",
    "PendingCleanup",
    "QueueStorage",
    "Storage",
    "Transition",
]
