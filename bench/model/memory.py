"""Lambda memory sizes: each function priced at each size (its GB-s lines of the bill),
its estimated peak (the measured floor plus the content it holds), and the size chosen."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from bench.model.awslambda import FULL_VCPU_MB, lambda_seconds
from bench.model.bill import model
from bench.model.prices import VOLUMES
from bench.model.run import Run
from bench.model.template import FUNCTIONS, Template

MEMORY_SIZES = (128, 256, 512, 1024, 1769)
#: copies of the largest content a function holds at once (assumed from the code, not
#: measured): ingress the request or SES object and the bytes it stores; delivery and
#: bounce the content read, its signed/DSN form and the SMTP client's dot-stuffed copy
#: (and, for bounce, the original under RET=FULL); admin a 1 MiB body; events header
#: sections; the sweeper none.
CONTENT_COPIES = {"ingress": 3, "delivery": 4, "bounce": 4, "admin": 1, "events": 0, "sweeper": 0}
MARGIN = 1.5  # memory chosen >= MARGIN x the estimated peak
#: functions whose GB-s cost under $0.001 per million at 100 M/month at any size: not
#: chosen by cost, but for their work — the sweeper's recovery after an outage (a large
#: backlog in its 240 s; 14x slower CPU at 128 MB), admin's interactive answers and jobs
#: events: by throughput (issue 40): one vCPU, so the stream keeps up at 10,000 mails/s
#: with one batch per shard (bench/model/limits.py's stream row; its GB-s hardly depend on
#: memory, the writer's waits being per batch)
NOT_BY_COST = {"sweeper": 256, "admin": 256, "events": FULL_VCPU_MB}


def memory_floor_mb(f: str, rss_mb: float, max_size: int = 40 * 2**20) -> float:
    """Estimated peak: the measured floor plus the content copies the function holds."""
    largest = {"admin": 2**20, "events": 11 * 1024}.get(f, max_size)
    return rss_mb + CONTENT_COPIES.get(f, 0) * largest / 2**20


def memory_sweep(
    run: Run, tpl: Template, rss_mb: Mapping[str, float], volume: int = VOLUMES[-1]
) -> dict[str, dict[str, Any]]:
    """Per function: $ per million mails at each memory size (its Lambda GB-s lines of
    the model at `volume`), the duration per invocation, the estimated peak and the
    choice: the smallest size >= MARGIN x the peak (cost only falls with memory in this
    model: the CPU part costs the same GB-s at any size below one vCPU, the waits cost
    in proportion to memory)."""
    out: dict[str, dict[str, Any]] = {}
    for f in FUNCTIONS:
        peak = memory_floor_mb(f, rss_mb.get(f, 0.0))
        cost: dict[int, float] = {}
        dur: dict[int, float] = {}
        for m in MEMORY_SIZES:
            t = replace(tpl, memory_mb={**tpl.memory_mb, f: m})
            lines = model(run, volume, t)
            cost[m] = (
                sum(
                    x.per_month
                    for x in lines
                    if x.service == "Lambda" and x.item.startswith(f"{f}:")
                )
                / volume
                * 1e6
            )
            inv = run.invocations[f]
            dur[m] = lambda_seconds(run, f, m) / inv * 1000 if inv else 0.0
        fit = [m for m in MEMORY_SIZES if m >= MARGIN * peak]
        out[f] = {
            "peak_mb": peak,
            "rss_mb": rss_mb.get(f, 0.0),
            "cost": cost,
            "ms_per_invocation": dur,
            "chosen": NOT_BY_COST.get(f, fit[0] if fit else MEMORY_SIZES[-1]),
            "template": tpl.memory_mb[f],
        }
    return out


def memory_report(run: Run, tpl: Template, rss_mb: Mapping[str, float]) -> list[str]:
    sweep = memory_sweep(run, tpl, rss_mb)
    L = [
        "| function | RSS after import + clients (MB) | est. peak (MB) | "
        + " | ".join(f"{m} MB: $/M (ms/inv.)" for m in MEMORY_SIZES)
        + " | chosen | template |",
        "|---|---:|---:|" + "---:|" * len(MEMORY_SIZES) + "---:|---:|",
    ]
    for f, r in sweep.items():
        cells = " | ".join(
            f"{r['cost'][m]:.3f} ({r['ms_per_invocation'][m]:.0f})"
            if r["ms_per_invocation"][m]
            else f"{r['cost'][m]:.3f}"
            for m in MEMORY_SIZES
        )
        L.append(
            f"| {f} | {r['rss_mb']:.0f} | {r['peak_mb']:.0f} | {cells} | {r['chosen']} | "
            f"{r['template']} |"
        )
    return L
