"""One local Spark session for the whole pipeline test session (JVM start-up is slow)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A Spark test that hangs ends the run at its timeout instead of stalling it: the
    thread method (the signal method never fired in a hung collect, its SIGALRM taken by
    another thread while the main thread sat in py4j's socket read)."""
    for item in items:
        if "tests/pipeline/" in item.nodeid.replace("\\", "/") and not item.get_closest_marker(
            "timeout"
        ):
            item.add_marker(pytest.mark.timeout(300, method="thread"))


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """local[1] with 2 shuffle partitions: small data, no UI, loopback only."""
    old = os.environ.get("SPARK_LOCAL_IP")
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    session = (
        SparkSession.builder.master("local[1]")
        .appName("mq-pipeline-tests")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "1")
        .config("spark.ui.enabled", "false")
        # the JVM's heap (Spark's default 1g): in local mode an OutOfMemoryError kills the
        # task's thread and the job waits for it forever (SPARK-1929's symptom); a CI run
        # of 2026-12-03 hung so in test_reputation_table's collect, no task running
        .config("spark.driver.memory", "3g")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        # Tiny data: skip adaptive re-planning, which only adds jobs here.
        .config("spark.sql.adaptive.enabled", "false")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()
        if old is None:
            os.environ.pop("SPARK_LOCAL_IP", None)
        else:
            os.environ["SPARK_LOCAL_IP"] = old
