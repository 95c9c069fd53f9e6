"""The scale model's arithmetic (bench/model/scale.py), on synthetic runs whose answer is known."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from bench.model import scale
from bench.model.dynamodb import Index
from bench.model.run import Run
from bench.model.state_table import failed_writes
from bench.model.template import Template
from bench.model.trace import entry, family
from tests.bench.model.synthetic import TPL, _item, _rec


def _run(records: list[dict[str, Any]], mails: int) -> Run:
    run = Run(mails=mails)
    run.records = records
    run.invocations = Counter({"delivery": mails, "ingress": mails})
    run.cpu_s = {"delivery": 0.0, "ingress": 0.0}
    run.records_in = Counter({"delivery": mails})
    return run


def test_all_writes_on_one_key_value_bind_at_1000_wcu_over_units_per_mail() -> None:
    # each mail: its item is put into st=queued (1 unit on the index) and moved to
    # st=inflight (a delete on queued + a put on inflight): 2 units on "queued" per mail
    recs = []
    for i in range(50):
        pk = f"M#{i:04d}ABCDEFGH"
        recs.append(_rec(None, _item(pk, "queued")))
        recs.append(_rec(_item(pk, "queued"), _item(pk, "inflight")))
    p = scale.profile(_run(recs, 50), TPL)
    assert p.key_wru[("by_state", "queued")] == pytest.approx(2.0)
    assert p.key_wru[("by_state", "inflight")] == pytest.approx(1.0)
    hot = [
        x
        for x in scale.loads(
            p, scale.Settings("t", delivery_concurrency=1e9, account_concurrency=1e9)
        )
        if x.limit.startswith("DynamoDB writes per")
    ]
    assert min(x.max_rate for x in hot) == pytest.approx(1000 / 2.0)
    # the table's own key is one value per mail: it does not grow with the rate
    assert ("table", "M#*") not in p.key_wru and ("table", "M#*") in p.per_mail_keys


def test_large_items_cost_units_per_kb_on_table_and_index() -> None:
    pk = "M#0001ABCDEFGH"
    big = _item(pk, "queued", pad=2500)  # ~2.6 KB: 3 write units
    units = scale.record_key_units(_rec(None, big), TPL)
    assert ("table", pk, 3) in units and ("by_state", "queued", 3) in units
    # a transactional write bills twice
    assert ("table", pk, 6) in scale.record_key_units(_rec(None, big), TPL, transactional=True)
    # a keys-only projection writes only the keys to the index
    ko = Index("by_state", ("st", "due"), "KEYS_ONLY")
    t = Template(**{**TPL.__dict__, "indexes": (ko,)})
    assert ("by_state", "queued", 1) in scale.record_key_units(_rec(None, big), t)


def test_sharded_key_spreads_the_load_over_its_values() -> None:
    recs = []
    for i in range(80):
        pk = f"M#{i:04d}ABCDEFGH"
        recs.append(_rec(None, _item(pk, f"queued#{i % 8}")))
    p = scale.profile(_run(recs, 80), TPL)
    assert family("queued#7") == "queued#*"
    # 1 unit per mail over 8 values: 1/8 unit per value per mail
    assert p.key_wru[("by_state", "queued#*")] == pytest.approx(1 / 8)


def test_a_small_run_meeting_most_shards_is_still_spread_over_all_of_them() -> None:
    """20 mails over the 64 shards of the template's default meet ~17 values, as many as
    a per-mail key would: the state index's family is still a fixed set of 64 values."""
    recs = []
    for i in range(20):
        pk = f"M#{i:04d}ABCDEFGH"
        recs.append(_rec(None, _item(pk, f"queued#{(i * 7) % 64:02d}")))
    p = scale.profile(_run(recs, 20), TPL)
    assert scale.STATE_SHARDS == 64
    assert p.key_wru[("by_state", "queued#*")] == pytest.approx(1 / 64)


