"""The largest group through the real handlers on the local stack: sent once, recorded.

Issue 14's first finding: recording the results of a 25+ recipient group overflowed
DynamoDB's expression limits, the write failed after the peer's 250, and the sweeper
handed the group out again every lease period. Here a 50-recipient one-domain mail goes
in over HTTP, out in one SMTP transaction to the sink, and the test then waits more than
a lease period (30 s here, with the sweeper every 2 s) to see that no second copy leaves
and the mail is finished; a 50-recipient bounce gives exactly one DSN naming all 50.
"""

from __future__ import annotations

import base64
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.local.test_run import PYTHON, REPO, Stack, _stop, _wait_ready

LEASE = 30  # the shortest lease the delivery settings accept
N = 50  # StorageSettings.group_recipient_limit


@pytest.fixture()
def fast_stack(tmp_path: Path) -> Iterator[Stack]:
    stdout, stderr = tmp_path / "stdout.txt", tmp_path / "stderr.txt"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MQ_", "MAILQUEUE_"))}
    python = PYTHON if PYTHON.exists() else Path(sys.executable)
    argv = [str(python), "-m", "mailqueue_local.run", "--var", str(tmp_path / "var")]
    argv += ["--port", "0", "--sweep-interval", "2", "--set", f"MQ_LEASE_SECONDS={LEASE}"]
    argv += ["--strict-limits"]
    with open(stdout, "wb") as out, open(stderr, "wb") as err:
        proc = subprocess.Popen(
            argv, cwd=REPO, stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=env
        )
    try:
        running = Stack(proc, _wait_ready(proc, stdout, stderr), stdout, stderr)
        yield running
        assert running.limit_violations() == [], "requests over AWS limits (moto accepted them)"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


def _submit(stack: Stack, recipients: list[str], subject: str) -> str:
    content = f"From: a@example.org\r\nSubject: {subject}\r\n\r\nfifty\r\n".encode()
    status, queued = stack.call(
        "POST",
        "/v1/messages",
        {
            "sender": "a@example.org",
            "recipients": recipients,
            "content": base64.b64encode(content).decode(),
        },
    )
    assert status == 202, queued
    assert queued["groups"] == [recipients[0].rpartition("@")[2]]  # one group of 50
    return str(queued["mail_id"])


def test_a_fifty_recipient_group_is_delivered_once_and_recorded(fast_stack: Stack) -> None:
    ok = [f"user{i:02d}@example.net" for i in range(N)]
    lost = [f"user{i:02d}@nosuch.demo" for i in range(N)]
    ok_id = _submit(fast_stack, ok, "fifty delivered")
    lost_id = _submit(fast_stack, lost, "fifty bounced")

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if len(fast_stack.mails()) >= 2:
            break
        time.sleep(0.2)
    first_seen = time.monotonic()
    # longer than a lease and many sweeps: an unrecorded group would be handed out again
    while time.monotonic() < first_seen + LEASE + 10:
        time.sleep(1)
    mails = fast_stack.mails()
    originals = [m for m, _ in mails if m["mail_from"] == "a@example.org"]
    dsns = [(m, raw) for m, raw in mails if m["mail_from"] == ""]
    assert len(originals) == 1, fast_stack.stderr.read_text()[-3000:]
    assert sorted(originals[0]["rcpt_tos"]) == ok  # one transaction, each RCPT TO once
    assert len(dsns) == 1
    dsn = dsns[0][1].decode()
    assert all(f"Final-Recipient: rfc822; {a}" in dsn for a in lost)
    # recorded: both mails finished, nothing left queued or inflight. The bounced one is
    # cleaned after its DSN; the delivered one, a one-group mail (its content in a content
    # item, issue 40), is left to DynamoDB's TTL and shown finished until then, every
    # recipient delivered, its content served no more
    status, _ = fast_stack.call("GET", f"/v1/queue/mails/{lost_id}")
    assert status == 404, (lost_id, status)
    status, doc = fast_stack.call("GET", f"/v1/queue/mails/{ok_id}")
    if status != 404:
        assert status == 200, (ok_id, status)
        rcpts = [r for g in doc["groups"] for r in g["recipients"]]
        assert sorted(r["address"] for r in rcpts) == ok
        assert {r["state"] for r in rcpts} == {"delivered"}, doc
        assert {g["state"] for g in doc["groups"]} == {"done"}, doc
        assert doc["finished"] is True and doc["content"] == "cleaned up", doc
    status, size = fast_stack.call("GET", "/v1/queue/size")
    assert status == 200 and size["pending"] == 0, size
    assert _stop(fast_stack.proc) == 0
