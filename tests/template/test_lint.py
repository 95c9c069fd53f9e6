"""`sam validate --lint` and cfn-lint pass, offline (no AWS account, fake credentials)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.template.conftest import ROOT, TEMPLATE, offline_env


def _run(*cmd: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(c) for c in cmd],
        cwd=ROOT,
        env=offline_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_sam_validate_lint(sam_venv: Path) -> None:
    proc = _run(sam_venv / "bin" / "sam", "validate", "--lint", "--template-file", TEMPLATE)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "is a valid SAM Template" in proc.stdout + proc.stderr


def test_cfn_lint(sam_venv: Path) -> None:
    proc = _run(sam_venv / "bin" / "cfn-lint", TEMPLATE)
    assert proc.returncode == 0, proc.stdout + proc.stderr
