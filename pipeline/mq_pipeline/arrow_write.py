"""Parquet for a small report's tables, written from the driver without a Spark job.

A demo report's tables are a few rows each, and writing one through Spark is a job of its
own (analysis of the write command, a commit protocol, a task): ~0.2-0.5 s of CPU even on
a warm JVM, eleven times per report (measured in docs/benchmarks.md, "Report speed").
The rows come to the driver anyway (the CSVs and summary.json are made from them), so for
a local output they are written from there with Arrow's Parquet writer (pyarrow, the
library PySpark's own `sql` extra installs):

* the layout Spark writes: one `part-00000-<uuid>-c000.snappy.parquet` and `_SUCCESS` in
  the table's directory, which is replaced (Spark's `mode("overwrite")`);
* Spark's schema in the footer under the key Spark's writer uses
  (`org.apache.spark.sql.parquet.row.metadata`), so Spark reads back the same schema;
* timestamps as INT64 microseconds, UTC-adjusted, which Spark reads as `TimestampType`.

`tests/pipeline/test_arrow_write.py` reads every table of a report back with Spark from
both writers and compares them. Big logs, non-local outputs (s3:// on EMR), a type not in
`_ARROW` and a Python without pyarrow keep Spark's writer.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from pyspark.sql import types as T

SPARK_SCHEMA_KEY = "org.apache.spark.sql.parquet.row.metadata"


def _arrow_types() -> dict[type, Any] | None:
    try:
        import pyarrow as pa
    except ImportError:
        return None
    return {
        T.StringType: pa.string(),
        T.IntegerType: pa.int32(),
        T.LongType: pa.int64(),
        T.DoubleType: pa.float64(),
        T.BooleanType: pa.bool_(),
        T.DateType: pa.date32(),
        T.TimestampType: pa.timestamp("us", tz="UTC"),
    }


def supports(schema: T.StructType) -> bool:
    """pyarrow is importable and every column is a flat type it is given here."""
    types = _arrow_types()
    return types is not None and all(type(f.dataType) in types for f in schema.fields)


def _micros(v: datetime | None) -> int | None:
    """A collected TimestampType value (naive local time, or aware) as epoch microseconds,
    exactly: `timestamp()` of the whole seconds, then the microseconds (a float of the
    whole value would round them)."""
    if v is None:
        return None
    return int(v.replace(microsecond=0).timestamp()) * 1_000_000 + v.microsecond


def write(
    schema: T.StructType, rows: Sequence[Any], directory: Path,
    no_dictionary: Sequence[str] = (),
) -> None:
    """Replace `directory` with one Parquet file of `rows` (collected `Row`s of `schema`).
    `no_dictionary`: columns of unique values (a dictionary would be built and dropped)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    types = _arrow_types()
    assert types is not None and supports(schema), "caller checks supports() first"
    fields, arrays = [], []
    for i, f in enumerate(schema.fields):
        typ = types[type(f.dataType)]
        values = [r[i] for r in rows]
        if isinstance(f.dataType, T.TimestampType):
            values = [_micros(v) for v in values]
        fields.append(pa.field(f.name, typ, f.nullable))
        arrays.append(pa.array(values, type=typ))
    table = pa.Table.from_arrays(
        arrays, schema=pa.schema(fields, metadata={SPARK_SCHEMA_KEY: schema.json()})
    )
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    dictionary: bool | list[str] = True
    if no_dictionary:
        dictionary = [f.name for f in schema.fields if f.name not in no_dictionary]
    pq.write_table(
        table, directory / f"part-00000-{uuid.uuid4()}-c000.snappy.parquet",
        compression="snappy", use_dictionary=dictionary,
    )
    (directory / "_SUCCESS").write_bytes(b"")
