"""X-Ray: traces recorded at Lambda's default sampling (1/s, then 5 %) when tracing is on."""

from __future__ import annotations

from bench.model.month import Month
from bench.model.prices import PRICES, SECONDS_PER_MONTH, Line
from bench.model.template import Template


def lines(tpl: Template, m: Month) -> list[Line]:
    """Traces a month, per function's invocations."""
    lines: list[Line] = []

    def add(service: str, item: str, usd: float) -> None:
        lines.append(Line(service, item, usd))

    p = PRICES
    inv_month = m.inv_month
    # X-Ray
    xr = p["xray"]["per_million_traces_recorded"] / 1e6
    if tpl.tracing:
        traces = 0.0
        for n in inv_month.values():
            rate_f = n / SECONDS_PER_MONTH
            traces += min(n, SECONDS_PER_MONTH) + max(0.0, rate_f - 1) * 0.05 * SECONDS_PER_MONTH
        add("X-Ray", "traces recorded (1/s + 5 % per function)", traces * xr)
    else:
        add("X-Ray", "tracing off (template parameter Tracing=Disabled)", 0.0)
    return lines
