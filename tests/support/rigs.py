"""The delivery rig: the delivery service against real SMTP peers, on either backend.

`aws`: AwsStorage on moto (server mode), triggers and bounces on SQS, records through
the real Lambda handlers. `fs`: FsStorage in a temporary directory, triggers and bounces
on the in-process queues of `mailqueue.backends.inprocess`, records through its workers. A test
that takes `rig` runs on AWS; `@both_backends` (or `pytest.mark.parametrize("rig",
BACKENDS, indirect=True)`) runs the same body on both.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

import pytest
from mailqueue.backends.aws.backend import AwsStorage
from mailqueue.backends.fs import FsStorage
from mailqueue.backends.inprocess import InProcess, Worker, bodies, bounce_handler, delivery_handler
from mailqueue.compose.aws import delivery_service
from mailqueue.core.model import GroupState, MailRef
from mailqueue.outbound.dkim import KeySource
from mailqueue.outbound.smtp import Timeouts
from mailqueue.services.bounce import BounceService
from mailqueue.services.delivery import DeliveryService, DeliverySettings
from mailqueue_local.runtime import SqsPoller

from functions.bounce import app as bounce_app
from functions.delivery import app as delivery_app
from tests.support.aws import AwsEnv

BACKENDS = ("aws", "fs")
both_backends = pytest.mark.parametrize("rig", BACKENDS, indirect=True)


class Poller(Protocol):
    timeout_seconds: float

    def poll_once(self) -> Any: ...


class Backend(Protocol):
    """What a test may ask of the queue beyond the storage protocol, per backend."""

    name: str

    @property
    def aws(self) -> AwsEnv | None: ...
    def storage(self) -> Any: ...
    def delivery_service(self, settings: DeliverySettings, **kw: Any) -> DeliveryService: ...
    def delivery_poller(self, svc: DeliveryService) -> Poller: ...
    def bounce_poller(self, svc: BounceService) -> Poller: ...
    def bounce_messages(self) -> list[dict[str, Any]]: ...
    def visible_triggers(self) -> int: ...
    def invisible_triggers(self) -> int: ...
    def reset_counts(self) -> None: ...
    def rearms(self) -> int: ...
    def repost(self, refs: Sequence[MailRef]) -> None: ...
    def early_receipt(self, ref: MailRef) -> None: ...
    def stored_contents(self) -> int: ...


class AwsBackend:
    name = "aws"

    def __init__(self, aws: AwsEnv, clock: Callable[[], datetime] | None = None) -> None:
        self._aws = aws
        self.clock = clock

    @property
    def aws(self) -> AwsEnv:
        return self._aws

    def storage(self) -> AwsStorage:
        if self.clock is None:
            return self.aws.storage()
        return AwsStorage(self.aws.settings, self.aws.clients, clock=self.clock)

    def delivery_service(self, settings: DeliverySettings, **kw: Any) -> DeliveryService:
        return delivery_service(settings, self.storage(), **kw)

    def _poller(self, url: str, handle: Any, svc: Any, name: str) -> SqsPoller:
        return SqsPoller(
            self.aws.clients.sqs,
            url,
            lambda event, ctx: handle(event, ctx, svc),
            function_name=name,
            timeout_seconds=60,
        )

    def delivery_poller(self, svc: DeliveryService) -> SqsPoller:
        url = self.aws.resources.delivery_queue_url
        return self._poller(url, delivery_app.handle, svc, "delivery")

    def bounce_poller(self, svc: BounceService) -> SqsPoller:
        return self._poller(self.aws.resources.bounce_queue_url, bounce_app.handle, svc, "bounce")

    def bounce_messages(self) -> list[dict[str, Any]]:
        sqs, url = self.aws.clients.sqs, self.aws.resources.bounce_queue_url
        out: list[dict[str, Any]] = []
        while True:
            resp = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)
            if not resp.get("Messages"):
                return out
            for m in resp["Messages"]:
                out.append(json.loads(m["Body"]))
                sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])

    def _attr(self, name: str) -> int:
        attrs = self.aws.clients.sqs.get_queue_attributes(
            QueueUrl=self.aws.resources.delivery_queue_url, AttributeNames=[name]
        )["Attributes"]
        return int(attrs[name])

    def visible_triggers(self) -> int:
        return self._attr("ApproximateNumberOfMessages")

    def invisible_triggers(self) -> int:
        return self._attr("ApproximateNumberOfMessagesNotVisible")

    def reset_counts(self) -> None:
        self.aws.counter.reset()

    def rearms(self) -> int:
        return int(self.aws.counter.calls["sqs:ChangeMessageVisibility"])

    def repost(self, refs: Sequence[MailRef]) -> None:
        self.storage().repost(refs)

    def early_receipt(self, ref: MailRef) -> None:
        """The trigger of a group not yet due, visible now (SQS caps delays at 15 min)."""
        sqs, url = self.aws.clients.sqs, self.aws.resources.delivery_queue_url
        msgs = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=1).get("Messages", [])
        if msgs:  # moto may honour the delay; make it visible like an early receipt
            sqs.change_message_visibility(
                QueueUrl=url, ReceiptHandle=msgs[0]["ReceiptHandle"], VisibilityTimeout=0
            )
        else:
            self.repost([ref])

    def stored_contents(self) -> int:
        got = self.aws.clients.s3.list_objects_v2(Bucket=self.aws.resources.bucket)
        return int(got.get("KeyCount", 0))


class FsBackend:
    name = "fs"

    @property
    def aws(self) -> AwsEnv | None:
        return None

    def __init__(self, root: Path, clock: Callable[[], datetime] | None = None) -> None:
        self.ip = InProcess.new(visibility_timeout=60)
        kw: dict[str, Any] = {"clock": clock} if clock is not None else {}
        self.st = FsStorage(root, triggers=self.ip.triggers, bounces=self.ip.bounces, **kw)
        self._rearms = 0

    def storage(self) -> FsStorage:
        return self.st

    def delivery_service(self, settings: DeliverySettings, **kw: Any) -> DeliveryService:
        return DeliveryService(settings, self.st, ports=self.ip.delivery_ports(), **kw)

    def delivery_poller(self, svc: DeliveryService) -> Worker:
        return Worker(self.ip.delivery, delivery_handler(svc), timeout_seconds=60)

    def bounce_poller(self, svc: BounceService) -> Worker:
        return Worker(self.ip.bounce, bounce_handler(svc))

    def bounce_messages(self) -> list[dict[str, Any]]:
        return bodies(self.ip.bounce)

    def visible_triggers(self) -> int:
        return self.ip.delivery.visible()

    def invisible_triggers(self) -> int:
        return self.ip.delivery.invisible()

    def reset_counts(self) -> None:
        self._rearms = self.ip.delivery.rearms

    def rearms(self) -> int:
        return self.ip.delivery.rearms - self._rearms

    def repost(self, refs: Sequence[MailRef]) -> None:
        self.ip.triggers.post(refs)

    def early_receipt(self, ref: MailRef) -> None:
        if not self.ip.delivery.make_visible():
            self.repost([ref])

    def stored_contents(self) -> int:
        return sum(1 for _ in self.st.data.glob("*/content"))


@dataclass
class DeliveryRig:
    backend: Backend
    service: DeliveryService
    poller: Poller

    @property
    def aws(self) -> AwsEnv:
        """The moto account (AWS-only tests)."""
        assert self.backend.aws is not None, "an AWS-only test ran on another backend"
        return self.backend.aws

    def storage(self) -> Any:
        return self.backend.storage()

    def poll(self) -> Any:
        r = self.poller.poll_once()
        if r.error is not None:
            raise r.error
        return r

    def bounce_poller(self, svc: BounceService) -> Poller:
        return self.backend.bounce_poller(svc)

    def group(self, mail_id: str, group: str) -> Any:
        return self.storage().get_group(MailRef(mail_id, group))

    def states(self, mail_id: str) -> dict[str, str]:
        _, groups = self.storage().get_mail(mail_id)
        return {r.address: r.state.value for g in groups for r in g.recipients}

    def bounce_messages(self) -> list[dict[str, Any]]:
        return self.backend.bounce_messages()

    def visible_triggers(self) -> int:
        return self.backend.visible_triggers()

    def invisible_triggers(self) -> int:
        return self.backend.invisible_triggers()

    def reset_counts(self) -> None:
        self.backend.reset_counts()

    def rearms(self) -> int:
        """Trigger re-arms since `reset_counts` (SQS ChangeMessageVisibility on AWS)."""
        return self.backend.rearms()

    def repost(self, refs: Sequence[MailRef]) -> None:
        self.backend.repost(refs)

    def early_receipt(self, ref: MailRef) -> None:
        self.backend.early_receipt(ref)

    def stored_contents(self) -> int:
        return self.backend.stored_contents()


RigFactory = Callable[..., DeliveryRig]


@pytest.fixture()
def rig(request: pytest.FixtureRequest, tmp_path: Path) -> RigFactory:
    kind = getattr(request, "param", "aws")

    def make(
        routes: dict[str, Any] | None = None,
        resolver: Any = None,
        mx_port: int = 25,
        timeouts: Timeouts | None = None,
        dkim_keys: KeySource | None = None,
        clock: Callable[[], datetime] | None = None,
        **settings: Any,
    ) -> DeliveryRig:
        backend: Backend = (
            AwsBackend(request.getfixturevalue("aws"), clock)
            if kind == "aws"
            else FsBackend(tmp_path / "queue", clock)
        )
        ds = DeliverySettings(
            hostname="mq.test",
            routes=json.dumps(routes or {}),
            mx_port=mx_port,
            **settings,
        )
        svc = backend.delivery_service(
            ds,
            resolver=resolver or ds.resolver(),
            dkim_keys=dkim_keys,
            timeouts=timeouts
            or Timeouts(
                connect=2,
                greeting=3,
                ehlo=3,
                mail=3,
                rcpt=3,
                data_init=3,
                data_block=3,
                data_done=3,
            ),
            **({"clock": clock} if clock is not None else {}),
        )
        return DeliveryRig(backend, svc, backend.delivery_poller(svc))

    return make


def relay_to(port: int, tls: str = "opportunistic", **extra: Any) -> dict[str, Any]:
    return {"default": {"next_hop": f"[127.0.0.1]:{port}", "tls": tls, **extra}}


__all__ = ["BACKENDS", "DeliveryRig", "GroupState", "both_backends", "relay_to"]
