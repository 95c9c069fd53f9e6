"""The synthetic generator writes what the real producer writes; the benchmark's docs
writer touches only its own section; the EMR bundle holds the job's modules."""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import re
import subprocess
import sys
import zipfile
from collections import Counter
from pathlib import Path
from typing import Any

from mailqueue.core.events import dumps
from mailqueue.core.model import Result
from mq_pipeline import bench, bundle, synth

from tests.pipeline import factory as fx
from tests.pipeline.factory import at

ISO = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$")


def shape(v: Any) -> Any:
    """Keys all the way down (lists by their first element), leaves as a kind."""
    if isinstance(v, dict):
        return {k: shape(x) for k, x in v.items()}
    if isinstance(v, list):
        return [shape(v[0])] if v else []
    if isinstance(v, str) and ISO.match(v):
        return "iso"
    return "value"


def producer_docs() -> dict[str, dict[str, Any]]:
    m = fx.mail("M", "u@d.example", at(0))
    a = fx.attempt(1, at(0), 0.1, 0.2, 451, "4.7.1", "4.7.1 greylisted")
    ok = fx.attempt(2, at(5), 0.1, 0.2, 250, "2.0.0", "Ok")
    evs = [
        fx.send(m, "u@d.example"),
        fx.delay(m, "u@d.example", a, at(5)),
        fx.delivery(m, "u@d.example", ok),
        fx.bounce(m, "u@d.example", at(1), Result(550, "5.1.1", "5.1.1 unknown", "203.0.113.9"), a),
        fx.operator(m, "u@d.example", at(2), "held"),
        fx.reject(fx.mail("R", ["a@x", "b@y"], at(0)), at(0)),
    ]
    return {e.event_type: json.loads(dumps(e)) for e in evs}


def synth_lines(root: Path) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for f in sorted((root / "events").glob("dt=*/hr=*/*.json.gz")):
        part = f"{f.parent.parent.name[3:]}{f.parent.name[3:]}"
        with gzip.open(f, "rt") as fh:
            out += [(part, json.loads(line)) for line in fh]
    return out


def small_cfg(seed: int = 3) -> synth.SynthConfig:
    return synth.SynthConfig(events=4000, hours=4, domains=20, seed=seed, shards=2,
                             dup_rate=0.05, late_rate=0.05, operator_rate=0.05,
                             reject_rate=0.05, lifetime_hours=1.0)


def test_synth_matches_the_producer_shape(tmp_path: Path) -> None:
    """Same fields as the real producer's records, type by type (validity against SES's
    format is tests/events/test_ses_schema.py's job, for both)."""
    synth.generate(small_cfg(), tmp_path, processes=1)
    lines = synth_lines(tmp_path)
    want = producer_docs()
    seen: dict[str, Any] = {}
    for _, doc in lines:
        if doc["mail"]["source"] and (doc["eventType"] != "Bounce" or "attempt" in doc[
            "mailqueue"
        ]):
            seen.setdefault(doc["eventType"], doc)
    assert set(seen) == set(want)
    for t, doc in seen.items():
        assert shape(doc) == shape(want[t]), t
    expiry = [d for _, d in lines if d["eventType"] == "Bounce"
              and d["bounce"]["bouncedRecipients"][0]["status"] == "4.4.7"]
    assert expiry and all(
        (d["bounce"]["bounceType"], d["bounce"]["bounceSubType"]) == ("Transient", "General")
        for d in expiry
    )


