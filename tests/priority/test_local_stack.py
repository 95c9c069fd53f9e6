"""`make run`'s local stack creates both delivery queues and polls both: a bulk and a
transactional mail submitted over HTTP both reach the sink (a bulk queue nobody polled
would keep its mail forever). The stack runs as `make run` starts it (a subprocess,
template deployed to moto when CloudFormation is available, else created directly)."""

from __future__ import annotations

import base64
import time

from tests.local.test_run import Stack, stack  # noqa: F401  (the running stack fixture)


def _send(s: Stack, rcpt: str, **extra: str) -> str:
    content = f"From: a@example.org\r\nSubject: {rcpt}\r\n\r\nhi\r\n".encode()
    body = {
        "sender": "a@example.org",
        "recipients": [rcpt],
        "content": base64.b64encode(content).decode(),
        **extra,
    }
    status, queued = s.call("POST", "/v1/messages", body)
    assert status == 202, queued
    return str(queued["mail_id"])


def test_the_local_stack_polls_the_bulk_and_the_transactional_queue(stack: Stack) -> None:  # noqa: F811
    ready = stack.ready
    assert ready["bulk_delivery_queue_url"], ready
    assert ready["bulk_delivery_queue_url"] != ready["delivery_queue_url"]
    _send(stack, "news@example.net", priority="bulk")
    _send(stack, "receipt@example.net")
    status, refused = stack.call(
        "POST", "/v1/messages", {"sender": "a@example.org", "recipients": ["x@example.net"],
                                 "content": "aGk=", "priority": "soon"},
    )  # fmt: skip
    assert (status, refused["error"], refused["field"]) == (400, "invalid_priority", "priority")
    deadline = time.monotonic() + 60
    got: set[str] = set()
    while time.monotonic() < deadline and got != {"news@example.net", "receipt@example.net"}:
        got = {r for meta, _ in stack.mails() for r in meta["rcpt_tos"]}
        time.sleep(0.2)
    assert got == {"news@example.net", "receipt@example.net"}
