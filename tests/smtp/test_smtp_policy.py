"""Retry schedule and reply classification (mailqueue.core.policy): examples and properties."""

from __future__ import annotations

import math
from datetime import timedelta

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from mailqueue.core.policy import (
    DIAGNOSTIC_LIMIT,
    MAX_DELAY_SECONDS,
    MAX_VISIBILITY_TIMEOUT,
    RetryPolicy,
    backoff,
    classify,
    clean_text,
    default_status,
    delay_warning_due,
    dns_null_mx,
    dns_nxdomain,
    dns_temporary,
    expired,
    local_result,
    parse_enhanced_status,
    visibility_hops,
)

P = RetryPolicy()
MIN = timedelta(minutes=5)
MAX = timedelta(hours=4)

# ------------------------------------------------------------------ backoff


def test_backoff_doubles_from_five_minutes_up_to_four_hours() -> None:
    delays = [backoff(n, timedelta(0), P) for n in range(1, 10)]
    assert delays[:7] == [timedelta(minutes=m) for m in (5, 10, 20, 40, 80, 160)] + [MAX]
    assert delays[7:] == [MAX, MAX]
    assert backoff(0, timedelta(0), P) == MIN  # "no attempt yet" counts as the first


def test_backoff_gives_up_when_next_attempt_passes_lifetime() -> None:
    lifetime = P.maximal_queue_lifetime
    assert backoff(20, lifetime - MAX, P) == MAX  # lands exactly on the lifetime: allowed
    assert backoff(20, lifetime - MAX + timedelta(seconds=1), P) is None
    assert backoff(1, lifetime, P) is None
    assert backoff(1, timedelta(seconds=-30), P) == MIN  # clock skew counts as zero age


