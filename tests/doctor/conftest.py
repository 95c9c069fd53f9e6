"""The admin service fixture for the doctor's API tests (the admin tests' own wiring)."""

from __future__ import annotations

import pytest

from tests.admin.conftest import Admin, make_admin
from tests.support.aws import AwsEnv


@pytest.fixture()
def admin(aws: AwsEnv) -> Admin:
    return make_admin(aws)
