"""Issue 44: the first `make report` on a machine does not record the JVM's class archive.

Recording it (-XX:ArchiveClassesAtExit, ~170 MB written at exit) made the first report of a
series take 127-260 s; `make cds` records it, `make test` first, `make run` and `make demo`
in the background. Read from make's dry run (the recipes as make expands them).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _dry(*args: str) -> str:
    out = subprocess.run(
        ["make", "--no-print-directory", "-n", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return out.stdout


def _dump_guard(recipe: str) -> str:
    """The shell condition under which the report's JVM records the archive."""
    lines = recipe.splitlines()
    at = next(i for i, line in enumerate(lines) if "-XX:ArchiveClassesAtExit" in line)
    return next(line for line in reversed(lines[:at]) if "elif" in line or "if [" in line)


def test_a_users_report_never_records_the_archive(tmp_path: Path) -> None:
    events = tmp_path / "events"
    events.mkdir()
    recipe = _dry("report", f"EVENTS={events}", f"PIPELINE_CDS={tmp_path / 'cds'}")
    # only `make cds` sets PIPELINE_CDS_DUMP; a report without the archive says so
    assert _dump_guard(recipe).strip().startswith('elif [ -n "" ]')
    assert "starts without it" in recipe
    cds = _dry("cds", f"PIPELINE_CDS={tmp_path / 'cds'}")
    assert "PIPELINE_CDS_DUMP=1" in cds and "mq_pipeline.synth" in cds


def test_setup_records_the_archive_before_the_first_report(tmp_path: Path) -> None:
    cds = f"PIPELINE_CDS={tmp_path / 'cds'}"
    for target, step in (("test", "flock 9"), ("run", "nohup nice -n 19"), ("demo", "nohup nice")):
        recipe = _dry(target, cds, "REQUIRE_POSTFIX=0")
        assert step in recipe, target
        # before the target's own command
        own = {"test": "-m pytest", "run": "mailqueue_local.run", "demo": "mailqueue_local.demo"}
        assert recipe.index(step) < recipe.index(own[target]), target
