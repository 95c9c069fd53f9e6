"""The DNS world the doctor tests share: keys per the DKIM key contract, a zone where
everything is published, and the expected records derived independently."""

from __future__ import annotations

import base64
import json
from functools import lru_cache

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519, rsa
from mailqueue.outbound.doctor import DoctorInput

IP4, IP6 = "192.0.2.10", "2001:db8::10"
EHLO = "mq.example.com"
REV4 = "10.2.0.192.in-addr.arpa"
REV6 = "0.1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.8.b.d.0.1.0.0.2.ip6.arpa"


@lru_cache(maxsize=1)
def keys() -> dict[str, str]:
    """Secret values as the DKIM key contract stores them."""
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = rsa_key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    seed = ed25519.Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
    )
    return {
        "rsa1": json.dumps({"algorithm": "rsa-sha256", "private_key": pem}),
        "ed1": json.dumps(
            {"algorithm": "ed25519-sha256", "private_key": base64.b64encode(seed).decode()}
        ),
    }


def public_txt(selector: str) -> str:
    """The expected record, derived here, not by the code under test."""
    doc = json.loads(keys()[selector])
    if doc["algorithm"] == "rsa-sha256":
        key = serialization.load_pem_private_key(doc["private_key"].encode(), None)
        der = key.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        return "v=DKIM1; k=rsa; p=" + base64.b64encode(der).decode()
    raw = (
        ed25519.Ed25519PrivateKey.from_private_bytes(base64.b64decode(doc["private_key"]))
        .public_key()
        .public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    )
    return "v=DKIM1; k=ed25519; p=" + base64.b64encode(raw).decode()


def good_zone() -> dict[str, dict[str, list[str]]]:
    return {
        REV4: {"PTR": [f"{EHLO}."]},
        REV6: {"PTR": [f"{EHLO}."]},
        EHLO: {"A": [IP4], "AAAA": [IP6], "TXT": ["v=spf1 a -all"]},
        "example.com": {"TXT": ["v=spf1 include:_spf.example.com -all", "other text"]},
        "_spf.example.com": {"TXT": [f"v=spf1 ip4:{IP4} ip6:{IP6} ~all"]},
        "rsa1._domainkey.example.com": {"TXT": [public_txt("rsa1")]},
        "ed1._domainkey.example.com": {"TXT": [public_txt("ed1")]},
        "_dmarc.example.com": {"TXT": ["v=DMARC1; p=reject; rua=mailto:d@example.com"]},
    }


INPUT = DoctorInput(ehlo=EHLO, sending_ips=(IP4, IP6), dkim={"example.com": ("rsa1", "ed1")})
