"""Issue 28, items 1, 5 and 7: what a newcomer following README.md is told."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from mailqueue_local.eventlogs import note
from mailqueue_local.run import port_hint

ROOT = Path(__file__).resolve().parents[2]


def _log(path: Path, mtime: float) -> None:
    f = path / "dt=2026-11-27" / "hr=19" / "part.json.gz"
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_bytes(b"x")
    os.utime(f, (mtime, mtime))


def test_report_after_a_demo_names_the_demos_log(tmp_path: Path) -> None:
    run, demo = tmp_path / "events", tmp_path / "demo" / "events"
    _log(run, 1_000_000)
    _log(demo, 2_000_000)
    line = note(run, demo)
    assert line is not None and f"make report EVENTS={demo}" in line and "older" in line
    _log(run, 3_000_000)  # a later make run: the default is the right log again
    assert note(run, demo) is None
    assert note(demo, demo) is None


def test_report_with_only_a_demo_log_names_it(tmp_path: Path) -> None:
    demo = tmp_path / "demo" / "events"
    _log(demo, 2_000_000)
    line = note(tmp_path / "events", demo)
    assert line is not None and "empty" in line and f"EVENTS={demo}" in line


def test_make_report_runs_the_note_first(tmp_path: Path) -> None:
    out = subprocess.run(
        ["make", "-n", "report"], cwd=ROOT, capture_output=True, text=True, timeout=60
    ).stdout
    assert out.index("mailqueue_local.eventlogs") < out.index("spark-submit")


def test_port_in_use_hint_says_how_through_make() -> None:
    hint = port_hint(3000)
    assert "port 3000" in hint and 'make run RUN_ARGS="--port 0"' in hint


def _targets() -> set[str]:
    names: set[str] = set()
    for f in [ROOT / "Makefile", *sorted((ROOT / "mk").glob("*.mk"))]:
        for line in f.read_text().splitlines():
            if line.startswith(".PHONY:"):
                names.update(line.split(":", 1)[1].split())
    return names


def test_make_help_lists_every_target_with_one_line() -> None:
    out = subprocess.run(
        ["make", "--no-print-directory", "help"], cwd=ROOT, capture_output=True, text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    listed = {}
    for line in out.stdout.splitlines():
        m = re.match(r"\s*([A-Za-z0-9_.-]+)\s{2,}(\S.*)$", line)
        if m:
            assert m.group(1) not in listed, f"{m.group(1)} listed twice"
            listed[m.group(1)] = m.group(2)
    missing = sorted(_targets() - set(listed))
    assert missing == [], f"targets without a '## help' line: {missing}"


@pytest.mark.parametrize("target", ["typecheck", "lint"])
def test_typecheck_has_a_recipe(target: str) -> None:
    out = subprocess.run(
        ["make", "-n", target], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0 and "mypy" in out.stdout, out


def test_a_remote_log_gets_no_note(capsys: pytest.CaptureFixture[str]) -> None:
    from mailqueue_local.eventlogs import main

    assert main(["s3a://bucket/events"]) == 0
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize(
    ("events", "out"),
    [
        ("var/events", "var/report"),
        ("var/demo/events", "var/demo/report"),
        ("s3a://bucket/events", "var/report"),
        ("/tmp/some-log", "var/report"),
    ],
)
def test_demo_report_gets_its_own_folder(events: str, out: str) -> None:
    """Issue 44, friction 2: `make report EVENTS=var/demo/events` leaves make run's report."""
    text = subprocess.run(
        ["make", "-n", "report", f"EVENTS={events}"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    ).stdout
    assert f"--out {out} " in text or text.rstrip().endswith(f"--out {out}"), text[-400:]


def test_a_busy_api_port_is_refused_before_anything_starts(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 44, friction 4: the port is checked first, not after a minute of starting moto,
    the resources and the functions; what starts is said step by step."""
    import socket

    from mailqueue_local.run import main
    from mailqueue_local.stack import LocalStack, StackOptions

    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen(1)
    port = held.getsockname()[1]
    steps: list[str] = []
    try:
        with pytest.raises(OSError, match=f"API port 127.0.0.1:{port} is in use"):
            LocalStack(
                StackOptions(var_dir=tmp_path / "var", api_port=port, progress=steps.append)
            ).start()
        assert steps == []  # refused before step 1 (moto) began
        with caplog.at_level("ERROR"):
            assert main(["--port", str(port), "--var", str(tmp_path / "var2")]) == 1
        assert f"port {port} in use" in caplog.text and "--port 0" in caplog.text
    finally:
        held.close()
