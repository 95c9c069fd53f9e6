"""bench/model/limits.py: every limit at 10,000 mails/s, on synthetic per-mail loads shaped
like the measured mix's (docs/benchmarks.md), so each row's arithmetic is checked."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest

from bench.model import limits, scale

#: per mail of a mix like the measured one: ~6 table and ~2.2 index write units, the
#: sharded index spread, delivery 20 ms of work and one SMTP transaction a mail
PROFILE = scale.Profile(
    key_wru={("by_state", "queued#*"): 0.03},
    target_wru={"table": 5.9, "by_state": 2.2},
    target_rru={"table": 0.6},
    fn_seconds={"ingress": 0.06, "delivery": 0.02, "events": 0.05},
    delivery_records=1.0,
    smtp_transactions=1.0,
    sends={"mailqueue-delivery": 1.0},
    s3_put={"content/*/": 0.002},
    api_requests=1.0,
)
#: the events writer: 2.7 records a mail, 2 ms CPU a record on a core, 25 ms a batch
STREAM = limits.StreamCost(
    records_per_mail=2.7,
    cpu_s_per_record=0.002,
    fixed_s_per_batch=0.025,
    table_wru_per_mail=5.9,
    table_rru_per_mail=0.6,
)
SIZE = 12.5 * 1024


def _by(rows: list[limits.Row], start: str) -> list[limits.Row]:
    return [r for r in rows if r.limit.startswith(start)]


@pytest.fixture(scope="module")
def deployments() -> dict[str, limits.Deployment]:
    return {
        "default relay": limits.default_deployment(egress="relay", smtp_parallel=10),
        "default direct": limits.default_deployment(egress="direct", smtp_parallel=10),
        "named relay": limits.named_deployment("relay", smtp_parallel=10),
        "named direct": limits.named_deployment("direct", smtp_parallel=10),
    }


def test_limits_rows_name_every_limit_with_its_page(
    deployments: dict[str, limits.Deployment],
) -> None:
    direct = limits.rows(PROFILE, STREAM, deployments["named direct"], SIZE)
    relay = limits.rows(PROFILE, STREAM, deployments["named relay"], SIZE)
    for start in (
        "DynamoDB stream",
        "SMTP front door",
        "VPC resolver",
        "NAT gateway bandwidth",
        "NAT gateway packets",
        "NAT gateway connections",
        "receivers' acceptance per sending IP",
        "site limiter writes per shard item",
        "shaping cap per site",
        "DynamoDB table quota",
        "DynamoDB writes per partition key value",
        "Lambda concurrent executions",
        "SQS event source MaximumConcurrency",
        "SQS in-flight",
        "S3 PUT",
        "API Gateway",
    ):
        assert _by(direct, start), start
    assert _by(relay, "SES sending rate") and not _by(direct, "SES sending rate")
    assert not _by(relay, "VPC resolver")  # relay mode: delivery outside any VPC
    assert all(r.doc for r in direct + relay)


def test_limits_dns_row_is_queries_a_mail_times_rate_over_interfaces(
    tmp_path: Path, deployments: dict[str, limits.Deployment]
) -> None:
    # the warm row alone (the steady-state row is the next test's)
    d = replace(deployments["named direct"], dns_queries_per_mail=3.0, dns_steady={})
    (row,) = _by(limits.rows(PROFILE, STREAM, d, SIZE), "VPC resolver")
    assert row.need == pytest.approx(3.0 * limits.TARGET / d.nat_gateways)
    assert row.capacity == 1024 and not row.adjustable
    # uncached: 30,000 packets/s, too many even over the named 20 interfaces
    assert row.use == pytest.approx(3.0 * limits.TARGET / d.nat_gateways / 1024) and row.use > 1
    # the measured figure replaces the uncached one when its file exists
    f = tmp_path / "dns.json"
    assert limits.dns_queries_per_mail(f) == (3.0, limits.dns_queries_per_mail(f)[1])
    f.write_text(json.dumps({"warm_queries_per_mail": 0.08}))
    q, src = limits.dns_queries_per_mail(f)
    assert q == 0.08 and "measured" in src
    warm = replace(d, dns_queries_per_mail=q)
    (row,) = _by(limits.rows(PROFILE, STREAM, warm, SIZE), "VPC resolver")
    assert row.use == pytest.approx(0.08 * 10_000 / d.nat_gateways / 1024)


def test_limits_site_row_spreads_a_site_over_its_shards() -> None:
    assert [limits.site_shards(r) for r in (8.3, 50, 200, 201, 3900, 7800, 20_000)] == [
        1,
        1,
        1,
        2,
        20,
        39,
        64,
    ]
    d = limits.named_deployment("direct")
    rows = limits.rows(PROFILE, STREAM, d, SIZE)
    google = next(r for r in _by(rows, "site limiter") if r.scope.startswith("google"))
    share = limits.ASSUMPTIONS["site_shares"]["google"]
    configured = share * limits.TARGET / limits.HEADROOM  # raised to carry it at 50 %
    n = limits.site_shards(configured)
    assert google.need == pytest.approx(share * limits.TARGET * limits.LIMITER_WRITES_PER_MAIL / n)
    assert google.capacity == 1000 and google.use < 0.5
    # one item (the layout before the shards) would be over its key value's 1,000 WCU
    assert share * limits.TARGET * limits.LIMITER_WRITES_PER_MAIL > 1000
    # shaping off (the default template): no limiter writes, no cap applied
    off = limits.rows(PROFILE, STREAM, limits.default_deployment(egress="direct"), SIZE)
    assert all(r.need == 0 for r in _by(off, "site limiter") + _by(off, "shaping cap"))


def test_limits_packaged_shaping_caps_are_shown_with_their_warm_up() -> None:
    rates = limits.packaged_site_rates()
    assert rates["google"] == 50 and rates["yahoo"] == 20
    assert rates["microsoft"] == pytest.approx(30_000 / 3600)  # its hourly rate binds
    d = replace(limits.default_deployment(egress="direct"), shaping=True)
    caps = _by(limits.rows(PROFILE, STREAM, d, SIZE), "shaping cap")
    google = next(r for r in caps if r.scope.startswith("google"))
    assert google.capacity == 50 and google.use == pytest.approx(0.39 * 10_000 / 50)
    # 50/s -> 7,800/s: 8 doublings at one per 2 days
    assert "8 doublings" in google.note and "16 days" in google.note


def test_limits_stream_needs_shards_times_factor_of_its_concurrency() -> None:
    d = limits.default_deployment(egress="relay")
    slow = replace(d, events_memory_mb=128)
    need, cap = limits.stream_concurrency(STREAM, slow, limits.TARGET)
    # 2.7 records x 2 ms x 1769/128 ~ 75 ms a mail: ~750 batches at once at 10,000/s
    assert need == pytest.approx(2.7 * 0.002 * 1769 / 128 * 1e4, rel=0.05)
    assert cap == pytest.approx(5.9 * 10_000 / 1000)  # the table split by its traffic
    assert limits.parallelization_needed(STREAM, slow) == limits.PARALLELIZATION_MAX
    fast = replace(d, events_memory_mb=1769, warm_partitions=140)
    need, cap = limits.stream_concurrency(STREAM, fast, limits.TARGET)
    assert need == pytest.approx(2.7 * 0.002 * 1e4, rel=0.05) and cap == 140
    assert limits.parallelization_needed(STREAM, fast) == 1
    # batches: what one shard's batch gathers in the window, at most BatchSize
    assert limits.stream_batch(STREAM, fast, limits.TARGET) == 1000
    assert limits.stream_batch(STREAM, fast, 1.0) == pytest.approx(2.7 / 140 * 60)


def test_limits_named_settings_keep_every_limit_under_half_and_default_lists_increases(
    deployments: dict[str, limits.Deployment],
) -> None:
    per = {k: limits.rows(PROFILE, STREAM, d, SIZE) for k, d in deployments.items()}
    assert limits.over(per["named relay"]) == []
    # direct mode: 20 NAT gateways of 8 addresses in the operator's network, one subnet
    # each over two egress pools (a function takes at most 16 subnets)
    assert limits.over(per["named direct"]) == [], limits.over(per["named direct"])
    d = deployments["named direct"]
    assert d.sending_ips == 160 and d.nat_gateways <= 2 * 16
    inc = limits.increases(per["default relay"])
    assert any(x.startswith("SES sending rate") for x in inc)
    assert any(x.startswith("SMTP front door") for x in inc)
    b = limits.binding(per["default relay"])
    assert b.use == max(r.use for r in per["default relay"]) and b.use > 1
    lines = limits.report(PROFILE, STREAM, SIZE, list(deployments.values()))
    text = "\n".join(lines)
    for name in (
        "VPC resolver",
        "site limiter",
        "DynamoDB stream",
        "SES sending rate",
        "SMTP front door",
    ):
        assert name in text
    assert "binds first" in text and math.isfinite(len(lines))


def test_limits_dns_steady_state_row_reads_queries_at_a_containers_rate(tmp_path: Path) -> None:
    """Past the TTLs a container renews its names: the DNS bench's steady figure at the
    deployment's mails/s a delivery container (fewer containers, more reuse)."""
    f = tmp_path / "dns.json"
    assert limits.dns_steady(f) == {}
    f.write_text(
        json.dumps(
            {"steady_queries_per_mail_by_container_rate": {"5": 0.76, "10": 0.53, "20": 0.34}}
        )
    )
    table = limits.dns_steady(f)
    assert limits.steady_at(table, 10) == pytest.approx(0.53)
    assert limits.steady_at(table, 1) == 0.76 and limits.steady_at(table, 99) == 0.34
    assert 0.34 < limits.steady_at(table, 14) < 0.53
    d = replace(limits.named_deployment("direct", smtp_parallel=10), dns_steady=table)
    rows = limits.rows(PROFILE, STREAM, d, SIZE)
    (row,) = _by(rows, "VPC resolver packets/s per network interface, steady")
    conc = next(r.need for r in rows if r.limit.startswith("SQS event source"))
    q = limits.steady_at(table, limits.TARGET / conc)
    assert row.need == pytest.approx(q * limits.TARGET / d.nat_gateways)
