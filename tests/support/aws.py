"""One moto server per test session (server mode: the AWS APIs over HTTP, as boto3 sees them)."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import boto3
from mailqueue.aws.accounting import RequestCounter
from mailqueue.aws.backend import AwsStorage
from mailqueue.aws.clients import AwsClients, make_clients
from mailqueue.aws.resources import CreatedResources, create_resources
from mailqueue.config import StorageSettings
from moto.server import ThreadedMotoServer

REGION = "us-east-1"


@contextmanager
def moto_server() -> Iterator[str]:
    import logging

    logging.getLogger("werkzeug").setLevel(logging.WARNING)
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


def make_env(endpoint: str) -> AwsEnv:
    clients = make_clients(endpoint_url=endpoint, region=REGION, session=session())
    res = create_resources(clients)
    settings = StorageSettings(
        table=res.table,
        bucket=res.bucket,
        delivery_queue_url=res.delivery_queue_url,
        bounce_queue_url=res.bounce_queue_url,
        region=REGION,
        endpoint_url=endpoint,
    )
    counter = RequestCounter().attach(*clients.all())
    return AwsEnv(endpoint, clients, res, settings, counter)
