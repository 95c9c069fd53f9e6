"""A small report's Parquet tables written by Arrow from the driver (`arrow_write`) read
back by Spark exactly as the ones Spark's own writer makes: same schema, same rows, every
table and the outcomes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from mq_pipeline import arrow_write, job
from mq_pipeline.transforms import TimeRange
from pyspark.sql import SparkSession

from tests.pipeline import factory as fx
from tests.pipeline.test_pipeline_e2e import scenario

pq = pytest.importorskip("pyarrow.parquet")  # EMR's image has no pyarrow: Spark writes there


def _run(spark: SparkSession, events: Path, out: Path) -> dict[str, Any]:
    cfg = job.JobConfig(events=str(events), out=str(out), rng=TimeRange.day("2026-05-04"),
                        late_hours=6, min_volume=1)
    return job.run(spark, cfg)


def _writer(table: Path) -> str:
    (part,) = table.glob("part-*.parquet")
    return str(pq.ParquetFile(part).metadata.created_by)


@pytest.fixture(scope="module")
def both(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("arrow")
    events = fx.write_events(root, scenario())
    _run(spark, events, root / "arrow")
    mp = pytest.MonkeyPatch()
    mp.setattr(arrow_write, "supports", lambda schema: False)
    try:
        _run(spark, events, root / "spark")
    finally:
        mp.undo()
    return root / "arrow", root / "spark"


@pytest.mark.parametrize("name", [*job.TABLES, "outcomes"])
def test_each_table_reads_back_as_sparks_own(
    spark: SparkSession, both: tuple[Path, Path], name: str
) -> None:
    arrow, ours = (d / "parquet" / name for d in both)
    assert _writer(arrow).startswith("parquet-cpp-arrow"), "not written by Arrow"
    assert _writer(ours).startswith("parquet-mr"), "not written by Spark"
    assert (arrow / "_SUCCESS").exists()
    a, s = spark.read.parquet(str(arrow)), spark.read.parquet(str(ours))
    assert a.schema == s.schema
    def rows(df: Any) -> list[tuple[Any, ...]]:
        return sorted((tuple(r) for r in df.collect()), key=lambda t: [str(v) for v in t])

    assert rows(a) == rows(s)
    assert a.count() > 0 or name in ("rejects", "feedback", "qshape")


def test_a_second_run_replaces_the_table(spark: SparkSession, tmp_path: Path) -> None:
    """Spark's mode("overwrite"): the old part file is gone, only the new one is read."""
    schema = spark.createDataFrame([("x", 1)], "k string, n long").schema
    target = tmp_path / "t"
    arrow_write.write(schema, [("a", 1), ("b", 2)], target)
    arrow_write.write(schema, [("c", 3)], target)
    assert len(list(target.glob("part-*"))) == 1
    assert [tuple(r) for r in spark.read.parquet(str(target)).collect()] == [("c", 3)]


def test_timestamps_keep_their_microseconds_in_any_zone(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Collected timestamps are naive local times (PySpark) or aware ones; either way the
    file holds the same instant to the microsecond."""
    schema = spark.createDataFrame([], "t timestamp").schema
    when = datetime(2026, 5, 4, 23, 59, 59, 999_999, tzinfo=UTC)
    east = when.astimezone(timezone(timedelta(hours=5, minutes=30)))
    naive_local = when.astimezone().replace(tzinfo=None)
    for i, v in enumerate((when, east, naive_local)):
        arrow_write.write(schema, [(v,)], tmp_path / str(i))
        (got,) = spark.read.parquet(str(tmp_path / str(i))).collect()
        assert got["t"] == naive_local, v  # PySpark collects naive local times


def test_supports_only_flat_types_it_maps(spark: SparkSession) -> None:
    assert arrow_write.supports(spark.createDataFrame([], "a string, b int, c double").schema)
    assert not arrow_write.supports(spark.createDataFrame([], "a array<string>").schema)
    assert not arrow_write.supports(spark.createDataFrame([], "a decimal(10,2)").schema)
