"""`mailqueue doctor`'s checks against the loopback DNS server: each passes and fails.

DKIM public keys come from keys generated here with ``cryptography``; the expected TXT
is rebuilt independently (SubjectPublicKeyInfo DER for RSA, raw 32 bytes for ed25519).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import pytest
from mailqueue.outbound.doctor import Finding, dkim_public_txt, render, run

from tests.doctor.world import EHLO, INPUT, IP4, IP6, REV4, good_zone, keys, public_txt
from tests.support.dns_peer import DnsPeer, dns_server


def key_source(store: Mapping[str, str]) -> object:
    def get(ref: str) -> str | None:
        return store.get(ref.rsplit("/", 1)[1])

    return get


@pytest.fixture()
def dns() -> Iterator[DnsPeer]:
    with dns_server(good_zone()) as peer:
        yield peer


def findings(dns: DnsPeer, store: Mapping[str, str] | None = None) -> list[Finding]:
    return run(INPUT, dns.resolver(), key_source(keys() if store is None else store))  # type: ignore[arg-type]


def one(fs: list[Finding], check: str, subject: str) -> Finding:
    [f] = [f for f in fs if f.check == check and f.subject == subject]
    return f


def test_everything_published_everything_ok(dns: DnsPeer) -> None:
    fs = findings(dns)
    assert [(f.check, f.subject) for f in fs if not f.ok] == []
    assert {(f.check, f.subject) for f in fs} == {
        ("fcrdns", IP4),
        ("ehlo", IP4),
        ("fcrdns", IP6),
        ("ehlo", IP6),
        ("spf", EHLO),
        ("spf", "example.com"),
        ("dkim", "rsa1._domainkey.example.com"),
        ("dkim", "ed1._domainkey.example.com"),
        ("dmarc", "example.com"),
    }
    assert "9 ok, 0 failing" in render(fs) and "Records to publish" not in render(fs)


def test_code_derives_the_same_public_records() -> None:
    for sel in ("rsa1", "ed1"):
        assert dkim_public_txt(keys()[sel]) == public_txt(sel)


def test_fcrdns_no_ptr(dns: DnsPeer) -> None:
    dns.set(REV4, "PTR", [])
    fs = findings(dns)
    f = one(fs, "fcrdns", IP4)
    assert not f.ok and f.detail == "no PTR record"
    assert f.publish and REV4 in f.publish and EHLO in f.publish
    assert not one(fs, "ehlo", IP4).ok
    assert one(fs, "fcrdns", IP6).ok


def test_fcrdns_ptr_name_does_not_resolve_back(dns: DnsPeer) -> None:
    dns.set(EHLO, "A", ["192.0.2.99"])
    fs = findings(dns)
    f = one(fs, "fcrdns", IP4)
    assert not f.ok and "do not include" in f.detail
    assert f.publish == f"{EHLO}. IN A {IP4}"
    assert one(fs, "fcrdns", IP6).ok


def test_ehlo_name_differs_from_the_ptr_name(dns: DnsPeer) -> None:
    dns.set(REV4, "PTR", ["ec2-192-0-2-10.compute.example."])
    dns.set("ec2-192-0-2-10.compute.example", "A", [IP4])
    fs = findings(dns)
    assert one(fs, "fcrdns", IP4).ok  # confirmed, but under another name
    f = one(fs, "ehlo", IP4)
    assert not f.ok and "ec2-192-0-2-10.compute.example" in f.detail
    assert f.publish is not None and f"-> {EHLO}." in f.publish


def test_spf_missing_record(dns: DnsPeer) -> None:
    dns.set("example.com", "TXT", ["unrelated"])
    f = one(findings(dns), "spf", "example.com")
    assert not f.ok and "no SPF record" in f.detail
    assert f.publish == f'example.com. IN TXT "v=spf1 ip4:{IP4} ip6:{IP6} -all"'


def test_spf_record_without_our_ip(dns: DnsPeer) -> None:
    dns.set("_spf.example.com", "TXT", [f"v=spf1 ip6:{IP6} -all"])
    dns.set("example.com", "TXT", ["v=spf1 mx include:_spf.example.com -all"])
    f = one(findings(dns), "spf", "example.com")
    assert not f.ok and f"{IP4} (fail)" in f.detail and IP6 not in f.detail
    assert f.publish == (f'example.com. IN TXT "v=spf1 mx include:_spf.example.com ip4:{IP4} -all"')


def test_spf_helo_identity(dns: DnsPeer) -> None:
    dns.set(EHLO, "TXT", ["v=spf1 -all"])
    f = one(findings(dns), "spf", EHLO)
    assert not f.ok and "HELO" in f.detail


def test_dkim_record_missing(dns: DnsPeer) -> None:
    dns.set("ed1._domainkey.example.com", "TXT", [])
    fs = findings(dns)
    f = one(fs, "dkim", "ed1._domainkey.example.com")
    assert not f.ok and f.detail == "no DKIM record published"
    assert f.publish == f'ed1._domainkey.example.com. IN TXT "{public_txt("ed1")}"'
    assert one(fs, "dkim", "rsa1._domainkey.example.com").ok


def test_dkim_record_is_another_key(dns: DnsPeer) -> None:
    dns.set("rsa1._domainkey.example.com", "TXT", [public_txt("ed1")])
    f = one(findings(dns), "dkim", "rsa1._domainkey.example.com")
    assert not f.ok and "not the stored key" in f.detail
    assert f.publish is not None and f.publish.startswith("rsa1._domainkey.example.com. IN TXT ")
    # a 2048-bit key is longer than one TXT string: split into 255-byte strings
    strings = f.publish.split(" IN TXT ", 1)[1]
    assert strings.count('" "') >= 1
    assert strings.replace('" "', "").strip('"') == public_txt("rsa1")


def test_dkim_key_not_stored(dns: DnsPeer) -> None:
    store = {"rsa1": keys()["rsa1"]}
    f = one(findings(dns, store), "dkim", "ed1._domainkey.example.com")
    assert not f.ok and "no stored key at secretsmanager:mailqueue/dkim/example.com/ed1" in f.detail


def test_dmarc_missing(dns: DnsPeer) -> None:
    dns.set("_dmarc.example.com", "TXT", [])
    f = one(findings(dns), "dmarc", "example.com")
    assert not f.ok
    assert f.publish == (
        '_dmarc.example.com. IN TXT "v=DMARC1; p=none; rua=mailto:postmaster@example.com"'
    )


def test_dns_failure_is_a_failure_not_a_crash() -> None:
    with dns_server(good_zone(), servfail={"_dmarc.example.com", REV4}) as dns:
        fs = findings(dns)
    assert not one(fs, "dmarc", "example.com").ok
    assert "DNS lookup failed" in one(fs, "fcrdns", IP4).detail


def test_render_lists_the_records_to_publish(dns: DnsPeer) -> None:
    dns.set("_dmarc.example.com", "TXT", [])
    dns.set(REV4, "PTR", [])
    text = render(findings(dns))
    assert "FAIL dmarc" in text and "Records to publish:" in text
    assert "_dmarc.example.com. IN TXT" in text
