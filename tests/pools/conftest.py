"""The ingress fixtures (the real handler on the `aws` fixture's moto resources)."""

from tests.ingress.conftest import ingress, ingress_factory  # noqa: F401
