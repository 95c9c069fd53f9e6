"""The sender policy: per IAM principal (ARN pattern), the sender domains it may use; no
rule, no sending. Through the real ingress handler against moto."""

from __future__ import annotations

import json

import pytest
from mailqueue.core.authz import SenderPolicy
from mailqueue.core.config import ConfigError
from mailqueue.services.ingress import IngressSettings

from tests.ingress.conftest import Ingress
from tests.support import events as ev
from tests.support.aws import AwsEnv

SHOP = "arn:aws:sts::123456789012:assumed-role/shop-app/i-1"
NEWS = "arn:aws:sts::123456789012:assumed-role/newsletter/i-2"
POLICY = json.dumps(
    [
        {
            "principal": "arn:aws:sts::123456789012:assumed-role/shop-app/*",
            "domains": ["shop.example.org"],
        },
        {
            "principal": "arn:aws:sts::123456789012:assumed-role/newsletter/*",
            "domains": ["*.news.example.org"],
        },
    ]
)


def test_a_new_deployment_refuses_every_sender_domain(ingress: Ingress) -> None:
    """No policy at all (the template's default): 403, a Reject event, nothing stored."""
    fresh = ingress.with_settings(sender_policy="", allowed_sender_domains=())
    before = fresh.trace()
    status, body, _ = fresh.http(ev.http_send(sender="orders@shop.example.org", principal=SHOP))
    assert (status, body["error"], body["field"]) == (403, "sender_not_allowed", "sender")
    assert fresh.trace().new_since(before) == (set(), set(), 0)
    assert [r["mailqueue"]["reject"]["reason"] for r in fresh.rejects()] == ["sender_not_allowed"]


@pytest.mark.parametrize(
    ("principal", "sender", "allowed"),
    [
        (SHOP, "orders@shop.example.org", True),
        (SHOP, "orders@SHOP.example.org", True),  # domains are case-insensitive
        (SHOP, "orders@news.example.org", False),  # another application's domain
        (SHOP, "orders@sub.shop.example.org", False),  # exact domain: no subdomains
        (NEWS, "a@weekly.news.example.org", True),  # *.domain: subdomains
        (NEWS, "a@news.example.org", False),  # ... but not the domain itself
        (NEWS, "orders@shop.example.org", False),
        ("arn:aws:sts::123456789012:assumed-role/other/i-3", "orders@shop.example.org", False),
    ],
)
def test_a_principal_may_send_only_as_its_domains(
    ingress: Ingress, principal: str, sender: str, allowed: bool
) -> None:
    policed = ingress.with_settings(sender_policy=POLICY)
    before = policed.trace()
    status, body, _ = policed.http(ev.http_send(sender=sender, principal=principal))
    if allowed:
        assert status == 202, body
    else:
        assert (status, body["error"]) == (403, "sender_not_allowed")
        assert policed.trace().new_since(before) == (set(), set(), 0)


@pytest.mark.parametrize(
    "bad",
    [
        "{",
        "{}",
        '[{"principal": "shop", "domains": ["a.example"]}]',
        '[{"principal": "*", "domains": []}]',
        '[{"principal": "*", "domains": ["not a domain"]}]',
        '[{"principal": "*", "domains": ["a.example"], "extra": 1}]',
    ],
)
def test_a_bad_policy_is_refused_at_start(aws: AwsEnv, bad: str) -> None:
    with pytest.raises(ConfigError, match="sender_policy"):
        IngressSettings(storage=aws.settings, sender_policy=bad)


def test_policy_matching_is_pure_data() -> None:
    p = SenderPolicy.parse(POLICY)
    assert p.allows(SHOP, "shop.example.org.") and not p.allows("", "shop.example.org")
    assert not SenderPolicy.parse("[]").allows(SHOP, "shop.example.org")
    assert SenderPolicy.parse('[{"principal": "*", "domains": ["*"]}]').permissive
