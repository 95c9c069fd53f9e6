"""SQS: the functions' requests, and Lambda's event sources on the queues (a receive and a
delete per batch, idle long polls); how full a delivery batch is at a rate."""

from __future__ import annotations

from bench.model.assumptions import ASSUMPTIONS
from bench.model.month import Month
from bench.model.prices import PRICES, SECONDS_PER_MONTH, Line
from bench.model.run import Run
from bench.model.template import Template


def delivery_batch(tpl: Template, records_per_s: float, record_s: float = 0.05) -> float:
    """Records in one delivery invocation at a rate: the SQS event source's pollers (5)
    return what is waiting when they poll, and wait up to the mapping's batching window
    for more; with no window set (the template) a batch holds what arrived during one
    invocation of `record_s` — about one record at 1 M mails a month."""
    per_poller = records_per_s / ASSUMPTIONS["esm_pollers_per_queue"]
    return max(
        1.0,
        min(float(tpl.delivery_batch_size), per_poller * (tpl.delivery_window_s + record_s) + 1),
    )


def lines(run: Run, tpl: Template, m: Month) -> list[Line]:
    """The queues' requests a month."""
    lines: list[Line] = []

    def add(service: str, item: str, usd: float) -> None:
        lines.append(Line(service, item, usd))

    p = PRICES
    per = m.per
    d_inv_month = m.d_inv_month
    ops = run.ops()
    # SQS: the functions' requests + the event sources' receive/delete per batch + idle polls
    sqs_p = p["sqs_standard"]["per_million_requests"] / 1e6
    sqs_fn = sum(n for k, n in ops.items() if k.startswith("sqs:"))
    add("SQS", "sends/visibility by the functions", sqs_fn * per * sqs_p)
    esm_batches = d_inv_month + run.invocations["bounce"] * per
    add("SQS", "event source receive + delete (per batch)", esm_batches * 2 * sqs_p)
    idle = (
        tpl.sqs_sources
        * ASSUMPTIONS["esm_pollers_per_queue"]
        * SECONDS_PER_MONTH
        / ASSUMPTIONS["long_poll_seconds"]
    )
    add("SQS", f"event source long polls ({tpl.sqs_sources} queues, idle floor)", idle * sqs_p)
    return lines
