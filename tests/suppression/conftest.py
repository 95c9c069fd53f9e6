"""The suppression tests use the admin and ingress tests' own wiring (real handlers, moto).

Their bodies reach the admin API over signed HTTP and read the state table: AWS only
(`aws_admin`), not the admin tests' two-backend `admin`."""

from __future__ import annotations

import pytest

from tests.admin.conftest import Admin, aws_admin  # noqa: F401
from tests.ingress.conftest import ingress_factory  # noqa: F401


@pytest.fixture()
def admin(aws_admin: Admin) -> Admin:  # noqa: F811
    return aws_admin
