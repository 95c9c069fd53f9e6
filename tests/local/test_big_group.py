"""The largest group the README says fits (111 recipients, docs/data-model.md) goes in and
out of the local stack under its partition throttle (issue 43 item 17).

The stack runs as `make run` starts it (the per-key throttle at AWS ÷ 100, --strict-limits)
with `MQ_GROUP_RECIPIENT_LIMIT=111`; one mail to 111 recipients at one domain, each with a
245-octet address, a 500-character 4-octet UTF-8 ORCPT and NOTIFY (near the worst case
docs/data-model.md sizes), so the group item is ~250 write units: far more than one
second of a key value's scaled budget (10 units). Before the throttle charged a request at
most one second's budget, each such write left its key value in debt for ~25 s, longer
than the SDK's retries wait: here the mail was accepted, claimed and sent only after a
minute, and its result was still not recorded two minutes on (the issue saw 503s and a
group never claimed, at a larger item). Now it must be answered 202, delivered in one
SMTP transaction and finished.
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

RECIPIENTS = 111


@pytest.fixture()
def big_group_stack(tmp_path: Path) -> Iterator[Stack]:
    stdout, stderr = tmp_path / "stdout.txt", tmp_path / "stderr.txt"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MQ_", "MAILQUEUE_"))}
    python = PYTHON if PYTHON.exists() else Path(sys.executable)
    argv = [str(python), "-m", "mailqueue_local.run", "--var", str(tmp_path / "var")]
    argv += ["--port", "0", "--strict-limits", "--no-smtpd", "--fast-retries"]
    argv += ["--set", f"MQ_GROUP_RECIPIENT_LIMIT={RECIPIENTS}"]
    with open(stdout, "wb") as out, open(stderr, "wb") as err:
        proc = subprocess.Popen(
            argv, cwd=REPO, stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=env
        )
    try:
        running = Stack(proc, _wait_ready(proc, stdout, stderr), stdout, stderr)
        assert running.ready.get("partition_throttle_scale") == 100, running.ready
        yield running
        assert running.limit_violations() == [], "requests over AWS limits (moto accepted them)"
        assert _stop(proc) == 0, stderr.read_text()[-2000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


def test_a_111_recipient_group_is_accepted_and_delivered_under_the_throttle(
    big_group_stack: Stack,
) -> None:
    stack = big_group_stack
    # near the worst case docs/data-model.md sizes: 245-octet addresses, each with a
    # 500-character ORCPT of 4-octet UTF-8 characters and every NOTIFY keyword it allows
    domain = f"{'b' * 62}.{'c' * 62}.{'d' * 50}.example"  # 184 octets
    rcpts = []
    for i in range(RECIPIENTS):
        address = f"{'r' * 56}{i:08d}@{domain}"  # a 64-octet local part
        orcpt = f"utf-8;{address}"
        orcpt += "\U0001d538" * (500 - len(orcpt))
        rcpts.append({"address": address, "orcpt": orcpt, "notify": ["SUCCESS", "FAILURE"]})
    content = b"From: a@example.org\r\nSubject: 111\r\n\r\none group, 111 recipients\r\n"
    status, queued = stack.call(
        "POST",
        "/v1/messages",
        {
            "sender": "a@example.org",
            "recipients": rcpts,
            "content": base64.b64encode(content).decode(),
        },
    )
    assert status == 202, queued
    assert queued["groups"] == [domain], queued  # one group: all 111 in one item

    wanted = {r["address"] for r in rcpts}
    deadline = time.monotonic() + 120
    delivered: set[str] = set()
    while time.monotonic() < deadline:
        delivered = {
            a for meta, _ in stack.mails() for a in meta["rcpt_tos"] if a.endswith("@" + domain)
        }
        if delivered >= wanted:
            break
        time.sleep(0.5)
    assert delivered == wanted, f"{len(delivered)} of {RECIPIENTS} delivered"
    transactions = [m for m, _ in stack.mails() if m["rcpt_tos"][0].endswith("@" + domain)]
    assert len(transactions) == 1, len(transactions)  # one SMTP transaction for the group
    # the group's result is recorded: the admin view has the mail finished (or gone)
    while True:
        status, shown = stack.call("GET", f"/v1/queue/mails/{queued['mail_id']}")
        assert status in (200, 404), shown
        states = {g["state"] for g in shown["groups"]} if status == 200 else set()
        if states <= {"done", "dsn"} or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert states <= {"done", "dsn"}, shown
