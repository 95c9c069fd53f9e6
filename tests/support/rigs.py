from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from mailqueue.delivery import DeliveryService, DeliverySettings
from mailqueue.dkim import KeySource
from mailqueue.local.runtime import PollResult, SqsPoller
from mailqueue.model import GroupState, MailRef
from mailqueue.smtp import Timeouts

from functions.delivery import app as delivery_app
from tests.support.aws import AwsEnv


@dataclass
class DeliveryRig:
    aws: AwsEnv
    service: DeliveryService
    poller: SqsPoller

    def poll(self) -> PollResult:
        r = self.poller.poll_once()
        if r.error is not None:
            raise r.error
        return r

    def group(self, mail_id: str, group: str) -> Any:
        return self.aws.storage().get_group(MailRef(mail_id, group))

    def states(self, mail_id: str) -> dict[str, str]:
        _, groups = self.aws.storage().get_mail(mail_id)
        return {r.address: r.state.value for g in groups for r in g.recipients}

    def bounce_messages(self) -> list[dict[str, Any]]:
        out = []
        while True:
            resp = self.aws.clients.sqs.receive_message(
                QueueUrl=self.aws.resources.bounce_queue_url, MaxNumberOfMessages=10
            )
            if not resp.get("Messages"):
                return out
            for m in resp["Messages"]:
                out.append(json.loads(m["Body"]))
                self.aws.clients.sqs.delete_message(
                    QueueUrl=self.aws.resources.bounce_queue_url, ReceiptHandle=m["ReceiptHandle"]
                )

    def visible_triggers(self) -> int:
        attrs = self.aws.clients.sqs.get_queue_attributes(
            QueueUrl=self.aws.resources.delivery_queue_url,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        return int(attrs["ApproximateNumberOfMessages"])

    def invisible_triggers(self) -> int:
        attrs = self.aws.clients.sqs.get_queue_attributes(
            QueueUrl=self.aws.resources.delivery_queue_url,
            AttributeNames=["ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        return int(attrs["ApproximateNumberOfMessagesNotVisible"])


RigFactory = Callable[..., DeliveryRig]


@pytest.fixture()
def rig(aws: AwsEnv) -> RigFactory:
    def make(
        routes: dict[str, Any] | None = None,
        resolver: Any = None,
        mx_port: int = 25,
        timeouts: Timeouts | None = None,
        dkim_keys: KeySource | None = None,
        **settings: Any,
    ) -> DeliveryRig:
        ds = DeliverySettings(
            hostname="mq.test",
            routes=json.dumps(routes or {}),
            mx_port=mx_port,
            **settings,
        )
        svc = DeliveryService(
            ds,
            aws.storage(),
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
        )
        poller = SqsPoller(
            aws.clients.sqs,
            aws.resources.delivery_queue_url,
            lambda event, ctx: delivery_app.handle(event, ctx, svc),
            function_name="delivery",
            timeout_seconds=60,
        )
        return DeliveryRig(aws, svc, poller)

    return make


def relay_to(port: int, tls: str = "opportunistic", **extra: Any) -> dict[str, Any]:
    return {"default": {"next_hop": f"[127.0.0.1]:{port}", "tls": tls, **extra}}


__all__ = ["DeliveryRig", "GroupState", "relay_to"]
