"""template.yaml as the cost model reads it (bench/model/template.py)."""

from __future__ import annotations

from typing import Any

import pytest

from bench.model.dynamodb import Index
from bench.model.stream import delivered_to_events
from bench.model.template import Template


def test_the_template_as_the_model_reads_it() -> None:
    tpl = Template.load()
    assert tpl.tracing is False  # X-Ray off unless the Tracing parameter turns it on
    assert tpl.dashboards == 0  # the dashboard is optional, off by default
    assert tpl.architecture == "arm64"
    # memory sizes chosen by the sweep (docs/benchmarks.md, "Lambda memory sizes")
    assert tpl.memory_mb == {
        "ingress": 512,
        "delivery": 512,
        "bounce": 512,
        "events": 1769,  # by throughput (issue 40: the stream at 10,000 mails/s)
        "sweeper": 256,
        "admin": 256,
    }
    # the projection is a parameter (StateIndexProjection): its default, keys only
    assert tpl.indexes == (Index("by_state", ("st", "due"), "KEYS_ONLY"),)
    assert tpl.schedules["sweeper"] == pytest.approx(730 * 12 + 30, rel=0.01)
    assert tpl.sqs_sources == 3  # delivery, bulk delivery (priority), bounce: idle polls each
    on = Template.load(tracing=True)
    assert on.tracing is True
    # the events source's batch size and window are template parameters (!Ref), read at
    # their defaults: the window chosen from the model (docs/benchmarks.md)
    assert (tpl.events_batch_size, tpl.events_window_s) == (1000, 60)

    # the events function sees group items, outbox events and a mail item's INSERT (its
    # headers), not the mail item's later writes nor other items
    def rec(pk: str, sk: str, name: str = "MODIFY") -> dict[str, Any]:
        return {"eventName": name, "dynamodb": {"Keys": {"pk": {"S": pk}, "sk": {"S": sk}}}}

    # (a group's REMOVE neither: it derives no event, and a solo mail's TTL delete is one)
    seen = delivered_to_events(
        [
            rec("M#1", "G#a.example"),
            rec("M#1", "G#a.example", "REMOVE"),
            rec("M#1", "M", "INSERT"),
            rec("M#1", "M", "REMOVE"),
            rec("M#1", "M"),
            rec("J#1", "J", "INSERT"),
            rec("E#x", "E", "INSERT"),
        ],
        tpl.events_filters,
    )
    assert [(r["dynamodb"]["Keys"]["sk"]["S"], r["eventName"]) for r in seen] == [
        ("G#a.example", "MODIFY"),
        ("M", "INSERT"),
        ("E", "INSERT"),
    ]
