"""What share of its provisioned capacity a state table uses under DynamoDB auto scaling.

With `StateTableCapacity=provisioned` the bill is for the capacity provisioned each hour,
not for the units consumed: the cost model divides the month's units by the average use
of what is provisioned. That use was an assumption (50 %); this module simulates
Application Auto Scaling's target tracking minute by minute over a week of mail, with the
rules AWS documents, so the figure comes from the template's target and a traffic profile
that is written down instead of from a guess.

Rules simulated (each with its page):

- Scale out when consumed / provisioned exceeds the target for 2 consecutive minutes, to
  consumed / target; scale in when it is 20 points or more below the target for 15
  consecutive minutes. "DynamoDB auto scaling increases provisioned capacity when
  utilization exceeds 70 RCUs for at least 2 consecutive minutes ... decreases provisioned
  capacity when utilization is 20% or more below the target for 15 consecutive minutes"
  (https://repost.aws/knowledge-center/dynamodb-auto-scaling; the mechanism:
  https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/AutoScaling.html).
- A change takes effect `LAG_MIN` minutes after the alarm (CloudWatch's one-minute
  metrics and the table update; "several minutes" on the same page): assumed 2.
- Decreases per UTC day: 4 at any time, then one more per hour in which none was made,
  27 at most ("Provisioned capacity decreases", Service, account, and table quotas:
  https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/ServiceQuotas.html).
- Burst capacity: up to 300 s of unused capacity is kept and spent above the provisioned
  rate ("Burst capacity",
  https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/burst-adaptive-capacity.html).
  What neither can take is throttled and done later (a queue retries: ingress answers 503,
  delivery and the events function retry), so it is carried over, never dropped.

The traffic profiles are the assumption left, and they are named: `flat`; `diurnal`
(weekday peak at 14:00 UTC four times the 02:00 trough, weekends at 60 %); `campaigns`
(diurnal, plus a bulk send of a weekday's tenth in one hour at 10:00, 2.4x the day's mean
rate on top); `bursty` (campaigns, plus three 20-minute bulk sends a day at seeded random
times, each 2 % of a day's mail: 1.4x the mean rate on top). The model prices provisioned
capacity at the use of `bursty`, the least favourable of them.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

MINUTES_PER_DAY = 1440
DAYS = 7
SCALE_OUT_MINUTES = 2
SCALE_IN_MINUTES = 15
SCALE_IN_MARGIN = 0.20  # points below the target
LAG_MIN = 2
DECREASES_AT_ANY_TIME = 4
DECREASES_PER_DAY = 27
BURST_SECONDS = 300


def _diurnal(minute: int) -> float:
    """Relative rate at a minute of the week: peak 14:00 UTC = 4x the 02:00 trough."""
    day, m = divmod(minute, MINUTES_PER_DAY)
    hour = m / 60.0
    shape = 1.0 + 0.6 * math.cos(2 * math.pi * (hour - 14.0) / 24.0)  # 1.6 / 0.4
    return shape * (0.6 if day >= 5 else 1.0)


def _campaigns(minute: int) -> float:
    day, m = divmod(minute, MINUTES_PER_DAY)
    extra = 0.0
    if day < 5 and 600 <= m < 660:  # a weekday's tenth of mail in one hour at 10:00
        extra = 0.1 * 24.0  # a tenth of a day's mean volume, sent in 1/24 of the day
    return _diurnal(minute) + extra


def _bursts() -> dict[int, float]:
    """Short bulk sends at seeded random times (derandomised: the same every run): three a
    day, each 20 minutes long and 2 % of a day's mean volume."""
    rng = random.Random(25)
    out: dict[int, float] = {}
    for day in range(DAYS):
        for _ in range(3):
            start = day * MINUTES_PER_DAY + rng.randrange(0, MINUTES_PER_DAY - 20)
            for m in range(start, start + 20):
                out[m] = out.get(m, 0.0) + 0.02 * MINUTES_PER_DAY / 20
    return out


_BURSTS = _bursts()


def _bursty(minute: int) -> float:
    return _campaigns(minute) + _BURSTS.get(minute, 0.0)


