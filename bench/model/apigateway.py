"""API Gateway's HTTP API: one request per submission call."""

from __future__ import annotations

from bench.model.assumptions import ASSUMPTIONS
from bench.model.month import Month
from bench.model.prices import PRICES, Line
from bench.model.run import Run


def lines(run: Run, m: Month) -> list[Line]:
    """The HTTP API's requests a month (one per call: 1/N mails per call on the batch route)."""
    lines: list[Line] = []

    def add(service: str, item: str, usd: float) -> None:
        lines.append(Line(service, item, usd))

    p = PRICES
    volume = m.volume
    # API Gateway
    add(
        "API Gateway",
        "HTTP API requests",
        volume
        * ASSUMPTIONS["api_requests_per_mail"]
        / run.mails_per_call  # 1 unless the run submitted through the batch route
        * p["apigateway_http_api"]["per_million_requests"]
        / 1e6,
    )
    return lines
