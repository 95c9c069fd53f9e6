"""The bill: a month's traffic at a volume (`month`), every service's lines of it
(`model`), the AWS requests a mail makes on its path, and the floors the figures meet."""

from __future__ import annotations

from collections import Counter

from bench.model import (
    apigateway,
    awslambda,
    cloudwatch,
    s3,
    secretsmanager,
    sqs,
    state_table,
    xray,
)
from bench.model import (
    egress as egress_model,
)
from bench.model.month import Month
from bench.model.prices import SECONDS_PER_MONTH, Line
from bench.model.run import Run
from bench.model.secretsmanager import PER_CONTAINER, per_container_share
from bench.model.sqs import delivery_batch
from bench.model.state_table import _COUNTER_OPS, _interp, state_records
from bench.model.stream import delivered_to_events, records_per_batch
from bench.model.template import Template

#: $ per million mails at each volume, and AWS requests per mail, the model must meet
FLOORS = {1_000_000: 20.0, 10_000_000: 10.0, 100_000_000: 8.0}
REQUEST_FLOOR = 6.5


def month(run: Run, volume: int, tpl: Template) -> Month:
    """The month's traffic at `volume` mails: stream records and batches, delivery batches
    and every function's invocations, scaled from the run."""
    per = volume / run.mails  # scale factor from the run to the month
    # the stream and the events function
    recs = delivered_to_events(state_records(run.records), tpl.events_filters)
    rec_per_mail = len(recs) / run.mails
    rate = volume * rec_per_mail / SECONDS_PER_MONTH
    batch = records_per_batch(tpl, rate)
    # the replay's figures are per record it was fed (the run's own template's records);
    # a batch of `batch` records here holds batch * ctr_rpm / rec_per_mail of those
    ctr_rpm = getattr(run, "replayed_per_mail", 0.0) or rec_per_mail
    batch = max(1.0, batch * ctr_rpm / rec_per_mail)
    ctr_items_per_rec = _interp(run.counters_by_batch, batch, "items") * ctr_rpm / rec_per_mail
    counters_in_state_table = True
    echo = 0.0
    if counters_in_state_table and not tpl.events_filters:
        # the counters' own writes come back on the stream (and their markers' TTL deletes)
        echo = ctr_items_per_rec + _interp(run.counters_by_batch, batch, "dynamodb:PutItem")
        echo += sum(1 for k in run.transact_keys if k[0].startswith("CR#")) / max(1, len(recs))
    records_month = volume * rec_per_mail * (1 + echo)
    batches = records_month / records_per_batch(tpl, records_month / SECONDS_PER_MONTH)
    d_records = (getattr(run, "records_in", Counter()).get("delivery") or run.mails) / run.mails
    d_batch = delivery_batch(tpl, volume * d_records / SECONDS_PER_MONTH)
    d_inv_month = volume * d_records / d_batch
    inv_month: dict[str, float] = {}
    for f in ("ingress", "delivery", "bounce"):
        inv_month[f] = run.invocations[f] * per
    inv_month["delivery"] = d_inv_month
    inv_month["events"] = batches
    inv_month["sweeper"] = sum(tpl.schedules.values())
    return Month(
        volume=volume,
        per=per,
        batch=batch,
        ctr_rpm=ctr_rpm,
        records_month=records_month,
        batches=batches,
        d_batch=d_batch,
        d_inv_month=d_inv_month,
        inv_month=inv_month,
    )


def model(run: Run, volume: int, tpl: Template, egress: str | None = "relay") -> list[Line]:
    """$ per month at `volume` mails a month, line by line."""
    m = month(run, volume, tpl)
    return [
        *apigateway.lines(run, m),
        *s3.lines(run, tpl, m),
        *state_table.lines(run, tpl, m),
        *sqs.lines(run, tpl, m),
        *awslambda.lines(run, tpl, m, egress),
        *secretsmanager.lines(run, tpl, m),
        *xray.lines(tpl, m),
        *cloudwatch.lines(run, tpl, m),
        *egress_model.lines(egress, volume),
    ]


def path_requests(run: Run, tpl: Template, volume: int) -> dict[str, float]:
    """AWS requests per delivered mail, accepted → cleaned: the functions' own, the
    counters' and the event log's share of each stream batch, and the SQS event source's
    receive + delete per batch."""
    out: Counter[str] = Counter()
    for f in ("ingress", "delivery", "bounce", "events"):
        for k, n in run.ops(f).items():
            if k.endswith(":items") or (
                f == "events"
                and (
                    k == "s3:PutObject"  # the event log: per batch, below
                    or (k in _COUNTER_OPS and run.counters_by_batch)  # counters': below
                )
            ):
                continue
            if (f, k) in PER_CONTAINER:
                out[k] += per_container_share(run, tpl, volume, f, k)
                continue
            out[k] += n / run.mails
    recs = delivered_to_events(state_records(run.records), tpl.events_filters)
    rpm = len(recs) / run.mails
    batch = records_per_batch(tpl, volume * rpm / SECONDS_PER_MONTH)
    for k in (
        "dynamodb:TransactWriteItems",
        "dynamodb:BatchGetItem",
        "dynamodb:GetItem",
        "dynamodb:UpdateItem",
        "dynamodb:PutItem",
    ):
        v = _interp(run.counters_by_batch, batch, k) * (
            getattr(run, "replayed_per_mail", 0.0) or rpm
        )
        if v:
            out[f"{k} (counters)"] += v
    out["s3:PutObject (event log)"] += rpm / batch
    d_records = (getattr(run, "records_in", Counter()).get("delivery") or run.mails) / run.mails
    d_batch = delivery_batch(tpl, volume * d_records / SECONDS_PER_MONTH)
    esm = d_records / d_batch + run.invocations["bounce"] / run.mails
    out["sqs:ReceiveMessage + DeleteMessageBatch (event source)"] += 2 * esm
    return dict(sorted(out.items()))
