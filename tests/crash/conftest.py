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
def clients(moto_endpoint: str) -> Clients:
    return Clients.create(moto_endpoint)
