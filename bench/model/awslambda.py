"""Lambda: a function's billed time for a run's work at a memory size (CPU in proportion
to memory, AWS's answer time, SMTP), its GB-s and requests a month."""

from __future__ import annotations

from collections import Counter

from bench.model.assumptions import ASSUMPTIONS, LATENCY_MS
from bench.model.month import Month
from bench.model.prices import PRICES, Line
from bench.model.run import Run
from bench.model.template import Template

#: Lambda gives a function CPU in proportion to its memory: 1,769 MB is one vCPU (AWS's
#: Lambda docs); Python's handlers use one thread, so more than one vCPU buys nothing
FULL_VCPU_MB = 1769


def cpu_factor(memory_mb: int) -> float:
    """How much longer the CPU part of a duration takes at `memory_mb` than on a whole
    core (the run measures CPU time on one core of this machine)."""
    return max(1.0, FULL_VCPU_MB / memory_mb)


def lambda_seconds(
    run: Run,
    f: str,
    memory_mb: int,
    smtp: bool = True,
    egress: str = "relay",
    batch: float | None = None,
    overlap: float = 1.0,
) -> float:
    """The function's Lambda time for the run's work at `memory_mb`: its handler's CPU
    time stretched by `cpu_factor`, plus what does not scale with CPU — AWS's answer time
    for each request it made, SMTP to the relay (delivery), 0.5 ms per invocation.

    `overlap`: requests in flight at once (delivery's lanes run a batch's records at
    once, so their AWS waits overlap as their SMTP transactions do, `smtp_seconds`; the
    CPU does not: it is counted whole, every thread's)."""
    wait = 0.0
    for k, n in run.ops(f).items():
        if k.endswith(":items"):
            continue
        svc = k.split(":", 1)[0]
        wait += n * LATENCY_MS.get(k, LATENCY_MS.get(svc, 10.0)) / 1000
    wait /= max(1.0, overlap)
    if f == "delivery" and smtp:
        wait += smtp_seconds(run, egress, batch)
    cpu = run.cpu_s.get(f, run.busy_s[f]) * cpu_factor(memory_mb)
    return cpu + wait + 0.0005 * run.invocations[f]


def smtp_seconds(run: Run, egress: str = "relay", batch: float | None = None) -> float:
    """Lambda time the run's SMTP transactions bill: one per delivery record at the
    egress mode's time, `smtp_parallel` of a batch's at once (never more than the batch
    holds: at low volume a batch is one record)."""
    ms = ASSUMPTIONS["smtp_ms_per_mail_direct" if egress == "direct" else "smtp_ms_per_mail_relay"]
    records = getattr(run, "records_in", Counter()).get("delivery") or run.mails
    fill = batch if batch is not None else records / max(1, run.invocations.get("delivery", 1))
    par = max(1.0, min(getattr(run, "smtp_parallel", 1.0), fill))
    return records * ms / 1000 / par


def lines(run: Run, tpl: Template, m: Month, egress: str | None = "relay") -> list[Line]:
    """Each function's GB-s a month and Lambda's requests."""
    lines: list[Line] = []

    def add(service: str, item: str, usd: float) -> None:
        lines.append(Line(service, item, usd))

    p = PRICES
    per = m.per
    batches = m.batches
    records_month = m.records_month
    d_batch = m.d_batch
    inv_month = m.inv_month
    # Lambda
    lam = p["lambda"]
    gbs_price = lam[
        "per_gb_second_arm64" if tpl.architecture == "arm64" else "per_gb_second_x86_64"
    ]

    def seconds(f: str) -> float:
        return lambda_seconds(run, f, tpl.memory_mb[f])

    for f in ("ingress", "delivery", "bounce"):
        secs = seconds(f)
        if f == "delivery":
            mode = egress or "relay"
            # a batch's records on the lanes at once: their AWS waits overlap (issue 40)
            lanes = max(1.0, min(getattr(run, "smtp_parallel", 1.0), d_batch))
            secs = lambda_seconds(
                run, f, tpl.memory_mb[f], smtp=False, overlap=lanes
            ) + smtp_seconds(run, mode, d_batch)
        add(
            "Lambda",
            f"{f}: GB-s ({tpl.memory_mb[f]} MB; CPU measured × 1769/MB + AWS/SMTP latency)",
            secs * per * tpl.memory_mb[f] / 1024 * gbs_price,
        )
    ev_inv = max(1, run.invocations["events"])
    ev_recs = max(1, len(run.records))
    # per record, its CPU; per batch, what the invocation waits for (its S3 PUT, its
    # reads) and Lambda's 0.5 ms: the run's few records a batch are not the volume's
    # (issue 40: a per-record price of the run's waits made memory look dear)
    ev_cpu = run.cpu_s.get("events", run.busy_s["events"]) * cpu_factor(tpl.memory_mb["events"])
    ev_fixed = max(0.0, seconds("events") - ev_cpu) / ev_inv
    add(
        "Lambda",
        f"events: GB-s ({tpl.memory_mb['events']} MB; CPU per record, waits per batch)",
        (ev_cpu / ev_recs * records_month + ev_fixed * batches)
        * tpl.memory_mb["events"]
        / 1024
        * gbs_price,
    )
    sweeps = sum(tpl.schedules.values())
    sweep_s = seconds("sweeper") / max(1, run.invocations["sweeper"])
    add(
        "Lambda",
        f"sweeper: schedules ({sweeps:,.0f} runs/month)",
        sweeps * sweep_s * tpl.memory_mb["sweeper"] / 1024 * gbs_price,
    )
    add("Lambda", "requests", sum(inv_month.values()) * lam["per_million_requests"] / 1e6)
    return lines
