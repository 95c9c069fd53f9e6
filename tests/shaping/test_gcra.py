"""Pure shaping decisions, property-tested: GCRA bounds, exact waits, slots, scaling."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from mailqueue.outbound.shaping import (
    BackoffRule,
    Limits,
    Rate,
    SiteState,
    admit,
    apply_action,
    effective_scale,
    gcra,
    release_slot,
)

intervals = st.floats(min_value=0.01, max_value=10.0)
bursts = st.integers(min_value=1, max_value=20)
requests = st.lists(
    st.tuples(st.floats(min_value=0.0, max_value=5.0), st.integers(min_value=1, max_value=5)),
    min_size=1,
    max_size=60,
)


@given(intervals, bursts, requests)
def test_gcra_never_grants_more_than_burst_plus_span_over_interval(
    interval: float, burst: int, reqs: list[tuple[float, int]]
) -> None:
    tat, now = 0.0, 1.8e9  # epoch seconds, as in production (float rounding)
    granted: list[tuple[float, int]] = []
    for dt, n in reqs:
        now += dt
        ok, tat, wait = gcra(tat, now, n, interval, burst)
        if ok:
            granted.append((now, n))
            assert wait == 0.0
        else:
            assert wait > 0
    for i, (ti, _) in enumerate(granted):
        total = 0
        for tj, nj in granted[i:]:
            total += nj
            assert total <= burst + (tj - ti) / interval + 1e-4


@given(intervals, bursts, st.floats(min_value=0.0, max_value=50.0), st.integers(1, 5))
def test_a_refusal_says_exactly_how_long_to_wait(
    interval: float, burst: int, ahead: float, n: int
) -> None:
    now = 1.8e9
    tat = now + ahead
    ok, _, wait = gcra(tat, now, n, interval, burst)
    if n > burst:
        assert not ok
        return
    if ok:
        return
    assert gcra(tat, now + wait, n, interval, burst)[0]
    assert not gcra(tat, now + wait * 0.99 - 1e-6, n, interval, burst)[0]


@given(bursts, st.integers(1, 100))
def test_a_full_burst_is_granted_at_once_from_rest(burst: int, messages: int) -> None:
    interval = 1.0 / messages
    assert gcra(0.0, 1.8e9, burst, interval, burst)[0]
    assert not gcra(0.0, 1.8e9, burst + 1, interval, burst)[0]


LIM = Limits(max_connections=2, rates=(Rate(10, 1.0, 3),), recover_after=60, recover_step=2)


@given(st.lists(st.sampled_from(["a", "b", "c", "d"]), min_size=1, max_size=30))
def test_connection_slots_never_exceed_the_limit(holders: list[str]) -> None:
    state, now = SiteState(), 10.0
    for h in holders:
        now += 0.5
        a = admit(state, now, LIM, holder=h, tokens=0, slot_lease=3.0, need_slot=True)
        if a.allowed:
            state = a.state
        else:
            assert a.reason in ("connections", "rate") and a.wait > 0
        live = [t for t in state.slots.values() if t > now]
        assert len(live) <= 2


def test_a_dead_workers_slot_expires_and_a_released_one_is_free_at_once() -> None:
    s = admit(SiteState(), 0, LIM, holder="a", tokens=1, slot_lease=30, need_slot=True).state
    s = admit(s, 0, LIM, holder="b", tokens=1, slot_lease=30, need_slot=True).state
    refused = admit(s, 1, LIM, holder="c", tokens=1, slot_lease=30, need_slot=True)
    assert not refused.allowed and refused.reason == "connections"
    assert admit(s, 31, LIM, holder="c", tokens=1, slot_lease=30, need_slot=True).allowed
    freed = release_slot(s, 1, "a")
    assert admit(freed, 1, LIM, holder="c", tokens=1, slot_lease=30, need_slot=True).allowed


@given(st.floats(min_value=0.05, max_value=1.0), st.floats(min_value=0, max_value=1000))
def test_scale_recovers_stepwise_and_never_above_one(scale: float, later: float) -> None:
    state = SiteState(scale=scale, scaled_at=0.0)
    now_scale, stepped_at = effective_scale(state, later, LIM)
    steps = int(later // 60)
    assert now_scale == min(1.0, scale * 2**steps) or scale >= 1.0
    assert now_scale <= 1.0 and stepped_at <= later


def test_slowdown_halves_the_rate_and_suspension_refuses_until_it_ends() -> None:
    slow = BackoffRule("r", (), (421,), None, None, slowdown=0.5)
    sus = BackoffRule("s", (), (421,), None, None, suspend=120)
    s = apply_action(SiteState(), 0, LIM, slow)
    assert s.scale == 0.5
    # at half rate the burst is halved too (3 -> 1: a block of at most 1 token), then one
    # token per 0.2 s instead of 0.1 s
    a = admit(s, 0, LIM, holder="a", tokens=3, slot_lease=30, need_slot=False)
    b = admit(a.state, 0.1, LIM, holder="a", tokens=1, slot_lease=30, need_slot=False)
    assert a.allowed and a.tokens == 1 and not b.allowed and abs(b.wait - 0.1) < 1e-6
    s = apply_action(s, 0, LIM, sus)
    r = admit(s, 60, LIM, holder="a", tokens=1, slot_lease=30, need_slot=False)
    assert not r.allowed and r.reason == "suspended" and r.wait == 60
    assert admit(s, 121, LIM, holder="a", tokens=1, slot_lease=30, need_slot=False).allowed


@given(
    st.integers(1, 50),
    st.integers(1, 40),
    st.floats(min_value=0.05, max_value=1.0),
    st.integers(1, 20),
)
def test_a_slowed_down_site_from_rest_grants_no_more_than_its_scaled_burst(
    messages: int, burst: int, scale: float, ask: int
) -> None:
    """After a suspension the bucket is full: what leaves at once is the burst scaled
    down with the rate (at least one), never the configured burst."""
    lim = Limits(rates=(Rate(messages, 1.0, burst),), recover_after=3600)
    state, now, granted = SiteState(scale=scale, scaled_at=1e9), 1e9 + 1, 0
    for _ in range(burst + 2):
        a = admit(state, now, lim, holder="a", tokens=ask, slot_lease=30, need_slot=False)
        if not a.allowed:
            break
        granted += a.tokens
        state = a.state
    assert 1 <= granted <= max(1, int(burst * scale + 1e-6))
