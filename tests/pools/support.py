"""Two egress pools on moto: real ingress, one delivery consumer per pool queue (each its
own container, binding its pool's loopback source address), the local stack's SMTP sink
(which files the peer address and HELO name of every transaction)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from mailqueue.backends.aws.backend import AwsStorage
from mailqueue.compose.aws import delivery_service
from mailqueue.core.config import StorageSettings
from mailqueue.services.delivery import DeliverySettings
from mailqueue_local.runtime import SqsPoller

from functions.delivery import app as delivery_app
from tests.ingress.conftest import Ingress
from tests.support import events as ev
from tests.support.aws import AwsEnv
from tests.support.rigs import relay_to

APP = "arn:aws:sts::123456789012:assumed-role/shop-app/checkout"
NO_BACKOFF = json.dumps({"version": 1, "rules": []})


def pool_queues(aws: AwsEnv, names: list[str]) -> tuple[StorageSettings, dict[str, str]]:
    """A delivery queue per pool (the template's PoolNDeliveryQueue), named in the
    storage settings' pool_queue_urls."""
    urls = {
        n: aws.clients.sqs.create_queue(
            QueueName=f"mq-pool-{n}", Attributes={"VisibilityTimeout": "120"}
        )["QueueUrl"]
        for n in names
    }
    return replace(aws.settings, pool_queue_urls=json.dumps(urls)), urls


def submit(ing: Ingress, rcpt: str, **fields: Any) -> None:
    content = ev.b64(f"From: a@example.org\r\nSubject: {rcpt}\r\n\r\nhi\r\n".encode())
    status, body, _ = ing.http(
        ev.http_send(principal=APP, key=None, recipients=[rcpt], content=content, **fields)
    )
    assert status == 202, body


@contextmanager
def consumers(
    aws: AwsEnv,
    storage: StorageSettings,
    queues: dict[str, str],
    port: int,
    pools: str,
    *,
    clock: Callable[[], datetime] | None = None,
    **extra: Any,
) -> Iterator[dict[str, Any]]:
    """One consumer thread per pool (its queue, its DeliverySettings.pool)."""
    stop = threading.Event()
    services: dict[str, Any] = {}

    def run(pool: str, url: str) -> None:
        settings = DeliverySettings(
            hostname="mq.test", routes=json.dumps(relay_to(port)), pools=pools, pool=pool, **extra
        )
        kw = {"clock": clock} if clock is not None else {}
        svc = delivery_service(settings, AwsStorage(storage, aws.clients), **kw)
        services[pool] = svc
        poller = SqsPoller(
            aws.clients.sqs,
            url,
            lambda event, ctx: delivery_app.handle(event, ctx, svc),
            function_name="delivery",
            timeout_seconds=120,
            wait_seconds=0,
        )
        while not stop.is_set():
            if poller.poll_once().received == 0:
                stop.wait(0.05)

    threads = [
        threading.Thread(target=run, args=(p, u), daemon=True, name=f"pool-{p}")
        for p, u in queues.items()
    ]
    for t in threads:
        t.start()
    try:
        yield services
    finally:
        stop.set()
        for t in threads:
            t.join(60)


@dataclass(frozen=True)
class Seen:
    rcpt: str
    address: str
    helo: str
    at: float


def sink_mails(directory: Path) -> list[Seen]:
    """What the sink filed: one entry per recipient (its transaction's peer and HELO)."""
    out = []
    for side in sorted(directory.glob("*.json")):
        if not side.with_suffix(".eml").exists():
            continue  # still being written
        doc = json.loads(side.read_text())
        at = datetime.fromisoformat(doc["received_at"].replace("Z", "+00:00")).timestamp()
        for r in doc["rcpt_tos"]:
            out.append(Seen(r, doc["client"]["address"], doc["client"]["helo"], at))
    return out


def wait_for(cond: Callable[[], bool], limit: float) -> bool:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return cond()
