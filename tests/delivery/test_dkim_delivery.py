"""DKIM through the real delivery handler: keys in moto (Secrets Manager / SSM, read by
Powertools), public keys on the loopback DNS server, and dkimpy verifying what the
aiosmtpd peer RECEIVED (after our SMTP client's CRLF normalisation and dot-stuffing)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from mailqueue.core.model import Envelope, MailRef, Recipient, utcnow
from mailqueue.outbound.dkim import powertools_key_source
from mailqueue.services.bounce import BounceService, BounceSettings

from tests.support import factories as f
from tests.support.aws import AwsEnv
from tests.support.dkim_keys import PREFIX, Keyring, dnsfunc_for, signatures, verify_all
from tests.support.dns_peer import dns_server
from tests.support.rigs import DeliveryRig, RigFactory, relay_to
from tests.support.smtp_peers import Behaviour, SmtpPeer, smtp_sink

DOMAINS = {"example.org": ["s2026r", "s2026e"]}


@pytest.fixture()
def keyring(aws: AwsEnv) -> Keyring:
    ring = Keyring(aws)
    ring.add("example.org", "s2026r", "rsa-sha256")
    ring.add("example.org", "s2026e", "ed25519-sha256")
    return ring


@pytest.fixture()
def peer() -> Iterator[SmtpPeer]:
    with smtp_sink() as p:
        yield p


def dkim_rig(
    rig: RigFactory,
    ring: Keyring,
    peer: Any,
    domains: Any = None,
    routes: dict[str, Any] | None = None,
    **kw: Any,
) -> DeliveryRig:
    keys = powertools_key_source(
        secrets_client=ring.secrets_client(), ssm_client=ring.ssm_client(), max_age=0
    )
    return rig(
        routes=routes or relay_to(peer.port),
        dkim_domains=json.dumps(DOMAINS if domains is None else domains),
        dkim_key_prefix=PREFIX,
        dkim_key_store=ring.store,
        dkim_keys=keys,
        **kw,
    )


def check_signed(ring: Keyring, received: bytes, domain: str, selectors: list[str]) -> None:
    """Every signature on the received bytes verifies with keys asked of DNS."""
    sigs = signatures(received)
    assert [s[b"s"].decode() for s in sigs] == selectors
    for s in sigs:
        assert s[b"d"] == domain.encode()
        assert s[b"c"] == b"relaxed/relaxed"
        h = [x.strip() for x in s[b"h"].split(b":")]
        assert h.count(b"from") == 2  # From oversigned
    with dns_server(ring.zone()) as dns:
        assert verify_all(received, dnsfunc_for(dns)) == [True] * len(selectors)


def _utf8() -> bytes:
    return (
        "From: Jörg Müller <joerg@example.org>\r\nTo: Zoë <zoe@example.net>\r\n"
        "Subject: Grüße aus Köln — ünïcødé\r\nMIME-Version: 1.0\r\n"
        "Content-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: 8bit\r\n\r\n"
        "Ärger mit Öl?  Straße\t \r\n日本語のテキスト\r\n\r\n\r\n"
    ).encode()


def _long_headers() -> bytes:
    to = ",\r\n ".join(f"user{i} <user{i}@example.net>" for i in range(60))
    refs = " ".join(f"<ref{i}.{'x' * 20}@example.org>" for i in range(20))  # ~800 octets
    subject = "long " + "word " * 180  # ~900 octets on one line (under 998)
    return (
        f"From: Alice <alice@example.org>\r\nTo: {to}\r\nSubject: {subject}\r\n"
        f"References: {refs}\r\nMessage-ID: <long@example.org>\r\n\r\nbody\r\n"
    ).encode()


def _dots() -> bytes:
    return (
        b"From: alice@example.org\r\nTo: bob@example.net\r\nSubject: dots\r\n\r\n"
        b".\r\n..\r\n.leading dot\r\n...three\r\nmiddle . dot\r\n.\r\n"
    )


def _lf_only() -> bytes:
    return f.content(3000).replace(b"\r\n", b"\n")


def _mixed_endings_no_final_newline() -> bytes:
    return (
        b"From: alice@example.org\nTo: bob@example.net\r\nSubject: mixed\n\n"
        b"lf line\ncrlf line\r\nbare cr\rline\n.dot after lf\nno final newline"
    )


CASES = {
    "ascii": (f.content(4096), False),
    "utf8_8bit": (_utf8(), True),
    "long_header_lines": (_long_headers(), False),
    "leading_dots": (_dots(), False),
    "lf_only": (_lf_only(), False),
    "mixed_endings_no_final_newline": (_mixed_endings_no_final_newline(), False),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_what_the_peer_received_verifies(
    case: str, rig: RigFactory, keyring: Keyring, peer: SmtpPeer
) -> None:
    content, utf8 = CASES[case]
    r = dkim_rig(rig, keyring, peer)
    env = Envelope(
        sender="alice@example.org",
        recipients=(Recipient(rid="", address="bob@x.example"),),
        smtputf8=utf8,
    )
    r.aws.storage().enqueue(env, content)
    assert r.poll().failed == 0
    [m] = peer.messages
    check_signed(keyring, m.content, "example.org", ["s2026r", "s2026e"])
    # the signature fields were added in front; the mail itself arrived as sent
    body = m.content.split(b"\r\n", 1)[1]
    assert body.endswith(content.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")[-20:]) or (
        case == "mixed_endings_no_final_newline"
    )


def test_a_changed_body_or_key_does_not_verify(
    rig: RigFactory, keyring: Keyring, peer: SmtpPeer
) -> None:
    """The verifier really checks: the test above could not pass on garbage."""
    r = dkim_rig(rig, keyring, peer)
    r.aws.storage().enqueue(f.envelope("bob@x.example"), f.content())
    r.poll()
    [m] = peer.messages
    with dns_server(keyring.zone()) as dns:
        assert verify_all(m.content.replace(b"lazy dog", b"lazy cat"), dnsfunc_for(dns)) == [
            False,
            False,
        ]
    other = Keyring(keyring.aws)
    other.txt = dict(keyring.txt)
    other.add("example.net", "s2026r", "rsa-sha256")  # a different key...
    other.txt["s2026r._domainkey.example.org"] = other.txt.pop("s2026r._domainkey.example.net")
    with dns_server(other.zone()) as dns:  # ...published under our selector
        assert verify_all(m.content, dnsfunc_for(dns)) == [False, True]


def test_a_retried_mail_verifies(rig: RigFactory, keyring: Keyring, peer: SmtpPeer) -> None:
    """First attempt deferred by the peer (451 after the data), second one delivered."""
    peer.behaviour = Behaviour(final_reply="451 4.3.0 try again later")
    r = dkim_rig(rig, keyring, peer)
    st = r.aws.storage()
    q = st.enqueue(f.envelope("bob@x.example"), _dots())
    assert r.poll().failed == 1
    assert peer.messages == []
    g = r.group(q.mail_id, "x.example")
    assert g.recipients[0].last_result.code == 451
    peer.behaviour = Behaviour()
    r.service.clock = lambda: utcnow() + timedelta(minutes=10)  # the retry is due
    st.repost([MailRef(q.mail_id, "x.example")])
    assert r.poll().failed == 0
    [m] = peer.messages
    check_signed(keyring, m.content, "example.org", ["s2026r", "s2026e"])
    assert not st.content_exists(q.mail_id)  # delivered and cleaned up


def test_rotation_two_selectors_of_one_algorithm_both_sign(
    rig: RigFactory, keyring: Keyring, peer: SmtpPeer
) -> None:
    keyring.add("example.org", "s2027r", "rsa-sha256")
    r = dkim_rig(rig, keyring, peer, {"example.org": ["s2026r", "s2027r", "s2026e"]})
    r.aws.storage().enqueue(f.envelope("bob@x.example"), f.content())
    r.poll()
    [m] = peer.messages
    check_signed(keyring, m.content, "example.org", ["s2026r", "s2027r", "s2026e"])


def test_keys_in_ssm_securestring(rig: RigFactory, aws: AwsEnv, peer: SmtpPeer) -> None:
    ring = Keyring(aws, store="ssm")
    ring.add("example.org", "s2026e", "ed25519-sha256")
    r = dkim_rig(rig, ring, peer, {"example.org": ["s2026e"]})
    r.aws.storage().enqueue(f.envelope("bob@x.example"), f.content())
    r.poll()
    [m] = peer.messages
    check_signed(ring, m.content, "example.org", ["s2026e"])


def test_an_unlisted_domain_goes_unsigned(
    rig: RigFactory, keyring: Keyring, peer: SmtpPeer
) -> None:
    r = dkim_rig(rig, keyring, peer, {"other.example": ["s2026r"]})
    body = f.content()
    r.aws.storage().enqueue(f.envelope("bob@x.example"), body)
    assert r.poll().failed == 0
    [m] = peer.messages
    assert signatures(m.content) == [] and m.content == body


def test_a_missing_key_defers_then_signs_once_stored(
    rig: RigFactory, keyring: Keyring, peer: SmtpPeer
) -> None:
    r = dkim_rig(rig, keyring, peer, {"example.org": ["s2026r", "s2028r"]})
    st = r.aws.storage()
    q = st.enqueue(f.envelope("bob@x.example"), f.content())
    assert r.poll().failed == 1
    assert peer.messages == [] and peer.connections == 0  # never sent unsigned
    last = r.group(q.mail_id, "x.example").recipients[0].last_result
    assert last.status == "4.7.0" and "s2028r" in last.text
    keyring.add("example.org", "s2028r", "rsa-sha256")
    r.service.clock = lambda: utcnow() + timedelta(minutes=10)
    st.repost([MailRef(q.mail_id, "x.example")])
    assert r.poll().failed == 0
    [m] = peer.messages
    check_signed(keyring, m.content, "example.org", ["s2026r", "s2028r"])


@pytest.mark.parametrize("host_domain", ["", "example.net"])
def test_dsn_and_delay_warning_are_signed_with_the_host_domain_key(
    host_domain: str, rig: RigFactory, keyring: Keyring
) -> None:
    """Default: the host's domain is the DSN From's (hostname mq.test); an explicit
    DkimHostDomain that the From does not name signs them all the same."""
    d = host_domain or "mq.test"
    keyring.add(d, "dsn2026", "ed25519-sha256")
    keyring.add(d, "dsn2026r", "rsa-sha256")
    domains = {**DOMAINS, d: ["dsn2026", "dsn2026r"]}
    behaviour = Behaviour(
        rcpt_replies={"bad@x.example": "550 5.1.1 no such user", "later@x.example": "450 4.2.0"}
    )
    with smtp_sink(behaviour) as peer:
        r = dkim_rig(
            rig, keyring, peer, domains, delay_warning_seconds=60, dkim_host_domain=host_domain
        )
        st = r.aws.storage()
        q = st.enqueue(f.envelope("bad@x.example", "later@x.example"), f.content())
        r.poll()  # bad bounced, later deferred
        r.service.clock = lambda: utcnow() + timedelta(minutes=10)
        st.repost([MailRef(q.mail_id, "x.example")])
        r.poll()  # later deferred again, now past the delay warning time
        bounce = r.bounce_poller(BounceService(BounceSettings(hostname="mq.test"), st))
        while bounce.poll_once().received:
            pass
        r.poll()  # the DSNs go out through delivery
        dsns = [m for m in peer.messages if m.mail_from in ("", "<>")]
    kinds = sorted(b"Action: delayed" in m.content for m in dsns)
    assert kinds == [False, True]  # one failure DSN, one delay warning
    for m in dsns:
        assert m.rcpt_tos == ["alice@example.org"]
        assert b"MAILER-DAEMON@mq.test" in m.content.split(b"\r\n\r\n", 1)[0]
        check_signed(keyring, m.content, d, ["dsn2026", "dsn2026r"])
