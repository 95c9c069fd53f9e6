"""Admin test wiring: the real service and API, on moto (`aws`) and on the filesystem
queue with in-process queues and stores (`fs`).

`admin` runs a test body on both backends; a module whose bodies read DynamoDB items or
SQS queues directly overrides it with `aws_admin`. The backend-neutral helpers
(`triggers`, `op`, `enqueue`) are what a body uses to run on both."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from mailqueue.backends.aws.backend import AwsStorage
from mailqueue.backends.fs import FsStorage
from mailqueue.backends.inprocess import InProcess, MemoryJobStore, bodies
from mailqueue.compose.admin import build_admin
from mailqueue.core.config import StorageSettings
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
    backend: str = "aws"

    def triggers(self) -> list[dict[str, Any]]:
        """The delivery triggers posted since the last call (drained)."""
        return self.queue_messages(self.aws.resources.delivery_queue_url)

    def bounce_handoffs(self) -> list[dict[str, Any]]:
        """The groups handed to the bounce path since the last call (drained)."""
        return self.queue_messages(self.aws.resources.bounce_queue_url)

    def op(self, mail_id: str, group: str) -> dict[str, Any] | None:
        """The operator stamp on a group ({action, actor, job, at}), None without one."""
        raw = self.item(mail_id, group).get("op")
        return {k: next(iter(v.values())) for k, v in raw["M"].items()} if raw else None

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


@dataclass
class FsAdmin:
    """The admin service on `FsStorage` with in-process queues, job store and lists."""

    settings: AdminSettings
    service: QueueAdmin
    api: AdminApi
    storage: FsStorage
    ip: InProcess
    backend: str = "fs"

    def enqueue(
        self,
        *rcpts: str,
        sender: str = "alice@example.org",
        arrival: datetime | None = None,
        not_before: datetime | None = None,
        body: bytes | None = None,
    ) -> QueuedMail:
        st = self.storage
        if arrival is not None:
            st = FsStorage(
                self.storage.root,
                clock=lambda: arrival,
                triggers=self.ip.triggers,
                bounces=self.ip.bounces,
            )
        return st.enqueue(envelope(*rcpts, sender=sender), body or content(), not_before=not_before)

    def state(self, mail_id: str, group: str) -> GroupState:
        return self.storage.get_group(MailRef(mail_id, group)).state

    def triggers(self) -> list[dict[str, Any]]:
        return bodies(self.ip.delivery)

    def bounce_handoffs(self) -> list[dict[str, Any]]:
        return bodies(self.ip.bounce)

    def with_settings(self, **changes: Any) -> FsAdmin:
        """The same queue and in-process stores, other admin settings."""
        return make_fs_admin(self.storage.root, ip=self.ip, **changes)

    def op(self, mail_id: str, group: str) -> dict[str, Any] | None:
        path = self.storage._gpath(MailRef(mail_id, group))
        op = json.loads(path.read_bytes()).get("op")
        return dict(op) if op else None


def make_fs_admin(root: Path, *, ip: InProcess | None = None, **changes: Any) -> FsAdmin:
    ip = ip or InProcess.new(visibility_timeout=60)
    storage = FsStorage(root, triggers=ip.triggers, bounces=ip.bounces)
    settings = replace(
        AdminSettings(
            storage=StorageSettings(
                table="unused", bucket="unused", delivery_queue_url="-", bounce_queue_url="-"
            ),
            job_runner="inline",
            job_slice_seconds=30.0,
            admin_principals="arn:aws:sts::123456789012:assumed-role/mailqueue-ops/*",
        ),
        **changes,
    )
    service = QueueAdmin(
        settings,
        storage,
        MemoryJobStore(),
        bounces=ip.bounces,
        suppressions=ip.suppression,
        suspensions=ip.suspensions,
    )
    api = AdminApi(
        service,
        InlineLauncher(
            lambda job_id: service.run_job(job_id, budget_seconds=settings.job_slice_seconds)
        ),
    )
    return FsAdmin(settings, service, api, storage, ip)


AnyAdmin = Admin | FsAdmin


@pytest.fixture(params=["aws", "fs"])
def admin(request: pytest.FixtureRequest, tmp_path: Path) -> Admin | FsAdmin:
    """The same test body on both backends."""
    if request.param == "fs":
        return make_fs_admin(tmp_path / "queue")
    return make_admin(request.getfixturevalue("aws"))


@pytest.fixture()
def aws_admin(aws: AwsEnv) -> Admin:
    """For bodies that read DynamoDB items or SQS queues themselves."""
    return make_admin(aws)


@pytest.fixture()
def admin_factory(aws: AwsEnv) -> Callable[..., Admin]:
    return lambda **changes: make_admin(aws, **changes)


def now() -> datetime:
    return utcnow()