def test_synth_mix_duplicates_late_and_determinism(tmp_path: Path) -> None:
    cfg = small_cfg(seed=11)
    n = synth.generate(cfg, tmp_path / "a", processes=1)
    synth.generate(cfg, tmp_path / "b", processes=2)
    a, b = synth_lines(tmp_path / "a"), synth_lines(tmp_path / "b")
    assert len(a) == n and sorted(json.dumps(x) for x in a) == sorted(json.dumps(x) for x in b)
    assert abs(n - cfg.events) < 0.25 * cfg.events
    ids = Counter(d["mailqueue"]["eventId"] for _, d in a)
    assert any(c > 1 for c in ids.values())  # duplicates share the eventId
    late = [1 for part, d in a if part > d["mail"]["timestamp"][:10] + d["mail"]["timestamp"][11:13]
            and d["eventType"] == "Send"]
    assert late  # some Sends were written in a later hour than their time
    types = Counter(d["eventType"] for _, d in a)
    assert types["Send"] > types["DeliveryDelay"] > types["Bounce"] > 0
    assert any(len(d["mail"]["destination"]) > 1 for _, d in a if d["eventType"] == "Reject")
    assert {d["mailqueue"]["operator"]["action"] for _, d in a
            if d["eventType"] == "mailqueue:Operator"} >= {"deleted", "held", "released"}
    domains = Counter(d["mail"]["destination"][0].split("@")[1] for _, d in a
                      if d["eventType"] == "Send")
    top = domains.most_common()
    assert top[0][1] > 3 * top[len(top) // 2][1]  # skewed, not uniform
    assert not list((tmp_path / "a" / "events").glob("dt=*/hr=*/*.tmp"))


def test_bench_docs_section_replaces_only_itself(tmp_path: Path) -> None:
    doc = tmp_path / "benchmarks.md"
    doc.write_text("# Benchmarks\n\n## Queue\n\nqueue numbers\n\n## Pipeline\n\nOLD-SECTION\n\n"
                   "## Later\n\nkeep me\n")
    result = {"size": "10m", "events": 9_716_870, "gz_bytes": 700 * 2**20, "job_s": 88.0,
              "job_inner_s": 80.0, "duckdb_s": 40.0, "match": True, "load_before": 0.5,
              "load_after": 2.0, "driver_memory": "12g", "command": "spark-submit x",
              "runs": [{"wall_s": 91.5, "cpu_s": 160.0}, {"wall_s": 88.0, "cpu_s": 150.0},
                       {"wall_s": 85.0, "cpu_s": 149.0}], "job_cpu_s": 150.0,
              "steps_s": {"read": {"wall_s": 40.0, "jvm_cpu_s": 78.0}}}
    bench.write_section(doc, bench.render_section([result], ["a note"]))
    text = doc.read_text()
    assert "queue numbers" in text and "keep me" in text and "OLD-SECTION" not in text
    assert text.index("## Queue") < text.index("## Pipeline") < text.index("## Later")
    assert "| 9.72 M | 700 MiB | 88.0 | 91.5, 88.0, 85.0 | 150 | 80.0 | 40.0 | yes |" in text
    assert "**88.0 s** median of 3 runs" in text and "a note" in text
    bench.write_section(doc, bench.render_section([result], []))
    assert doc.read_text().count("## Pipeline") == 1
    fresh = tmp_path / "new.md"
    bench.write_section(fresh, bench.render_section([result], []))
    assert fresh.read_text().startswith("# Benchmarks\n\n## Pipeline")


def test_bundle_has_the_job_and_no_extras(tmp_path: Path) -> None:
    z = bundle.build(tmp_path)
    names = set(zipfile.ZipFile(z).namelist())
    assert names == {f"mq_pipeline/{m}" for m in bundle.JOB_MODULES}
    assert (tmp_path / "main.py").read_text().count("from mq_pipeline.job import main") == 1
    again = bundle.build(tmp_path / "again")
    assert again.read_bytes() == z.read_bytes()  # reproducible


def test_the_bundled_job_imports_from_its_zip_alone(tmp_path: Path) -> None:
    """EMR runs main.py with the zip on the path and PySpark, nothing else of ours: every
    module the job imports must be in it (job.py once imported the renderer, which is not)."""
    z = bundle.build(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(z)
    code = "import mq_pipeline.job as j, sys; print(j.__file__); sys.exit(callable(j.main) - 1)"
    done = subprocess.run([sys.executable, "-P", "-c", code], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert str(z) in done.stdout  # the job came from the zip, not from the checkout


def test_spark_submits_pyspark_zips_go_behind_the_installed_package() -> None:
    """Locally the job imports the pip-installed PySpark (compiled bytecode), not the copy
    in its zips that spark-submit puts first; on EMR (Spark's own zips) nothing moves."""
    spec = importlib.util.spec_from_file_location(
        "mq_pipeline_main", Path(bundle.__file__).resolve().parents[1] / "main.py"
    )
    assert spec is not None and spec.loader is not None
    main = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(main)
    lib = "/v/lib/python3.11/site-packages/pyspark/python/lib"
    path = [f"{lib}/pyspark.zip", f"{lib}/py4j-0.10.9.9-src.zip", "/job", "/v/lib/site-packages"]
    main.installed_pyspark_first(path)
    assert path == ["/job", "/v/lib/site-packages", f"{lib}/pyspark.zip",
                    f"{lib}/py4j-0.10.9.9-src.zip"]
    emr = ["/usr/lib/spark/python/lib/pyspark.zip", "/job", "/usr/lib/python3/site-packages"]
    main.installed_pyspark_first(emr)
    assert emr == ["/usr/lib/spark/python/lib/pyspark.zip", "/job",
                   "/usr/lib/python3/site-packages"]


def test_synth_complaints_have_one_event_id_each(tmp_path: Path) -> None:
    """Issue 44, friction 8: two recipients' complaints never share an eventId (copies written
    twice by dup_rate share it, as SES's redeliveries do, and are the same event)."""
    cfg = synth.SynthConfig(events=20_000, hours=4, domains=20, seed=5, shards=1,
                            complaint_rate=0.05, lifetime_hours=1.0)
    synth.generate(cfg, tmp_path, processes=1)
    owners: dict[str, set[tuple[str, str]]] = {}
    for _, d in synth_lines(tmp_path):
        if d["eventType"] == "Complaint":
            who = d["complaint"]["complainedRecipients"][0]["emailAddress"]
            owners.setdefault(d["mailqueue"]["eventId"], set()).add((d["mail"]["messageId"], who))
    assert len(owners) > 20
    assert all(len(v) == 1 for v in owners.values()), [v for v in owners.values() if len(v) > 1]
