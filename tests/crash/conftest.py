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


# The largest group: 50 recipients of one domain, every refusal a 512-octet reply line.
_LONG = "x" * (512 - len("550 5.1.1 ") - 2)
MAX_GROUP = tuple(
    f"{kind}{i:02d}@x.example" for i, kind in enumerate(["ok"] * 30 + ["bad"] * 10 + ["later"] * 10)
)


@pytest.fixture(scope="module")
def peers() -> Iterator[Peers]:
    bad = {"bad@x.example": "550 5.1.1 no such user"}
    bad.update({a: "550 5.1.1 " + _LONG for a in MAX_GROUP if a.startswith("bad")})
    later_max = {a: "451 4.3.0 " + _LONG for a in MAX_GROUP if a.startswith("later")}
    with (
        smtp_sink(Behaviour(rcpt_replies=bad)) as ok,
        smtp_sink(
            Behaviour(
                rcpt_replies={
                    **bad,
                    "later@x.example": "451 4.3.0 later",
                    "later@y.example": "451 4.3.0 later",
                    **later_max,
                }
            )
        ) as failing,
    ):
        yield Peers(ok, failing)


@pytest.fixture(scope="module")
def clients(moto_endpoint: str, moto_modules_listed_once: None) -> Clients:
    return Clients.create(moto_endpoint)


@pytest.fixture(scope="module")
def moto_modules_listed_once() -> Iterator[None]:
    """moto's server finds the service of a request to 127.0.0.1 by first asking whether
    the host is one of its modules: a listdir and ~120 stats of its package per request
    (a fifth of the server's time per request here, thousands per sweep). The package
    does not change while the tests run: listed once while this module's tests run."""
    import moto.backends

    original = moto.backends.list_of_moto_modules
    listed = tuple(original())
    moto.backends.list_of_moto_modules = lambda: listed
    try:
        yield
    finally:
        moto.backends.list_of_moto_modules = original
