"""Template checks: the parsed template, and SAM's own virtual environment (.venv-sam)."""

from __future__ import annotations

import fcntl
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from mailqueue_local.cfn import load_template

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "template.yaml"
SAM_VENV = ROOT / ".venv-sam"


@pytest.fixture(scope="session")
def template() -> dict[str, Any]:
    return load_template(TEMPLATE)


def offline_env(**extra: str) -> dict[str, str]:
    """No AWS account: fake credentials, a region, no telemetry, no profile."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        AWS_DEFAULT_REGION="us-east-1",
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        SAM_CLI_TELEMETRY="0",
        **extra,
    )
    return env


@pytest.fixture(scope="session")
def sam_venv() -> Path:
    """.venv-sam, created by `make sam-venv` when missing or stale (a fresh clone's first
    run installs aws-sam-cli there: about two minutes, once). Under `make test`'s workers
    (pytest-xdist) two files may ask at once: an exclusive lock on var/sam-venv.lock lets
    one install while the other waits, then finds it done."""
    lock = ROOT / "var" / "sam-venv.lock"
    lock.parent.mkdir(exist_ok=True)
    with lock.open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        proc = subprocess.run(
            ["make", "-s", "sam-venv"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
    assert proc.returncode == 0, f"make sam-venv failed:\n{proc.stdout}\n{proc.stderr}"
    assert (SAM_VENV / "bin" / "sam").exists()
    return SAM_VENV
