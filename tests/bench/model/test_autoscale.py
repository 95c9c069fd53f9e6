"""The auto scaling simulation that gives provisioned capacity its price (bench/model/autoscale.py).

Each test checks one documented rule against a load made for it, or an invariant of the
simulation (work is conserved: what is throttled is done later, never dropped).
"""

from __future__ import annotations

import pytest

from bench.model import autoscale as a
from bench.model.assumptions import ASSUMPTIONS
from bench.model.template import Template

WEEK = a.DAYS * a.MINUTES_PER_DAY


def test_a_steady_load_is_used_at_the_target() -> None:
    o = a.simulate([100.0] * WEEK, target=0.7, minimum=10)
    assert o.use == pytest.approx(0.7, abs=1e-9)
    assert (o.increases, o.decreases, o.throttled) == (0, 0, 0.0)


def test_the_minimum_bounds_the_use_of_a_small_load() -> None:
    o = a.simulate([2.0] * WEEK, target=0.7, minimum=10)
    assert o.use == pytest.approx(0.2)


def test_a_step_up_is_served_from_burst_then_scaled_out_within_the_documented_minutes() -> None:
    load = [100.0] * 600 + [300.0] * (WEEK - 600)
    o = a.simulate(load, target=0.7, minimum=10)
    assert o.increases >= 1
    # 300/s against 143 provisioned: 300 s of burst (43,000 unit-s) lasts 4.6 minutes,
    # the scale-out lands after 2 minutes above the target and 2 of lag: nothing refused
    assert o.throttled == 0.0
    assert o.use == pytest.approx(0.7, abs=0.01)


def test_a_spike_beyond_burst_is_throttled_and_carried_never_dropped() -> None:
    load = [100.0] * 600 + [2000.0] * 10 + [100.0] * (WEEK - 610)
    o = a.simulate(load, target=0.7, minimum=10)
    assert o.throttled > 0.0
    assert o.peak_backlog_minutes > 1.0
    assert o.consumed + o.carried == pytest.approx(o.demanded)
    assert o.carried == pytest.approx(0.0, abs=1e-6)  # done before the week ends


def test_scale_in_waits_15_minutes_and_keeps_the_daily_quota() -> None:
    # 10 minutes high, 20 low, all week: 48 low spells of 20 minutes a day, each long
    # enough (15 minutes below the target less 20 points) for a scale-in
    load = [(400.0 if m % 30 < 10 else 50.0) for m in range(WEEK)]
    o = a.simulate(load, target=0.7, minimum=10)
    per_day = o.decreases / a.DAYS
    assert a.DECREASES_AT_ANY_TIME < per_day <= a.DECREASES_PER_DAY < 48
    assert o.use < 0.5  # capacity stays up through most low spells
    # low spells of 14 minutes never scale in
    short = [(400.0 if m % 24 < 10 else 50.0) for m in range(WEEK)]
    assert a.simulate(short, target=0.7, minimum=10).decreases == 0


def test_a_day_curve_leaves_the_use_below_the_target() -> None:
    for profile in ("diurnal", "campaigns", "bursty"):
        use = a.average_use(150.0, target=0.7, minimum=10, profile=profile)
        assert 0.5 < use < 0.7, (profile, use)
    assert a.average_use(150.0, profile="bursty") < a.average_use(150.0, profile="diurnal")


def test_the_cost_model_prices_provisioned_capacity_at_the_simulated_use() -> None:
    tpl = Template.load()
    assert tpl.state_use is None and tpl.state_target == pytest.approx(0.7)
    assert ASSUMPTIONS["provisioned_traffic_profile"] == a.PRICED_PROFILE
