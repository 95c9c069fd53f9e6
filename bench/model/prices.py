"""AWS's list prices as the models use them (bench/aws-prices.json, us-east-1), the month
they are priced over, the volumes the figures are given at, and one priced line."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PRICES: dict[str, Any] = json.loads(
    (Path(__file__).resolve().parent.parent / "aws-prices.json").read_text()
)
SECONDS_PER_MONTH = 730 * 3600
VOLUMES = (1_000_000, 10_000_000, 100_000_000)


@dataclass
class Line:
    service: str
    item: str
    per_month: float
