"""The README's SMTP examples, run as written against the stack `make run` starts.

Issue 26's done-when: "`make run` prints the SMTP line and a mail sent with `swaks` from
the README is delivered to the sink". The stack is test_run.py's `stack` fixture (through
conftest.py): the `make run` entry point, `python -m mailqueue_local.run --var <tmp>/var
--port 0 --strict-limits`, as a subprocess.
The test reads the banner on its stdout, takes the README's ```sh block with `swaks` and
its ```python block with `smtplib` literally, substitutes only the two placeholders the
README says the banner fills in (PORT and PASSWORD), and runs them from <tmp> (the
README's relative paths, var/smtpd/smtpd-cert.pem and message.eml, resolve there as they
do in the repo after `make run`). Each mail must reach the stack's SMTP sink (its delivery
peer) exactly once, with message.eml's headers and body.

swaks is Debian's (`make test` installs it as root, mk/postfix.mk); without it and its
Net::SSLeay the swaks half is skipped with the reason, as tests/smtpd/test_swaks.py does.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import time
import urllib.parse
from pathlib import Path

import pytest

from tests.local.test_run import PYTHON, REPO, Stack

README = REPO / "README.md"
MESSAGE = REPO / "message.eml"
SINK_RCPT = "b@example.net"


def _swaks_missing() -> str | None:
    if shutil.which("swaks") is None:
        return "swaks is not installed (make test installs it as root)"
    probe = subprocess.run(["perl", "-MNet::SSLeay", "-e1"], capture_output=True, check=False)
    if probe.returncode != 0:
        return "swaks needs Net::SSLeay for TLS (libnet-ssleay-perl)"
    return None


def fenced_block(text: str, lang: str, needle: str) -> str:
    """The one fenced ```lang block of the README that contains `needle`."""
    blocks: list[str] = [
        body
        for info, body in re.findall(r"^```(\w*)\n(.*?)^```", text, re.M | re.S)
        if info == lang and needle in body
    ]
    assert len(blocks) == 1, f"README: {len(blocks)} ```{lang} blocks with {needle!r}"
    return blocks[0]


def readme_swaks(port: int, password: str) -> list[str]:
    """The README's swaks command filled in, as argv (continuation lines joined, as sh
    would)."""
    block = fill_in(fenced_block(README.read_text(), "sh", "swaks"), port, password)
    argv = shlex.split(block.replace("\\\n", " "), comments=True)
    assert argv and argv[0] == "swaks", argv
    return argv


def readme_smtplib(port: int, password: str) -> str:
    return fill_in(fenced_block(README.read_text(), "python", "smtplib"), port, password)


def fill_in(text: str, port: int, password: str) -> str:
    """The README's placeholders, as the banner fills them in; each must be there."""
    for word in ("PORT", "PASSWORD"):
        assert re.search(rf"\b{word}\b", text), f"README: no {word} placeholder in {text!r}"
    text = re.sub(r"\bPORT\b", str(port), text)
    return re.sub(r"\bPASSWORD\b", password, text)


def sink_files(stack: Stack) -> set[Path]:
    return set(Path(stack.ready["mail_dir"]).glob("*.eml"))


def delivered_once(stack: Stack, before: set[Path], mail_id: str | None) -> bytes:
    """The one mail the sink received since `before`, waited for, then checked to stay
    one: the queue holds nothing more for it (its admin view says so) and no second copy
    turns up."""
    deadline = time.monotonic() + 90
    new: set[Path] = set()
    while time.monotonic() < deadline:
        new = sink_files(stack) - before
        if new:
            break
        time.sleep(0.2)
    assert new, "nothing reached the sink in 90 s:\n" + stack.stderr.read_text()[-3000:]
    while time.monotonic() < deadline:  # the queue is done: nothing left to send again
        status, size = stack.call("GET", "/v1/queue/size")
        assert status == 200, size
        if size["pending"] == 0:
            break
        time.sleep(0.2)
    else:
        pytest.fail(f"the queue still holds recipients after the delivery: {size}")
    if mail_id is not None:
        status, view = stack.call("GET", f"/v1/queue/mails/{urllib.parse.quote(mail_id)}")
        assert status == 200 and view["finished"] is True, view
        states = [(r["state"], r["attempts"]) for g in view["groups"] for r in g["recipients"]]
        assert states == [("delivered", 1)], view
    time.sleep(2.0)  # a duplicate delivery would land within this (the retry floor is longer)
    new = sink_files(stack) - before
    assert len(new) == 1, sorted(p.name for p in new)
    (eml,) = new
    meta = json.loads(eml.with_suffix(".json").read_text())
    assert meta["mail_from"] == "a@example.org" and meta["rcpt_tos"] == [SINK_RCPT], meta
    return eml.read_bytes()


