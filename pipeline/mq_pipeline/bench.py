"""`make bench-pipeline`: time the job end to end on synthetic data, check it against DuckDB.

For each size: generate the data once (cached under var/bench/synth-<size>/, reused while
its synth.json matches), run `spark-submit pipeline/main.py` and time the whole process
(JVM start included), compute the headline metrics with DuckDB on the same files, compare,
and finally write a results table into the "## Pipeline" section of docs/benchmarks.md
(only that section is replaced; the rest of the file is kept as is).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from . import reference, synth

UTC = timezone.utc  # noqa: UP017
SIZES = {"1m": 1_000_000, "10m": 10_000_000, "50m": 50_000_000}
# Driver heap per size: the job keeps the de-duplicated events in memory (spilling past it).
DRIVER_MEMORY = {"1m": "4g", "10m": "12g", "50m": "16g"}
JAVA_OPTS = "-XX:+UseParallelGC"
# Job runs per size: this machine's 2 cores are shared (run-to-run spread of identical
# runs was 83-118 s at 10 M), so 10 M is timed three times and the median reported.
REPEATS = {"1m": 1, "10m": 3, "50m": 1}
SECTION = "## Pipeline"


def repo_root() -> Path:
    return Path(__file__).resolve().parents[2]


def ensure_data(root: Path, cfg: synth.SynthConfig) -> tuple[Path, float | None]:
    """The data set for cfg, generated unless a matching one is cached; (dir, seconds)."""
    meta = root / "synth.json"
    want = {**asdict(cfg), "version": synth.SYNTH_VERSION}
    if meta.exists():
        have = json.loads(meta.read_text())
        if all(have.get(k) == v for k, v in want.items()):
            return root, None
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    t0 = time.perf_counter()
    synth.generate(cfg, root)
    return root, time.perf_counter() - t0


def spark_submit_cmd(events: Path, out: Path, day: str, driver_memory: str) -> list[str]:
    venv_bin = Path(sys.executable).parent
    return [
        str(venv_bin / "spark-submit"),
        "--master", "local[*]",
        "--driver-memory", driver_memory,
        "--driver-java-options", JAVA_OPTS,
        "--conf", "spark.ui.enabled=false",  # no web UI to start or feed events to
        str(repo_root() / "pipeline" / "main.py"),
        "--events", str(events),
        "--out", str(out),
        "--date", day,
    ]


def run_job(cmd: list[str], log: Path) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the job's processes: user + system)."""
    env = {
        **os.environ,
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    with log.open("w") as fh:
        proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, check=False)
    took = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"job failed ({proc.returncode}); see {log}")
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    return took, cpu


def bench_one(
    label: str, bench_dir: Path, duck_threads: int | None, repeats: int | None = None
) -> dict[str, Any]:
    cfg = synth.SynthConfig(events=SIZES[label])
    data, gen_s = ensure_data(bench_dir / f"synth-{label}", cfg)
    meta = json.loads((data / "synth.json").read_text())
    day = cfg.start[:10]
    out = bench_dir / f"out-{label}"
    shutil.rmtree(out, ignore_errors=True)
    cmd = spark_submit_cmd(data / "events", out, day, DRIVER_MEMORY[label])
    load_before = os.getloadavg()[0]
    print(f"[bench {label}] job: {' '.join(cmd)}", flush=True)
    runs: list[dict[str, float]] = []
    for i in range(repeats or REPEATS[label]):
        wall, cpu = run_job(cmd, bench_dir / f"job-{label}.log")
        runs.append({"wall_s": round(wall, 1), "cpu_s": round(cpu, 1),
                     "load_after": round(os.getloadavg()[0], 2)})
        print(f"[bench {label}] run {i + 1}: {wall:.1f}s wall, {cpu:.1f}s CPU", flush=True)
    job_s = statistics.median(r["wall_s"] for r in runs)
    load_after = os.getloadavg()[0]
    summary = json.loads((out / "summary.json").read_text())
    start = datetime.fromisoformat(day).replace(tzinfo=UTC)
    end = synth.end_of(cfg)
    print(f"[bench {label}] job {job_s:.1f}s; DuckDB reference...", flush=True)
    tmp = bench_dir / "duckdb-tmp"
    tmp.mkdir(exist_ok=True)
    ref = reference.headline(
        str(data / "events"), start, end, temp_dir=str(tmp), threads=duck_threads
    )
    problems = reference.compare(summary, ref)
    shutil.rmtree(tmp, ignore_errors=True)
    result = {
        "size": label,
        "lines": meta["lines"],
        "events": summary["input"]["events"],
        "gz_bytes": sum(f.stat().st_size for f in (data / "events").rglob("*.gz")),
        "generated_s": None if gen_s is None else round(gen_s, 1),
        "job_s": round(job_s, 1),
        "runs": runs,
        "job_cpu_s": statistics.median(r["cpu_s"] for r in runs),
        "job_inner_s": summary["seconds"],
        "steps_s": summary.get("steps_s"),
        "duckdb_s": ref["seconds"],
        "match": not problems,
        "problems": problems,
        "load_before": round(load_before, 2),
        "load_after": round(load_after, 2),
        "driver_memory": DRIVER_MEMORY[label],
        "command": " ".join(cmd),
        "headline": summary["headline"],
    }
    print(f"[bench {label}] duckdb {ref['seconds']:.1f}s; match={not problems}", flush=True)
    for p in problems:
        print(f"[bench {label}]   MISMATCH {p}", flush=True)
    return result


