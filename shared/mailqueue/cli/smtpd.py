"""`mailqueue smtpd`: run the SMTP front door; `mailqueue smtpd passwd`: manage its users.

    mailqueue smtpd [--port 587] [--tls-port 465] [--receive-port 25] [--host 0.0.0.0]
    mailqueue smtpd --check [--port 587] [--timeout 5]   (exit 0 on a 220 greeting)
    mailqueue smtpd passwd --file F USER --principal ARN   (the password from stdin or a prompt)

`--check` is the container's health check: it connects to 127.0.0.1 on the submission
port (MQ_SMTPD_PORT, or --port) and passes only on a 220 greeting within the timeout,
so an smtpd that accepts connections but never greets (a stuck event loop, every slot
taken) is unhealthy and ECS replaces the task. An NLB's TCP health check cannot see
this: it completes the handshake and closes without reading a byte.

Everything else comes from MQ_* (the ingress function's settings: table, bucket, queues,
sender policy, limits) and MQ_SMTPD_* (mailqueue.services.smtpd.settings.SmtpdSettings).
"""

from __future__ import annotations

import argparse
import getpass
import logging
import signal
import socket
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from types import FrameType
from typing import TextIO

from mailqueue.core.config import ConfigError

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="mailqueue smtpd", description=__doc__.split("\n")[0])
    p.add_argument("--host", help="address to listen on (MQ_SMTPD_HOST; default 127.0.0.1)")
    p.add_argument("--port", type=int, help="submission port, STARTTLS (-1: off)")
    p.add_argument("--tls-port", type=int, help="submissions port, implicit TLS (-1: off)")
    p.add_argument("--receive-port", type=int, help="receiving port, no AUTH (-1: off)")
    p.add_argument("-v", "--verbose", action="store_true")
    p.add_argument("--check", action="store_true", help="health check: 220 greeting or exit 1")
    p.add_argument("--timeout", type=float, default=5.0, help="--check's wait (seconds)")
    sub = p.add_subparsers(dest="action")
    pw = sub.add_parser("passwd", help="add or change a user in a credentials file")
    pw.add_argument("user")
    pw.add_argument("--file", required=True, help="the credentials file (JSON)")
    pw.add_argument("--principal", required=True, help="the principal the user submits as")
    pw.add_argument("--delete", action="store_true", help="remove the user instead")
    return p


def _passwd(ns: argparse.Namespace, out: TextIO) -> int:
    from mailqueue.backends.credentials_file import read_users, write_users
    from mailqueue.services.smtpd import User
    from mailqueue.services.smtpd.credentials import hash_password

    users = read_users(ns.file)
    if ns.delete:
        users.pop(ns.user, None)
    else:
        if sys.stdin.isatty():
            password = getpass.getpass(f"password for {ns.user}: ")
        else:
            password = sys.stdin.readline().rstrip("\n")
        if len(password) < 12:
            out.write("mailqueue smtpd: a password needs at least 12 characters\n")
            return 2
        users[ns.user] = User(ns.principal, hash_password(password))
    write_users(ns.file, users)
    out.write(f"{ns.file}: {len(users)} user(s)\n")
    return 0


def check(port: int, timeout: float, host: str = "127.0.0.1") -> str | None:
    """None when the server greets with 220 within `timeout`; else what went wrong."""
    deadline = time.monotonic() + timeout
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            data = b""
            # a greeting may be multi-line (220-...): its last line is "220 "
            while not any(x.startswith(b"220 ") for x in data.split(b"\r\n")[:-1]):
                if data and not data.startswith(b"220"):
                    return f"greeted with {data[:60]!r}"
                left = deadline - time.monotonic()
                if left <= 0:
                    return "no greeting within the timeout"
                sock.settimeout(left)
                chunk = sock.recv(512)
                if not chunk:
                    return f"closed after {data[:60]!r}"
                data += chunk
                if len(data) > 4096:
                    return "greeting too long"
            sock.sendall(b"QUIT\r\n")
    except TimeoutError:
        return "no greeting within the timeout"
    except OSError as e:
        return f"cannot connect: {e.strerror or e}"
    return None


def _check(ns: argparse.Namespace, env: Mapping[str, str], out: TextIO, err: TextIO) -> int:
    port = ns.port if ns.port is not None else int(env.get("MQ_SMTPD_PORT") or 587)
    problem = check(port, ns.timeout)
    if problem is None:
        out.write(f"smtpd 127.0.0.1:{port}: 220\n")
        return 0
    err.write(f"smtpd 127.0.0.1:{port}: unhealthy: {problem}\n")
    return 1


def main(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    stdout: TextIO,
    stderr: TextIO,
) -> int:
    ns = _parser().parse_args(list(argv))
    if ns.action == "passwd":
        return _passwd(ns, stdout)
    if ns.check:
        return _check(ns, env, stdout, stderr)
    logging.basicConfig(
        level=logging.DEBUG if ns.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=stderr,
    )
    from mailqueue.compose.smtpd import build_server
    from mailqueue.services.ingress import ingress_settings_from_env
    from mailqueue.services.smtpd import quiet_aiosmtpd_logs, smtpd_settings_from_env

    quiet_aiosmtpd_logs()
    try:
        smtpd = smtpd_settings_from_env(
            env, host=ns.host, port=ns.port, tls_port=ns.tls_port, receive_port=ns.receive_port
        )
        server = build_server(smtpd, ingress_settings_from_env(env))
    except ConfigError as e:
        stderr.write(f"mailqueue smtpd: {e}\n")
        return 2
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    server.start()
    for x in server.listening:
        stdout.write(f"listening {x.kind} {x.host}:{x.port}\n")
    stdout.flush()
    try:
        while not stop.wait(0.5):
            pass
    finally:
        server.stop()
    return 0
