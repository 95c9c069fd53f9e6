"""The state table's stream and the events function's event source: which records its
filter lets through (Lambda event filtering) and how many make one batch."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bench.model.assumptions import ASSUMPTIONS
from bench.model.template import Template


def matches(pattern: Mapping[str, Any], record: Mapping[str, Any]) -> bool:
    """Lambda event filtering (the subset the template uses: nested keys, lists of exact
    values or {"prefix": ...})."""
    for k, want in pattern.items():
        got = record.get(k) if isinstance(record, Mapping) else None
        if isinstance(want, dict):
            if not isinstance(got, Mapping) or not matches(want, got):
                return False
        else:
            ok = False
            for w in want:
                if isinstance(w, dict) and "prefix" in w:
                    ok = ok or (isinstance(got, str) and got.startswith(w["prefix"]))
                else:
                    ok = ok or got == w
            if not ok:
                return False
    return True


def delivered_to_events(
    records: list[dict[str, Any]], filters: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    if not filters:
        return records
    return [r for r in records if any(matches(f, r) for f in filters)]


def records_per_batch(tpl: Template, records_per_s: float) -> float:
    """Records in one stream batch at a rate: full, or what arrives within the window.
    With a ParallelizationFactor of F a shard's records go to F batches at once (by item:
    Lambda keeps each item's records in order), so a window gathers 1/F of them each
    (assumed: Lambda does not say how it fills parallel batches)."""
    per_shard = (
        records_per_s
        / ASSUMPTIONS["stream_shards"]
        / max(1, getattr(tpl, "events_parallelization", 1))
    )
    return max(1.0, min(tpl.events_batch_size, per_shard * max(tpl.events_window_s, 0.2)))