def _runs(r: dict[str, Any]) -> str:
    return ", ".join(f"{x['wall_s']:.1f}" for x in r.get("runs") or [{"wall_s": r["job_s"]}])


def _fmt_n(n: int) -> str:
    return f"{n / 1e6:.2f} M" if n >= 1e6 else f"{n:,}"


def render_section(results: list[dict[str, Any]], notes: list[str]) -> str:
    """The markdown of the "## Pipeline" section."""
    cpu = platform.processor() or platform.machine()
    lines = [
        SECTION,
        "",
        "Generated by `make bench-pipeline` (`pipeline/mq_pipeline/bench.py`) on this "
        "machine: "
        f"{os.cpu_count()} cores ({cpu}), {_mem_gib()} GiB RAM, Python "
        f"{platform.python_version()}, Spark local[*], run {datetime.now(UTC):%Y-%m-%d %H:%M} UTC.",
        "",
        "Each size is a synthetic day of SES-shaped queue events (`mq_pipeline.synth`: Zipf "
        "domains, retries, bounces, ~1 % duplicates, ~2 % late writes) as gzip JSON lines. "
        "*Job* is the wall time of the whole `spark-submit pipeline/main.py --date ...` "
        "process (JVM start, read, de-duplication, outcomes, every report table, Parquet + "
        "CSV + summary.json): the median of the *runs* (10 M is run three times, the other "
        "sizes once); *job CPU* is the user + system time of those processes (median). "
        "*DuckDB* computes the headline metrics (event counts, outcome "
        "counts, rates, exact time-to-deliver quantiles) on the same files as a reference; "
        "*match* means every count and rate is equal and every percentile lies within "
        "percentile_approx's rank error.",
        "",
        "| events | gzip size | job (s) | runs (s) | job CPU (s) | job, in-process (s) "
        "| DuckDB reference (s) | match | load avg before/after | driver memory |",
        "|---:|---:|---:|---:|---:|---:|---:|:---:|:---:|:---:|",
    ]
    for r in results:
        lines.append(
            f"| {_fmt_n(r['events'])} | {r['gz_bytes'] / 2**20:,.0f} MiB | {r['job_s']:.1f} "
            f"| {_runs(r)} | {r.get('job_cpu_s') or 0:.0f} "
            f"| {r['job_inner_s']:.1f} | {r['duckdb_s']:.1f} | {'yes' if r['match'] else 'NO'} "
            f"| {r['load_before']:.1f} / {r['load_after']:.1f} | {r['driver_memory']} |"
        )
    by = {r["size"]: r for r in results}
    lines.append("")
    if "10m" in by:
        t = by["10m"]["job_s"]
        lines.append(
            f"- 10 M events end to end: **{t:.1f} s** median of {len(by['10m'].get('runs') or [1])}"
            f" runs ({_runs(by['10m'])}) (floor: ≤ 90 s)."
        )
    if "10m" in by and "50m" in by:
        ratio = by["50m"]["job_s"] / by["10m"]["job_s"]
        lines.append(f"- 50 M / 10 M time ratio: **{ratio:.2f}** (floor: ≤ 6).")
    lines += [f"- {n}" for n in notes]
    lines += [
        "- Load average is the machine's 1-minute load before/after the job: other work on "
        "the same 2 cores slows the job, so read the times together with it.",
        "",
        "Per-step wall and JVM CPU seconds of the largest run (from summary.json `steps_s`):",
        "",
    ]
    last = results[-1]
    if last.get("steps_s"):
        lines += ["| step | wall (s) | JVM CPU (s) |", "|---|---:|---:|"]
        for k, v in last["steps_s"].items():
            lines.append(f"| {k} | {v['wall_s']} | {v['jvm_cpu_s']} |")
        lines.append("")
    lines += [
        "Commands (the job command of each size is in var/bench/bench.json):",
        "",
        "```sh",
        "make bench-pipeline                      # 1 M, 10 M, 50 M; data cached in var/bench/",
        "make bench-pipeline BENCH_ARGS='--sizes 1m,10m'",
        *[r["command"].replace(f"{repo_root()}/", "") for r in results[-1:]],
        "```",
        "",
        "Tuning that mattered (each measured on 10 M events, JVM CPU seconds): reading "
        "timestamps as strings and casting the few used (the JSON reader's timestamp pattern "
        "cost about as much as the rest of the parse); one shuffle, by message_id, shared by "
        "de-duplication and the per-recipient aggregation (adaptive execution is switched "
        "off for that query so the checkpoint keeps the partitioning); `localCheckpoint` "
        "instead of `persist` (no columnar cache encoding: ~40 s CPU less); de-duplication as "
        "a hash aggregate (no sort); normalising diagnostic texts after aggregating them; "
        "one pass over events for volumes, reasons and lag; ParallelGC; shuffle partitions = "
        "max(2 x cores, gzip input / 128 MiB); spark.memory.fraction 0.8; narrower "
        "checkpointed rows; the range filter compares the producer's fixed-width UTC "
        "strings instead of parsing each event time twice more (the optimizer inlines the "
        "parse into every reference); the de-duplicated events checkpointed serialized "
        "(GC pauses 4.8 s -> 1.6 s at 10 M; at 50 M the per-row objects had made the "
        "outcomes step alone take 384 s).",
        "",
        "Tried and not kept (no difference beyond the run-to-run spread): JIT thresholds "
        "(C2 compiles ~50 s CPU per run, but tier-3 code is slower), C1 only (150 s), no "
        "tiered compilation (100 s), SerialGC (102 s), off-heap checkpoint (same CPU as "
        "serialized on-heap), Hadoop's raw local file system (no checksum layer), a "
        "hand-written parser for the canonical timestamp form (slower than Spark's cast).",
        "",
    ]
    return "\n".join(lines)


