"""IP warm-up: a pool's daily budget, total and per big receiver, ramping step by step.

Why: a big receiver throttles or junks a cold address that suddenly sends volume; every
dedicated-IP service ramps a new address over weeks (SES: up to 45 days to 50,000 a day,
data/pools.json cites it). A pool with a `warmup` (pools.py) may send, each UTC day, the
current step's `total` (times its address count: the numbers are per address) and
`per_site` to each of the schedule's big receivers. Past the day's budget the mail waits
for the next day (a DeliveryDelay with the reason, nothing refused, nothing lost) or,
when the schedule names an `overflow` pool, goes there.

The ramp advances one step per UTC day the pool sent on, and only when the day before
stayed inside the reputation band (bounces below the guard's review threshold, the same
thresholds as reputation.py): a pool that bounces stops ramping.

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

log = logging.getLogger(__name__)

DAY = 86400
COUNTER_TTL = 8 * DAY  # counters are tidied up by TTL a week after their day
MIN_SAMPLE = 50  # fewer mails than this in a day: its bounce rate does not hold the ramp


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


def bounce_key(pool: str, day: str) -> str:
    return f"{pool}|{day}|!bounced"


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
    bounced: int
    held: bool  # yesterday's bounces stopped the ramp
    sites: dict[str, int]

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
            "bounced": self.bounced,
            "held": self.held,
            "sites": self.sites,
        }


class WarmupGate:
    """Per container: the pools' ramps and today's counters (one conditional write per
    mail and per capped site while a pool is warming up; nothing for a warm pool)."""

    def __init__(
        self,
        config: PoolConfig,
        counters: BudgetCounters,
        *,
        bounce_band: float = 0.05,  # reputation.py's review threshold for bounces
        clock: Callable[[], float],
    ) -> None:
        self.config = config
        self.counters = counters
        self.band = bounce_band
        self.clock = clock
        self._steps: dict[tuple[str, str], tuple[int, bool]] = {}  # (pool, day) -> step, held
        self._lock = threading.Lock()

    def _scale(self, pool: Pool) -> int:
        return max(1, pool.address_count())

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
                c = self.counters.get(
                    [total_key(pool.name, prev_day), bounce_key(pool.name, prev_day)]
                )
                sent = c.get(total_key(pool.name, prev_day), 0)
                bounced = c.get(bounce_key(pool.name, prev_day), 0)
                held = sent >= MIN_SAMPLE and bounced / sent >= self.band
                new = prev_step if held or sent == 0 else prev_step + 1
                if held:
                    log.warning("warm-up held", extra={"pool": pool.name, "step": prev_step})
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

    def bounced(self, pool: Pool, n: int) -> None:
        """Count today's hard bounces of a warming pool (they hold tomorrow's ramp)."""
        if pool.warmup is None or n <= 0:
            return
        self.counters.add(bounce_key(pool.name, day_of(self.clock())), n, COUNTER_TTL)

    def progress(self, pool: Pool) -> Progress:
        day = day_of(self.clock())
        w = pool.warmup
        if w is None:
            return Progress(pool.name, day, 0, 0, None, None, 0, 0, False, {})
        step, held = self.step(pool, day)
        caps = w.budget(step)
        keys = [total_key(pool.name, day), bounce_key(pool.name, day)]
        keys += [site_key(pool.name, day, s) for s in w.sites]
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
            c.get(keys[1], 0),
            held,
            {s: c.get(site_key(pool.name, day, s), 0) for s in w.sites},
        )


__all__ = ["BudgetCounters", "Progress", "Spent", "WarmupGate", "day_of", "next_day_at"]
