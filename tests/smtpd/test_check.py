"""Issue 43, item 8: the front door's health check reads the 220 greeting.

`mailqueue smtpd --check` against the real server (healthy), a listener that accepts
and never greets, one that greets with 421, and a closed port (all unhealthy); and the
template's container health check, run as ECS would run it (the command from
template.yaml, the port from the task's environment) against the real server.
"""

from __future__ import annotations

import io
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from mailqueue.cli.smtpd import main
from mailqueue_local.cfn import load_template

from tests.smtpd.conftest import Door

ROOT = Path(__file__).resolve().parents[2]


def run_check(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(["--check", *args], env=env or {}, stdout=out, stderr=err)
    return code, out.getvalue() + err.getvalue()


@pytest.fixture()
def fake_server() -> Iterator[Callable[[bytes | None], int]]:
    """A TCP listener on a free port that greets with the given bytes (None: never)."""
    socks: list[socket.socket] = []
    stop = threading.Event()

    def start(greeting: bytes | None) -> int:
        srv = socket.create_server(("127.0.0.1", 0))
        srv.settimeout(0.2)
        socks.append(srv)

        def serve() -> None:
            while not stop.is_set():
                try:
                    conn, _ = srv.accept()
                except TimeoutError:
                    continue
                except OSError:
                    return
                socks.append(conn)
                if greeting is not None:
                    conn.sendall(greeting)

        threading.Thread(target=serve, daemon=True).start()
        return int(srv.getsockname()[1])

    yield start
    stop.set()
    for s in socks:
        s.close()


def test_a_greeting_server_is_healthy(door: Door) -> None:
    code, text = run_check("--port", str(door.port))
    assert code == 0, text
    # the port from the environment, as in the task
    code, text = run_check(env={"MQ_SMTPD_PORT": str(door.port)})
    assert code == 0, text


def test_accepting_but_never_greeting_is_unhealthy(
    fake_server: Callable[[bytes | None], int],
) -> None:
    port = fake_server(None)
    start = time.monotonic()
    code, text = run_check("--port", str(port), "--timeout", "1")
    assert code == 1 and "no greeting" in text, text
    assert time.monotonic() - start < 5


def test_a_refusing_greeting_is_unhealthy(fake_server: Callable[[bytes | None], int]) -> None:
    port = fake_server(b"421 4.7.0 busy\r\n")
    code, text = run_check("--port", str(port), "--timeout", "2")
    assert code == 1 and "421" in text, text


def test_a_multiline_greeting_is_healthy(fake_server: Callable[[bytes | None], int]) -> None:
    port = fake_server(b"220-mx.example ESMTP\r\n220 ready\r\n")
    code, text = run_check("--port", str(port), "--timeout", "2")
    assert code == 0, text


def test_nothing_listening_is_unhealthy() -> None:
    s = socket.create_server(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    code, text = run_check("--port", str(port), "--timeout", "1")
    assert code == 1 and "cannot connect" in text, text


def test_the_templates_container_health_check_runs_against_the_server(door: Door) -> None:
    """The command ECS runs (HealthCheck CMD), with the task's MQ_SMTPD_PORT replaced by
    the test server's port: exit 0; against a closed port: exit 1."""
    td = load_template(ROOT / "template.yaml")["Resources"]["SmtpTaskDefinition"]
    (container,) = td["Properties"]["ContainerDefinitions"]
    hc = container["HealthCheck"]
    kind, *command = hc["Command"]
    assert kind == "CMD" and command[:2] == ["mailqueue", "smtpd"], hc
    assert hc["Timeout"] > 5  # the check's own default wait fits ECS's timeout
    env_names = {e["Name"] for e in container["Environment"]}
    assert "MQ_SMTPD_PORT" in env_names
    exe = Path(sys.executable).parent / command[0]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "shared"), str(ROOT)])}
    env["MQ_SMTPD_PORT"] = str(door.port)
    proc = subprocess.run([str(exe), *command[1:]], env=env, capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    door.server.stop()
    proc = subprocess.run([str(exe), *command[1:]], env=env, capture_output=True, timeout=60)
    assert proc.returncode == 1, proc.stdout + proc.stderr
