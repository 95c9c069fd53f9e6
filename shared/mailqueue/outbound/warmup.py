"""IP warm-up: a pool's daily budget, total and per big receiver, ramping step by step.

Why: a big receiver throttles or junks a cold address that suddenly sends volume; every
dedicated-IP service ramps a new address over weeks (SES: up to 45 days to 50,000 a day,
data/pools.json cites it). A pool with a `warmup` (pools.py) may send, each UTC day, the
current step's `total` (times its address count: the numbers are per address) and
`per_site` to each of the schedule's big receivers. Past the day's budget the mail waits
for the next day (a DeliveryDelay with the reason, nothing refused, nothing lost) or,
when the schedule names an `overflow` pool, goes there.

The ramp advances one step per UTC day the pool sent on, and only while the pool stays
inside the reputation guard's band: its standing in the guard's own counters
(reputation.py, scope ``pool``: delivery's hard bounces, and the late bounces and
complaints `record_feedback` counts with the mail's pool) is judged with the guard's
thresholds and window; a review or pause verdict holds the ramp at its step.

Counters are durable and atomic: a small item per (pool, day[, site]) and one ramp item
per pool, behind :class:`BudgetCounters` (DynamoDB in ``backends/aws/budget_store.py``,
a file per key in ``backends/fs_budget.py``, a dict in ``backends/inprocess.py``). A
unit is taken with a conditional increment (`n < limit`) before the attempt: two
containers can never together pass the cap. A unit taken for the total whose site
counter then refuses is given back.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Protocol

from mailqueue.outbound.pools import Pool, PoolConfig
from mailqueue.outbound.reputation import Standing

log = logging.getLogger(__name__)

DAY = 86400
COUNTER_TTL = 8 * DAY  # counters are tidied up by TTL a week after their day
#: a pool's standing in the reputation guard (ReputationGuard.standing("pool", name))
PoolStanding = Callable[[str], Standing]


class BudgetCounters(Protocol):
    """Durable atomic counters (one small item each). Errors: `MailqueueError`."""

    requests: int

    def take(self, key: str, limit: int, ttl: float) -> bool:
        """Add one to `key` if it is below `limit` (atomically); False when it is not."""
        ...

    def give_back(self, key: str) -> None:
        """Take back one unit `take` added (never below zero)."""
        ...

    def add(self, key: str, n: int, ttl: float) -> None:
        """Add `n` unconditionally (the day's bounces)."""
        ...

    def get(self, keys: Sequence[str]) -> dict[str, int]:
        """The counters' values (absent: 0)."""
        ...

    def ramp(self, pool: str) -> tuple[str, int] | None:
        """The pool's ramp item: (UTC date it was set for, step), None before the first."""
        ...

    def set_ramp(self, pool: str, day: str, step: int, expected: str | None) -> bool:
        """Set the ramp item if its date is still `expected` (None: absent); False when
        another container moved it first."""
        ...


def day_of(now: float) -> str:
    return datetime.fromtimestamp(now, UTC).date().isoformat()


def next_day_at(now: float) -> float:
    d = datetime.fromtimestamp(now, UTC).date() + timedelta(days=1)
    return datetime(d.year, d.month, d.day, tzinfo=UTC).timestamp()


def total_key(pool: str, day: str) -> str:
    return f"{pool}|{day}"


def site_key(pool: str, day: str, site: str) -> str:
    return f"{pool}|{day}|{site}"


@dataclass(frozen=True, slots=True)
class Spent:
    """The pool's budget for today is used up: wait until `until` or overflow."""

    pool: str
    reason: str
    until: float
    overflow: str | None = None


@dataclass(frozen=True, slots=True)
class Progress:
    pool: str
    day: str
    step: int
    last_step: int
    total: int | None  # None: warm (past the ramp)
    per_site: int | None
    sent: int
    held: bool  # the pool's standing stopped the ramp today
    sites: dict[str, int]
    standing: Standing | None = None  # the guard's window for the pool

    def to_json(self) -> dict[str, object]:
        return {
            "pool": self.pool,
            "day": self.day,
            "step": self.step,
            "last_step": self.last_step,
            "warm": self.total is None,
            "total": self.total,
            "per_site": self.per_site,
            "sent": self.sent,
            "held": self.held,
            "sites": self.sites,
            "reputation": self.standing.to_json() if self.standing is not None else None,
        }


class WarmupGate:
    """Per container: the pools' ramps and today's counters (one conditional write per
    mail and per capped site while a pool is warming up; nothing for a warm pool)."""

    def __init__(
        self,
        config: PoolConfig,
        counters: BudgetCounters,
        *,
        standing: PoolStanding | None = None,
        clock: Callable[[], float],
    ) -> None:
        self.config = config
        self.counters = counters
        self.standing = standing  # None: no guard counts (the ramp is never held)
        self.clock = clock
        self._steps: dict[tuple[str, str], tuple[int, bool]] = {}  # (pool, day) -> step, held
        self._lock = threading.Lock()

    def _scale(self, pool: Pool) -> int:
        return max(1, pool.address_count())

    def _hold(self, pool: Pool) -> Standing | None:
        """The pool's standing when it is outside the band (review or pause), else None."""
        if self.standing is None:
            return None
        st = self.standing(pool.name)
        return st if st.verdict in ("review", "pause") else None

    def step(self, pool: Pool, day: str) -> tuple[int, bool]:
        """Today's ramp step of `pool` and whether the ramp was held (cached per day)."""
        with self._lock:
            hit = self._steps.get((pool.name, day))
        if hit is not None:
            return hit
        for _ in range(5):
            cur = self.counters.ramp(pool.name)
            if cur is not None and cur[0] >= day:
                got = (cur[1], False)
                break
            if cur is None:
                new, held = 1, False
            else:
                prev_day, prev_step = cur
                sent = self.counters.get([total_key(pool.name, prev_day)]).get(
                    total_key(pool.name, prev_day), 0
                )
                bad = self._hold(pool) if sent else None
                held = bad is not None
                new = prev_step if held or sent == 0 else prev_step + 1
                if bad is not None:
                    log.warning(
                        "warm-up held",
                        extra={"pool": pool.name, "step": prev_step, "reason": bad.reason},
                    )
            if self.counters.set_ramp(pool.name, day, new, cur[0] if cur else None):
                got = (new, held)
                break
        else:  # five containers moved it under us: read what they set
            cur = self.counters.ramp(pool.name)
            got = (cur[1] if cur else 1, False)
        with self._lock:
            self._steps[(pool.name, day)] = got
        return got

    def admit(self, pool: Pool, site: str) -> Spent | None:
        """Take today's unit for one mail from `pool` to `site`; Spent when over budget."""
        w = pool.warmup
        if w is None:
            return None
        now = self.clock()
        day = day_of(now)
        step, _ = self.step(pool, day)
        caps = w.budget(step)
        if caps is None:
            return None  # warm
        scale = self._scale(pool)
        total, per_site = caps.total * scale, caps.per_site * scale
        until = next_day_at(now)
        tk = total_key(pool.name, day)
        if not self.counters.take(tk, total, COUNTER_TTL):
            return Spent(pool.name, f"warm-up: pool {pool.name} has sent its {total} mails "
                         f"of ramp step {step} today", until, w.overflow)  # fmt: skip
        if site in w.sites and not self.counters.take(
            site_key(pool.name, day, site), per_site, COUNTER_TTL
        ):
            self.counters.give_back(tk)
            return Spent(pool.name, f"warm-up: pool {pool.name} has sent its {per_site} mails "
                         f"to {site} of ramp step {step} today", until, w.overflow)  # fmt: skip
        return None

    def progress(self, pool: Pool) -> Progress:
        day = day_of(self.clock())
        w = pool.warmup
        if w is None:
            return Progress(pool.name, day, 0, 0, None, None, 0, False, {})
        step, held = self.step(pool, day)
        caps = w.budget(step)
        keys = [total_key(pool.name, day)] + [site_key(pool.name, day, s) for s in w.sites]
        c = self.counters.get(keys)
        scale = self._scale(pool)
        return Progress(
            pool.name,
            day,
            step,
            w.last_step,
            caps.total * scale if caps else None,
            caps.per_site * scale if caps else None,
            c.get(keys[0], 0),
            held,
            {s: c.get(site_key(pool.name, day, s), 0) for s in w.sites},
            self.standing(pool.name) if self.standing is not None else None,
        )


__all__ = [
    "BudgetCounters",
    "PoolStanding",
    "Progress",
    "Spent",
    "WarmupGate",
    "day_of",
    "next_day_at",
]
