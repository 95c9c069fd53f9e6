"""The recovery sweeper: finishes what crashes left, using only the storage primitives.

qmail's promise (INTERNALS §6): a crash at any moment loses no accepted mail and leaves
nothing that recovery cannot finish. Each pass below is idempotent, paginated and bounded
by the time left, so a sweeper that itself dies mid-run is simply run again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from mailqueue.core.config import ConfigError
from mailqueue.core.errors import LeaseLost
from mailqueue.core.model import Claim, Group, GroupState, utcnow
from mailqueue.core.policy import expired
from mailqueue.core.ports import BounceHandoff, Triggers
from mailqueue.core.storage import QueueStorage

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SweeperSettings:
    trigger_grace_seconds: int = 900  # overdue this long with no attempt: trigger lost
    cleanup_grace_seconds: int = 300
    orphan_grace_seconds: int = 36 * 3600  # as qmail
    dsn_grace_seconds: int = 900
    max_queue_lifetime_seconds: int = 5 * 86400
    page_size: int = 100
    reserve_seconds: float = 10.0

    def __post_init__(self) -> None:
        if self.trigger_grace_seconds < 60:
            raise ConfigError("trigger_grace_seconds must be at least 60")
        if self.orphan_grace_seconds < 3600:
            raise ConfigError("orphan_grace_seconds must be at least an hour")


@dataclass
class SweepStats:
    leases_recovered: int = 0
    cleaned: int = 0
    orphans_removed: int = 0
    triggers_reposted: int = 0
    expired: int = 0
    dsn_reposted: int = 0
    stopped_early: bool = False
    errors: dict[str, int] = field(default_factory=dict)

    def as_metrics(self) -> dict[str, int]:
        return {
            "LeasesRecovered": self.leases_recovered,
            "MailsCleaned": self.cleaned,
            "OrphansRemoved": self.orphans_removed,
            "TriggersReposted": self.triggers_reposted,
            "GroupsExpired": self.expired,
            "DsnReposted": self.dsn_reposted,
        }


class Sweeper:
    def __init__(
        self,
        settings: SweeperSettings,
        storage: QueueStorage,
        *,
        triggers: Triggers,
        bounces: BounceHandoff,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.s = settings
        self.storage = storage
        self.triggers = triggers
        self.bounces = bounces
        self.clock = clock

    def run(
        self, time_left: Callable[[], float] | None = None, *, orphans: bool = False
    ) -> SweepStats:
        left = time_left or (lambda: 300.0)
        stats = SweepStats()
        for step in (self.recover_leases, self.repost_lost_triggers, self.repost_dsn, self.clean):
            if left() < self.s.reserve_seconds:
                stats.stopped_early = True
                break
            step(stats, left)
        if orphans and left() >= self.s.reserve_seconds:
            self.remove_orphans(stats, left)
        return stats

    def _pages(self, state: GroupState, due_before: datetime, left: Callable[[], float]):  # type: ignore[no-untyped-def]
        cursor: str | None = None
        while left() >= self.s.reserve_seconds:
            if state == GroupState.INFLIGHT:
                page = self.storage.find_inflight(due_before, limit=self.s.page_size, cursor=cursor)
            else:
                page = self.storage.list_queue(
                    state=state, due_before=due_before, limit=self.s.page_size, cursor=cursor
                )
            yield from page.items
            cursor = page.cursor
            if not cursor:
                return

    def recover_leases(self, stats: SweepStats, left: Callable[[], float]) -> None:
        """Expired leases (the holder died): take the claim over and hand it back."""
        now = self.clock()
        for g in self._pages(GroupState.INFLIGHT, now, left):
            claim = self.storage.send_start(g.ref, now, lease_seconds=60)
            if not isinstance(claim, Claim):
                continue  # someone else got there first
            try:
                if self._expire_if_old(claim, stats):
                    continue
                self.storage.send_cancel(claim)  # re-posts a trigger (no receipt handle)
                stats.leases_recovered += 1
            except LeaseLost:
                continue

    def repost_lost_triggers(self, stats: SweepStats, left: Callable[[], float]) -> None:
        """Queued groups overdue by more than the grace: their trigger was lost."""
        now = self.clock()
        cutoff = now - timedelta(seconds=self.s.trigger_grace_seconds)
        lost: list[Group] = []
        for g in self._pages(GroupState.QUEUED, cutoff, left):
            last = max((r.last_attempt_at for r in g.recipients if r.last_attempt_at), default=None)
            if last is not None and last >= g.next_attempt_at:
                continue  # attempted since it became due
            if now - g.arrival > timedelta(seconds=self.s.max_queue_lifetime_seconds):
                claim = self.storage.send_start(g.ref, now, lease_seconds=60)
                if isinstance(claim, Claim):
                    try:
                        self._expire_if_old(claim, stats)
                    except LeaseLost:
                        pass  # taken over meanwhile; the new holder decides
                continue
            lost.append(g)
        if lost:
            # each on its pool's or priority's queue
            for p, pool in sorted({(g.priority, g.pool) for g in lost}):
                refs = [g.ref for g in lost if (g.priority, g.pool) == (p, pool)]
                self.triggers.post(refs, priority=p, pool=pool)
            stats.triggers_reposted += len(lost)

    def _expire_if_old(self, claim: Claim, stats: SweepStats) -> bool:
        now = self.clock()
        g = claim.group
        lifetime = timedelta(seconds=self.s.max_queue_lifetime_seconds)
        if now - g.arrival <= lifetime:
            return False
        last = next((r.last_result for r in g.pending() if r.last_result), None)
        res = expired(last, lifetime)
        self.storage.drop(claim, {r.rid: res for r in g.pending()})
        stats.expired += len(g.pending())
        return True

    def repost_dsn(self, stats: SweepStats, left: Callable[[], float]) -> None:
        """Groups waiting for a DSN too long: the bounce message was lost; post it again."""
        cutoff = self.clock() - timedelta(seconds=self.s.dsn_grace_seconds)
        refs = [g.ref for g in self._pages(GroupState.DSN, cutoff, left)]
        if refs:
            self.bounces.post(refs)
            stats.dsn_reposted += len(refs)

    def clean(self, stats: SweepStats, left: Callable[[], float]) -> None:
        now = self.clock()
        for p in self.storage.find_pending_cleanup(
            now,
            grace_seconds=self.s.cleanup_grace_seconds,
            orphan_grace_seconds=self.s.orphan_grace_seconds,
            orphans=False,
        ):
            if left() < self.s.reserve_seconds:
                stats.stopped_early = True
                return
            if self.storage.cleanup(p.mail_id):
                stats.cleaned += 1

    def remove_orphans(self, stats: SweepStats, left: Callable[[], float]) -> None:
        """Content with no state older than the grace (an enqueue died before its state)."""
        cutoff = self.clock() - timedelta(seconds=self.s.orphan_grace_seconds)
        for p in self.storage.find_orphans(cutoff):
            if left() < self.s.reserve_seconds:
                stats.stopped_early = True
                return
            if self.storage.cleanup(p.mail_id):
                stats.orphans_removed += 1
