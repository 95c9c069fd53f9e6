"""Secrets Manager: the DKIM keys delivery reads (cached per container and 5 minutes, so
priced by the containers alive at a volume) and storing them."""

from __future__ import annotations

import math

from bench.model.awslambda import lambda_seconds
from bench.model.month import Month
from bench.model.prices import PRICES, SECONDS_PER_MONTH, Line
from bench.model.run import Run
from bench.model.template import Template

#: Requests made per container and cache period, not per mail: (function, op) → cache
#: seconds (dkim.py: Powertools' parameters, max_age 300)
PER_CONTAINER = {("delivery", "secretsmanager:GetSecretValue"): 300}


def warm_containers(run: Run, tpl: Template, volume: int, f: str = "delivery") -> int:
    """Containers of `f` alive at `volume`: its mean concurrency (Little's law: the
    seconds it is busy per mail x mails per second) plus three standard deviations of a
    Poisson count, since the peaks start the containers that then wait, warm, until
    Lambda reclaims them; at least 1, at most the template's delivery concurrency."""
    busy = lambda_seconds(run, f, tpl.memory_mb[f]) / run.mails * volume / SECONDS_PER_MONTH
    return int(min(tpl.delivery_containers, max(1, math.ceil(busy + 3 * math.sqrt(busy)))))


def per_container_share(run: Run, tpl: Template, volume: int, f: str, op: str) -> float:
    """Per mail at `volume`: the run's rate (one warm container: a cache miss per key), or
    what the containers alive at that volume read refreshing their caches, whichever is
    less. (It assumed all `delivery_containers` warm at every volume: 90 containers
    reading 2 keys every 5 minutes is $0.50 a million at 10 M a month, where ~3 run.)"""
    keys = run.ops(f).get(op, 0)  # the run has one warm container per function: one read
    refreshes = SECONDS_PER_MONTH / PER_CONTAINER[(f, op)]  # per key, cached for the period
    alive = warm_containers(run, tpl, volume, f)
    return min(keys / run.mails, alive * keys * refreshes / volume)


def lines(run: Run, tpl: Template, m: Month) -> list[Line]:
    """Reads and stored secrets a month."""
    lines: list[Line] = []

    def add(service: str, item: str, usd: float) -> None:
        lines.append(Line(service, item, usd))

    p = PRICES
    volume = m.volume
    # Secrets Manager: the DKIM keys delivery reads (cached per container), and storing them
    sm = p["secrets_manager"]
    calls = sum(per_container_share(run, tpl, volume, f, op) for f, op in PER_CONTAINER) * volume
    add(
        "Secrets Manager",
        f"GetSecretValue (per warm container and 5 min: "
        f"{warm_containers(run, tpl, volume)} containers)",
        calls * sm["per_10000_api_calls"] / 1e4,
    )
    keys = run.ops("delivery").get("secretsmanager:GetSecretValue", 0)
    add(
        "Secrets Manager",
        f"secrets stored ({keys:.0f} DKIM keys read in the run)",
        keys * sm["per_secret_month"],
    )
    return lines
