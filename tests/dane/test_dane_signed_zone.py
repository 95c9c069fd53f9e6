"""DANE (RFC 7672) against a real DNSSEC-signed zone: nsd serves it, unbound validates it
(tests/support/dnssec_peer.py), aiosmtpd peers on loopback present a certificate that
matches the published TLSA records or one that does not. Delivery runs on the fs backend
with the in-process queues; the MX and address lookups go through the same resolver."""

from __future__ import annotations

import datetime as _dt
import hashlib
import ssl
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from mailqueue.outbound import dane

from tests.mtasts.peers import Ca, policy_server, policy_text
from tests.support import factories as f
from tests.support.dnssec_peer import SignedDns, authentic, missing, signed_dns
from tests.support.rigs import DeliveryRig, RigFactory
from tests.support.smtp_peers import Behaviour, smtp_sink

pytestmark = pytest.mark.skipif(missing() is not None, reason=str(missing()))
fs_rig = pytest.mark.parametrize("rig", ["fs"], indirect=True)
ZONE = "dane.example"
PEM = serialization.Encoding.PEM
DER = serialization.Encoding.DER


@dataclass
class Pki:
    ca_der: bytes
    leaf_der: bytes
    other_spki: bytes
    good: ssl.SSLContext  # leaf (issued by the CA, names *.dane.example) + CA in the chain
    stranger: ssl.SSLContext  # self-signed, same name, another key


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _ctx(
    d: Path, tag: str, certs: list[x509.Certificate], key: ec.EllipticCurvePrivateKey
) -> ssl.SSLContext:
    cf, kf = d / f"{tag}.pem", d / f"{tag}.key"
    cf.write_bytes(b"".join(c.public_bytes(PEM) for c in certs))
    kf.write_bytes(
        key.private_bytes(PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cf, kf)
    return ctx


def make_pki() -> Pki:
    now = _dt.datetime.now(_dt.UTC)
    d = Path(tempfile.mkdtemp(prefix="mailqueue-dane-"))
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name("dane test CA"))
        .issuer_name(_name("dane test CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _dt.timedelta(hours=1))
        .not_valid_after(now + _dt.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(ca_key, hashes.SHA256())
    )

    def leaf(
        issuer: x509.Name, signer: ec.EllipticCurvePrivateKey, key: ec.EllipticCurvePrivateKey
    ) -> x509.Certificate:
        return (
            x509.CertificateBuilder()
            .subject_name(_name(f"*.{ZONE}"))
            .issuer_name(issuer)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _dt.timedelta(hours=1))
            .not_valid_after(now + _dt.timedelta(days=2))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(f"*.{ZONE}")]), False)
            .sign(signer, hashes.SHA256())
        )

    key = ec.generate_private_key(ec.SECP256R1())
    good = leaf(ca.subject, ca_key, key)
    other_key = ec.generate_private_key(ec.SECP256R1())
    stranger = leaf(_name(f"*.{ZONE}"), other_key, other_key)
    spki = serialization.PublicFormat.SubjectPublicKeyInfo
    return Pki(
        ca.public_bytes(DER),
        good.public_bytes(DER),
        other_key.public_key().public_bytes(DER, spki),
        _ctx(d, "good", [good, ca], key),
        _ctx(d, "stranger", [stranger], other_key),
    )


