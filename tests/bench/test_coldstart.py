"""Cold start: no handler imports the X-Ray SDK unless tracing is on, `LazyTracer`
builds Powertools' Tracer at the first traced invocation, and no handler imports at
module level a heavy module that only some paths use (DKIM signing and its crypto, the
DNS resolver, Spark). Timing goals live in `make bench` (bench/coldstart.py), not here."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench import coldstart

ROOT = Path(__file__).resolve().parents[2]
PROBE = "import sys, app; print(sorted(m for m in sys.modules if m.startswith('aws_xray_sdk')))"


def test_every_function_is_measured() -> None:
    """A function folder the cold-start checks and bench/coldstart.py leave out (as the
    destinations function once was) would go unchecked and unmeasured."""
    folders = {p.name for p in (ROOT / "functions").iterdir() if (p / "app.py").exists()}
    assert set(coldstart.HANDLERS) == folders


@pytest.mark.parametrize("handler", coldstart.HANDLERS)
def test_a_handler_imports_no_xray_when_tracing_is_off(handler: str) -> None:
    env = {**os.environ, "AWS_LAMBDA_FUNCTION_NAME": handler, "POWERTOOLS_TRACE_DISABLED": "true"}
    out = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=ROOT / "functions" / handler,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert out == "[]"


# imported by some path at first use, never by `import app`
HEAVY = ("dkim", "nacl", "cryptography", "aws_xray_sdk", "pyspark", "dns.resolver", "dns.name")
# per handler, our own modules it must not pull in (bounce needs one exception class of
# delivery's, not the SMTP client, routing, MTA-STS and DKIM behind it)
NOT_IMPORTED: dict[str, tuple[str, ...]] = {
    "bounce": (
        "mailqueue.services.delivery",
        "mailqueue.outbound.smtp",
        "mailqueue.outbound.routing",
        "mailqueue.outbound.dkim",
    ),
    "events": ("mailqueue.backends.aws.backend",),
    # the destinations function sends events: no queue storage, no SMTP
    "destinations": ("mailqueue.backends.aws.backend", "mailqueue.outbound.smtp"),
}
MODULES = "import sys, app; print('\\n'.join(sorted(sys.modules)))"


@pytest.mark.parametrize("handler", coldstart.HANDLERS)
def test_a_handler_imports_no_heavy_module_it_does_not_need(handler: str) -> None:
    env = {**os.environ, "AWS_LAMBDA_FUNCTION_NAME": handler, "POWERTOOLS_TRACE_DISABLED": "true"}
    loaded = set(
        subprocess.run(
            [sys.executable, "-c", MODULES],
            cwd=ROOT / "functions" / handler,
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
    )
    assert "app" in loaded and "boto3" in loaded  # the probe saw a real import
    heavy = sorted(m for m in loaded if any(m == h or m.startswith(h + ".") for h in HEAVY))
    assert heavy == []
    assert sorted(loaded & set(NOT_IMPORTED.get(handler, ()))) == []


TRACED = """
import sys
from mailqueue.compose.xray import LazyTracer
t = LazyTracer(service="probe")
@t.capture_lambda_handler
def handler(event, context):
    return {"ok": event}
print("before", any(m.startswith("aws_xray_sdk") for m in sys.modules))
print("result", handler(1, None))
print("after", any(m.startswith("aws_xray_sdk") for m in sys.modules), t.tracer is not None)
"""


@pytest.mark.parametrize(("disabled", "expect_xray"), [("false", True), ("true", False)])
def test_lazy_tracer_builds_the_tracer_only_when_on(disabled: str, expect_xray: bool) -> None:
    env = {
        **os.environ,
        "AWS_LAMBDA_FUNCTION_NAME": "probe",
        "POWERTOOLS_TRACE_DISABLED": disabled,
        "AWS_XRAY_CONTEXT_MISSING": "IGNORE_ERROR",
    }
    out = subprocess.run(
        [sys.executable, "-c", TRACED], env=env, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert out[0] == "before False"
    assert out[1] == "result {'ok': 1}"
    assert out[2] == f"after {expect_xray} {expect_xray}"


def test_import_profile_reads_importtime() -> None:
    prof = coldstart.import_profile("events")
    assert prof["app"] > 0 and "mailqueue.compose.events" in prof


def test_import_cpu_ms_times_a_real_import() -> None:
    # a handler's import does real work (boto3, Powertools): well above a bare interpreter's
    # process time for nothing, and a number, not a placeholder
    assert coldstart.import_cpu_ms("events") > 10 * coldstart.import_cpu_ms("events", module="gc")


def test_the_bench_never_inherits_dontwritebytecode(monkeypatch: pytest.MonkeyPatch) -> None:
    """With it inherited no .pyc is written and every run compiles from source."""
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    cache = ROOT / "shared" / "mailqueue" / "services" / "__pycache__"
    for pyc in cache.glob("sweeper.*.pyc"):
        pyc.unlink()
    prof = coldstart.import_profile("sweeper")
    assert prof["app"] > 0 and any(cache.glob("sweeper.*.pyc"))
