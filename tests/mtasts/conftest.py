"""Fixtures for the MTA-STS tests: the test CA (see peers.py)."""

from __future__ import annotations

import pytest

from tests.mtasts.peers import Ca, shared_ca


@pytest.fixture(scope="session")
def ca() -> Ca:
    return shared_ca()
