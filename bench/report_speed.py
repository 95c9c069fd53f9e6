"""`make bench` (report line): the Spark report against a DuckDB baseline, same files, one run.

For each size the data is generated once with the project's generator (`mq_pipeline.synth`,
cached under var/bench/synth-<size>/ as `make bench-pipeline` does), read once to warm the
page cache, then `make report` (the command a user types: spark-submit with its JVM start,
the job, the HTML renderer) and the DuckDB baseline (`bench.report_duckdb`: every table of
the report, in SQL) are timed alternately on the same files, and every number of every
report table is compared. The ratio of the medians is what the floors are about: both
sides run on the same machine in the same minutes, so load from other work slows both.
Results go to var/bench/report-speed.json and the "## Report speed" section of
docs/benchmarks.md (only that section is replaced).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from mq_pipeline import bench as pipeline_bench
from mq_pipeline import synth

from bench import report_duckdb

UTC = timezone.utc  # noqa: UP017
ROOT = Path(__file__).resolve().parent.parent
SECTION = "## Report speed: Spark report vs DuckDB (issue 28)"
# size -> (synth config, driver memory, timed runs per engine, floor on the ratio)
SMALL = synth.SynthConfig(events=12, hours=1, domains=3, shards=1, seed=7)
SIZES: dict[str, tuple[synth.SynthConfig, str, int, float | None]] = {
    "demo": (SMALL, "4g", 3, None),
    "1m": (synth.SynthConfig(events=1_000_000), "4g", 3, 5.0),
    "10m": (synth.SynthConfig(events=10_000_000), "12g", 1, 2.5),
}
DEMO_FLOOR_S = 15.0  # `make report` on the demo log, quiet machine


def _cpu_children() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def warm(events: Path) -> int:
    """Read every file once, so neither engine pays the first read from disk."""
    n = 0
    for f in sorted(events.rglob("*.gz")):
        n += len(f.read_bytes())
    return n


def run_report(events: Path, out: Path, day: str, memory: str, log: Path) -> dict[str, float]:
    """Time `make report` on `events` (wall and CPU of the whole process tree)."""
    shutil.rmtree(out, ignore_errors=True)
    cmd = ["make", "--no-print-directory", "report", f"EVENTS={events}", f"REPORT_OUT={out}",
           f"ARGS=--date {day}", f"PIPELINE_DRIVER_MEMORY={memory}"]
    c0, t0 = _cpu_children(), time.perf_counter()
    with log.open("w") as fh:
        proc = subprocess.run(cmd, cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT, check=False)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"make report failed ({proc.returncode}); see {log}")
    return {"wall_s": round(wall, 2), "cpu_s": round(_cpu_children() - c0, 1),
            "load": round(os.getloadavg()[0], 1)}


def spark_tables(out: Path) -> dict[str, list[dict[str, Any]]]:
    """The job's report tables, read back from its Parquet output."""
    con = report_duckdb.connect()
    tables = {}
    for name in report_duckdb.KEYS:
        path = out / "parquet" / name
        if not path.exists():
            tables[name] = []
            continue
        cur = con.execute(f"SELECT * FROM read_parquet('{path}/*.parquet')")
        cols = [d[0] for d in cur.description]
        tables[name] = [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]
    con.close()
    return tables


