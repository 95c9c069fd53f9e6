"""Cold import time of each Lambda handler: `python -X importtime -c "import app"`.

A fresh interpreter per run (nothing imported before), in the function's directory as
Lambda runs it, with the .pyc files already written (one warm-up run first, as a deployed
package ships them); the figure is the cumulative time of the `app` module, the median of
`runs`. Lambda's own runtime start and the network are not in it: this is what our code
and its imports cost at the start of a cold invocation. Tracing is off (the template's
default), as it is in the functions' environment. PYTHONDONTWRITEBYTECODE is dropped from
the child's environment: with it set (as in some shells) no .pyc is ever written and every
run would compile every module from source.
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HANDLERS = ("admin", "bounce", "delivery", "destinations", "events", "ingress", "sweeper")
FLOOR_MS = 300.0
_LINE = re.compile(r"import time:\s+(\d+)\s+\|\s+(\d+)\s+\|(\s*)(\S+)")


def in_handler(handler: str, *args: str, root: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """A fresh interpreter in functions/<handler>/ with the environment a Lambda container
    of it has (its name, tracing off, the region; .pyc files used)."""
    env = {
        **{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"},
        "AWS_LAMBDA_FUNCTION_NAME": f"mailqueue-{handler}",
        "POWERTOOLS_TRACE_DISABLED": "true",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    return subprocess.run(
        [sys.executable, *args],
        cwd=root / "functions" / handler,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )


def import_profile(handler: str, root: Path = ROOT) -> dict[str, int]:
    """One cold import: cumulative microseconds of each module imported at top level of
    the handler (``app`` itself included)."""
    out = in_handler(handler, "-X", "importtime", "-c", "import app", root=root).stderr
    result: dict[str, int] = {}
    for line in out.splitlines():
        m = _LINE.match(line)
        if m and len(m.group(3)) <= 3:  # `app` and what it imports directly
            result[m.group(4)] = int(m.group(2))
    return result


_CPU = "import time; t = time.process_time(); import {}; print(time.process_time() - t)"


def import_cpu_ms(handler: str, root: Path = ROOT, module: str = "app") -> float:
    """CPU time (ms) of one cold `import app`: unlike importtime's wall clock it leaves out
    the waits for a core, so it stays comparable on a machine other work keeps busy."""
    env = {
        **{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"},
        "AWS_LAMBDA_FUNCTION_NAME": f"mailqueue-{handler}",
        "POWERTOOLS_TRACE_DISABLED": "true",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    out = subprocess.run(
        [sys.executable, "-c", _CPU.format(module)],
        cwd=root / "functions" / handler,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return float(out) * 1000


def measure(runs: int = 5, root: Path = ROOT) -> dict[str, dict[str, float]]:
    """handler -> {"median_ms", "min_ms", "max_ms", "xray": 0/1, "top": ...}."""
    out: dict[str, dict[str, float]] = {}
    for h in HANDLERS:
        import_profile(h, root)  # writes the .pyc files
        profiles = [import_profile(h, root) for _ in range(runs)]
        totals = [p["app"] / 1000 for p in profiles]
        cpu = [import_cpu_ms(h, root) for _ in range(runs)]
        out[h] = {
            "cpu_ms": statistics.median(cpu),
            "median_ms": statistics.median(totals),
            "min_ms": min(totals),
            "max_ms": max(totals),
            "xray": float(any("aws_xray_sdk" in k for p in profiles for k in p)),
        }
    return out


def report(before: dict[str, dict[str, float]] | None = None, runs: int = 5) -> list[str]:
    now = measure(runs)
    load = os.getloadavg()[0]
    lines = [
        "### Cold import per handler",
        "",
        f"`python -X importtime -c 'import app'` in functions/<name>/, a fresh interpreter "
        f"per run, .pyc present, median of {runs} (load average {load:.1f} when measured; "
        "`make bench` → `python -m bench.coldstart`). Floor: ≤ 300 ms (importtime's wall "
        "clock; the CPU column is the same import's process time, which the machine's other "
        "work does not inflate).",
        "",
        "| handler | "
        + ("before (ms) | " if before else "")
        + "median (ms) | min–max | CPU, median (ms) | X-Ray SDK imported | ≤ 300 ms |",
        "|---|" + ("---:|" if before else "") + "---:|---:|---:|:---:|:---:|",
    ]
    for h, m in now.items():
        b = f"{before[h]['median_ms']:.0f} | " if before and h in before else ""
        lines.append(
            f"| {h} | {b}{m['median_ms']:.0f} | {m['min_ms']:.0f}–{m['max_ms']:.0f} | "
            f"{m['cpu_ms']:.0f} | "
            f"{'yes' if m['xray'] else 'no'} | {'yes' if m['median_ms'] <= FLOOR_MS else '**no**'} |"
        )
    return lines


if __name__ == "__main__":
    print("\n".join(report(runs=int(sys.argv[1]) if len(sys.argv) > 1 else 5)))
