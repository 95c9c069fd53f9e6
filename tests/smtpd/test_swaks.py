"""swaks against the front door: STARTTLS + AUTH PLAIN/LOGIN, 8-bit content,
pipelining, the implicit-TLS port. Each mail is read back from the queue.

Debian 12's swaks (20201014) has no DSN or SMTPUTF8 options (--dsn-* came in 20240103):
the DSN parameters and SMTPUTF8 are sent by smtplib in test_smtplib.py."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.smtpd.conftest import ALICE, Door

SWAKS = shutil.which("swaks")


def _why() -> str | None:
    if SWAKS is None:
        return "swaks is not installed (make test installs it as root)"
    probe = subprocess.run(["perl", "-MNet::SSLeay", "-e1"], capture_output=True, check=False)
    if probe.returncode != 0:
        return "swaks needs Net::SSLeay for TLS (libnet-ssleay-perl)"
    return None


_reason = _why()
if _reason is not None and os.environ.get("MAILQUEUE_REQUIRE_POSTFIX") == "1":
    raise RuntimeError(f"swaks is required here (make test as root): {_reason}")
pytestmark = pytest.mark.skipif(_reason is not None, reason=_reason or "")

EIGHT_BIT = (
    "From: a@example.org\r\nTo: b@example.net\r\nSubject: 8-bit\r\n"
    "Content-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: 8bit\r\n\r\n"
    "été, naïve, 日本語\r\n"
).encode()


def swaks(door: Door, tmp: Path, *args: str, port: int | None = None) -> str:
    data = tmp / "message.eml"
    if not data.exists():
        data.write_bytes(EIGHT_BIT)
    run = subprocess.run(
        [
            str(SWAKS),
            "--server",
            f"127.0.0.1:{port or door.port}",
            "--tls-verify",
            "--tls-ca-path",
            str(door.cert),
            "--auth-user",
            ALICE[0],
            "--auth-password",
            ALICE[1],
            "--from",
            "a@example.org",
            "--data",
            f"@{data}",
            "--timeout",
            "10",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return run.stdout + run.stderr


def queued(out: str) -> str:
    m = re.search(r"<~  250 2\.0\.0 Ok: queued as (\S+)", out)
    assert m, out[-2000:]
    return m.group(1)


def test_starttls_auth_plain_and_8bit_content(door: Door, tmp_path: Path) -> None:
    out = swaks(door, tmp_path, "--tls", "--auth", "PLAIN", "--to", "b@example.net")
    assert "<-  220 Ready to start TLS" in out, out
    assert "235 2.7.0 Authentication successful" in out
    assert "8BITMIME" in out and "DSN" in out and "ENHANCEDSTATUSCODES" in out
    _, content = door.stored(queued(out))
    # the 8-bit octets as sent (swaks ends --data with one more CRLF of its own)
    assert content.endswith(EIGHT_BIT + b"\r\n")


def test_auth_login_pipelining_several_recipients(door: Door, tmp_path: Path) -> None:
    out = swaks(
        door,
        tmp_path,
        "--tls",
        "--auth",
        "LOGIN",
        "--pipeline",
        "--to",
        "b@example.net,c@example.com,d@example.org",
    )
    assert "PIPELINING" in out
    items, _ = door.stored(queued(out))
    assert sorted(r.address for g in items["groups"] for r in g.recipients) == [
        "b@example.net",
        "c@example.com",
        "d@example.org",
    ]


def test_implicit_tls(door: Door, tmp_path: Path) -> None:
    out = swaks(
        door, tmp_path, "--tls-on-connect", "--auth", "PLAIN", "--to", "b@example.net",
        port=door.tls_port,
    )  # fmt: skip
    items, _ = door.stored(queued(out))
    assert [r.address for g in items["groups"] for r in g.recipients] == ["b@example.net"]


def test_without_tls_there_is_no_auth_and_no_mail(door: Door, tmp_path: Path) -> None:
    out = swaks(door, tmp_path, "--auth", "PLAIN", "--to", "b@example.net")
    assert "250 2.0.0 Ok: queued" not in out
    assert "AUTH" not in out.split("<~  250 ")[-1] or "530" in out or "not supported" in out
    assert door.mail_ids() == []
