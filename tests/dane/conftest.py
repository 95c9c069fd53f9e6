"""The MTA-STS test CA for the precedence test (see tests/mtasts/peers.py)."""

from __future__ import annotations

import pytest

from tests.mtasts.peers import Ca, shared_ca


@pytest.fixture(scope="session")
def ca() -> Ca:
    return shared_ca()
