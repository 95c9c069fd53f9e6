"""The suppression tests use the admin and ingress tests' own wiring (real handlers, moto)."""

from __future__ import annotations

from tests.admin.conftest import admin  # noqa: F401
from tests.ingress.conftest import ingress_factory  # noqa: F401
