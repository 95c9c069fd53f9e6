"""The SMTP front door on the `aws` fixture's moto resources: the real ingress service,
a self-signed certificate, a credentials file with two users; every listener on a free
loopback port. `Door.stored` reads back what the queue holds."""

from __future__ import annotations

import json
import ssl
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from mailqueue.backends.credentials_file import write_users
from mailqueue.compose.smtpd import build_server
from mailqueue.services.smtpd import SmtpdSettings, SmtpServer, User
from mailqueue.services.smtpd.credentials import hash_password
from mailqueue_local.tlscert import self_signed

from tests.ingress.conftest import Ingress, make_ingress
from tests.support.aws import AwsEnv

ALICE = ("alice", "correct horse battery staple")
ALICE_ARN = "arn:aws:iam::123456789012:user/alice"
BOB = ("bob", "hunter2-but-longer")
BOB_ARN = "arn:aws:iam::123456789012:user/bob"
# alice may send as example.org, bob as example.net only
POLICY = json.dumps(
    [
        {"principal": ALICE_ARN, "domains": ["example.org"]},
        {"principal": BOB_ARN, "domains": ["example.net"]},
    ]
)
MESSAGE = (
    b"From: a@example.org\r\nTo: b@example.net\r\nSubject: hello\r\n"
    b"Message-ID: <1@example.org>\r\n\r\nbody line\r\n.dot line\r\n"
)


@dataclass
class Door:
    server: SmtpServer
    ingress: Ingress
    cert: Path
    credentials: Path

    @property
    def port(self) -> int:
        p = self.server.port_of("submission")
        assert p is not None
        return p

    @property
    def receive_port(self) -> int:
        p = self.server.port_of("receive")
        assert p is not None
        return p

    @property
    def tls_port(self) -> int:
        p = self.server.port_of("submissions")
        assert p is not None
        return p

    def client_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.cert))
        return ctx

    def stored(self, mail_id: str) -> tuple[dict[str, Any], bytes]:
        """The mail item (or the solo item) and the content the queue holds."""
        st = self.ingress.aws.storage()
        mail, groups = st.get_mail(mail_id)
        assert mail is not None, mail_id
        content = bytes(st.read_content(mail_id).read())
        return {"mail": mail, "groups": groups}, content

    def mail_ids(self) -> list[str]:
        out = []
        for page in self.ingress.aws.clients.dynamodb.get_paginator("scan").paginate(
            TableName=self.ingress.aws.resources.table, ProjectionExpression="pk"
        ):
            out += [it["pk"]["S"][2:] for it in page["Items"] if it["pk"]["S"].startswith("M#")]
        return sorted(set(out))


def start_door(
    aws: AwsEnv, tmp_path: Path, ingress_changes: dict[str, Any] | None = None, **changes: Any
) -> Door:
    cert, key = self_signed(tmp_path / "tls")
    creds = tmp_path / "credentials.json"
    write_users(
        creds,
        {
            ALICE[0]: User(ALICE_ARN, hash_password(ALICE[1], n=2**10)),
            BOB[0]: User(BOB_ARN, hash_password(BOB[1], n=2**10)),
        },
    )
    ingress = make_ingress(aws, sender_policy=POLICY, **(ingress_changes or {}))
    defaults: dict[str, Any] = {
        "port": 0,
        "tls_port": 0,
        "receive_port": 0,
        "cert_file": str(cert),
        "key_file": str(key),
        "credentials": f"file:{creds}",
        "auth_failure_delay": 0.0,
        "idle_timeout": 5.0,
        "workers": 4,
    }
    settings = SmtpdSettings(**{**defaults, **changes})
    server = build_server(settings, ingress.settings, aws.clients, service=ingress.service)
    return Door(server.start(), ingress, cert, creds)


@pytest.fixture()
def door_factory(aws: AwsEnv, tmp_path: Path) -> Iterator[Callable[..., Door]]:
    started: list[Door] = []

    def make(ingress_changes: dict[str, Any] | None = None, **changes: Any) -> Door:
        d = start_door(aws, tmp_path, ingress_changes, **changes)
        started.append(d)
        return d

    yield make
    for d in started:
        d.server.stop()


@pytest.fixture()
def door(door_factory: Callable[..., Door]) -> Door:
    return door_factory()
