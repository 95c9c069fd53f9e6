"""`make run --pools local`: the template deployed into moto with two egress pools, the
real handlers, and the sink filing each transaction's peer address: a transactional mail
leaves from the default pool's 127.0.0.2, a bulk one from the bulk pool's 127.0.0.3 (its
own queue, polled like the template's other event sources) with the pool's EHLO name."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.local.test_run import PYTHON, REPO, Stack


@pytest.fixture()
def pooled(tmp_path: Path) -> Iterator[Stack]:
    stdout, stderr = tmp_path / "stdout.txt", tmp_path / "stderr.txt"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MQ_", "MAILQUEUE_"))}
    python = PYTHON if PYTHON.exists() else Path(sys.executable)
    cmd = [str(python), "-m", "mailqueue_local.run", "--var", str(tmp_path / "var"),
           "--port", "0", "--strict-limits", "--pools", "local"]  # fmt: skip
    with open(stdout, "wb") as out, open(stderr, "wb") as err:
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=out, stderr=err,
                                stdin=subprocess.DEVNULL, env=env)  # fmt: skip
    try:
        running = Stack(proc, _ready(proc, stdout, stderr), stdout, stderr)
        yield running
        assert running.limit_violations() == []
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


def _ready(proc: subprocess.Popen[bytes], stdout: Path, stderr: Path) -> dict[str, Any]:
    """The READY line. The stack with two pools deploys ~30 more resources into moto
    (a start of 69 s on this 2-core host under load): a startup wait, not an assertion."""
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        for line in stdout.read_text().splitlines():
            if line.startswith("READY "):
                ready: dict[str, Any] = json.loads(line[len("READY ") :])
                return ready
        if proc.poll() is not None:
            pytest.fail(f"the stack exited with {proc.returncode}:\n{stderr.read_text()}")
        time.sleep(0.2)
    pytest.fail(f"no READY line within 240 s:\n{stderr.read_text()}")


def _send(s: Stack, rcpt: str, **extra: str) -> None:
    content = f"From: a@example.org\r\nSubject: {rcpt}\r\n\r\nhi\r\n".encode()
    body = {"sender": "a@example.org", "recipients": [rcpt],
            "content": base64.b64encode(content).decode(), **extra}  # fmt: skip
    status, queued = s.call("POST", "/v1/messages", body)
    assert status == 202, queued


def test_local_stack_egress_pools_send_each_class_from_its_loopback_address(
    pooled: Stack,
) -> None:
    _send(pooled, "news@example.net", priority="bulk")
    _send(pooled, "receipt@example.net")
    deadline = time.monotonic() + 90
    seen: dict[str, tuple[str, str]] = {}
    while time.monotonic() < deadline and len(seen) < 2:
        for meta, _ in pooled.mails():
            for r in meta["rcpt_tos"]:
                seen[r] = (meta["client"]["address"], meta["client"]["helo"])
        time.sleep(0.3)
    assert seen["news@example.net"] == ("127.0.0.3", "bulk.mailqueue.localhost")
    assert seen["receipt@example.net"][0] == "127.0.0.2"
    assert seen["receipt@example.net"][1] != "bulk.mailqueue.localhost"
    status, pools = pooled.call("GET", "/v1/queue/pools", None)
    assert status == 200, pools
    assert {p["name"]: p["bind"] for p in pools["items"]} == {
        "default": "127.0.0.2",
        "bulk": "127.0.0.3",
    }