def test_backoff_rejects_negative_attempts() -> None:
    with pytest.raises(ValueError):
        backoff(-1, timedelta(0), P)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"minimal_backoff": timedelta(0)},
        {"maximal_backoff": timedelta(minutes=1)},
        {"maximal_queue_lifetime": timedelta(days=14)},
        {"maximal_queue_lifetime": timedelta(0)},
        {"maximal_queue_lifetime": timedelta(hours=1)},
        {"multiplier": 0.5},
        {"multiplier": math.inf},
        {"delay_warning": timedelta(days=6)},
        {"delay_warning": timedelta(0)},
    ],
)
def test_retry_policy_validation(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        RetryPolicy(**kwargs)  # type: ignore[arg-type]


def test_retry_policy_accepts_lifetime_just_under_sqs_retention() -> None:
    RetryPolicy(maximal_queue_lifetime=timedelta(days=13, hours=23))


def test_delay_warning() -> None:
    p = RetryPolicy(delay_warning=timedelta(hours=4))
    assert not delay_warning_due(timedelta(hours=3), p, False)
    assert delay_warning_due(timedelta(hours=4), p, False)
    assert not delay_warning_due(timedelta(hours=5), p, True)
    assert not delay_warning_due(timedelta(days=4), P, False)  # off by default


policies = st.builds(
    RetryPolicy,
    minimal_backoff=st.integers(1, 3600).map(lambda s: timedelta(seconds=s)),
    maximal_backoff=st.integers(3600, 86400).map(lambda s: timedelta(seconds=s)),
    maximal_queue_lifetime=st.integers(2, 13).map(lambda d: timedelta(days=d)),
    multiplier=st.floats(1.0, 10.0),
)
ages = st.integers(0, 14 * 86400).map(lambda s: timedelta(seconds=s))


@settings(max_examples=300)
@given(policies, st.integers(0, 10_000), ages)
@example(  # a slow multiplier past 200 attempts: the exponent must not be truncated
    RetryPolicy(
        minimal_backoff=timedelta(seconds=1),
        maximal_backoff=timedelta(seconds=3600),
        maximal_queue_lifetime=timedelta(days=2),
        multiplier=1.03125,
    ),
    202,
    timedelta(0),
)
def test_backoff_bounds_and_expiry(p: RetryPolicy, attempts: int, age: timedelta) -> None:
    delay = backoff(attempts, age, p)
    exponent = max(attempts, 1) - 1
    # beyond e**50 the cap has long won; avoid float overflow without truncating the exponent
    growth = p.multiplier**exponent if exponent * math.log(p.multiplier) < 50 else math.inf
    uncapped = p.minimal_backoff.total_seconds() * growth
    expected = timedelta(seconds=min(uncapped, p.maximal_backoff.total_seconds()))
    if age + expected > p.maximal_queue_lifetime:
        assert delay is None
    else:
        assert delay is not None
        assert p.minimal_backoff <= delay <= p.maximal_backoff
        assert abs((delay - expected).total_seconds()) < 1e-3


@settings(max_examples=300)
@given(policies, st.integers(1, 500), st.integers(1, 500), ages)
def test_backoff_is_monotonic_in_attempts(p: RetryPolicy, a: int, b: int, age: timedelta) -> None:
    lo, hi = sorted((a, b))
    d_lo, d_hi = backoff(lo, timedelta(0), p), backoff(hi, timedelta(0), p)
    assert d_lo is not None and d_hi is not None
    assert d_lo <= d_hi
    # Once a mail must bounce, more attempts or more age never revive it.
    if backoff(lo, age, p) is None:
        assert backoff(hi, age, p) is None
        assert backoff(lo, age + timedelta(hours=1), p) is None


# ------------------------------------------------------------------ SQS hops


def test_visibility_hops_examples() -> None:
    assert visibility_hops(timedelta(0)) == []
    assert visibility_hops(timedelta(seconds=-5)) == []
    assert visibility_hops(timedelta(seconds=0.2)) == [1]  # rounded up, never early
    assert visibility_hops(timedelta(hours=4)) == [14400]
    assert visibility_hops(timedelta(hours=12)) == [MAX_VISIBILITY_TIMEOUT]
    assert visibility_hops(timedelta(hours=30)) == [43200, 43200, 21600]
    assert visibility_hops(timedelta(minutes=40), max_hop=MAX_DELAY_SECONDS) == [900, 900, 600]
    with pytest.raises(ValueError):
        visibility_hops(timedelta(hours=1), max_hop=0)


@given(st.floats(-10, 30 * 86400, allow_nan=False), st.sampled_from([900, 43200, 7]))
def test_visibility_hops_cover_the_delay(seconds: float, max_hop: int) -> None:
    hops = visibility_hops(timedelta(seconds=seconds), max_hop=max_hop)
    total = math.ceil(timedelta(seconds=seconds).total_seconds())
    assert sum(hops) == max(total, 0)
    assert all(1 <= h <= max_hop for h in hops)
    assert len(hops) == (math.ceil(total / max_hop) if total > 0 else 0)


# ------------------------------------------------------------------ classification


@pytest.mark.parametrize(
    ("code", "text", "status", "permanent"),
    [
        (250, "2.1.5 Ok", "2.1.5", False),
        (250, "Ok", "2.0.0", False),
        (550, "5.1.1 <bob@example.org>: Recipient address rejected", "5.1.1", True),
        (550, "No such user", "5.0.0", True),
        (450, "4.2.0 greylisted", "4.2.0", False),
        (452, "Too many recipients", "4.0.0", False),
        (421, "mx.example closing connection", "4.0.0", False),  # Postfix: no 421 special
        (421, "4.7.0 Try again later", "4.7.0", False),
        (550, "4.2.2 mailbox full", "5.0.0", True),  # class mismatch: ignored (Postfix)
        (450, "5.1.1 nope", "4.0.0", False),
        (552, "5.3.4 Message too big", "5.3.4", True),
        (554, "5.7.1 Service unavailable; client blocked", "5.7.1", True),
        (550, "5.1.10 null MX", "5.1.10", True),
        (550, "5.01.001 leading zeros", "5.1.1", True),
        (550, "5.1.1234 too long detail", "5.0.0", True),
        (550, "5.1.1Joined", "5.0.0", True),
        (354, "go ahead", "5.5.0", True),  # out of protocol
        (-1, "garbage", "5.5.0", True),
        (999, "what", "5.5.0", True),
    ],
)
def test_classify_examples(code: int, text: str, status: str, permanent: bool) -> None:
    r = classify(code, text, "mx.example")
    assert (r.code, r.status, r.permanent, r.remote_mta) == (code, status, permanent, "mx.example")


def test_classify_multiline_reads_first_line_and_flattens() -> None:
    text = "5.7.1 Message rejected\r\n5.7.1 see https://example.org/why\nbye"
    r = classify(550, text)
    assert r.status == "5.7.1"
    assert r.text == "5.7.1 Message rejected 5.7.1 see https://example.org/why bye"


def test_clean_text_truncates_and_strips_controls() -> None:
    assert clean_text("a\r\nb\x00c\td") == "a b c d"
    long = clean_text("x" * 2000)
    assert len(long) == DIAGNOSTIC_LIMIT and long.endswith("...")


def test_local_results() -> None:
    assert dns_nxdomain("nx.example").status == "5.1.2"
    assert dns_null_mx("null.example").status == "5.1.10"
    assert dns_temporary("x.example", "MX", "timeout").status == "4.4.3"
    assert not dns_temporary("x.example", "MX", "timeout").permanent
    with pytest.raises(ValueError):
        local_result("4.4", "not a status")
    last = local_result("4.4.1", "connect to mx[192.0.2.1]:25: Connection refused", "mx")
    e = expired(last, timedelta(days=5))
    assert e.status == "4.4.7" and "Connection refused" in e.text and e.remote_mta == "mx"


codes = st.integers(200, 599).filter(lambda c: c // 100 in (2, 4, 5))
statuses = st.tuples(st.sampled_from("245"), st.integers(0, 999), st.integers(0, 999))


@settings(max_examples=500)
@given(codes, statuses, st.text())
def test_classify_uses_enhanced_status_when_class_matches(
    code: int, status: tuple[str, int, int], rest: str
) -> None:
    cls, subject, detail = status
    text = f"{cls}.{subject}.{detail} {rest}"
    r = classify(code, text)
    if cls == str(code)[0]:
        assert r.status == f"{cls}.{subject}.{detail}"
    else:
        assert r.status == f"{str(code)[0]}.0.0"
    assert r.permanent == (code >= 500)
    assert r.success == (code < 300)


@settings(max_examples=500)
@given(st.integers(-1000, 1000), st.text())
def test_classify_is_total_and_safe(code: int, text: str) -> None:
    r = classify(code, text)
    assert r.code == code
    assert parse_enhanced_status(r.status) == r.status
    assert r.status[0] in "245"
    assert r.status[0] == default_status(code)[0]
    assert len(r.text) <= DIAGNOSTIC_LIMIT
    assert "\r" not in r.text and "\n" not in r.text


@given(st.text(alphabet=st.characters(blacklist_categories=("Nd",)), max_size=30))
def test_no_enhanced_status_without_digits(text: str) -> None:
    assert parse_enhanced_status(text) is None
    assert classify(451, text).status == "4.0.0"
