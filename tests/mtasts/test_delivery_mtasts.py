"""MTA-STS applied by the delivery function: real DNS, HTTPS policy server, STARTTLS peers;
on both backends (the handler over SQS with the policy cache in DynamoDB on moto, and
FsStorage with the in-process queues and cache)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from tests.mtasts.peers import Ca, PolicyServer, policy_server, policy_text
from tests.support import factories as f
from tests.support.dns_peer import DnsPeer, dns_server
from tests.support.rigs import BACKENDS, DeliveryRig, RigFactory
from tests.support.smtp_peers import Behaviour, SmtpPeer, smtp_sink

DOMAIN = "dest.test"
MX = "mx1.dest.test"
pytestmark = pytest.mark.parametrize("rig", BACKENDS, indirect=True)


def zone(mx: str = MX, policy_id: str = "1") -> dict[str, dict[str, list[str]]]:
    return {
        DOMAIN: {"MX": [f"10 {mx}."]},
        mx: {"A": ["127.0.0.1"]},
        f"_mta-sts.{DOMAIN}": {"TXT": [f"v=STSv1; id={policy_id}"]},
        f"mta-sts.{DOMAIN}": {"A": ["127.0.0.1"]},
        "smarthost.test": {"A": ["127.0.0.1"]},
    }


@contextmanager
def world(
    ca: Ca, policy: str, *, mx: str = MX, behaviour: Behaviour | None = None
) -> Iterator[tuple[DnsPeer, PolicyServer, SmtpPeer]]:
    with (
        dns_server(zone(mx)) as dns,
        policy_server(ca, {f"mta-sts.{DOMAIN}": policy}) as https,
        smtp_sink(behaviour or Behaviour()) as peer,
    ):
        yield dns, https, peer


def make(
    rig: RigFactory, ca: Ca, dns: DnsPeer, https: PolicyServer, peer: SmtpPeer, **kw: Any
) -> DeliveryRig:
    return rig(
        resolver=dns.resolver(),
        mx_port=peer.port,
        mta_sts_ca_file=str(ca.ca_file),
        mta_sts_port=https.port,
        **kw,
    )


def last_result(r: DeliveryRig, mail_id: str) -> Any:
    g = r.group(mail_id, DOMAIN)
    return g.recipients[0].last_result


def test_enforce_delivers_over_verified_tls(rig: RigFactory, ca: Ca) -> None:
    tls = Behaviour(starttls=True, tls_context=ca.server_context(MX))
    with world(ca, policy_text("enforce", "*.dest.test"), behaviour=tls) as (dns, https, peer):
        r = make(rig, ca, dns, https, peer)
        q = r.storage().enqueue(f.envelope(f"a@{DOMAIN}"), f.content())
        assert r.poll().failed == 0
        assert [m.tls for m in peer.messages] == [True]
        assert https.hits == {f"mta-sts.{DOMAIN}": 1}
    assert not r.storage().content_exists(q.mail_id)  # delivered and cleaned up


def test_enforce_mx_not_in_policy_defers_475(rig: RigFactory, ca: Ca) -> None:
    tls = Behaviour(starttls=True, tls_context=ca.server_context(MX))
    policy = policy_text("enforce", "mx.other.test")
    with world(ca, policy, behaviour=tls) as (dns, https, peer):
        r = make(rig, ca, dns, https, peer)
        q = r.storage().enqueue(f.envelope(f"a@{DOMAIN}"), f.content())
        assert r.poll().failed == 1  # kept for a retry
        assert peer.connections == 0  # never connected to an MX the policy does not name
    res = last_result(r, q.mail_id)
    assert res.status == "4.7.5"
    assert f"MTA-STS policy of {DOMAIN} (mode enforce, id 1)" in res.text
    assert MX in res.text and "mx.other.test" in res.text
    assert r.states(q.mail_id) == {f"a@{DOMAIN}": "queued"}


def test_enforce_certificate_not_for_the_mx_name_defers_475(rig: RigFactory, ca: Ca) -> None:
    wrong = Behaviour(starttls=True, tls_context=ca.server_context("other.test"))
    with world(ca, policy_text("enforce", MX), behaviour=wrong) as (dns, https, peer):
        r = make(rig, ca, dns, https, peer)
        q = r.storage().enqueue(f.envelope(f"a@{DOMAIN}"), f.content())
        assert r.poll().failed == 1
        assert peer.messages == []
    res = last_result(r, q.mail_id)
    assert res.status == "4.7.5"
    assert res.text.startswith(f"MTA-STS policy of {DOMAIN} (mode enforce, id 1): ")
    assert "certificate" in res.text.lower()


def test_enforce_without_starttls_defers_475(rig: RigFactory, ca: Ca) -> None:
    with world(ca, policy_text("enforce", MX)) as (dns, https, peer):
        r = make(rig, ca, dns, https, peer)
        q = r.storage().enqueue(f.envelope(f"a@{DOMAIN}"), f.content())
        assert r.poll().failed == 1
        assert peer.messages == []
    res = last_result(r, q.mail_id)
    assert res.status == "4.7.5" and "MTA-STS" in res.text and "TLS" in res.text


def test_testing_mode_delivers_and_logs(rig: RigFactory, ca: Ca, caplog: Any) -> None:
    # MX not in the policy and no TLS at all: testing mode only reports
    with world(ca, policy_text("testing", "mx.other.test")) as (dns, https, peer):
        r = make(rig, ca, dns, https, peer)
        q = r.storage().enqueue(f.envelope(f"someone@{DOMAIN}"), f.content())
        with caplog.at_level("INFO", logger="mailqueue.outbound.mtasts"):
            assert r.poll().failed == 0
        assert [m.tls for m in peer.messages] == [False]
    assert not r.storage().content_exists(q.mail_id)
    notes = [rec.getMessage() for rec in caplog.records if rec.name == "mailqueue.outbound.mtasts"]
    assert any("mode testing" in n and MX in n and "not in the policy" in n for n in notes)
    assert not any("someone@" in n for n in notes)  # no addresses in the logs


def test_relay_route_ignores_the_recipient_domains_policy(rig: RigFactory, ca: Ca) -> None:
    with world(ca, policy_text("enforce", "mx.other.test")) as (dns, https, peer):
        routes = {"default": {"next_hop": f"smarthost.test:{peer.port}"}}
        r = make(rig, ca, dns, https, peer, routes=routes)
        q = r.storage().enqueue(f.envelope(f"a@{DOMAIN}"), f.content())
        assert r.poll().failed == 0
        assert len(peer.messages) == 1
        assert https.hits == {}
        assert (f"_mta-sts.{DOMAIN}.", "TXT") not in dns.queries
    assert not r.storage().content_exists(q.mail_id)  # delivered and cleaned up


def test_switched_off_by_setting(rig: RigFactory, ca: Ca) -> None:
    with world(ca, policy_text("enforce", "mx.other.test")) as (dns, https, peer):
        r = make(rig, ca, dns, https, peer, mta_sts=False)
        r.storage().enqueue(f.envelope(f"a@{DOMAIN}"), f.content())
        assert r.poll().failed == 0
        assert len(peer.messages) == 1 and https.hits == {}
