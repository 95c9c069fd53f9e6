"""Admin test wiring: the real service, API and handler on the `aws` fixture's moto."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import pytest
from mailqueue.backends.aws.backend import AwsStorage
from mailqueue.compose.admin import build_admin
from mailqueue.core.model import GroupState, MailRef, QueuedMail, utcnow
from mailqueue.services.admin import AdminApi, AdminSettings, InlineLauncher, QueueAdmin

from tests.support.aws import AwsEnv
from tests.support.factories import content, envelope

ACTOR = "arn:aws:sts::123456789012:assumed-role/mailqueue-ops/alice"


@dataclass
class Admin:
    aws: AwsEnv
    settings: AdminSettings
    service: QueueAdmin
    api: AdminApi
    storage: AwsStorage

    def enqueue(
        self,
        *rcpts: str,
        sender: str = "alice@example.org",
        arrival: datetime | None = None,
        not_before: datetime | None = None,
        body: bytes | None = None,
    ) -> QueuedMail:
        """Enqueue through the real storage; `arrival` backdates the mail."""
        st = (
            self.storage
            if arrival is None
            else AwsStorage(self.aws.settings, self.aws.clients, clock=lambda: arrival)
        )
        return st.enqueue(envelope(*rcpts, sender=sender), body or content(), not_before=not_before)

    def item(self, mail_id: str, group: str) -> dict[str, Any]:
        resp = self.aws.clients.dynamodb.get_item(
            TableName=self.aws.resources.table,
            Key={"pk": {"S": f"M#{mail_id}"}, "sk": {"S": f"G#{group}"}},
            ConsistentRead=True,
        )
        return dict(resp.get("Item") or {})

    def state(self, mail_id: str, group: str) -> GroupState:
        return self.storage.get_group(MailRef(mail_id, group)).state

    def queue_messages(self, url: str) -> list[dict[str, Any]]:
        """Drain a queue (delayed messages included via ApproximateNumber... is not enough:
        moto returns delayed ones once their delay passed, so read what is visible)."""
        out: list[dict[str, Any]] = []
        while True:
            resp = self.aws.clients.sqs.receive_message(
                QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=0
            )
            msgs = resp.get("Messages", [])
            if not msgs:
                return out
            for m in msgs:
                out.append(json.loads(m["Body"]))
                self.aws.clients.sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])

    def with_settings(self, **changes: Any) -> Admin:
        return make_admin(self.aws, **changes)


def make_admin(aws: AwsEnv, **changes: Any) -> Admin:
    settings = AdminSettings(
        storage=aws.settings,
        job_runner="inline",
        job_slice_seconds=30.0,
        admin_principals="arn:aws:sts::123456789012:assumed-role/mailqueue-ops/*",
    )
    settings = replace(settings, **changes)
    service = build_admin(settings, aws.clients)
    api = AdminApi(
        service,
        InlineLauncher(
            lambda job_id: service.run_job(job_id, budget_seconds=settings.job_slice_seconds)
        ),
    )
    return Admin(aws, settings, service, api, AwsStorage(aws.settings, aws.clients))


@pytest.fixture()
def admin(aws: AwsEnv) -> Admin:
    return make_admin(aws)


@pytest.fixture()
def admin_factory(aws: AwsEnv) -> Callable[..., Admin]:
    return lambda **changes: make_admin(aws, **changes)


def now() -> datetime:
    return utcnow()
