"""DkimUnsignedPolicy at acceptance: with "refuse", a submission whose From domain has no
DKIM selectors is refused with 422 dkim_unsigned_domain (delivery never refuses for it).
Through the real ingress handler against moto."""

from __future__ import annotations

import json

import pytest
from mailqueue.core.config import ConfigError

from tests.ingress.conftest import Ingress
from tests.support import events as ev

SHOP = json.dumps({"shop.example.org": ["s2026r", "s2026e"]})
OTHER = json.dumps({"other.example.org": ["s1"]})


def test_refuse_policy_refuses_an_unsigned_from_domain(ingress: Ingress) -> None:
    strict = ingress.with_settings(dkim_domains=OTHER, dkim_unsigned_policy="refuse")
    before = strict.trace()
    status, body, _ = strict.http(ev.http_send())
    assert (status, body["error"], body["field"]) == (422, "dkim_unsigned_domain", "content")
    assert strict.trace().new_since(before) == (set(), set(), 0)
    assert [r["mailqueue"]["reject"]["reason"] for r in strict.rejects()] == [
        "dkim_unsigned_domain"
    ]


@pytest.mark.parametrize(("domains", "policy"), [(SHOP, "refuse"), (OTHER, "send"), ("{}", "send")])
def test_signed_domains_and_the_send_policy_are_accepted(
    ingress: Ingress, domains: str, policy: str
) -> None:
    ok = ingress.with_settings(dkim_domains=domains, dkim_unsigned_policy=policy)
    status, body, _ = ok.http(ev.http_send())
    assert status == 202, body


def test_bad_dkim_settings_stop_the_function(ingress: Ingress) -> None:
    with pytest.raises(ConfigError):
        ingress.with_settings(dkim_domains='{"shop.example.org": []}')
    with pytest.raises(ConfigError):
        ingress.with_settings(dkim_unsigned_policy="maybe")


OBSOLETE = (
    b"From: Shop <orders@shop.example.org>\r\nTo : Customer <customer@example.net>\r\n"
    b"Subject: obsolete syntax\r\n\r\nbody\r\n"
)
NO_COLON = (
    b"From: Shop <orders@shop.example.org>\r\nX-Broken header without a colon\r\n"
    b"Subject: x\r\n\r\nbody\r\n"
)


@pytest.mark.parametrize("content", [OBSOLETE, NO_COLON], ids=["space-before-colon", "no-colon"])
def test_refuse_policy_refuses_a_mail_dkim_cannot_sign(ingress: Ingress, content: bytes) -> None:
    """Issue 28, item 19: a signing domain's mail that dkimpy cannot parse would leave
    unsigned (and fail DMARC); under "refuse" it is a 422 with the reason, nothing stored."""
    strict = ingress.with_settings(dkim_domains=SHOP, dkim_unsigned_policy="refuse")
    before = strict.trace()
    status, body, _ = strict.http(ev.http_send(content=ev.b64(content)))
    assert (status, body["error"], body["field"]) == (422, "dkim_unsignable", "content"), body
    assert "syntax" in body["message"] and "customer@" not in body["message"]
    assert strict.trace().new_since(before) == (set(), set(), 0)
    # "send" keeps the old behaviour: accepted (delivery sends it unsigned)
    lenient = ingress.with_settings(dkim_domains=SHOP, dkim_unsigned_policy="send")
    assert lenient.http(ev.http_send(content=ev.b64(content)))[0] == 202
