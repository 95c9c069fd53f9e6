"""The fuzz tests' stack: `make run`'s, with --strict-limits, delivery kept from starting
(its event source mapping left disabled) and the sweeper idle, so what the queue holds
afterwards is exactly what the fuzzed requests wrote."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.local.test_run import PYTHON, REPO, Stack, _stop, _wait_ready


@pytest.fixture()
def quiet_stack(tmp_path: Path) -> Iterator[Stack]:
    stdout, stderr = tmp_path / "stdout.txt", tmp_path / "stderr.txt"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MQ_", "MAILQUEUE_"))}
    python = PYTHON if PYTHON.exists() else Path(sys.executable)
    argv = [str(python), "-m", "mailqueue_local.run", "--var", str(tmp_path / "var")]
    argv += ["--port", "0", "--sweep-interval", "86400", "--strict-limits"]
    argv += ["--disable-trigger", "delivery"]  # delivery never runs: nothing moves
    with open(stdout, "wb") as out, open(stderr, "wb") as err:
        proc = subprocess.Popen(
            argv, cwd=REPO, stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=env
        )
    try:
        running = Stack(proc, _wait_ready(proc, stdout, stderr), stdout, stderr)
        yield running
        assert running.limit_violations() == [], "requests over AWS limits (moto accepted them)"
        assert _stop(proc) == 0, stderr.read_text()[-2000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
