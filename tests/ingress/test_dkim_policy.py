"""DkimUnsignedPolicy at acceptance: with "refuse", a submission whose From domain has no
DKIM selectors is refused with 422 dkim_unsigned_domain (delivery never refuses for it).
Through the real ingress handler against moto."""

from __future__ import annotations

import json

import pytest
from mailqueue.core.config import ConfigError
from mailqueue.core.trace import HEADER_SCAN_LIMIT

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


def _from_after(octets: int) -> bytes:
    """A mail whose From field starts `octets` into the header section, after other
    fields (X-Filler lines of 100 octets, one shorter one to land exactly)."""
    line = b"X-Filler: " + b"f" * 88 + b"\r\n"  # 100 octets
    fill = line * (octets // 100)
    rest = octets - len(fill)
    if rest:
        fill += b"X-F: " + b"g" * max(0, rest - 7) + b"\r\n"
    assert len(fill) == octets or rest < 7
    return fill + b"From: Shop <orders@shop.example.org>\r\nSubject: late from\r\n\r\nbody\r\n"


@pytest.mark.parametrize(
    "octets",
    [150 * 1024, HEADER_SCAN_LIMIT - 20],
    ids=["from-after-150KiB", "from-cut-by-the-limit"],
)
def test_refuse_policy_refuses_a_from_field_past_the_header_limit(
    ingress: Ingress, octets: int
) -> None:
    """Issue 43 item 12: ingress read 256 KiB of the header section, delivery 102,400
    octets, so a From field between the two (or cut by delivery's limit) was accepted
    under "refuse" and delivered unsigned. One limit now (core.trace.HEADER_SCAN_LIMIT),
    the same cut at a whole field on both sides: such a From is not seen, so "refuse"
    refuses the mail, nothing stored."""
    content = _from_after(octets)
    strict = ingress.with_settings(dkim_domains=SHOP, dkim_unsigned_policy="refuse")
    before = strict.trace()
    status, body, _ = strict.http(ev.http_send(content=ev.b64(content)))
    assert (status, body["error"]) == (422, "dkim_unsigned_domain"), body
    assert strict.trace().new_since(before) == (set(), set(), 0)


def test_a_from_field_just_within_the_header_limit_is_accepted(ingress: Ingress) -> None:
    content = _from_after(HEADER_SCAN_LIMIT - 200)  # From ends 160 octets before the limit
    strict = ingress.with_settings(dkim_domains=SHOP, dkim_unsigned_policy="refuse")
    status, body, _ = strict.http(ev.http_send(content=ev.b64(content)))
    assert status == 202, body
