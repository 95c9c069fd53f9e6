"""Lambda's billed time (bench/model/awslambda.py): CPU by memory, SMTP by egress and overlap,
the events function per batch."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest

from bench.model.awslambda import cpu_factor, lambda_seconds, smtp_seconds
from bench.model.bill import model
from bench.model.run import Run
from bench.model.stream import records_per_batch
from tests.bench.model.synthetic import TPL, _line, _run


def test_lambda_cpu_scales_with_memory() -> None:
    """Below one vCPU (1,769 MB) the CPU part of a duration stretches by 1769/MB; the
    waits for AWS and SMTP do not."""
    run = Run(mails=10)
    run.cpu_s["events"] = 0.1
    run.invocations["events"] = 2
    run.requests["events"] = Counter({"s3:PutObject": 2})
    wait = 2 * 0.020 + 2 * 0.0005
    assert lambda_seconds(run, "events", 1769) == pytest.approx(0.1 + wait)
    assert lambda_seconds(run, "events", 3538) == pytest.approx(0.1 + wait)
    assert lambda_seconds(run, "events", 128) == pytest.approx(0.1 * 1769 / 128 + wait)
    assert cpu_factor(512) == pytest.approx(1769 / 512)


def test_smtp_time_depends_on_egress_and_overlap() -> None:
    run = _run()
    assert smtp_seconds(run, "relay", 1) == pytest.approx(10 * 0.030)
    assert smtp_seconds(run, "direct", 1) == pytest.approx(10 * 0.400)
    run.smtp_parallel = 10.0
    assert smtp_seconds(run, "direct", 10) == pytest.approx(10 * 0.040)
    assert smtp_seconds(run, "direct", 1) == pytest.approx(10 * 0.400)  # batch of 1


def test_the_events_waits_are_priced_per_batch_and_its_cpu_per_record() -> None:
    """The writer's CPU is per record, its waits (the event-log PUT) per batch: at 100 M
    a month a batch holds 1,000 records, not the run's few, so memory hardly costs."""
    run = _run()
    run.invocations["events"] = 10  # the run: one record a batch
    run.requests["events"] = Counter({"s3:PutObject": 10})
    run.cpu_s["events"] = 0.02
    tpl = replace(TPL, events_batch_size=1000, events_window_s=60)  # the template's
    small, big = (replace(tpl, memory_mb={**tpl.memory_mb, "events": m}) for m in (128, 1769))
    per = {
        t.memory_mb["events"]: _line(model(run, 100_000_000, t), "events: GB-s")
        for t in (small, big)
    }
    # CPU-bound: the same GB-s at any size below one vCPU, the PUT's 20 ms per 1,000 records
    assert per[1769] == pytest.approx(per[128], rel=0.05)
    one_vcpu = lambda_seconds(run, "events", 1769) - 0.02  # the run's waits, per batch
    assert one_vcpu > 0.1  # 10 PUTs at 20 ms and Lambda's 0.5 ms each
    # a ParallelizationFactor spreads a shard's records over more, smaller batches
    assert records_per_batch(replace(TPL, events_parallelization=4), 40.0) == pytest.approx(
        records_per_batch(TPL, 10.0)
    )
