"""One-click unsubscribe end to end on the local stack (`make run`'s subprocess: moto, the
real handlers, the local HTTP API gateway, the SMTP sink), with a plain HTTP client:

* a bulk mail is delivered with List-Unsubscribe (HTTPS + mailto) and
  List-Unsubscribe-Post, both covered by the DKIM signature's h= tag, which dkimpy
  verifies with the stack's own key;
* a GET of the link (no credentials) shows a page with a POST form and changes nothing;
* a POST with List-Unsubscribe=One-Click unsubscribes (idempotent: a repeat is 200 and
  adds nothing); an altered token and a POST without the one-click body are 400 with a
  machine-readable reason; the per-token rate limit answers 429;
* afterwards the same sender's bulk mail to the address is refused (422
  recipient_suppressed) while its transactional mail still goes;
* a `Subscription` event, valid against the committed schema, reaches the event log.
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from email import message_from_bytes
from pathlib import Path
from typing import Any

import dkim
import pytest
from jsonschema import Draft202012Validator

from tests.events.test_ses_schema import SCHEMA
from tests.local.test_run import PYTHON, REPO, Stack, _wait_ready
from tests.support.dkim_keys import signatures

SENDER = "news@example.org"
RCPT = "reader@example.net"
KEYS = json.dumps({"k1": base64.b64encode(b"0123456789abcdef0123456789abcdef").decode()})


@pytest.fixture()
def stack(tmp_path: Path) -> Iterator[Stack]:
    stdout, stderr = tmp_path / "stdout.txt", tmp_path / "stderr.txt"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MQ_", "MAILQUEUE_"))}
    python = PYTHON if PYTHON.exists() else Path(sys.executable)
    argv = [str(python), "-m", "mailqueue_local.run", "--var", str(tmp_path / "var")]
    argv += ["--port", "0", "--fast-retries", "--sweep-interval", "2", "--strict-limits"]
    for k, v in {
        "MQ_LIST_UNSUBSCRIBE_URL": "https://mail.example.org",
        "MQ_LIST_UNSUBSCRIBE_KEYS": KEYS,
        "MQ_LIST_UNSUBSCRIBE_KID": "k1",
        "MQ_LIST_UNSUBSCRIBE_MAILTO": "unsubscribe@example.org",
    }.items():
        argv += ["--set", f"{k}={v}"]
    with open(stdout, "wb") as out, open(stderr, "wb") as err:
        proc = subprocess.Popen(
            argv, cwd=REPO, stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=env
        )
    try:
        yield Stack(proc, _wait_ready(proc, stdout, stderr), stdout, stderr)
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


def submit(stack: Stack, label: str, priority: str = "bulk") -> tuple[int, Any]:
    content = (
        f"From: News <{SENDER}>\r\nTo: <{RCPT}>\r\nSubject: {label}\r\n"
        f"Message-ID: <{label}@example.org>\r\n\r\nhello {label}\r\n"
    ).encode()
    body = {
        "sender": SENDER,
        "recipients": [RCPT],
        "content": base64.b64encode(content).decode(),
        "priority": priority,
    }
    return stack.call("POST", "/v1/messages", body)


def public(
    stack: Stack, method: str, path: str, body: bytes | None = None
) -> tuple[int, dict[str, str], str]:
    """A request with no credentials at all, as a mail client or a browser makes it."""
    headers = {"content-type": "application/x-www-form-urlencoded"} if body is not None else {}
    req = urllib.request.Request(stack.ready["api_url"] + path, body, headers, method=method)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, dict(resp.headers), resp.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read().decode()


def wait_for(fn: Any, what: str, seconds: float = 60) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        got = fn()
        if got:
            return got
        time.sleep(0.3)
    pytest.fail(f"timed out waiting for {what}")


def events(stack: Stack) -> list[dict[str, Any]]:
    root = Path(stack.ready["mail_dir"]).parent / "events"
    docs = []
    for p in sorted(root.rglob("*.json.gz")):
        docs += [json.loads(x) for x in gzip.decompress(p.read_bytes()).splitlines()]
    return docs


def test_one_click_unsubscribe_end_to_end(stack: Stack) -> None:
    status, doc = submit(stack, "issue-1")
    assert status == 202, doc
    msg = wait_for(lambda: [m for _, m in stack.mails() if b"issue-1" in m], "the bulk mail")[0]
    parsed = message_from_bytes(msg)
    lu = " ".join(str(parsed["List-Unsubscribe"]).split())
    assert parsed["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
    m = re.fullmatch(
        r"<https://mail\.example\.org(/u/[A-Za-z0-9_.-]+)>, "
        r"<mailto:unsubscribe@example\.org\?subject=unsubscribe>",
        lu,
    )
    assert m, lu
    path = m.group(1)
    # both fields are signed, and the signature verifies with the stack's key
    sigs = signatures(msg)
    assert sigs
    for tags in sigs:
        signed = {h.strip().lower() for h in tags[b"h"].split(b":")}
        assert {b"list-unsubscribe", b"list-unsubscribe-post"} <= signed
    txt = {k.encode() + b".": v.encode() for k, v in stack.ready["dkim_txt"].items()}
    assert all(
        dkim.DKIM(msg).verify(idx=i, dnsfunc=lambda name, timeout=5: txt.get(name))
        for i in range(len(sigs))
    )

    # GET: a confirmation page with a POST form; nothing recorded
    status, headers, page = public(stack, "GET", path)
    assert status == 200 and '<form method="post">' in page and "r***@example.net" in page
    status, doc = submit(stack, "issue-2")
    assert status == 202, doc  # still subscribed after the GET

    # refusals, each with its reason, before anything is written
    status, headers, page = public(stack, "POST", path[:-2] + "xx", b"List-Unsubscribe=One-Click")
    assert (status, headers.get("X-Mailqueue-Error")) == (400, "invalid_token")
    status, headers, _ = public(stack, "POST", path, b"")
    assert (status, headers.get("X-Mailqueue-Error")) == (400, "missing_one_click")

    # POST: unsubscribed; again: the same answer, nothing new
    status, _, page = public(stack, "POST", path, b"List-Unsubscribe=One-Click")
    assert status == 200 and "unsubscribed" in page
    status, _, page = public(stack, "POST", path, b"List-Unsubscribe=One-Click")
    assert status == 200 and "unsubscribed" in page

    status, doc = submit(stack, "issue-3")
    assert (status, doc.get("error")) == (422, "recipient_suppressed")
    status, doc = submit(stack, "receipt", priority="transactional")
    assert status == 202, doc  # the opt-out holds the sender's bulk mail only

    # the per-token limit (5 a minute in the container): 429 with Retry-After
    codes = [public(stack, "GET", path) for _ in range(6)]
    limited = [c for c in codes if c[0] == 429]
    assert limited and int(limited[0][1]["Retry-After"]) >= 1

    subs = wait_for(
        lambda: [e for e in events(stack) if e["eventType"] == "Subscription"],
        "the Subscription event in the log",
    )
    assert len({e["mailqueue"]["eventId"] for e in subs}) == 1  # one, however often POSTed
    e = subs[0]
    assert e["subscription"]["contactList"] == "example.org"
    assert e["subscription"]["newTopicPreferences"]["unsubscribeAll"] is True
    assert e["mail"]["destination"] == [RCPT]
    errors = sorted(Draft202012Validator(SCHEMA).iter_errors(e), key=str)
    assert not errors, errors[0].message
