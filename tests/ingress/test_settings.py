"""IngressSettings: built from MQ_* variables, validated at start (no AWS needed)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from mailqueue.core.config import ConfigError, StorageSettings
from mailqueue.core.trace import TRACE_RESERVE
from mailqueue.services.ingress import IngressSettings, ingress_settings_from_env

ENV = {
    "MQ_TABLE": "t",
    "MQ_BUCKET": "b",
    "MQ_DELIVERY_QUEUE_URL": "https://sqs/d",
    "MQ_BOUNCE_QUEUE_URL": "https://sqs/b",
}
STORAGE = StorageSettings(table="t", bucket="b", delivery_queue_url="d", bounce_queue_url="q")


def test_from_env_parses_lists_numbers_and_flags() -> None:
    s = ingress_settings_from_env(
        {
            **ENV,
            "MQ_MAX_SIZE": "1048576",
            "MQ_MAX_RECIPIENTS": "20",
            "MQ_ALLOWED_SENDER_DOMAINS": "Shop.Example.org, example.org",
            "MQ_NULL_SENDER_PRINCIPALS": "arn:aws:iam::1:role/a arn:aws:iam::1:role/b",
            "MQ_RECEIVING_DOMAINS": "example.com",
            "MQ_SES_DELETE_RAW": "false",
            "MQ_SPAM_VERDICT": "accept",
            "MQ_ROUTES": json.dumps(
                {"example.net": "relay.example.net:587", "example.com": "[192.0.2.25]"}
            ),
        }
    )
    assert s.storage.table == "t"
    assert (s.max_size, s.max_recipients) == (1048576, 20)
    # ingress's limits reach the storage, plus room for the Received: field it prepends
    assert s.enqueue_storage.max_size == 1048576 + TRACE_RESERVE
    assert s.enqueue_storage.max_recipients == 20
    assert s.allowed_sender_domains == ("shop.example.org", "example.org")
    assert s.null_sender_principals == ("arn:aws:iam::1:role/a", "arn:aws:iam::1:role/b")
    assert s.receiving_domains == ("example.com",)
    assert s.ses_delete_raw is False and s.spam_verdict == "accept"
    table = s.routing_table()
    assert table is not None and table.lookup("example.net") is not None


def test_explicit_arguments_beat_the_environment() -> None:
    s = ingress_settings_from_env({**ENV, "MQ_MAX_RECIPIENTS": "20"}, max_recipients=5)
    assert s.max_recipients == 5


def test_defaults() -> None:
    s = IngressSettings(storage=STORAGE)
    assert s.max_size == 40 * 1024 * 1024 and s.max_recipients == 1000
    assert s.allowed_sender_domains == () and s.receiving_domains == ()
    assert (s.spam_verdict, s.virus_verdict) == ("reject", "reject")
    assert s.inbound_bucket == "b" and s.outbox_table == "t"
    assert s.routing_table() is None


@pytest.mark.parametrize(
    "changes",
    [
        {"routes": "{not json"},
        {"routes": json.dumps({"example.net": {"next_hop": "x:465"}})},
        {"spam_verdict": "quarantine"},
        {"virus_verdict": "REJECT"},
        {"max_size": 0},
        {"max_size": 41 * 1024 * 1024},
        {"max_recipients": 0},
        {"receiving_domains": ("not a domain",)},
        {"allowed_sender_domains": ("user@example.org",)},
        {"null_sender_principals": ("bounce-role",)},
        {"ses_prefix": "inbound"},
        {"upload_prefix": "content/"},
        {"upload_expires": 0},
    ],
)
def test_bad_settings_fail_at_start(changes: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        IngressSettings(storage=STORAGE, **changes)


def test_missing_storage_settings_fail_at_start() -> None:
    with pytest.raises(ConfigError):
        ingress_settings_from_env({"MQ_TABLE": "t"})
