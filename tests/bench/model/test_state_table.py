"""The state table's bill (bench/model/state_table.py): index entries that lag their schedule."""

from __future__ import annotations

from typing import Any

import pytest

from bench.model.state_table import lagging_entry_reads
from tests.bench.model.synthetic import img


def test_lagging_index_entries_are_priced_as_the_sweeps_that_read_them() -> None:
    """A reschedule that kept its index entry (same `st` and `due`, a later `next_at`):
    each sweep until `next_at` reads the item back. A retry is priced at the policy's
    first retry (300 s: one sweep), whatever the run's fast retry; a shaping re-arm of
    60 s at its own lag (a fifth of a sweep); an entry that moved costs no such read."""

    def mod(old: Any, new: Any) -> dict[str, Any]:
        return {"eventName": "MODIFY", "dynamodb": {"OldImage": old, "NewImage": new}}

    base = {"pk": "M#1", "sk": "G#a", "st": "queued#07", "due": 1_800_000_000_000}
    at = "2027-01-15T08:00:00.000Z"  # due's own time
    claimed = img(**base, next_at=at, lease_ms=9, history=[])
    retried = img(**base, next_at="2027-01-15T08:00:05.000Z", history=[{"n": 1}])
    postponed = img(**base, next_at="2027-01-15T08:01:00.000Z", history=[])
    moved = img(**{**base, "due": 1_800_000_005_000}, next_at="2027-01-15T08:00:05.000Z")
    assert lagging_entry_reads([mod(claimed, retried)]) == pytest.approx(1.0)
    assert lagging_entry_reads([mod(claimed, postponed)]) == pytest.approx(0.2)
    assert lagging_entry_reads([mod(claimed, moved)]) == 0.0
    # a claim (the lease on the item, next_at unchanged) is no lag
    assert lagging_entry_reads([mod(img(**base, next_at=at), claimed)]) == 0.0
    # never more sweeps than the slack allows: 900 s / 300 s
    far = img(**base, next_at="2027-01-15T09:00:00.000Z", history=[{"n": 1}])
    assert lagging_entry_reads([mod(claimed, far)]) == pytest.approx(3.0)