def assert_is_message_eml(raw: bytes, tail: bytes = b"") -> None:
    """The delivered mail is message.eml byte for byte (plus `tail`, what the client adds)
    behind the trace fields the queue prepends (Received: at ingress, DKIM-Signature: at
    delivery) and nothing else."""
    sent = MESSAGE.read_bytes() + tail
    assert b"\r\nSubject: Hello from the local mail queue\r\n" in sent
    assert raw.endswith(sent), raw[-400:]
    trace = raw[: len(raw) - len(sent)]
    names = re.findall(rb"^([!-9;-~]+):", trace, re.M)
    assert names and set(names) <= {b"DKIM-Signature", b"Received"}, trace
    assert names.count(b"Received") == 1, trace


def smtp_line_port(stack: Stack) -> int:
    """The banner's SMTP line: the port it names, checked against the READY line and
    against the socket (an SMTP greeting there)."""
    out = stack.stdout.read_text()
    m = re.search(r"^Or over SMTP \(submission on 127\.0\.0\.1:(\d+)\):$", out, re.M)
    assert m, out
    port = int(m.group(1))
    assert port == stack.ready["smtp"]["port"] and port != 0
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        assert s.recv(512).startswith(b"220 "), port
    return port


def test_make_run_prints_the_smtp_line_and_the_readme_examples_are_delivered(
    stack: Stack, tmp_path: Path
) -> None:
    smtp = stack.ready["smtp"]
    port, password = smtp_line_port(stack), smtp["password"]
    # run from <tmp>: the README's var/smtpd/smtpd-cert.pem is the stack's (--var <tmp>/var)
    assert Path(smtp["cafile"]) == tmp_path / "var" / "smtpd" / "smtpd-cert.pem"
    shutil.copyfile(MESSAGE, tmp_path / "message.eml")

    # the banner prints the README's swaks line filled in (the CA path as the stack has it)
    argv = readme_swaks(port, password)
    banner = [
        shlex.split(line)
        for line in stack.stdout.read_text().splitlines()
        if line.strip().startswith("swaks ")
    ]
    ca = argv.index("--tls-ca-path") + 1
    assert banner == [argv[:ca] + [smtp["cafile"]] + argv[ca + 1 :]]

    why = _swaks_missing()
    if why is None:
        before = sink_files(stack)
        run = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=120)
        out = run.stdout + run.stderr
        assert run.returncode == 0, out
        m = re.search(r"<~  250 2\.0\.0 Ok: queued as (\S+)", out)
        assert m, out
        # swaks ends --data with one CRLF of its own (tests/smtpd/test_swaks.py)
        assert_is_message_eml(delivered_once(stack, before, m.group(1)), tail=b"\r\n")
    elif os.environ.get("MAILQUEUE_REQUIRE_POSTFIX") == "1":
        pytest.fail(f"swaks is required here (make test as root): {why}")

    # the README's smtplib snippet, as a script of its own
    code = readme_smtplib(port, password)
    before = sink_files(stack)
    run = subprocess.run(
        [str(PYTHON), "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert_is_message_eml(delivered_once(stack, before, None))
    if why is not None:
        pytest.skip(f"the smtplib example passed; the swaks one did not run: {why}")


def test_the_dev_password_never_starts_with_a_dash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """swaks reads `--auth-password -x…` as an option: the banner's line would fail."""
    import secrets

    from mailqueue_local import smtpd as local_smtpd

    creds = tmp_path / "credentials.json"
    drawn = iter(["-first", "-second", "third", "fourth"])
    monkeypatch.setattr(secrets, "token_urlsafe", lambda n: next(drawn))
    assert local_smtpd._dev_password(tmp_path, creds) == "third"
    assert local_smtpd._dev_password(tmp_path, creds) == "third"  # kept across runs
    (tmp_path / "dev-password").write_text("-kept-by-an-older-run\n")
    assert local_smtpd._dev_password(tmp_path, creds) == "fourth"