def bench_size(
    label: str, bench_dir: Path, threads: int | None, repeat: int | None = None
) -> dict[str, Any]:
    cfg, memory, repeats, floor = SIZES[label]
    repeats = repeat or repeats
    data, gen_s = pipeline_bench.ensure_data(bench_dir / f"synth-{label}", cfg)
    events = data / "events"
    day = cfg.start[:10]
    start = datetime.fromisoformat(day).replace(tzinfo=UTC)
    # what `--date day` asks the job for: that UTC day
    params = report_duckdb.Params(events=str(events), start=start, end=start + timedelta(days=1))
    gz = warm(events)
    out = bench_dir / f"report-{label}"
    tmp = bench_dir / "duckdb-tmp"
    tmp.mkdir(exist_ok=True)
    spark_runs: list[dict[str, float]] = []
    duck_runs: list[dict[str, float]] = []
    ref: dict[str, Any] = {}
    con = None
    for i in range(repeats):
        print(f"[report-speed {label}] run {i + 1}/{repeats}: make report ...", flush=True)
        spark_runs.append(run_report(events, out, day, memory, bench_dir / f"report-{label}.log"))
        print(f"[report-speed {label}]   spark {spark_runs[-1]}", flush=True)
        if con is not None:
            con.close()
        con = report_duckdb.connect(threads=threads, temp_dir=str(tmp))
        c0 = time.process_time()
        ref = report_duckdb.compute(con, params)
        duck_runs.append({"wall_s": ref["seconds"], "cpu_s": round(time.process_time() - c0, 1),
                          "load": round(os.getloadavg()[0], 1)})
        print(f"[report-speed {label}]   duckdb {duck_runs[-1]}", flush=True)
    assert con is not None
    summary = json.loads((out / "summary.json").read_text())
    tables = spark_tables(out)
    checked, problems = report_duckdb.compare(tables, summary["input"], ref)
    q_checked, q_problems = report_duckdb.check_quantiles(
        con, tables["delivery"], summary["percentiles"]["accuracy"])
    con.close()
    shutil.rmtree(tmp, ignore_errors=True)
    problems += q_problems
    spark_s = statistics.median(r["wall_s"] for r in spark_runs)
    duck_s = statistics.median(r["wall_s"] for r in duck_runs)
    result = {
        "size": label,
        "events": summary["input"]["events"],
        "gz_bytes": gz,
        "generated_s": None if gen_s is None else round(gen_s, 1),
        "spark_runs": spark_runs,
        "duckdb_runs": duck_runs,
        "spark_s": spark_s,
        "duckdb_s": duck_s,
        "ratio": round(spark_s / duck_s, 2) if duck_s else None,
        "floor": floor,
        "steps_s": summary.get("steps_s"),
        "job_inner_s": summary.get("seconds"),
        "numbers_compared": checked + q_checked,
        "rows": {k: len(v) for k, v in tables.items()},
        "problems": problems[:50],
        "match": not problems,
        "driver_memory": memory,
        "command": f"make report EVENTS={events.relative_to(ROOT) if events.is_relative_to(ROOT) else events} "
                   f"REPORT_OUT=... ARGS='--date {day}' PIPELINE_DRIVER_MEMORY={memory}",
    }
    print(f"[report-speed {label}] spark {spark_s:.1f}s, duckdb {duck_s:.1f}s, ratio "
          f"{result['ratio']}, {result['numbers_compared']} numbers compared, "
          f"{len(problems)} differences", flush=True)
    for p in problems[:20]:
        print(f"[report-speed {label}]   DIFF {p}", flush=True)
    return result


def _walls(runs: list[dict[str, float]], digits: int) -> str:
    return ", ".join(f"{x['wall_s']:.{digits}f}" for x in runs)


def _cpu(r: dict[str, Any]) -> str:
    s = statistics.median(x["cpu_s"] for x in r["spark_runs"])
    d = statistics.median(x["cpu_s"] for x in r["duckdb_runs"])
    return f"{s:.1f} / {d:.1f} ({s / d:.1f}×)" if d else f"{s:.1f} / {d:.1f}"


