"""S3: the content objects' requests, and the event log's PUTs, storage and lifecycle."""

from __future__ import annotations

from bench.model.month import Month
from bench.model.prices import PRICES, SECONDS_PER_MONTH, Line
from bench.model.run import Run
from bench.model.template import Template


def event_log_storage(
    bytes_month: float, objects_month: float, tpl: Template
) -> list[tuple[str, float]]:
    """The event log's storage in the steady state (EventsExpirationDays of it kept: 400
    by default), and its lifecycle transitions: the `events-tiering` rule moves objects to
    STANDARD_IA after EventsTransitionDays, but S3 Lifecycle does not transition objects
    under 128 KB by default ("Transitioning objects using Amazon S3 Lifecycle",
    docs.aws.amazon.com/AmazonS3/latest/userguide/lifecycle-transition-general-
    considerations.html): one stream batch is one object, so at low volume the log stays
    in Standard, at high volume (full batches) most of it is in Standard-IA, each object
    paying one transition request (aws.amazon.com/s3/pricing; bench/aws-prices.json
    `s3_standard_ia`). Reads of the old log by reports (IA retrieval, $/GB) are not
    counted: a daily report reads the last day, still in Standard."""
    s3, ia = PRICES["s3_standard"], PRICES["s3_standard_ia"]
    day_months = 1 / (SECONDS_PER_MONTH / 86400)
    kept_days = tpl.events_retention_days or 3650
    gb = bytes_month / 2**30
    object_bytes = bytes_month / max(objects_month, 1.0)
    tiered = object_bytes >= ia["min_transition_object_bytes"] and kept_days > (
        tpl.events_transition_days
    )
    if not tiered:
        return [
            (
                f"event-log storage (steady state, {tpl.events_retention_days or 'forever'} d "
                f"kept; {object_bytes / 1024:.0f} KB objects stay in Standard)",
                gb * s3["storage_per_gb_month"] * kept_days * day_months,
            )
        ]
    std_days = tpl.events_transition_days
    return [
        (
            f"event-log storage (steady state, {kept_days} d kept: {std_days} d Standard, "
            f"then Standard-IA; {object_bytes / 1024:.0f} KB objects)",
            gb
            * day_months
            * (
                std_days * s3["storage_per_gb_month"]
                + (kept_days - std_days) * ia["storage_per_gb_month"]
            ),
        ),
        (
            "event-log lifecycle transitions to Standard-IA (one per object)",
            objects_month * ia["transition_per_1000"] / 1000,
        ),
    ]


def lines(run: Run, tpl: Template, m: Month) -> list[Line]:
    """The functions' requests (the events function's PUTs are per batch) and the event log's."""
    lines: list[Line] = []

    def add(service: str, item: str, usd: float) -> None:
        lines.append(Line(service, item, usd))

    p = PRICES
    per = m.per
    batches = m.batches
    # S3 requests made by the functions (the events function's PUTs are modeled per batch)
    s3 = p["s3_standard"]
    fn_ops = {f: run.ops(f) for f in run.requests}
    put = sum(
        n
        for f, c in fn_ops.items()
        if f != "events"
        for k, n in c.items()
        if k in ("s3:PutObject", "s3:CopyObject", "s3:ListObjectsV2")
    )
    get = sum(
        n for f, c in fn_ops.items() for k, n in c.items() if k in ("s3:GetObject", "s3:HeadObject")
    )
    add("S3", "content PUT (+copy/list)", put * per * s3["put_copy_post_list_per_1000"] / 1000)
    add("S3", "GET/HEAD (content, Send headers)", get * per * s3["get_per_1000"] / 1000)
    add(
        "S3",
        "event-log PUTs (one per stream batch)",
        batches * s3["put_copy_post_list_per_1000"] / 1000,
    )
    for item, usd in event_log_storage(run.event_bytes * per, batches, tpl):
        add("S3", item, usd)
    return lines
