"""A bulk backlog does not delay transactional mail; both paths share the site limits.

Real ingress and delivery handlers on moto, a slow aiosmtpd peer (0.25 s per message).
Consumers are threads, each with its own `DeliveryService` (one Lambda container each),
polling their event source's queue as Lambda's pollers do: one for the transactional
queue, two for the bulk queue. The control runs the same consumers on one queue (no
bulk path): there the transactional mail waits behind the backlog.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import pytest
from mailqueue.backends.aws.backend import AwsStorage
from mailqueue.compose.aws import delivery_service
from mailqueue.core.config import StorageSettings
from mailqueue.services.delivery import DeliveryService, DeliverySettings
from mailqueue_local.runtime import SqsPoller

from functions.delivery import app as delivery_app
from tests.ingress.conftest import Ingress
from tests.support import events as ev
from tests.support.aws import AwsEnv
from tests.support.rigs import relay_to
from tests.support.smtp_peers import Behaviour, SmtpPeer, smtp_sink

N_BULK = 150
SLOW = 0.25  # seconds the peer takes per message: the backlog is >= 150 x 0.25 s of work
# the transactional mail's time to delivery behind the backlog may exceed its time with
# no backlog by at most this (polling, a slow machine); without the bulk path it waits
# ~150 x 0.25 / 3 consumers = 12.5 s, each consumer one record at a time (LANES): with
# delivery's default 10 lanes an invocation the 150 drained in ~4 s on a quiet machine
# and the control read 4.23 s, within the slack (CI, 2026-12-03)
SLACK = 4.0
LANES = 1
APP = "arn:aws:sts::123456789012:assumed-role/shop-app/checkout"


def _service(aws: AwsEnv, settings: StorageSettings, port: int, **extra: Any) -> DeliveryService:
    return delivery_service(
        DeliverySettings(hostname="mq.test", routes=json.dumps(relay_to(port)), **extra),
        AwsStorage(settings, aws.clients),
    )


@contextmanager
def consumers(
    aws: AwsEnv, settings: StorageSettings, port: int, queues: list[str], **extra: Any
) -> Iterator[None]:
    """One consumer thread per entry of `queues` (a queue URL), each its own container."""
    stop = threading.Event()

    def run(url: str) -> None:
        svc = _service(aws, settings, port, **extra)
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

    threads = [threading.Thread(target=run, args=(url,), daemon=True) for url in queues]
    for t in threads:
        t.start()
    try:
        yield
    finally:
        stop.set()
        for t in threads:
            t.join(60)


def _submit(ing: Ingress, rcpt: str, **fields: Any) -> None:
    content = ev.b64(f"From: a@example.org\r\nSubject: {rcpt}\r\n\r\nhi\r\n".encode())
    status, body, _ = ing.http(
        ev.http_send(principal=APP, key=None, recipients=[rcpt], content=content, **fields)
    )
    assert status == 202, body


def _delivered(peer: SmtpPeer, rcpt: str) -> bool:
    return any(rcpt in m.rcpt_tos for m in peer.messages)


def _time_to_delivery(ing: Ingress, peer: SmtpPeer, rcpt: str, limit: float) -> float | None:
    """Seconds from submission until the peer has the mail (None: not within `limit`)."""
    started = time.monotonic()
    _submit(ing, rcpt)
    while time.monotonic() - started < limit:
        if _delivered(peer, rcpt):
            return time.monotonic() - started
        time.sleep(0.02)
    return None


def _wait(cond: Callable[[], bool], limit: float) -> bool:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


@pytest.mark.parametrize("bulk_path", [True, False], ids=["two-paths", "control-one-path"])
def test_a_bulk_backlog_does_not_delay_transactional_mail(
    ingress_factory: Callable[..., Ingress], aws: AwsEnv, bulk_path: bool
) -> None:
    settings = aws.settings if bulk_path else replace(aws.settings, bulk_delivery_queue_url="")
    ing = ingress_factory(storage=settings)
    r = aws.resources
    if bulk_path:  # 1 transactional consumer, 2 bulk ones (two event sources)
        queues = [r.delivery_queue_url, r.bulk_delivery_queue_url, r.bulk_delivery_queue_url]
    else:  # the same three consumers on the one queue
        queues = [r.delivery_queue_url] * 3
    with smtp_sink(Behaviour(data_delay=SLOW)) as peer:
        with consumers(aws, settings, peer.port, queues, batch_concurrency=LANES):
            base = _time_to_delivery(ing, peer, "first@example.net", 30)
        assert base is not None
        for i in range(N_BULK):  # the backlog, queued while nothing consumes
            _submit(ing, f"bulk{i}@example.net", priority="bulk")
        with consumers(aws, settings, peer.port, queues, batch_concurrency=LANES):
            assert _wait(lambda: _delivered(peer, "bulk0@example.net"), 30)  # work under way
            took = _time_to_delivery(ing, peer, "urgent@example.net", base + SLACK)
            bulk_left = N_BULK - sum(1 for m in peer.messages if m.rcpt_tos[0].startswith("bulk"))
            behind = f"not within {base + SLACK:.1f}" if took is None else f"{took:.2f}"
            print(
                f"\n[priority] {'two paths' if bulk_path else 'one path'}: transactional "
                f"delivered in {base:.2f} s with no backlog, {behind} s behind {N_BULK} "
                f"bulk mails ({bulk_left} bulk still queued then)"
            )
            if bulk_path:
                assert took is not None, f"transactional mail waited > {base + SLACK:.1f} s"
                assert bulk_left > 0  # it really overtook a backlog
                # and the bulk mail is all delivered too
                assert _wait(
                    lambda: (
                        sum(1 for m in peer.messages if m.rcpt_tos[0].startswith("bulk")) == N_BULK
                    ),
                    120,
                )
            else:
                # the control: with one queue the same backlog does delay it
                assert took is None
                waited = time.monotonic()
                assert _wait(lambda: _delivered(peer, "urgent@example.net"), 120)
                print(f"[priority] one path: delivered {time.monotonic() - waited:.1f} s later")
