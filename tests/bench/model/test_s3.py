"""The event log in S3 (bench/model/s3.py): storage for its retention, tiering of large objects."""

from __future__ import annotations

from dataclasses import replace

import pytest

from bench.model.bill import model
from bench.model.prices import PRICES, SECONDS_PER_MONTH
from bench.model.s3 import event_log_storage
from tests.bench.model.synthetic import TPL, _line, _run


def test_event_log_is_stored_for_its_retention() -> None:
    lines = model(_run(), 1_000_000, TPL)
    gb = 500 * 1e6 / 2**30
    months = 400 / (SECONDS_PER_MONTH / 86400)
    assert _line(lines, "event-log storage") == pytest.approx(
        gb * PRICES["s3_standard"]["storage_per_gb_month"] * months
    )


def test_event_log_objects_of_128_kb_or_more_tier_to_standard_ia() -> None:
    """Lifecycle moves an object to Standard-IA only from 128 KB (S3's default minimum):
    one stream batch is one object, so small volumes stay in Standard, large ones tier and
    pay one transition request per object."""
    std = PRICES["s3_standard"]["storage_per_gb_month"]
    ia = PRICES["s3_standard_ia"]
    day = 1 / (SECONDS_PER_MONTH / 86400)
    gb = 2**30
    small = event_log_storage(gb, gb / (100 * 1024), TPL)  # 100 KB objects
    assert len(small) == 1 and small[0][1] == pytest.approx(std * 400 * day)
    big_objects = gb / (300 * 1024)
    big = dict(event_log_storage(gb, big_objects, TPL))
    stored = next(v for k, v in big.items() if k.startswith("event-log storage"))
    assert stored == pytest.approx(day * (30 * std + 370 * ia["storage_per_gb_month"]))
    assert stored < small[0][1] / 1.5
    moved = next(v for k, v in big.items() if "transitions" in k)
    assert moved == pytest.approx(big_objects * ia["transition_per_1000"] / 1000)
    # kept no longer than the transition: nothing moves
    short = replace(TPL, events_retention_days=30)
    assert len(event_log_storage(gb, big_objects, short)) == 1
