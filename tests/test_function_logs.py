"""Issue 28, item 18: a warning from a function's service module reaches its log output.

Powertools' ``Logger(service=name)`` adds ``SuppressFilter(name)`` to every root handler,
and that filter drops any record whose logger name *contains* ``name``: a service called
``delivery`` silenced every record of ``mailqueue.services.delivery``. Each function runs
in a fresh interpreter with a root handler installed first, as the Lambda runtime's
bootstrap does, then imports the handler module and logs from its service module.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# function -> the service module(s) whose warnings must reach the function's log
SERVICES = {
    "delivery": ["mailqueue.services.delivery", "mailqueue.outbound.smtp"],
    "bounce": ["mailqueue.services.bounce"],
    "sweeper": ["mailqueue.services.sweeper"],
    "events": ["mailqueue.services.eventlog", "mailqueue.core.events"],
    "ingress": [
        "mailqueue.services.ingress.pipeline",  # the doors' one acceptance pipeline
        "mailqueue.services.ingress.answers",
        "mailqueue.services.ingress.doors.batch",
        "mailqueue.services.ingress.doors.ses",
    ],
    "admin": ["mailqueue.services.admin.api"],
}

SNIPPET = """
import importlib, logging, sys
# the Lambda runtime's bootstrap: one handler on the root logger, before the handler imports
handler = logging.StreamHandler(sys.stdout)
handler.setFormatter(logging.Formatter("RUNTIME %(name)s %(levelname)s %(message)s"))
logging.getLogger().addHandler(handler)
importlib.import_module(sys.argv[1])
for name in sys.argv[2:]:
    importlib.import_module(name)  # the module exists; its logger is named after it
    logging.getLogger(name).warning("marker from %s", name)
"""


@pytest.mark.parametrize("function", sorted(SERVICES))
def test_service_warning_reaches_function_log(function: str) -> None:
    modules = SERVICES[function]
    out = subprocess.run(
        [sys.executable, "-c", SNIPPET, f"functions.{function}.app", *modules],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "AWS_DEFAULT_REGION": "us-east-1"},
    )
    assert out.returncode == 0, out.stderr
    for name in modules:
        assert f"RUNTIME {name} WARNING marker from {name}" in out.stdout, (function, out)
