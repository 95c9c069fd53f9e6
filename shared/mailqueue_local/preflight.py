"""Every function's settings checked before the local stack says READY (issue 28, item 15).

In Lambda a bad setting fails a function's cold start (its composition root validates);
the local stack used to print READY and then answer every submission with 500 when, say,
``MQ_GROUP_RECIPIENT_LIMIT=112`` (a group item DynamoDB cannot hold) was given. Here each
function's settings object is read from the environment the stack set, and the storage
they share is built once (its worst-case capacity check), fresh and thrown away (no
container's cache is touched): the first failure stops the start with the function's
name and the setting's message.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mailqueue.core.config import ConfigError


def _storage() -> Any:
    """The storage every function builds (one check: the worst-case group capacity)."""
    from mailqueue.backends.aws.backend import AwsStorage
    from mailqueue.backends.aws.clients import make_clients
    from mailqueue.core.config import StorageSettings, settings_from_env

    ss = settings_from_env(StorageSettings)
    return AwsStorage(ss, make_clients(region=ss.region, endpoint_url=ss.endpoint_url))


def _ingress() -> Any:
    from mailqueue.services.ingress import ingress_settings_from_env

    return ingress_settings_from_env()


def _admin() -> Any:
    from mailqueue.services.admin import admin_settings_from_env

    return admin_settings_from_env()


def _delivery() -> Any:
    from mailqueue.services.delivery import DeliverySettings

    return DeliverySettings.from_env()


def _bounce() -> Any:
    from mailqueue.core.config import settings_from_env
    from mailqueue.services.bounce import BounceSettings

    return settings_from_env(BounceSettings)


def _sweeper() -> Any:
    from mailqueue.core.config import settings_from_env
    from mailqueue.services.sweeper import SweeperSettings

    return settings_from_env(SweeperSettings)


def _events() -> Any:
    from mailqueue.compose.events import event_writer_from_env

    return event_writer_from_env()


# the storage first (shared by all; its capacity check is the costly one), then each
# function's own settings object, as its composition root reads them
BUILDERS: dict[str, Callable[[], Any]] = {
    "storage": _storage,
    "ingress": _ingress,
    "admin": _admin,
    "delivery": _delivery,
    "bounce": _bounce,
    "sweeper": _sweeper,
    "events": _events,
}


def check_settings(functions: list[str] | None = None) -> None:
    """Build each function's service from the process environment; raise ConfigError
    naming the function whose settings it refuses."""
    for name in functions or list(BUILDERS):
        builder = BUILDERS.get(name)
        if builder is None:
            continue
        try:
            builder()
        except ConfigError as e:
            raise ConfigError(f"{_what(name)}: {e}") from e
        except ValueError as e:  # a settings object refusing a value it cannot hold
            raise ConfigError(f"{_what(name)}: {e}") from e


def _what(name: str) -> str:
    return (
        "the storage settings (every function)"
        if name == "storage"
        else (f"the {name} function's settings")
    )
