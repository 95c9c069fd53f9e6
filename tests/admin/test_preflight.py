"""Issue 28, item 15: the local stack checks every function's settings before READY, so a
group limit the item cannot hold stops the start with its message instead of a READY
followed by 500s. The same check as the stack's, on the suite's moto."""

from __future__ import annotations

import pytest
from mailqueue.core.authz import PERMISSIVE_SENDER_POLICY
from mailqueue.core.config import ConfigError
from mailqueue_local.preflight import BUILDERS, check_settings

from tests.admin.conftest import Admin
from tests.admin.test_cli import local_env


@pytest.fixture()
def stack_env(aws_admin: Admin, monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in local_env(aws_admin).items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("MQ_HOSTNAME", "mq.example.org")
    monkeypatch.setenv("MQ_SENDER_POLICY", PERMISSIVE_SENDER_POLICY)


def test_the_default_settings_pass_for_every_function(stack_env: None) -> None:
    check_settings()
    assert set(BUILDERS) >= {"ingress", "admin", "delivery", "bounce", "sweeper", "events"}


def test_a_group_limit_the_item_cannot_hold_stops_the_start(
    stack_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MQ_GROUP_RECIPIENT_LIMIT", "112")
    with pytest.raises(ConfigError, match=r"group_recipient_limit=112 .* largest that fits is 111"):
        check_settings()
    monkeypatch.setenv("MQ_GROUP_RECIPIENT_LIMIT", "111")
    check_settings()
