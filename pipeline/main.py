"""Entry point for spark-submit (locally and on EMR Serverless).

    spark-submit --master 'local[*]' pipeline/main.py --events var/events --out var/report
    spark-submit --py-files mq_pipeline.zip main.py --events s3://b/events --out s3://b/report

Locally `mq_pipeline` imports from this file's directory; on EMR from the --py-files zip.
"""

import sys
from pathlib import PurePath


def installed_pyspark_first(path: list[str]) -> None:
    """Put the zips of a pip-installed PySpark behind site-packages on `path`.

    spark-submit puts $SPARK_HOME/python/lib/{pyspark,py4j-*}.zip at the head of the
    path. When SPARK_HOME is the pip-installed `pyspark` package (local runs), the same
    modules sit in site-packages with their compiled bytecode, while from a zip ~2 MB of
    source is compiled again on every run: 1.2 s of a small report (docs/benchmarks.md,
    "Report speed"). On EMR, SPARK_HOME is Spark's own directory and nothing moves.
    """
    zips = [
        p for p in path
        if p.endswith(".zip") and PurePath(p).parent.match("site-packages/pyspark/python/lib")
    ]
    for p in zips:
        path.remove(p)
        path.append(p)


installed_pyspark_first(sys.path)

from mq_pipeline.job import main  # noqa: E402 - after the path is ordered

if __name__ == "__main__":
    sys.exit(main())
