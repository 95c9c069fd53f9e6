"""dkim.py's configuration, key format and the keygen command (against moto, DNS, dkimpy)."""

from __future__ import annotations

import io
import re

import dkim as dkimpy
import pytest
from mailqueue.cli.main import main as cli_main
from mailqueue.outbound.dkim import (
    OVERSIGNED,
    SIGNED_HEADERS,
    DkimConfig,
    DkimError,
    DkimSigner,
    KeyUnavailable,
    generate_key,
    header_from_domain,
    key_json,
    key_ref,
    parse_key,
    powertools_key_source,
    public_txt,
    sign_one,
    txt_strings,
    wire_form,
)

from tests.support.aws import AwsEnv, session
from tests.support.dkim_keys import PREFIX, dnsfunc_for, signatures, verify_all
from tests.support.dns_peer import dns_server

MAIL = b"From: a@example.com\r\nTo: b@example.net\r\nSubject: s\r\n\r\nhello\r\n"


@pytest.mark.parametrize(
    ("domains", "policy"),
    [
        ("[]", "send"),
        ('{"example.com": []}', "send"),
        ('{"example.com": ["bad selector"]}', "send"),
        ('{"not a domain": ["s1"]}', "send"),
        ('{"example.com": ["s1"]}', "sometimes"),
        ("{", "send"),
    ],
)
def test_bad_configuration_is_refused(domains: str, policy: str) -> None:
    with pytest.raises(DkimError):
        DkimConfig.parse(domains, policy, "mq.example.com")


def test_signing_domain_and_refusal_rules() -> None:
    c = DkimConfig.parse('{"Example.COM.": ["s1"], "mq.example.com": ["h1"]}', "refuse", "")
    assert c.signing_domain("example.com", False) == "example.com"
    assert c.signing_domain("other.org", False) is None and c.refuses("other.org", False)
    assert not c.refuses("example.com", False)
    # null-sender mail falls back to the host domain only when that is set and listed
    assert c.signing_domain("other.org", True) is None
    c = DkimConfig.parse('{"mq.example.com": ["h1"]}', "refuse", "mq.example.com")
    assert c.signing_domain("other.org", True) == "mq.example.com"
    assert c.signing_domain(None, True) == "mq.example.com"
    assert c.refuses(None, False)
    assert not DkimConfig.parse("{}", "send", "").refuses("other.org", False)


@pytest.mark.parametrize(
    ("head", "domain"),
    [
        (b"From: A <a@Example.COM>\r\n\r\n", "example.com"),
        (b"from: a@b.example\n\n", "b.example"),
        ("From: Jörg <j@bücher.example>\r\n\r\n".encode(), "xn--bcher-kva.example"),
        (b"From: a@x.example, b@y.example\r\n\r\n", None),  # no single d= aligns
        (b"To: a@x.example\r\n\r\n", None),
        (b"From: not an address\r\n\r\n", None),
    ],
)
def test_header_from_domain(head: bytes, domain: str | None) -> None:
    assert header_from_domain(head) == domain


def test_wire_form_is_the_smtp_clients() -> None:
    assert wire_form(b"a\nb\rc\r\nd") == b"a\r\nb\r\nc\r\nd\r\n"


def test_key_json_is_checked() -> None:
    for bad in ("nope", "[]", '{"algorithm": "rsa-sha1", "private_key": "x"}', "{}"):
        with pytest.raises(DkimError):
            parse_key(bad)
    assert parse_key('{"algorithm": "ed25519-sha256", "private_key": "AAAA"}')[0] == (
        "ed25519-sha256"
    )


def test_a_broken_key_is_unavailable_not_a_crash() -> None:
    c = DkimConfig.parse('{"example.com": ["s1"]}', "send", "")
    store = {"secretsmanager:mq/dkim/example.com/s1": '{"algorithm": "rsa-sha256", '
             '"private_key": "-----BEGIN RSA PRIVATE KEY-----\\nAAAA\\n-----END"}'}  # fmt: skip
    with pytest.raises(KeyUnavailable):
        DkimSigner(c, store.__getitem__, prefix="mq/").sign(
            MAIL, from_domain="example.com", null_sender=False
        )
    with pytest.raises(KeyUnavailable):  # no such secret
        DkimSigner(c, {}.__getitem__, prefix="mq/").sign(
            MAIL, from_domain="example.com", null_sender=False
        )


