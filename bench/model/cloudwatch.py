"""CloudWatch: log ingestion and storage (the handlers' bytes, Lambda's own lines, the API
access log), EMF custom metrics, alarms, dashboards."""

from __future__ import annotations

from bench.model.assumptions import ASSUMPTIONS
from bench.model.month import Month
from bench.model.prices import PRICES, Line
from bench.model.run import Run
from bench.model.template import Template


def lines(run: Run, tpl: Template, m: Month) -> list[Line]:
    """Logs, metrics, alarms and dashboards a month."""
    lines: list[Line] = []

    def add(service: str, item: str, usd: float) -> None:
        lines.append(Line(service, item, usd))

    p = PRICES
    per = m.per
    batches = m.batches
    inv_month = m.inv_month
    ev_inv = max(1, run.invocations["events"])
    # CloudWatch
    cw = p["cloudwatch"]
    plat = ASSUMPTIONS["platform_log_bytes_per_invocation"]
    ovh = ASSUMPTIONS["cw_log_event_overhead_bytes"]
    log_b = 0.0

    def platform(f: str) -> float:
        """Lambda's START/END/REPORT lines of `f`, per invocation (none at WARN)."""
        return plat + 3 * ovh if f in tpl.platform_logs else 0.0

    for f in ("ingress", "delivery", "bounce"):
        log_b += (run.log_bytes[f] + run.log_events[f] * ovh) * per + inv_month[f] * platform(f)
    log_b += (run.log_bytes["events"] + run.log_events["events"] * ovh) / ev_inv * batches
    log_b += inv_month["events"] * platform("events")
    log_b += inv_month["sweeper"] * platform("sweeper")
    # the sweep's own lines (its EMF document every 5 minutes), measured once in the run
    log_b += (
        (run.log_bytes["sweeper"] + run.log_events["sweeper"] * ovh)
        / max(1, getattr(run, "sweeps", 0) or run.invocations["sweeper"])
        * inv_month["sweeper"]
    )
    log_b += run.api_log_bytes * per
    gb = log_b / 2**30
    add(
        "CloudWatch",
        "Logs ingestion (measured bytes + platform lines)"
        if tpl.platform_logs
        else "Logs ingestion (measured bytes; SystemLogLevel WARN: no platform lines)",
        gb * cw["logs_ingestion_per_gb"],
    )
    add(
        "CloudWatch",
        f"Logs storage ({tpl.log_retention_days} d retention)",
        gb * cw["logs_storage_per_gb_month"] * min(1.0, tpl.log_retention_days / 30),
    )
    add(
        "CloudWatch",
        f"EMF custom metrics ({len(run.metrics)} seen in the run)",
        len(run.metrics) * cw["custom_metric_per_month"],
    )
    add("CloudWatch", f"alarms ({tpl.alarms})", tpl.alarms * cw["standard_alarm_per_month"])
    add("CloudWatch", f"dashboards ({tpl.dashboards})", tpl.dashboards * cw["dashboard_per_month"])
    return lines
