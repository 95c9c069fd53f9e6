"""SQS and its event sources (bench/model/sqs.py): delivery batches fill with the volume and
the batching window."""

from __future__ import annotations

from dataclasses import replace

import pytest

from bench.model.bill import model
from bench.model.prices import PRICES, SECONDS_PER_MONTH
from bench.model.sqs import delivery_batch
from bench.model.template import Template
from tests.bench.model.synthetic import TPL, _line, _run


def test_delivery_batches_fill_with_the_volume_not_the_run() -> None:
    assert delivery_batch(TPL, 0.38) == pytest.approx(1.0, abs=0.01)  # 1 M/month
    assert delivery_batch(TPL, 1e5) == 10  # a backlog: full batches
    window = replace(TPL, delivery_window_s=5.0)
    assert delivery_batch(window, 38.0) == 10  # 100 M/month with a 5 s window
    lines = model(_run(), 1_000_000, TPL)
    per_inv = PRICES["sqs_standard"]["per_million_requests"] / 1e6 * 2
    # one receive + delete per mail at 1 M/month (the run's batch fill is not used)
    assert _line(lines, "event source receive") == pytest.approx(1e6 * per_inv, rel=0.02)


def test_the_templates_delivery_batching_window_reaches_the_model() -> None:
    """Both delivery event sources gather triggers for DeliveryBatchingWindowSeconds (1 s):
    at 100 M mails a month a batch fills, and a receive serves several mails."""
    tpl = Template.load()
    assert tpl.delivery_window_s == 1.0
    assert delivery_batch(tpl, 100e6 / SECONDS_PER_MONTH) > 5
    assert delivery_batch(tpl, 1e6 / SECONDS_PER_MONTH) < 1.2