def spki_sha256(cert_der: bytes) -> str:
    cert = x509.load_der_x509_certificate(cert_der)
    spki = cert.public_key().public_bytes(DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return hashlib.sha256(spki).hexdigest()


@pytest.fixture(scope="module")
def pki() -> Pki:
    return make_pki()


@pytest.fixture(scope="module")
def world(pki: Pki) -> Iterator[SignedDns]:
    ee = spki_sha256(pki.leaf_der)
    ta = hashlib.sha256(pki.ca_der).hexdigest()
    wrong = hashlib.sha256(pki.other_spki).hexdigest()
    records = []
    for name in ("good", "ta", "bad", "bogus", "plain", "sts"):
        records += [f"{name} IN MX 10 mx-{name}", f"mx-{name} IN A 127.0.0.1"]
    records += [
        f"_25._tcp.mx-good IN TLSA 3 1 1 {ee}",
        f"_25._tcp.mx-ta IN TLSA 2 0 1 {ta}",
        f"_25._tcp.mx-bad IN TLSA 3 1 1 {wrong}",
        f"_25._tcp.mx-bogus IN TLSA 3 1 1 {ee}",
        f"_25._tcp.mx-sts IN TLSA 3 1 1 {ee}",
        '_mta-sts.sts IN TXT "v=STSv1; id=1"',
        "mta-sts.sts IN A 127.0.0.1",
    ]
    # the bogus host's TLSA is changed after signing: its RRSIG no longer verifies
    flipped = ee[:-1] + ("0" if ee[-1] != "0" else "1")
    with signed_dns(ZONE, records, tamper={"_25._tcp.mx-bogus": (ee, flipped)}) as w:
        yield w


def make(rig: RigFactory, world: SignedDns, port: int, **kw: Any) -> DeliveryRig:
    kw.setdefault("mta_sts", False)
    return rig(
        resolver=world.resolver(),
        mx_port=port,
        dane=True,
        dane_nameservers=world.nameservers,
        **kw,
    )


def test_the_zone_validates(world: SignedDns) -> None:
    # the set-up itself: signed answers carry AD, the tampered one is SERVFAIL
    assert authentic(world, f"_25._tcp.mx-good.{ZONE}", "TLSA")
    assert authentic(world, f"good.{ZONE}", "MX")
    r = world.resolver()
    p = dane.lookup(r, f"mx-bogus.{ZONE}")
    assert p is not None and "SERVFAIL" in p.error
    assert dane.lookup(r, f"mx-plain.{ZONE}") is None


@fs_rig
def test_dane_ee_match_delivers(rig: RigFactory, world: SignedDns, pki: Pki) -> None:
    with smtp_sink(Behaviour(starttls=True, tls_context=pki.good)) as peer:
        r = make(rig, world, peer.port)
        q = r.storage().enqueue(f.envelope(f"a@good.{ZONE}"), f.content())
        assert r.poll().failed == 0
        assert [m.tls for m in peer.messages] == [True]
    assert not r.storage().content_exists(q.mail_id)


@fs_rig
def test_dane_ta_match_delivers(rig: RigFactory, world: SignedDns, pki: Pki) -> None:
    with smtp_sink(Behaviour(starttls=True, tls_context=pki.good)) as peer:
        r = make(rig, world, peer.port)
        r.storage().enqueue(f.envelope(f"a@ta.{ZONE}"), f.content())
        assert r.poll().failed == 0
        assert [m.tls for m in peer.messages] == [True]


@fs_rig
@pytest.mark.parametrize("domain", ["good", "ta"])
def test_mismatching_certificate_defers_475(
    rig: RigFactory, world: SignedDns, pki: Pki, domain: str
) -> None:
    with smtp_sink(Behaviour(starttls=True, tls_context=pki.stranger)) as peer:
        r = make(rig, world, peer.port)
        q = r.storage().enqueue(f.envelope(f"a@{domain}.{ZONE}"), f.content())
        assert r.poll().failed == 1
        assert peer.messages == []
    res = r.group(q.mail_id, f"{domain}.{ZONE}").recipients[0].last_result
    assert res.status == "4.7.5"
    assert "DANE: no TLSA record" in res.text and f"mx-{domain}.{ZONE}" in res.text
    assert r.states(q.mail_id) == {f"a@{domain}.{ZONE}": "queued"}


@fs_rig
def test_published_key_not_presented_defers_475(
    rig: RigFactory, world: SignedDns, pki: Pki
) -> None:
    with smtp_sink(Behaviour(starttls=True, tls_context=pki.good)) as peer:
        r = make(rig, world, peer.port)
        q = r.storage().enqueue(f.envelope(f"a@bad.{ZONE}"), f.content())
        assert r.poll().failed == 1
        assert peer.messages == []
    res = r.group(q.mail_id, f"bad.{ZONE}").recipients[0].last_result
    assert res.status == "4.7.5" and "DANE" in res.text


@fs_rig
def test_no_starttls_defers_475(rig: RigFactory, world: SignedDns) -> None:
    with smtp_sink(Behaviour()) as peer:  # plaintext only: a downgrade
        r = make(rig, world, peer.port)
        q = r.storage().enqueue(f.envelope(f"a@good.{ZONE}"), f.content())
        assert r.poll().failed == 1
        assert peer.messages == []
    res = r.group(q.mail_id, f"good.{ZONE}").recipients[0].last_result
    assert res.status == "4.7.5" and "STARTTLS" in res.text and "DANE" in res.text


@fs_rig
def test_bogus_tlsa_defers_475_without_connecting(
    rig: RigFactory, world: SignedDns, pki: Pki
) -> None:
    with smtp_sink(Behaviour(starttls=True, tls_context=pki.good)) as peer:
        r = make(rig, world, peer.port)
        q = r.storage().enqueue(f.envelope(f"a@bogus.{ZONE}"), f.content())
        assert r.poll().failed == 1
        assert peer.connections == 0
    res = r.group(q.mail_id, f"bogus.{ZONE}").recipients[0].last_result
    assert res.status == "4.7.5" and "TLSA" in res.text and "SERVFAIL" in res.text


@fs_rig
def test_host_without_tlsa_keeps_opportunistic_tls(rig: RigFactory, world: SignedDns) -> None:
    with smtp_sink(Behaviour()) as peer:  # no TLS offered, no TLSA: delivered in plaintext
        r = make(rig, world, peer.port)
        r.storage().enqueue(f.envelope(f"a@plain.{ZONE}"), f.content())
        assert r.poll().failed == 0
        assert [m.tls for m in peer.messages] == [False]


@fs_rig
def test_dane_takes_precedence_over_mta_sts(
    rig: RigFactory, world: SignedDns, pki: Pki, ca: Ca
) -> None:
    # an enforced MTA-STS policy that names another MX would defer (4.7.5, no connection);
    # the domain's DANE records govern instead (RFC 8461 §2) and the mail is delivered
    policy = policy_text("enforce", "mx.other.test")
    with (
        policy_server(ca, {f"mta-sts.sts.{ZONE}": policy}) as https,
        smtp_sink(Behaviour(starttls=True, tls_context=pki.good)) as peer,
    ):
        r = make(
            rig,
            world,
            peer.port,
            mta_sts=True,
            mta_sts_ca_file=str(ca.ca_file),
            mta_sts_port=https.port,
        )
        r.storage().enqueue(f.envelope(f"a@sts.{ZONE}"), f.content())
        assert r.poll().failed == 0
        assert [m.tls for m in peer.messages] == [True]
        assert https.hits == {}
