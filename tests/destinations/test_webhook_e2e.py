"""Issue 42, deliverable 4: a `make demo` run with a webhook destination. The receiver is
down (nothing listens on its port) through the whole demo and a minute after it; then it
comes up, and it must see every event of the run's event log, each exactly once after
de-duplication on the event id, every POST signed (HMAC over timestamp and body, within
the replay window). The stack is the real one: the template's conditional destinations
resources deployed into moto, the events function handing events to the outbox queue, the
destinations function polling it with its backoff (scaled to seconds here)."""

from __future__ import annotations

import gzip
import io
import json
import secrets
import socket
import time
from pathlib import Path
from typing import Any

from mailqueue_local import demo
from mailqueue_local.stack import LocalStack

from tests.destinations.receiver import Receiver

DOWN_SECONDS = 60


def _free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = int(s.getsockname()[1])
    s.close()
    return port


def _log_ids(events_dir: Path) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for f in sorted(events_dir.rglob("*.json.gz")):
        try:
            lines = gzip.decompress(f.read_bytes()).splitlines()
        except (OSError, EOFError):
            continue
        for line in lines:
            doc = json.loads(line)
            out[doc["mailqueue"]["eventId"]] = doc
    return out


def test_webhook_sees_every_demo_event_once_after_a_minute_down(tmp_path: Path) -> None:
    port, secret = _free_port(), secrets.token_urlsafe(24)
    receiver = Receiver(port, secret)
    seen: dict[str, Any] = {}

    def linger(stack: LocalStack) -> None:
        time.sleep(DOWN_SECONDS)  # down a minute past the demo's last event
        receiver.start()
        deadline = time.monotonic() + 120
        stable_since = None
        while time.monotonic() < deadline:
            logged, got = _log_ids(stack.events_dir), receiver.unique()
            if logged and set(logged) <= set(got):
                stable_since = stable_since or time.monotonic()
                if time.monotonic() - stable_since > 3:
                    break
            else:
                stable_since = None
            time.sleep(0.5)
        seen["log"] = _log_ids(stack.events_dir)
        dlq = stack.clients.sqs.get_queue_url(QueueName=_dlq_name(stack))["QueueUrl"]
        attrs = stack.clients.sqs.get_queue_attributes(
            QueueUrl=dlq, AttributeNames=["ApproximateNumberOfMessages"]
        )
        seen["dead"] = int(attrs["Attributes"]["ApproximateNumberOfMessages"])

    out = io.StringIO()
    try:
        rc = demo.run(
            tmp_path / "demo",
            300.0,
            out,
            template_parameters={
                "EventDestinations": json.dumps(
                    {"destinations": [
                        {"name": "app", "type": "webhook",
                         "url": f"http://127.0.0.1:{port}/hooks/mail", "events": ["*"]}
                    ]}
                )
            },
            settings={
                "MQ_WEBHOOK_KEYS": "json:" + json.dumps({"app": secret}),
                "MQ_ALLOW_HTTP_LOOPBACK": "true",
                "MQ_DESTINATION_RETRY_BASE_SECONDS": "2",
                "MQ_DESTINATION_RETRY_MAX_SECONDS": "8",
            },
            linger=linger,
        )
    finally:
        receiver.stop()
    assert rc == 0, out.getvalue()[-3000:]
    logged, got = seen["log"], receiver.unique()
    assert len(logged) >= 15  # seven mails: Sends, Deliveries, a Bounce, delays, feedback
    assert set(got) == set(logged), (set(logged) - set(got), set(got) - set(logged))
    assert all(got[i] == logged[i] for i in logged)  # the event as the log holds it
    assert {e["eventType"] for e in got.values()} >= {
        "Send", "Delivery", "Bounce", "DeliveryDelay", "Complaint", "Subscription"
    }
    assert receiver.bad_signatures == 0 and seen["dead"] == 0


def _dlq_name(stack: LocalStack) -> str:
    for url in stack.clients.sqs.list_queues().get("QueueUrls", []):
        if url.endswith("-destinations-dlq"):
            return url.rsplit("/", 1)[1]
    raise AssertionError("no destinations dead-letter queue deployed")
