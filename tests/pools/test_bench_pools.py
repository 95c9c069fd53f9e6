"""bench/pools.py's arithmetic, recomputed by hand for one pool from the price list."""

from __future__ import annotations

import math

from bench.pools import AZS, HOURS_PER_MONTH, load_prices, model, pool_cost, warmup_days


def test_pool_cost_items_recomputed_from_the_price_list() -> None:
    prices = load_prices()
    v = prices["vpc_egress"]
    p = pool_cost("bulk", 3500.0, 16_000.0, 50.0, prices)
    assert p.addresses == 70 and p.nat_gateways == 2 * math.ceil(70 / (2 * 8)) == 10
    assert math.isclose(p.items["NAT gateways (hours)"], 10 * 730 * v["nat_gateway_per_hour"])
    assert math.isclose(
        p.items["Elastic IPs (public IPv4 hours)"], 70 * 730 * v["elastic_ip_public_ipv4_per_hour"]
    )
    mails = 3500 * HOURS_PER_MONTH * 3600
    out_gb = mails * (16_000 + 1_500 + 2_000) / 1024**3
    assert math.isclose(p.items["data transfer out (GB)"], out_gb * 0.09)
    assert math.isclose(
        p.items["NAT processing (GB)"], (out_gb + mails * 6_000 / 1024**3) * 0.045
    )


def test_addresses_for_ten_thousand_a_second_and_the_warmup() -> None:
    pools = model(50.0, load_prices())
    assert sum(p.rate for p in pools) == 10_000
    assert sum(p.addresses for p in pools) == 200  # 6,500/50 + 3,500/50
    assert all(p.nat_gateways % AZS == 0 for p in pools)
    assert warmup_days(50_000 / 86400) == 45  # the ramp's end is SES's 50,000 a day
    assert warmup_days(200 / 86400) == 1
    # 4.32 M a day: 50,000 doubled 7 times (6.4 M) = 45 + 7 x 3 days
    assert warmup_days(50.0) == 45 + 7 * 3
