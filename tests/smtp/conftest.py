"""Fixtures for the SMTP client, routing and policy tests (all on 127.0.0.1)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from mailqueue.outbound.routing import Hop
from mailqueue.outbound.smtp import ConnectionPool, SmtpClient, Timeouts

from tests.support.smtp_peers import SmtpPeer

#: Short enough that a hang fails fast, long enough for a loaded CI machine.
TEST_TIMEOUTS = Timeouts(
    connect=3,
    greeting=5,
    ehlo=5,
    starttls=5,
    auth=5,
    mail=5,
    rcpt=5,
    data_init=5,
    data_block=5,
    data_done=5,
    rset=2,
    quit=1,
)


def hop_to(peer: SmtpPeer | Any, host: str = "mx.test", **kw: Any) -> Hop:
    """A hop to a test peer (anything with ``host`` and ``port``)."""
    return Hop(host=host, address=peer.host, port=peer.port, **kw)


@pytest.fixture()
def pool() -> Iterator[ConnectionPool]:
    with ConnectionPool() as p:
        yield p


@pytest.fixture()
def client(pool: ConnectionPool) -> SmtpClient:
    return SmtpClient("client.mailqueue.test", timeouts=TEST_TIMEOUTS, pool=pool)