def test_rsa_signature_is_dkimpys_byte_for_byte() -> None:
    """The RSA signature is made by OpenSSL (cryptography), not dkimpy's Python
    arithmetic: RSASSA-PKCS1-v1_5 is deterministic, so each field must equal the one
    dkimpy itself makes over the same message in the same second (t=)."""
    private = generate_key("rsa-sha256")
    folded = (
        b'From: "A, B" <a@example.com>\r\nTo: b@example.net,\r\n  c@example.net\r\n'
        b"Subject: a long subject\r\n\tfolded once\r\nMIME-Version: 1.0\r\n\r\n"
        b"body  with   runs \r\n\r\n\r\n"
    )
    for mail, body in ((MAIL, "relaxed"), (folded, "relaxed"), (folded, "simple")):
        for _ in range(5):  # both in the same second, so both carry the same t=
            ours = sign_one(mail, "example.com", "s1", "rsa-sha256", private, body=body)  # type: ignore[arg-type]
            d = dkimpy.DKIM(mail, signature_algorithm=b"rsa-sha256", linesep=b"\r\n")
            present = {bytes(n).lower() for n, _ in d.headers}
            include = [h.encode() for h in (*SIGNED_HEADERS, *OVERSIGNED) if h.encode() in present]
            canon = (b"relaxed", body.encode())
            theirs = d.sign(
                b"s1", b"example.com", private.encode(), canonicalize=canon, include_headers=include
            )
            if signatures(ours + mail)[0][b"t"] == signatures(theirs + mail)[0][b"t"]:
                break
        assert ours == bytes(theirs)
        assert ours.startswith(b"DKIM-Signature: v=1; a=rsa-sha256;")


@pytest.mark.parametrize(
    ("flag", "algorithm", "k"),
    [("rsa", "rsa-sha256", "rsa"), ("ed25519", "ed25519-sha256", "ed25519")],
)
@pytest.mark.parametrize("store", ["secretsmanager", "ssm"])
def test_keygen_stores_the_key_and_prints_a_record_that_verifies(
    aws: AwsEnv, flag: str, algorithm: str, k: str, store: str
) -> None:
    out, err = io.StringIO(), io.StringIO()
    argv = ["dkim", "keygen", "example.com", "s2026", "--algorithm", flag, "--store", store,
            "--prefix", PREFIX, "--endpoint-url", aws.endpoint]  # fmt: skip
    from mailqueue.cli import dkim as cli_dkim

    code = cli_dkim.main(argv[1:], env={}, stdout=out, stderr=err, session=session())
    assert code == 0, err.getvalue()
    record = out.getvalue().strip()
    m = re.fullmatch(r"s2026\._domainkey\.example\.com\. IN TXT \( (.+) \)", record)
    assert m, record
    strings = re.findall(r'"([^"]*)"', m.group(1))
    assert all(len(s) <= 255 for s in strings)
    txt = "".join(strings)
    assert txt.startswith(f"v=DKIM1; k={k}; p=")
    # the stored secret has the contract's name and format, and its public half is `txt`
    keys = powertools_key_source(
        secrets_client=session().client("secretsmanager", endpoint_url=aws.endpoint),
        ssm_client=session().client("ssm", endpoint_url=aws.endpoint),
        max_age=0,
    )
    ref = f"secretsmanager:{PREFIX}dkim/example.com/s2026" if store == "secretsmanager" else (
        f"ssm:/{PREFIX}dkim/example.com/s2026")  # fmt: skip
    alg, private = parse_key(keys(ref))
    assert alg == algorithm and public_txt(alg, private) == txt
    if alg == "rsa-sha256":
        assert private.startswith("-----BEGIN RSA PRIVATE KEY-----")
        assert len(txt) > 380  # a 2048-bit modulus
    # a signature by the stored key verifies against the printed record, served by DNS
    signed = sign_one(MAIL, "example.com", "s2026", alg, private) + MAIL
    zone = {"s2026._domainkey.example.com": {"TXT": [m.group(1)]}}
    with dns_server(zone) as dns:
        assert verify_all(signed, dnsfunc_for(dns)) == [True]
        assert dkimpy.verify(signed, dnsfunc=dnsfunc_for(dns))
    # a second keygen for the same selector is refused (rotation = a new selector)
    again = cli_dkim.main(argv[1:], env={}, stdout=io.StringIO(), stderr=err, session=session())
    assert again == 1 and "exists" in err.getvalue()


