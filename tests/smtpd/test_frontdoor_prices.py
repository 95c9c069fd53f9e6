"""docs/deploy.md's idle cost of the SMTP front door (Fargate + NLB) is the arithmetic of
the prices bench/aws-prices.json carries with their sources (issue 26)."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HOURS = 730  # a month, as the cost model counts it


def test_the_documented_idle_cost_follows_from_the_cited_prices() -> None:
    prices = json.loads((ROOT / "bench" / "aws-prices.json").read_text())
    fg, nlb = prices["fargate_linux"], prices["network_load_balancer"]
    assert "fargate/pricing" in fg["source"] and "elasticloadbalancing" in nlb["source"]
    task = (0.25 * fg["arm64_per_vcpu_hour"] + 0.5 * fg["arm64_per_gb_hour"]) * HOURS
    lb = nlb["per_hour"] * HOURS
    doc = (ROOT / "docs" / "deploy.md").read_text()
    assert f"${task:.2f} each" in doc, task  # 0.25 vCPU / 0.5 GB ARM, two tasks
    assert f"${lb:.2f}" in doc, lb