def test_failed_conditional_writes_are_billed_from_the_trace() -> None:
    pk = "M#0001ABCDEFGH"
    run = _run([_rec(None, _item(pk, "queued", pad=1500))], 1)
    params = {"TableName": "x-state", "Key": {"pk": {"S": pk}, "sk": {"S": "G#x"}}}
    failed = {"Error": {"Code": "ConditionalCheckFailedException"}}
    run.trace = [entry("delivery", "dynamodb", "UpdateItem", params, failed, 0.01)]
    n, u = failed_writes(run)
    assert (n, u) == (1, 2)  # the item is ~1.6 KB: 2 units
    assert scale.profile(run, TPL).failed_wru == pytest.approx(2.0)


def test_delivery_concurrency_binds_at_concurrency_over_seconds_per_mail() -> None:
    p = scale.Profile(fn_seconds={"delivery": 0.1}, smtp_transactions=1.0, delivery_records=1.0)
    s = scale.Settings("t", delivery_concurrency=30, smtp_ms=400, smtp_parallel=1)
    rate, first = scale.sustainable(p, s)
    assert first.limit.startswith("SQS event source")
    assert rate == pytest.approx(30 / 0.5)
    # ten transactions at once: 0.1 + 0.04 s per mail
    rate2, _ = scale.sustainable(p, scale.Settings("t", 30, smtp_parallel=10))
    assert rate2 == pytest.approx(30 / 0.14)


def test_burst_drains_at_the_ramp_then_the_ceiling() -> None:
    p = scale.Profile(fn_seconds={"delivery": 0.1}, smtp_transactions=1.0, delivery_records=1.0)
    s = scale.Settings("t", delivery_concurrency=30, smtp_ms=400)
    b = scale.burst(p, s, mails=60_000, window_s=60)
    # 30 concurrent at 0.5 s per mail: 60 mails/s, reached within a few seconds
    assert b.peak_concurrency == pytest.approx(30)
    assert 1000 <= b.drained_s <= 1010
    assert b.submitted_s == pytest.approx(60)


def test_mix_weights_per_mail_loads() -> None:
    a = scale.Profile(key_wru={("by_state", "queued"): 2.0}, target_wru={"table": 4.0})
    b = scale.Profile(key_wru={("by_state", "queued"): 6.0}, target_wru={"table": 8.0})
    m = scale.mix([(0.75, a), (0.25, b)])
    assert m.key_wru[("by_state", "queued")] == pytest.approx(3.0)
    assert m.target_wru["table"] == pytest.approx(5.0)


def test_burst_is_held_by_the_tables_warm_throughput_doubling_every_30_minutes() -> None:
    p = scale.Profile(
        fn_seconds={"delivery": 0.001},
        smtp_transactions=0.0,
        delivery_records=1.0,
        target_wru={"table": 8.0},
    )
    s = scale.Settings("t", delivery_concurrency=2000, account_concurrency=1e9, smtp_ms=0)
    b = scale.burst(p, s, mails=1_800_000, window_s=1)
    assert b.binding == "table warm throughput (doubling)"
    # 4,000 WRU/s / 8 per mail = 500 mails/s, doubling every 1,800 s:
    # delivered(t) = 500 * 1800 / ln 2 * (2^(t/1800) - 1) = 1.8 M at t = 1800 * log2(1 + ln 2 * 2)
    import math

    expect = 1800 * math.log2(1 + math.log(2) * 2)
    assert abs(b.drained_s - expect) < 30


def test_a_small_run_meeting_fewer_shards_than_mails_is_still_spread_over_all_of_them() -> None:
    """20 mails met 13 of the 64 shards (collisions happen): still 64 values, not 13
    (issue 25: a run of the mix read 57 % per key value at 10,000 mails/s from this)."""
    recs = []
    for i in range(20):
        pk = f"M#{i:04d}ABCDEFGH"
        recs.append(_rec(None, _item(pk, f"queued#{i % 13:02d}")))
    p = scale.profile(_run(recs, 20), TPL)
    assert p.key_wru[("by_state", "queued#*")] == pytest.approx(1 / 64)
