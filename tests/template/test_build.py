"""`sam build` (no Docker) produces layers and functions without test or analytics code.

Builds into a temporary folder with the Makefile's own `build` target (python3.12 from
pyenv on PATH); the deps layer's wheels come from the package index, so this needs it.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.template.conftest import ROOT, offline_env

pytestmark = pytest.mark.slow

# (cryptography left this list: the admin function's doctor derives DKIM public records)
FORBIDDEN = {
    "moto",
    "pytest",
    "pyspark",
    "duckdb",
    "hypothesis",
    "aiosmtpd",
    "mypy",
    "ruff",
    "aws_sam_cli",
    "aws_sam_translator",
    "cfn_lint",
    "werkzeug",
    "flask",
    "docker",
    "py4j",
    "pandas",
    "pyarrow",
}
FUNCTIONS = ("Ingress", "Delivery", "Bounce", "Sweeper", "Admin", "Events")
ELF_AARCH64 = 0xB7


def _dists(folder: Path) -> dict[str, str]:
    """Installed distributions in a layer folder: normalised name → version."""
    out = {}
    for info in folder.glob("*.dist-info"):
        name, _, version = info.name[: -len(".dist-info")].partition("-")
        out[re.sub(r"[-_.]+", "_", name).lower()] = version
    return out


def _size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


@pytest.fixture(scope="module")
def build(sam_venv: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sam") / "build"
    proc = subprocess.run(
        ["make", "-s", "build", f"SAM_BUILD_DIR={out}"],
        cwd=ROOT,
        env=offline_env(),
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return out


def test_functions_are_their_handler_only(build: Path) -> None:
    for name in FUNCTIONS:
        files = {
            p.relative_to(build / f"{name}Function").as_posix()
            for p in (build / f"{name}Function").rglob("*")
            if p.is_file()
        }
        assert files == {"app.py"}, (name, files)


def test_deps_layer_holds_the_pinned_runtime_dependencies_only(build: Path) -> None:
    python = build / "DepsLayer" / "python"
    dists = _dists(python)
    pins = {}
    for line in (ROOT / "layers/deps/requirements.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            pins[re.sub(r"[-_.]+", "_", name).lower()] = version
    assert {k: dists.get(k) for k in pins} == pins
    assert not FORBIDDEN & set(dists), FORBIDDEN & set(dists)
    for so in python.rglob("*.so"):
        machine = int.from_bytes(so.read_bytes()[18:20], "little")
        assert machine == ELF_AARCH64, f"{so.name} is not built for arm64"


def test_mailqueue_layer_is_the_package_alone(build: Path) -> None:
    python = build / "MailqueueLayer" / "python"
    assert _dists(python) == {"mailqueue": "0.1.0"}
    tops = {p.name for p in python.iterdir() if not p.name.endswith(".dist-info")}
    assert tops == {"mailqueue"}
    assert not any(p.name.startswith("test") for p in python.rglob("*"))
    assert (python / "mailqueue" / "backends" / "aws" / "backend.py").exists()
    # the local runtime and the test-only limit guard stay out of Lambda
    assert not (python / "mailqueue_local").exists()
    assert not any(p.name in ("limitguard.py", "motopatch.py") for p in python.rglob("*.py"))


def test_everything_fits_lambda(build: Path) -> None:
    layers = _size(build / "DepsLayer") + _size(build / "MailqueueLayer")
    for name in FUNCTIONS:
        # 250 MB unzipped for a function with its layers
        assert layers + _size(build / f"{name}Function") < 250 * 1024 * 1024
