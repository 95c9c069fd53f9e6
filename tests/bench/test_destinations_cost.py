"""bench/destinations.py: the cost per million events to each destination kind, checked
against sums done by hand on a small price file, and on the shared one."""

from __future__ import annotations

from typing import Any

import pytest

from bench import destinations as d

PRICES: dict[str, Any] = {
    "sqs_standard": {"per_million_requests": 0.4},
    "lambda": {"per_million_requests": 0.2, "per_gb_second_arm64": 1e-5},
    "vpc_egress": {"data_transfer_out_per_gb_first_10tb": 0.1},
}


def test_costs_add_up_by_hand() -> None:
    rows = {r.kind: r for r in d.cost_rows(PRICES, 1000, send_ms=40)}
    # 10 events of 1,200 B: one chunk each for send and receive, plus the delete
    assert rows["webhook"].outbox_sqs == pytest.approx(3 / 10 * 0.4)
    # a batch: 0.2 $/M invocations + 0.25 GB x 10 x 0.04 s x 1e-5 $/GB-s, per 10 events
    assert rows["sns"].lambda_usd == pytest.approx((0.2 + 1e6 * 0.25 * 0.4 * 1e-5) / 10)
    assert rows["webhook"].destination == pytest.approx(1e6 * 1700 / 1e9 * 0.1)
    assert rows["webhook"].total == pytest.approx(0.12 + 0.12 + 0.17)
    # no EventBridge/SNS price in the file: reported as such, never guessed
    assert rows["eventbridge"].destination is None and rows["eventbridge"].total is None
    assert "not in the price file" in rows["sns"].note


def test_destination_prices_count_64_kb_chunks() -> None:
    priced = {
        **PRICES,
        "eventbridge": {"custom_events_per_million": 1.0},
        "sns_standard": {"publish_per_million": 0.5},
    }
    small = {r.kind: r for r in d.cost_rows(priced, 64 * 1024, 20)}
    big = {r.kind: r for r in d.cost_rows(priced, 64 * 1024 + 1, 20)}
    assert (small["eventbridge"].destination, big["eventbridge"].destination) == (1.0, 2.0)
    assert (small["sns"].destination, big["sns"].destination) == (0.5, 1.0)
    assert big["eventbridge"].total == pytest.approx(
        big["eventbridge"].outbox_sqs + big["eventbridge"].lambda_usd + 2.0
    )


def test_the_section_from_the_shared_prices() -> None:
    prices, source = d.load_prices()
    rows = {n: d.cost_rows(prices, n, 20) for n in (2000,)}
    lines = d.section(rows, source, 20)
    assert lines[0] == d.SECTION
    table = [line for line in lines if line.startswith("| 2,000 B")]
    assert [line.split(" | ")[1] for line in table] == list(d.KINDS)
    assert all(r.outbox_sqs > 0 and r.lambda_usd > 0 for r in rows[2000])
