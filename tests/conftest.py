from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.aws import AwsEnv, make_env, moto_server, reset_moto


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    with moto_server() as endpoint:
        yield endpoint


@pytest.fixture()
def aws(moto_endpoint: str) -> Iterator[AwsEnv]:
    """A clean account per test: moto reset, resources created afresh."""
    reset_moto(moto_endpoint)
    env = make_env(moto_endpoint)
    env.counter.reset()
    yield env


from tests.support.rigs import rig  # noqa: E402,F401  (the delivery rig fixture, shared)
