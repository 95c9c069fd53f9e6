"""One moto server per test session (server mode: the AWS APIs over HTTP, as boto3 sees them).

moto does not enforce the services' limits; `mailqueue.backends.aws.limits` does, on every client
of the test process (tests/conftest.py installs it for the session), and `LimitsCheck`
fails a test whose code met a limit it did not expect.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import boto3
from mailqueue.backends.aws.accounting import RequestCounter
from mailqueue.backends.aws.backend import AwsStorage
from mailqueue.backends.aws.clients import AwsClients, make_clients
from mailqueue.backends.aws.limits import ServiceLimitExceeded
from mailqueue.backends.aws.resources import CreatedResources, create_resources
from mailqueue.core.config import StorageSettings
from mailqueue_local.limitguard import LimitRecorder, install_guard
from moto.server import ThreadedMotoServer

REGION = "us-east-1"
# The state index's shards in tests: several, so every reader's fan-out and cursor are
# exercised, but fewer than the default 64 (each shard is one Query per state read).
TEST_STATE_SHARDS = 4


@contextmanager
def moto_server() -> Iterator[str]:
    import logging

    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    # DynamoDB applies each conditional write atomically; moto's threaded server does not
    # (concurrent delivery lanes could both pass one claim's condition): one at a time
    from mailqueue_local.motopatch import install_atomic_dynamodb

    install_atomic_dynamodb()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


def reset_moto(endpoint: str) -> None:
    req = urllib.request.Request(f"{endpoint}/moto-api/reset", method="POST")
    with urllib.request.urlopen(req, timeout=10) as resp:
        resp.read()


def session() -> boto3.session.Session:
    return boto3.session.Session(
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        region_name=REGION,
    )


@dataclass
class AwsEnv:
    endpoint: str
    clients: AwsClients
    resources: CreatedResources
    settings: StorageSettings
    counter: RequestCounter

    def storage(self, **overrides: object) -> AwsStorage:
        settings = self.settings
        if overrides:
            from dataclasses import replace

            settings = replace(settings, **overrides)  # type: ignore[arg-type]
        return AwsStorage(settings, self.clients)

    def mail_items(self, mail_id: str) -> dict[str, dict[str, Any]]:
        """A mail's items as stored (DynamoDB JSON) by sort key: `M`, `G#<group>`."""
        resp = self.clients.dynamodb.query(
            TableName=self.resources.table,
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": f"M#{mail_id}"}},
            ConsistentRead=True,
        )
        return {it["sk"]["S"]: it for it in resp["Items"]}


def make_env(endpoint: str, limits: LimitRecorder | None = None) -> AwsEnv:
    """Clients and resources in moto; `limits`: guard the clients with that recorder.

    (Under pytest the session-wide guard already covers them; the explicit guard is for
    use outside it, and does not check a request twice.)
    """
    clients = make_clients(endpoint_url=endpoint, region=REGION, session=session())
    if limits is not None:
        for client in clients.all():
            install_guard(client, limits)
    res = create_resources(clients)
    settings = StorageSettings(
        table=res.table,
        bucket=res.bucket,
        delivery_queue_url=res.delivery_queue_url,
        bounce_queue_url=res.bounce_queue_url,
        bulk_delivery_queue_url=res.bulk_delivery_queue_url,
        region=REGION,
        endpoint_url=endpoint,
        state_shards=TEST_STATE_SHARDS,
    )
    counter = RequestCounter().attach(*clients.all())
    return AwsEnv(endpoint, clients, res, settings, counter)


@dataclass
class LimitsCheck:
    """A test's view of the limit guard: what it expects, and the verdict at teardown.

    Every violation the guard answered during the test fails it at teardown, unless the
    test declared it with ``with limits_guard.expect("rule"): ...`` (which in turn fails
    if no such violation happened inside the block).
    """

    recorder: LimitRecorder
    unexpected: list[ServiceLimitExceeded] = field(default_factory=list)

    def begin(self) -> None:
        self.recorder.drain()  # left by an earlier test's background threads

    @contextmanager
    def expect(self, *rules: str) -> Iterator[list[ServiceLimitExceeded]]:
        self.unexpected.extend(self.recorder.drain())
        seen: list[ServiceLimitExceeded] = []
        yield seen
        for v in self.recorder.drain():
            (seen if v.rule in rules else self.unexpected).append(v)
        if not seen:
            raise AssertionError(f"expected a request refused for {rules}; none was")

    def failures(self) -> list[str]:
        self.unexpected.extend(self.recorder.drain())
        return [f"{v.service}:{v.operation} {v.rule}: {v.message[:300]}" for v in self.unexpected]