def _mem_gib() -> int:
    try:
        pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        return round(pages / 2**30)
    except (ValueError, OSError):
        return 0


def write_section(doc: Path, section: str) -> None:
    """Replace (or append) the "## Pipeline" section of `doc`, keeping everything else."""
    text = doc.read_text(encoding="utf-8") if doc.exists() else "# Benchmarks\n"
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip() == SECTION), None)
    if start is None:
        new = text.rstrip("\n") + "\n\n" + section.rstrip("\n") + "\n"
    else:
        end = next(
            (i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines)
        )
        before = "\n".join(lines[:start]).rstrip("\n")
        after = "\n".join(lines[end:])
        new = (before + "\n\n" if before else "") + section.rstrip("\n") + "\n"
        if after:
            new += "\n" + after.rstrip("\n") + "\n"
    doc.parent.mkdir(parents=True, exist_ok=True)
    doc.write_text(new, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--sizes", default="1m,10m,50m", help="comma list of 1m, 10m, 50m")
    ap.add_argument("--bench-dir", type=Path, default=repo_root() / "var" / "bench")
    ap.add_argument("--docs", type=Path, default=repo_root() / "docs" / "benchmarks.md")
    ap.add_argument("--no-docs", action="store_true", help="do not touch docs/benchmarks.md")
    ap.add_argument("--duckdb-threads", type=int, default=None)
    ap.add_argument("--note", action="append", default=[], help="a line for the docs section")
    ap.add_argument("--repeat", type=int, default=None, help="job runs per size (default: "
                    + ", ".join(f"{k}: {v}" for k, v in REPEATS.items()) + ")")
    a = ap.parse_args(argv)
    a.bench_dir.mkdir(parents=True, exist_ok=True)
    results_file = a.bench_dir / "bench.json"
    previous = json.loads(results_file.read_text()) if results_file.exists() else {}
    results: dict[str, Any] = {r["size"]: r for r in previous.get("results", [])}
    for label in [s.strip() for s in a.sizes.split(",") if s.strip()]:
        if label not in SIZES:
            raise SystemExit(f"unknown size {label}; use {', '.join(SIZES)}")
        results[label] = bench_one(label, a.bench_dir, a.duckdb_threads, a.repeat)
        ordered = [results[k] for k in SIZES if k in results]
        results_file.write_text(json.dumps({"results": ordered}, indent=2) + "\n")
    ordered = [results[k] for k in SIZES if k in results]
    if not a.no_docs:
        write_section(a.docs, render_section(ordered, a.note))
        print(f"wrote the {SECTION!r} section of {a.docs}")
    bad = [r["size"] for r in ordered if not r["match"]]
    if bad:
        print(f"reference mismatch for {', '.join(bad)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