PROFILES: dict[str, Callable[[int], float]] = {
    "flat": lambda _m: 1.0,
    "diurnal": _diurnal,
    "campaigns": _campaigns,
    "bursty": _bursty,
}
PRICED_PROFILE = "bursty"


def demand(profile: str, mean_units_per_s: float) -> list[float]:
    """Units per second in each minute of a week, scaled to the given mean."""
    f = PROFILES[profile]
    raw = [f(m) for m in range(DAYS * MINUTES_PER_DAY)]
    k = mean_units_per_s / (sum(raw) / len(raw))
    return [x * k for x in raw]


@dataclass(frozen=True)
class Outcome:
    use: float  # consumed / provisioned over the week (what the bill divides by)
    throttled: float  # share of the demand refused at first and done later
    decreases: int  # scale-ins made (capped per day)
    increases: int
    peak_backlog_minutes: float  # the largest carried-over work, in minutes of mean demand
    demanded: float  # unit-seconds asked for over the week
    consumed: float  # unit-seconds served (demanded less what is still carried at the end)
    carried: float  # unit-seconds still throttled at the end


def simulate(
    load: list[float], *, target: float = 0.7, minimum: float = 1.0, maximum: float = 40_000.0
) -> Outcome:
    """Target tracking over `load` (units/s per minute), starting at the right capacity."""
    prov = min(maximum, max(minimum, load[0] / target))
    burst = 0.0  # unit-seconds saved from unused capacity (at most 300 s of it)
    backlog = 0.0  # unit-seconds throttled, carried to later minutes
    above = below = 0
    pending: list[tuple[int, float]] = []  # (minute it takes effect, new capacity)
    day_decreases = 0
    last_decrease = -10**9
    consumed_sum = prov_sum = throttled_sum = demand_sum = 0.0
    incs = decs = 0
    peak_backlog = 0.0
    mean = sum(load) / len(load) or 1.0
    for t, rate in enumerate(load):
        if t % MINUTES_PER_DAY == 0:
            day_decreases = 0
        while pending and pending[0][0] <= t:
            prov = pending.pop(0)[1]
        want = rate * 60.0 + backlog
        cap = prov * 60.0
        used = min(want, cap + burst)
        burst = min(prov * BURST_SECONDS, burst + max(0.0, cap - used) - max(0.0, used - cap))
        new_work = rate * 60.0
        refused = max(0.0, new_work - max(0.0, used - backlog))
        backlog = want - used
        peak_backlog = max(peak_backlog, backlog / 60.0 / mean)
        consumed_sum += used
        prov_sum += cap
        throttled_sum += refused
        demand_sum += new_work
        util = used / cap if cap else 0.0
        above = above + 1 if util > target else 0
        below = below + 1 if util < target - SCALE_IN_MARGIN else 0
        if pending:
            continue  # one change at a time: the alarm waits for the table update
        if above >= SCALE_OUT_MINUTES:
            # to what is consumed (CloudWatch sees no more than is served), at the target
            new = min(maximum, max(minimum, (used / 60.0) / target))
            if new > prov:
                pending.append((t + LAG_MIN, new))
                incs += 1
            above = 0
        elif below >= SCALE_IN_MINUTES:
            may = day_decreases < DECREASES_AT_ANY_TIME or (
                day_decreases < DECREASES_PER_DAY and t - last_decrease >= 60
            )
            new = max(minimum, (used / 60.0) / target)
            if may and new < prov:
                pending.append((t + LAG_MIN, new))
                day_decreases += 1
                last_decrease = t
                decs += 1
            below = 0
    return Outcome(
        use=consumed_sum / prov_sum if prov_sum else 0.0,
        throttled=throttled_sum / demand_sum if demand_sum else 0.0,
        decreases=decs,
        increases=incs,
        peak_backlog_minutes=peak_backlog,
        demanded=demand_sum,
        consumed=consumed_sum,
        carried=backlog,
    )


@lru_cache(maxsize=4096)
def average_use(
    mean_units_per_s: float,
    *,
    target: float = 0.7,
    minimum: float = 1.0,
    profile: str = PRICED_PROFILE,
) -> float:
    """The share of the provisioned capacity consumed over a week of `profile` (cached:
    the cost model asks for the same table at the same volume many times)."""
    return simulate(demand(profile, mean_units_per_s), target=target, minimum=minimum).use
