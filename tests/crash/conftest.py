from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.crash.harness import Clients
from tests.support.smtp_peers import Behaviour, SmtpPeer, smtp_sink


@dataclass
class Peers:
    ok: SmtpPeer
    failing: SmtpPeer


@pytest.fixture(scope="module")
def peers() -> Iterator[Peers]:
    bad = {"bad@x.example": "550 5.1.1 no such user"}
    with (
        smtp_sink(Behaviour(rcpt_replies=bad)) as ok,
        smtp_sink(
            Behaviour(
                rcpt_replies={
                    **bad,
                    "later@x.example": "451 4.3.0 later",
                    "later@y.example": "451 4.3.0 later",
                }
            )
        ) as failing,
    ):
        yield Peers(ok, failing)


@pytest.fixture(scope="module")
def clients(moto_endpoint: str) -> Clients:
    return Clients.create(moto_endpoint)