def render(results: list[dict[str, Any]], notes: list[str]) -> str:
    lines = [
        SECTION, "",
        f"Generated by `make bench` (`bench/report_speed.py`), {datetime.now(UTC):%Y-%m-%d %H:%M} "
        f"UTC, {os.cpu_count()} cores. Each size: the same gzip JSON files "
        "(`mq_pipeline.synth`; *demo* is a one-hour log of 16 lines (20 events), the size of `make demo`'s) read "
        "by `make report` (whole command: JVM start, job, renderer) and by the DuckDB "
        "baseline (`bench/report_duckdb.py`: every report table in SQL, exact quantiles), "
        "timed alternately in one run; every number of every table compared "
        "(counts and integers equal, sums of doubles to 1e-9 relative, the time-to-deliver "
        "percentiles within percentile_approx's rank error of DuckDB's exact ones).",
        "",
        "**The machine was shared** (load average in the table): absolute times are slow "
        "and noisy; the ratio is fair because both engines ran on the same files in the same "
        "minutes.",
        "",
        "| size | events | gzip | `make report` runs (s) | DuckDB runs (s) | ratio (median) "
        "| floor | CPU s, Spark / DuckDB (ratio) | numbers compared | equal | load |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|:---:|---:|",
    ]
    for r in results:
        floor = f"≤ {r['floor']}×" if r["floor"] else f"≤ {DEMO_FLOOR_S:.0f} s quiet"
        loads = [x["load"] for x in r["spark_runs"] + r["duckdb_runs"]]
        lines.append(
            f"| {r['size']} | {r['events']:,} | {r['gz_bytes'] / 2**20:,.1f} MiB "
            f"| {_walls(r['spark_runs'], 1)} | {_walls(r['duckdb_runs'], 2)} "
            f"| **{r['ratio']}×** | {floor} | {_cpu(r)} | {r['numbers_compared']:,} "
            f"| {'yes' if r['match'] else 'NO'} | {min(loads):.1f}-{max(loads):.1f} |")
    lines.append("")
    for r in results:
        if r.get("steps_s"):
            steps = ", ".join(f"{k} {v['wall_s']}" for k, v in r["steps_s"].items())
            lines.append(f"- {r['size']}: job steps (s wall): {steps}.")
    lines += [f"- {n}" for n in notes]
    lines += ["", "```sh", "make bench                      # this section is the report line",
              "PYTHONPATH=pipeline .venv/bin/python -m bench.report_speed --sizes demo,1m",
              "```", ""]
    return "\n".join(lines)


def write_section(doc: Path, section: str) -> None:
    """Replace (or append) this section of `doc`, keeping everything else."""
    text = doc.read_text(encoding="utf-8") if doc.exists() else "# Benchmarks\n"
    lines = text.splitlines()
    start = next((i for i, x in enumerate(lines) if x.strip() == SECTION), None)
    if start is None:
        doc.write_text(text.rstrip("\n") + "\n\n" + section.rstrip("\n") + "\n", encoding="utf-8")
        return
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")),
               len(lines))
    new = lines[:start] + section.rstrip("\n").splitlines() + ([""] + lines[end:] if end < len(
        lines) else [])
    doc.write_text("\n".join(new).rstrip("\n") + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--sizes", default="demo,1m,10m")
    ap.add_argument("--bench-dir", type=Path, default=ROOT / "var" / "bench")
    ap.add_argument("--docs", type=Path, default=ROOT / "docs" / "benchmarks.md")
    ap.add_argument("--no-docs", action="store_true")
    ap.add_argument("--threads", type=int, default=None, help="DuckDB threads (default: all)")
    ap.add_argument("--note", action="append", default=[])
    ap.add_argument("--repeat", type=int, default=None, help="timed runs per engine and size")
    a = ap.parse_args(argv)
    a.bench_dir.mkdir(parents=True, exist_ok=True)
    results = [bench_size(s.strip(), a.bench_dir, a.threads, a.repeat)
               for s in a.sizes.split(",") if s.strip()]
    (a.bench_dir / "report-speed.json").write_text(json.dumps(results, indent=2) + "\n")
    if not a.no_docs:
        write_section(a.docs, render(results, a.note))
        print(f"wrote {SECTION!r} in {a.docs}")
    failed = [r["size"] for r in results if not r["match"]]
    if failed:
        print(f"numbers differ for {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
