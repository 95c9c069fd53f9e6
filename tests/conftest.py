from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from hypothesis import settings

# CI is the gate: the same examples every run (a new failure shows up as a change, not as
# luck); `HYPOTHESIS_PROFILE=explore` runs random examples when hunting for bugs.
settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True, database=None)
settings.register_profile("explore", deadline=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

from mailqueue_local.limitguard import LimitRecorder, strict_limits  # noqa: E402

from tests.support.aws import AwsEnv, LimitsCheck, make_env, moto_server, reset_moto  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def limit_recorder() -> Iterator[LimitRecorder]:
    """AWS's documented limits, enforced on every boto3 session of the test process."""
    recorder = LimitRecorder()
    with strict_limits(recorder):
        yield recorder


@pytest.fixture(autouse=True)
def limits_guard(limit_recorder: LimitRecorder) -> Iterator[LimitsCheck]:
    """Fails the test at teardown for each request over a limit it did not `expect`."""
    check = LimitsCheck(limit_recorder)
    check.begin()
    yield check
    failures = check.failures()
    if failures:
        pytest.fail("requests AWS would refuse (moto accepted them):\n" + "\n".join(failures))


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    with moto_server() as endpoint:
        yield endpoint


@pytest.fixture()
def aws(moto_endpoint: str, limit_recorder: LimitRecorder) -> Iterator[AwsEnv]:
    """A clean account per test: moto reset, resources created afresh."""
    reset_moto(moto_endpoint)
    env = make_env(moto_endpoint, limit_recorder)
    env.counter.reset()
    yield env


from tests.support.rigs import rig  # noqa: E402,F401  (the delivery rig fixture, shared)