def test_keygen_is_reached_through_the_mailqueue_command() -> None:
    err = io.StringIO()
    code = cli_main(["dkim", "keygen", "not_a_domain", "s1"], env={}, stderr=err)
    assert code == 1 and "is not a domain" in err.getvalue()


def test_a_large_mail_is_signed_with_simple_body_canonicalisation() -> None:
    """Above relaxed_body_max (dkimpy's relaxed body costs ~40x the body in memory)."""
    private = {a: generate_key(a) for a in ("rsa-sha256", "ed25519-sha256")}
    store = {f"secretsmanager:mq/dkim/example.com/{a[:3]}": key_json(a, k)
             for a, k in private.items()}  # fmt: skip
    config = DkimConfig.parse('{"example.com": ["rsa", "ed2"]}', "send", "")
    body = b"From: a@example.com\r\nSubject: big\r\n\r\n" + b"word  with   spaces \r\n" * 100
    for limit, canon in ((10**6, b"relaxed/relaxed"), (100, b"relaxed/simple")):
        signer = DkimSigner(config, store.__getitem__, prefix="mq/", relaxed_body_max=limit)
        signed, sigs = signer.sign(body, from_domain="example.com", null_sender=False)
        assert len(sigs) == 2
        assert [s[b"c"] for s in signatures(signed)] == [canon, canon]
        zone = {f"{a[:3]}._domainkey.example.com": {"TXT": [
            " ".join(f'"{s}"' for s in txt_strings(public_txt(a, k)))]}
            for a, k in private.items()}  # fmt: skip
        with dns_server(zone) as dns:
            assert verify_all(signed, dnsfunc_for(dns)) == [True, True]


def test_the_relaxed_threshold_is_on_the_body_not_the_whole_message() -> None:
    """Issue 28, item 19: docs say the body; a body at the limit with headers around it
    is still canonicalised relaxed, one octet over is simple."""
    private = generate_key("ed25519-sha256")
    store = {"secretsmanager:mq/dkim/example.com/ed2": key_json("ed25519-sha256", private)}
    config = DkimConfig.parse('{"example.com": ["ed2"]}', "send", "")
    body = b"word  with   spaces \r\n" * 100
    mail = b"From: a@example.com\r\nSubject: " + b"x" * 500 + b"\r\n\r\n" + body
    for limit, canon in ((len(body), b"relaxed/relaxed"), (len(body) - 1, b"relaxed/simple")):
        signer = DkimSigner(config, store.__getitem__, prefix="mq/", relaxed_body_max=limit)
        signed, _ = signer.sign(mail, from_domain="example.com", null_sender=False)
        assert [s[b"c"] for s in signatures(signed)] == [canon]


@pytest.mark.parametrize("algorithm", ["rsa-sha256", "ed25519-sha256"])
def test_doctor_reads_the_key_contract_as_the_signer_writes_it(algorithm: str) -> None:
    """`mailqueue doctor` derives the expected TXT record from the stored secret itself:
    it must be the record keygen prints and the signer's key verifies against."""
    from mailqueue.outbound.doctor import DoctorInput, dkim_public_txt

    private = generate_key(algorithm)  # type: ignore[arg-type]
    stored = key_json(algorithm, private)  # type: ignore[arg-type]
    assert dkim_public_txt(stored) == public_txt(algorithm, private)  # type: ignore[arg-type]
    for store in ("secretsmanager", "ssm"):
        doctor = DoctorInput("mq.example.com", (), {}, dkim_key_prefix=PREFIX, key_store=store)
        assert doctor.key_ref("example.com", "s1") == key_ref(store, PREFIX, "example.com", "s1")
