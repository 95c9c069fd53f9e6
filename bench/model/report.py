"""The cost model's tables: the bill per service and per line at each volume with the
floors (`report`), with provisioned capacity (`capacity_report`) and with batch
submission (`batch_report`)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from bench.model.assumptions import ASSUMPTIONS, LATENCY_MS
from bench.model.awslambda import lambda_seconds
from bench.model.bill import FLOORS, REQUEST_FLOOR, model, path_requests
from bench.model.egress import egress_monthly
from bench.model.prices import VOLUMES
from bench.model.run import Run, with_ingress_of
from bench.model.state_table import state_records
from bench.model.stream import delivered_to_events
from bench.model.template import Template


def _init_note(run: Run) -> str:
    init = getattr(run, "init_cpu_s", None)  # runs pickled before the warm-up have none
    if not init:
        return " Handler CPU includes each function's first-invocation set-up (a cold run)."
    return (
        " Handler CPU is a warm container's: each function's service was built before the run"
        " (once per container, not priced per mail: "
        + ", ".join(f"{f} {init[f] * 1000:.0f} ms" for f in ("ingress", "delivery") if f in init)
        + ")."
    )


def report(run: Run, tpl: Template, title: str = "### Cost model") -> list[str]:
    egress = egress_monthly("relay", VOLUMES[0])
    tables = {v: model(run, v, tpl) for v in VOLUMES}
    L: list[str] = [title, ""]
    L.append(
        f"Measured: {run.mails} mails of 10 KB, 1 recipient each (20 domains), one per API "
        f"call, through the local stack (template in moto, the real handlers, SQS and "
        f"stream event sources, SMTP sink), accepted → delivered → cleaned, in "
        f"{run.wall_s:.0f} s. Relay mode; the relay's own price is not included. "
        f"Tracing {'on' if tpl.tracing else 'off'}. List prices us-east-1 "
        "(bench/aws-prices.json)."
    )
    L.append("")
    L.append(
        "| service | "
        + " | ".join(f"{v // 1_000_000} M/month: $/month" for v in VOLUMES)
        + " | "
        + " | ".join(f"$/M at {v // 1_000_000} M" for v in VOLUMES)
        + " |"
    )
    L.append("|---|" + "---:|" * (2 * len(VOLUMES)))
    services = list(dict.fromkeys(x.service for x in tables[VOLUMES[0]]))
    for svc in services:
        vals = [sum(x.per_month for x in tables[v] if x.service == svc) for v in VOLUMES]
        L.append(
            f"| {svc} | "
            + " | ".join(f"{x:,.2f}" for x in vals)
            + " | "
            + " | ".join(f"{x / v * 1e6:.2f}" for x, v in zip(vals, VOLUMES, strict=True))
            + " |"
        )
    tot = [sum(x.per_month for x in tables[v]) for v in VOLUMES]
    L.append(
        "| **all-in** | "
        + " | ".join(f"**{x:,.2f}**" for x in tot)
        + " | "
        + " | ".join(f"**{x / v * 1e6:.2f}**" for x, v in zip(tot, VOLUMES, strict=True))
        + " |"
    )
    L.append("")
    L.append("Per mail (at 100 M/month), line by line:")
    L.append("")
    L.append("| service | item | $ per million mails |")
    L.append("|---|---|---:|")
    for x in tables[VOLUMES[-1]]:
        L.append(f"| {x.service} | {x.item} | {x.per_month / VOLUMES[-1] * 1e6:.3f} |")
    L.append("")
    recs = delivered_to_events(state_records(run.records), tpl.events_filters)
    L.append(
        f"Measured inputs: {len(run.records) / run.mails:.1f} stream records per mail "
        f"({len(recs) / run.mails:.1f} of them delivered to the events function"
        + (" after the event source's filter" if tpl.events_filters else "")
        + "); invocations per mail: "
        + ", ".join(
            f"{f} {run.invocations[f] / run.mails:.2f}" for f in ("ingress", "delivery", "events")
        )
        + "; handler CPU per mail: "
        + ", ".join(
            f"{f} {run.cpu_s.get(f, 0) / run.mails * 1000:.0f} ms" for f in ("ingress", "delivery")
        )
        + f", events {run.cpu_s.get('events', 0) / max(1, len(run.records)) * 1000:.1f} ms per record; "
        f"log bytes per mail: "
        + ", ".join(
            f"{f} {run.log_bytes[f] / run.mails:,.0f}" for f in ("ingress", "delivery", "events")
        )
        + f", API access log {run.api_log_bytes / run.mails:,.0f}; EMF metrics seen: {len(run.metrics)}; "
        f"event log {run.event_bytes / run.mails:,.0f} B per mail (gzip)." + _init_note(run)
    )
    L.append("")
    if run.counters_by_batch:  # a run of a revision with queue-size counters
        L.append(
            "Counters (replayed through `mailqueue.counters` at each batch size), per stream record:"
        )
        L.append("")
        L.append(
            "| records per batch | requests | items written | WRU | items, no netting | "
            "WRU, no netting (used) |"
        )
        L.append("|---:|---:|---:|---:|---:|---:|")
        for b, c in sorted(run.counters_by_batch.items()):
            req = sum(v for k, v in c.items() if k.startswith("dynamodb:"))
            L.append(
                f"| {b} | {req:.3f} | {c.get('items', 0):.3f} | {c.get('wru', 0):.3f} | "
                f"{c.get('items_no_netting', 0):.3f} | {c.get('wru_no_netting', 0):.3f} |"
            )
        L.append("")
    pr = path_requests(run, tpl, VOLUMES[-1])
    total_req = sum(pr.values())
    L.append(
        f"AWS requests per delivered 1-recipient mail, accepted → cleaned, at 100 M/month "
        f"(full stream batches): **{total_req:.2f}** — "
        + ", ".join(f"{k} {v:.2f}" for k, v in pr.items())
    )
    L.append("")
    L.append("| floor | measured | met |")
    L.append("|---|---:|:---:|")
    for v, t in zip(VOLUMES, tot, strict=True):
        fl = FLOORS[v]
        per_m = t / v * 1e6
        L.append(
            f"| ≤ ${fl:.2f} per million at {v // 1_000_000} M/month | ${per_m:.2f} | "
            f"{'yes' if per_m <= fl else '**no**'} |"
        )
    L.append(
        f"| ≤ {REQUEST_FLOOR} AWS requests per mail | {total_req:.2f} | "
        f"{'yes' if total_req <= REQUEST_FLOOR else '**no**'} |"
    )
    L.append("")
    L.append(
        "Assumptions (not measured): "
        + "; ".join(f"{k} = {v}" for k, v in ASSUMPTIONS.items())
        + f"; events batch {tpl.events_batch_size} records / {tpl.events_window_s} s window, "
        "the records of one batch spread evenly over the shards; Lambda time is the handler "
        "thread's CPU time measured in the run, stretched by 1769/MB below one vCPU "
        "(Lambda's CPU is proportional to memory; 1,769 MB = 1 vCPU), plus AWS's answer "
        "time per request "
        f"({', '.join(f'{k} {v:.0f} ms' for k, v in LATENCY_MS.items())}) and SMTP to the "
        "relay (moto's own answer time, slow and load-dependent here, is left out); "
        "the SQS event source's receive and delete counted once per "
        "invocation, delivery's batches filled from the volume (bench.model.sqs.delivery_batch: "
        "the template's batching window, 5 pollers); X-Ray at Lambda's default sampling (1/s then 5 %) when tracing is on; "
        "storage of content (deleted after delivery) and of state items not included; "
        "a BatchGetItem is priced per key requested (a key without an item costs the "
        "minimum read unit); `mailqueue size` reads the by_state index when asked (not "
        "priced: no steady cost); "
        + (
            "egress: relay mode sends from outside any VPC (no NAT, no transfer charge); "
            "direct mode's NAT and transfer are in bench/model/egress.py's section."
            if egress is not None
            else "egress not included: bench/egress_cost.py (branch `egress`) has not landed; "
            "`egress_monthly()` is the hook."
        )
    )
    return L


def _crossover(run: Run, tpl: Template, prov: Template, total: Any, u: float | None) -> str:
    """Where provisioned capacity (at `u`; None: the simulated use) becomes the cheaper,
    in whole 0.5 M steps."""
    at = "at the simulated use" if u is None else f"at {u:.0%} use"
    for half in range(1, 201):
        v = half * 500_000
        if total(run, prov, v, u) < total(run, tpl, v, u):
            return f"{at}, provisioned is the cheaper from {v / 1e6:g} M mails a month."
    return f"{at}, provisioned is not the cheaper below 100 M mails a month."


def capacity_report(
    run: Run,
    tpl: Template,
    batch: Run | None = None,
    utilizations: tuple[float, ...] = (0.35, 0.5, 0.7),
) -> list[str]:
    """The same runs priced with the state table in provisioned capacity mode
    (StateTableCapacity=provisioned) at several average utilizations, and the utilization
    at which each volume's floor is met."""
    prov = replace(tpl, state_capacity="provisioned")
    saved = tpl.state_use

    def total(r: Run, t: Template, v: int, u: float | None) -> float:
        return sum(x.per_month for x in model(r, v, replace(t, state_use=u))) / v * 1e6

    L = [
        "#### With provisioned capacity (`StateTableCapacity=provisioned`)",
        "",
        "The state table and its index at provisioned capacity with auto scaling (target "
        "70 %), priced by the hour (bench/aws-prices.json `dynamodb_provisioned`: "
        "$0.00065 per WCU-hour, $0.00013 per RCU-hour, us-east-1) at the average use of "
        "what is provisioned that bench/model/autoscale.py simulates (auto scaling's documented "
        "rules, minute by minute, over a week of the '"
        + str(ASSUMPTIONS["provisioned_traffic_profile"])
        + "' traffic profile: it follows a daily curve with a lag and scales in at most 27 "
        "times a day, so the use stays below the target), and at fixed uses for comparison; "
        "never below the template's minimum (10 write, 5 read units on the table and on "
        "the index). On demand is the default: " + _crossover(run, tpl, prov, total, saved),
        "",
        "| submission | capacity | "
        + " | ".join(f"$/M at {v // 1_000_000} M" for v in VOLUMES)
        + " |",
        "|---|---|" + "---:|" * len(VOLUMES),
    ]
    rows: list[tuple[str, Run]] = [("one mail per call", run)]
    if batch is not None:
        rows.append((f"batches of {batch.mails_per_call}", batch))
    for name, r in rows:
        L.append(
            f"| {name} | on demand | "
            + " | ".join(f"{total(r, tpl, v, saved):.2f}" for v in VOLUMES)
            + " |"
        )
        L.append(
            f"| {name} | provisioned, simulated use | "
            + " | ".join(f"{total(r, prov, v, None):.2f}" for v in VOLUMES)
            + " |"
        )
        for u in utilizations:
            L.append(
                f"| {name} | provisioned, {u:.0%} used | "
                + " | ".join(f"{total(r, prov, v, u):.2f}" for v in VOLUMES)
                + " |"
            )
    L.append("")
    notes = []
    for v in VOLUMES[1:]:
        fl = FLOORS[v]
        us = [u / 100 for u in range(20, 91)]
        met = next((u for u in us if total(run, prov, v, u) <= fl), None)
        notes.append(
            f"at {v // 1_000_000} M/month the ${fl:.2f} floor (one mail per call) is met from "
            + (f"{met:.0%} average use" if met is not None else "no utilization up to 90 %")
        )
    L.append("Break-even: " + "; ".join(notes) + ".")
    return L


