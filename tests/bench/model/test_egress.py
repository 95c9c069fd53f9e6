"""bench/model/egress.py (NAT and data transfer): each item recomputed from the price list."""

from __future__ import annotations

import pytest

from bench.model.egress import (
    API_BYTES_PER_MAIL,
    GB,
    HOURS_PER_MONTH,
    SES_PER_GB_DEFAULT,
    SMTP_OVERHEAD_IN,
    SMTP_OVERHEAD_OUT,
    break_even_mails,
    direct_cost,
    egress_table,
    load_prices,
    markdown_section,
    ses_relay_cost,
)

PRICES = load_prices()
V = PRICES["vpc_egress"]


def test_price_list_has_the_egress_prices() -> None:
    assert V["nat_gateway_per_hour"] > 0 and V["data_transfer_out_per_gb_first_10tb"] > 0
    assert PRICES["ses_for_comparison"]["outbound_per_1000_recipients_a_la_carte"] > 0


@pytest.mark.parametrize("nats", [1, 2, 3])
def test_direct_fixed_part_is_nat_and_ip_hours(nats: int) -> None:
    c = direct_cost(0, 50_000, PRICES, nat_gateways=nats)
    hourly = V["nat_gateway_per_hour"] + V["elastic_ip_public_ipv4_per_hour"]
    assert c.total == pytest.approx(nats * 730 * hourly)
    assert HOURS_PER_MONTH == 730


def test_direct_variable_part_by_hand() -> None:
    mails, size = 3_000_000, 100 * 1024
    c = direct_cost(mails, size, PRICES, nat_gateways=2)
    out_gb = mails * (size + SMTP_OVERHEAD_OUT) / GB
    nat_gb = out_gb + mails * (SMTP_OVERHEAD_IN + API_BYTES_PER_MAIL) / GB
    assert c.items["data transfer out"] == pytest.approx(out_gb * 0.09)
    assert c.items["NAT processing"] == pytest.approx(nat_gb * 0.045)
    # 286 GiB of mail plus 4 GiB of SMTP/TLS: $26.1 out, on top of the fixed $73
    assert 26.0 < c.items["data transfer out"] < 26.3
    assert c.total == pytest.approx(2 * 730 * 0.05 + out_gb * 0.09 + nat_gb * 0.045)


def test_interface_endpoints_trade_hours_for_nat_processing() -> None:
    plain = direct_cost(10_000_000, 10 * 1024, PRICES)
    ends = direct_cost(10_000_000, 10 * 1024, PRICES, interface_endpoints=True)
    api_gb = 10_000_000 * API_BYTES_PER_MAIL / GB
    assert plain.items["NAT processing"] - ends.items["NAT processing"] == pytest.approx(
        api_gb * V["nat_gateway_per_gb_processed"]
    )
    endpoint = ends.items["interface endpoints (SQS, Secrets Manager)"]
    # two services × two AZs × 730 h
    assert endpoint == pytest.approx(2 * 2 * 730 * 0.01 + api_gb * 0.01)
    assert ends.total > plain.total  # at this volume the endpoints do not pay for themselves
    three = direct_cost(0, 1, PRICES, nat_gateways=3, interface_endpoints=True)
    assert three.items["interface endpoints (SQS, Secrets Manager)"] == pytest.approx(
        2 * 3 * 730 * 0.01
    )


def test_ses_relay_by_hand_and_overridable_per_gb() -> None:
    c = ses_relay_cost(1_000_000, 10 * 1024, PRICES)
    assert c.items["SES per recipient"] == pytest.approx(100.0)
    assert c.items["SES per GB"] == pytest.approx(1_000_000 * 10 * 1024 / GB * SES_PER_GB_DEFAULT)
    two = ses_relay_cost(1_000_000, 10 * 1024, PRICES, recipients_per_mail=2)
    assert two.total == pytest.approx(2 * c.total)
    cheaper = {
        **PRICES,
        "ses_for_comparison": {**PRICES["ses_for_comparison"], "outbound_per_gb": 0},
    }
    assert ses_relay_cost(1_000_000, 10 * 1024, cheaper).items["SES per GB"] == 0


def test_costs_scale_linearly_above_the_fixed_part() -> None:
    fixed = direct_cost(0, 20_000, PRICES).total
    one = direct_cost(1_000_000, 20_000, PRICES).total - fixed
    hundred = direct_cost(100_000_000, 20_000, PRICES).total - fixed
    assert hundred == pytest.approx(100 * one)
    assert ses_relay_cost(100_000_000, 20_000, PRICES).total == pytest.approx(
        100 * ses_relay_cost(1_000_000, 20_000, PRICES).total
    )


@pytest.mark.parametrize("size", [1024, 10 * 1024, 100 * 1024])
def test_break_even_is_where_the_lines_cross(size: int) -> None:
    n = break_even_mails(size, PRICES)
    assert direct_cost(n, size, PRICES).total < ses_relay_cost(n, size, PRICES).total
    below = n - max(1, n // 100)
    assert direct_cost(below, size, PRICES).total > ses_relay_cost(below, size, PRICES).total


def test_table_covers_1_10_100_million_and_direct_wins_at_scale() -> None:
    rows = egress_table(10 * 1024, PRICES)
    assert [n for n, *_ in rows] == [1_000_000, 10_000_000, 100_000_000]
    for _, direct, with_endpoints, ses in rows[1:]:
        assert direct.total < with_endpoints.total < ses.total
    lines = markdown_section(PRICES)
    table = [line for line in lines if line.startswith("| ") and "KB" in line]
    assert len(table) == 6
    assert any("break" in line or "costs less above" in line for line in lines)


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError):
        direct_cost(1, 1, PRICES, nat_gateways=4)
    with pytest.raises(ValueError):
        ses_relay_cost(-1, 1, PRICES)
