"""A month of traffic at a volume, as the bill's lines need it (computed by `bill.month`).

Its own module so that each service's lines can take it without importing the bill."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Month:
    volume: int
    per: float  # scale factor from the run to the month
    batch: float  # mails' records per stream batch, in the counters replay's records
    ctr_rpm: float  # records per mail the counters replay was fed (or the run's own)
    records_month: float  # stream records a month (with the counters' echo)
    batches: float  # stream batches a month (each an events invocation, an event-log PUT)
    d_batch: float  # records per delivery invocation
    d_inv_month: float  # delivery invocations a month
    inv_month: dict[str, float]  # invocations a month per function