def batch_report(run: Run, batch: Run, tpl: Template, more: tuple[int, ...] = (50,)) -> list[str]:
    """The figure with batch submission (issue 18): `run` (one mail per call) priced
    again with `batch`'s submission side, and for each of `more` mails per call the
    API requests at 1/N with the ingress function as measured in `batch`."""
    rows: list[tuple[str, Run]] = [
        ("one mail per call (the model above)", run),
        (f"batches of {batch.mails_per_call} (measured)", with_ingress_of(run, batch)),
    ]
    for n in more:
        rows.append(
            (
                f"batches of {n} (API requests 1/{n}; ingress as measured with "
                f"{batch.mails_per_call})",
                replace(with_ingress_of(run, batch), mails_per_call=n),
            )
        )
    L = [
        "#### With batch submission (`POST /v1/messages/batch`)",
        "",
        f"Measured: the same {batch.mails} mails of 10 KB submitted {batch.mails_per_call} "
        f"per call through the local stack's batch route ({batch.invocations['ingress']} "
        f"ingress invocation(s)), each accepted, delivered and cleaned up, in "
        f"{batch.wall_s:.0f} s. Priced: the one-mail-per-call run with its submission side "
        "(API requests, ingress invocations, the ingress function's AWS requests, CPU and "
        "logs, the API access log) taken from the batch run; delivery and the rest stay "
        "the first run's, so the difference is the route's alone. Each mail of a batch is "
        "enqueued as from the single route (one BatchWriteItem + one SendMessageBatch).",
        "",
        "| submission | API requests per mail | ingress Lambda ms per mail | AWS requests "
        "per mail | " + " | ".join(f"$/M at {v // 1_000_000} M" for v in VOLUMES) + " |",
        "|---|---:|---:|---:|" + "---:|" * len(VOLUMES),
    ]
    for name, r in rows:
        tot = [sum(x.per_month for x in model(r, v, tpl)) for v in VOLUMES]
        ms = lambda_seconds(r, "ingress", tpl.memory_mb["ingress"]) / r.mails * 1000
        api = ASSUMPTIONS["api_requests_per_mail"] / r.mails_per_call
        req = sum(path_requests(r, tpl, VOLUMES[-1]).values())
        L.append(
            f"| {name} | {api:.3f} | {ms:.1f} | {req:.2f} | "
            + " | ".join(f"{t / v * 1e6:.2f}" for t, v in zip(tot, VOLUMES, strict=True))
            + " |"
        )
    return L
