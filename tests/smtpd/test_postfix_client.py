"""Postfix relays into the queue: a private Postfix with ``relayhost`` = the local
stack's `mailqueue smtpd` (TLS required, SASL), mail submitted to Postfix reaches the
stack's sink exactly once, byte for byte after the trace fields (Received: of Postfix and
of the queue, the queue's DKIM-Signature)."""

from __future__ import annotations

import os
import smtplib
import time

import pytest

from tests.local.test_run import Stack, stack  # noqa: F401 (the local stack fixture)
from tests.smtpd.postfix_client import available, postfix_relay

_why = available()
if _why is not None and os.environ.get("MAILQUEUE_REQUIRE_POSTFIX") == "1":
    raise RuntimeError(f"Postfix is required here (make test as root): {_why}")
pytestmark = pytest.mark.skipif(_why is not None, reason=_why or "")

ORIGINAL = (
    b"From: Alice <a@example.org>\r\n"
    b"To: Bob <b@example.net>\r\n"
    b"Subject: relayed by Postfix =?utf-8?q?=C3=A9t=C3=A9?=\r\n"
    b"Date: Fri, 27 Nov 2026 12:00:00 +0000\r\n"
    b"Message-ID: <postfix-relay-1@example.org>\r\n"
    b"MIME-Version: 1.0\r\n"
    b"Content-Type: text/plain; charset=utf-8\r\n"
    b"Content-Transfer-Encoding: 8bit\r\n"
    b"\r\n"
    b"8-bit body: \xc3\xa9t\xc3\xa9\r\n"
    b".a line that starts with a dot\r\n"
    b"\r\n"
    b"last line\r\n"
)
TRACE = (b"Received:", b"DKIM-Signature:")


def strip_trace(raw: bytes) -> bytes:
    """The message without its leading trace and signature fields (each folded)."""
    while raw.startswith(TRACE):
        end = raw.index(b"\r\n")
        while raw[end + 2 : end + 3] in (b" ", b"\t"):
            end = raw.index(b"\r\n", end + 2)
        raw = raw[end + 2 :]
    return raw


def test_postfix_relays_through_smtpd_into_the_sink_exactly_once(stack: Stack) -> None:  # noqa: F811
    smtp = stack.ready["smtp"]
    relay = f"[127.0.0.1]:{smtp['port']}"
    with postfix_relay(relay, smtp["cafile"], smtp["user"], smtp["password"]) as pf:
        c = smtplib.SMTP("127.0.0.1", pf.port, timeout=10)
        c.ehlo("app.example")
        c.sendmail("a@example.org", ["b@example.net"], ORIGINAL, ["BODY=8BITMIME"])
        c.quit()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not stack.mails():
            time.sleep(0.2)
        time.sleep(2)  # a duplicate would arrive within this
        log = pf.log
    mails = stack.mails()
    assert len(mails) == 1, (len(mails), log[-2000:])
    envelope, raw = mails[0]
    assert strip_trace(raw) == ORIGINAL
    head = raw[: raw.index(b"From: Alice")]
    assert head.count(b"Received:") == 2  # Postfix's, then the queue's in front of it
    assert b"mailqueue smtpd ESMTPSA TLS" in head
    assert "status=sent" in log and "TLS connection established" in log
