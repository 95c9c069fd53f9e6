"""The cost model's fixes of issue 25, finding 4 (bench/cost.py), on synthetic runs."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest

from bench import cost
from tests.bench.test_scale_model import TPL, _item, _rec


def _run() -> cost.Run:
    run = cost.Run(mails=10)
    run.invocations = Counter({"delivery": 10, "ingress": 10, "events": 1, "sweeper": 1})
    run.records_in = Counter({"delivery": 10})
    run.cpu_s = {"delivery": 0.1, "ingress": 0.1, "events": 0.01, "sweeper": 0.01}
    run.requests = {"delivery": Counter({"dynamodb:UpdateItem": 20})}
    run.event_bytes = 10 * 500
    run.sweeps = 1
    run.log_bytes = Counter({"sweeper": 1000})
    run.log_events = Counter({"sweeper": 2})
    run.records = [_rec(None, _item(f"M#{i:04d}ABCDEFGH", "queued")) for i in range(10)]
    return run


def _line(lines: list[cost.Line], start: str) -> float:
    return sum(x.per_month for x in lines if x.item.startswith(start))


def test_delivery_batches_fill_with_the_volume_not_the_run() -> None:
    assert cost.delivery_batch(TPL, 0.38) == pytest.approx(1.0, abs=0.01)  # 1 M/month
    assert cost.delivery_batch(TPL, 1e5) == 10  # a backlog: full batches
    window = replace(TPL, delivery_window_s=5.0)
    assert cost.delivery_batch(window, 38.0) == 10  # 100 M/month with a 5 s window
    lines = cost.model(_run(), 1_000_000, TPL)
    per_inv = cost.PRICES["sqs_standard"]["per_million_requests"] / 1e6 * 2
    # one receive + delete per mail at 1 M/month (the run's batch fill is not used)
    assert _line(lines, "event source receive") == pytest.approx(1e6 * per_inv, rel=0.02)


def test_event_log_is_stored_for_its_retention() -> None:
    lines = cost.model(_run(), 1_000_000, TPL)
    gb = 500 * 1e6 / 2**30
    months = 400 / (cost.SECONDS_PER_MONTH / 86400)
    assert _line(lines, "event-log storage") == pytest.approx(
        gb * cost.PRICES["s3_standard"]["storage_per_gb_month"] * months
    )


def test_event_log_objects_of_128_kb_or_more_tier_to_standard_ia() -> None:
    """Lifecycle moves an object to Standard-IA only from 128 KB (S3's default minimum):
    one stream batch is one object, so small volumes stay in Standard, large ones tier and
    pay one transition request per object."""
    std = cost.PRICES["s3_standard"]["storage_per_gb_month"]
    ia = cost.PRICES["s3_standard_ia"]
    day = 1 / (cost.SECONDS_PER_MONTH / 86400)
    gb = 2**30
    small = cost.event_log_storage(gb, gb / (100 * 1024), TPL)  # 100 KB objects
    assert len(small) == 1 and small[0][1] == pytest.approx(std * 400 * day)
    big_objects = gb / (300 * 1024)
    big = dict(cost.event_log_storage(gb, big_objects, TPL))
    stored = next(v for k, v in big.items() if k.startswith("event-log storage"))
    assert stored == pytest.approx(day * (30 * std + 370 * ia["storage_per_gb_month"]))
    assert stored < small[0][1] / 1.5
    moved = next(v for k, v in big.items() if "transitions" in k)
    assert moved == pytest.approx(big_objects * ia["transition_per_1000"] / 1000)
    # kept no longer than the transition: nothing moves
    short = replace(TPL, events_retention_days=30)
    assert len(cost.event_log_storage(gb, big_objects, short)) == 1


def test_the_templates_delivery_batching_window_reaches_the_model() -> None:
    """Both delivery event sources gather triggers for DeliveryBatchingWindowSeconds (1 s):
    at 100 M mails a month a batch fills, and a receive serves several mails."""
    tpl = cost.Template.load()
    assert tpl.delivery_window_s == 1.0
    assert cost.delivery_batch(tpl, 100e6 / cost.SECONDS_PER_MONTH) > 5
    assert cost.delivery_batch(tpl, 1e6 / cost.SECONDS_PER_MONTH) < 1.2


def test_smtp_time_depends_on_egress_and_overlap() -> None:
    run = _run()
    assert cost.smtp_seconds(run, "relay", 1) == pytest.approx(10 * 0.030)
    assert cost.smtp_seconds(run, "direct", 1) == pytest.approx(10 * 0.400)
    run.smtp_parallel = 10.0
    assert cost.smtp_seconds(run, "direct", 10) == pytest.approx(10 * 0.040)
    assert cost.smtp_seconds(run, "direct", 1) == pytest.approx(10 * 0.400)  # batch of 1


def test_the_sweepers_log_is_priced_per_scheduled_run() -> None:
    tpl = replace(TPL, schedules={"sweeper": 8760.0})
    quiet = _run()
    quiet.log_bytes = Counter()
    quiet.log_events = Counter()
    a = _line(cost.model(_run(), 1_000_000, tpl), "Logs ingestion")
    b = _line(cost.model(quiet, 1_000_000, tpl), "Logs ingestion")
    ovh = cost.ASSUMPTIONS["cw_log_event_overhead_bytes"]
    assert a - b == pytest.approx(8760 * (1000 + 2 * ovh) / 2**30 * 0.5)


# ---------------------------------------------------------------- issue 40: CPU measured whole
def _burn(seconds: float) -> float:
    """Spin until this thread has used `seconds` of CPU; returns what it used."""
    import time

    t0 = time.thread_time()
    x = 0
    while time.thread_time() - t0 < seconds:
        x += 1
    return time.thread_time() - t0


def _lanes_handler(event: object, context: object) -> float:
    """A handler shaped like delivery's: the work on lane threads, the handler waiting."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="delivery-lane") as lanes:
        return sum(lanes.map(_burn, [0.15, 0.15]))


def test_cost_counts_the_cpu_of_the_lanes_a_handler_starts() -> None:
    """The lanes' CPU is the handler's: counting the handler thread alone (before issue
    40) saw a few ms of 300; with the threads it starts counted, all of it."""
    old: dict[str, float] = {}
    used = cost._wrap("delivery", _lanes_handler, old)({}, None)
    assert used >= 0.3
    assert old["delivery"] < 0.1 * used  # the old way: the lanes' work is missing

    cpu: dict[str, float] = {}
    with cost._ThreadCpu(cpu).installed():
        used = cost._wrap("delivery", _lanes_handler, cpu)({}, None)
    assert 0.95 * used <= cpu["delivery"] <= used + 0.1


def test_cost_counts_a_thread_still_running_when_the_handler_returns() -> None:
    """A thread that outlives the invocation is credited what it used so far at the
    handler's return, and the rest when it ends, never twice."""
    import threading

    go_on = threading.Event()
    used: list[float] = []

    def worker() -> None:
        used.append(_burn(0.1))
        go_on.wait(10)
        used.append(_burn(0.1))

    def handler(event: object, context: object) -> None:
        threading.Thread(target=worker, daemon=True).start()
        while not used:
            threading.Event().wait(0.01)

    cpu: dict[str, float] = {}
    with cost._ThreadCpu(cpu).installed():
        t_before = set(threading.enumerate())
        cost._wrap("events", handler, cpu)({}, None)
        at_return = cpu["events"]
        assert at_return >= 0.09
        go_on.set()
        for t in set(threading.enumerate()) - t_before:
            t.join(10)
    assert sum(used) - 0.02 <= cpu["events"] <= sum(used) + 0.05
    assert cpu["events"] > at_return + 0.08
    assert threading.Thread.start is not None and "tagged" not in threading.Thread.start.__name__


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
        t.memory_mb["events"]: _line(cost.model(run, 100_000_000, t), "events: GB-s")
        for t in (small, big)
    }
    # CPU-bound: the same GB-s at any size below one vCPU, the PUT's 20 ms per 1,000 records
    assert per[1769] == pytest.approx(per[128], rel=0.05)
    one_vcpu = cost.lambda_seconds(run, "events", 1769) - 0.02  # the run's waits, per batch
    assert one_vcpu > 0.1  # 10 PUTs at 20 ms and Lambda's 0.5 ms each
    # a ParallelizationFactor spreads a shard's records over more, smaller batches
    assert cost.records_per_batch(replace(TPL, events_parallelization=4), 40.0) == pytest.approx(
        cost.records_per_batch(TPL, 10.0)
    )
