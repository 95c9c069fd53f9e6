"""The report bench's DuckDB baseline computes the job's numbers, and its comparison sees a
wrong one; the job's small-input settings leave the shared session as they found it."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from mq_pipeline import job, synth
from mq_pipeline.transforms import UTC, TimeRange
from pyspark.sql import SparkSession

from bench import report_duckdb

# A small day with every kind of event (duplicates, late writes, rejects, operators, DSNs).
CFG = synth.SynthConfig(events=3000, hours=4, domains=15, seed=11, shards=2, dup_rate=0.05,
                        late_rate=0.05, operator_rate=0.05, reject_rate=0.05,
                        lifetime_hours=1.0)
DAY = CFG.start[:10]


@pytest.fixture(scope="module")
def both(
    spark: SparkSession, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("speed")
    synth.generate(CFG, root, processes=1)
    out = root / "report"
    watched = {k: spark.conf.get(k, None) for k in job.SMALL_INPUT_CONF}
    summary = job.run(spark, job.JobConfig(events=str(root / "events"), out=str(out),
                                           rng=TimeRange.day(DAY), top_reasons=4))
    after = {k: spark.conf.get(k, None) for k in job.SMALL_INPUT_CONF}
    start = datetime.fromisoformat(DAY).replace(tzinfo=UTC)
    con = report_duckdb.connect(threads=1)
    ref = report_duckdb.compute(con, report_duckdb.Params(
        events=str(root / "events"), start=start, end=start + timedelta(days=1), top_n=4))
    tables = {}
    for name in report_duckdb.KEYS:
        df = spark.read.parquet(str(out / "parquet" / name))
        tables[name] = [r.asDict() for r in df.collect()]
    yield {"summary": summary, "ref": ref, "tables": tables, "con": con,
           "conf": (watched, after), "out": out}
    con.close()


def test_duckdb_baseline_equals_every_number_of_the_report(both: dict[str, Any]) -> None:
    checked, problems = report_duckdb.compare(both["tables"], both["summary"]["input"],
                                              both["ref"])
    q_checked, q_problems = report_duckdb.check_quantiles(
        both["con"], both["tables"]["delivery"], both["summary"]["percentiles"]["accuracy"])
    assert problems + q_problems == []
    # every table has rows, so the comparison compared something in each
    assert all(both["ref"][name] for name in report_duckdb.KEYS), {
        k: len(both["ref"][k]) for k in report_duckdb.KEYS}
    assert checked > 1000 and q_checked > 20


def test_the_comparison_sees_one_changed_number(both: dict[str, Any]) -> None:
    for table, col in (("volumes", "events"), ("reasons", "reason"), ("sched_lag", "p90_s"),
                       ("delivery", "bytes_delivered"), ("qshape", "recipients")):
        tables = copy.deepcopy(both["tables"])
        row = next(r for r in tables[table] if r.get(col) is not None)
        row[col] = row[col] + ("x" if isinstance(row[col], str) else 1)
        _, problems = report_duckdb.compare(tables, both["summary"]["input"], both["ref"])
        assert len(problems) == 1 and f".{col}:" in problems[0], (table, problems)
    tables = copy.deepcopy(both["tables"])
    overall = next(r for r in tables["delivery"] if r["grain"] == "overall")
    overall["ttd_p50_s"] = overall["ttd_max_s"]
    _, problems = report_duckdb.check_quantiles(both["con"], tables["delivery"], 10_000)
    assert len(problems) == 1 and "overall" in problems[0], problems


def test_small_input_settings_are_put_back(both: dict[str, Any]) -> None:
    watched, after = both["conf"]
    assert after == watched
