"""DANE for SMTP (RFC 7672): authenticate an MX host by its DNSSEC-signed TLSA records.

Why: opportunistic STARTTLS is open to downgrade and to any certificate; MTA-STS needs a
web PKI certificate and an HTTPS fetch. A domain that publishes TLSA records under a
DNSSEC-signed zone says "my MX host presents this key": a sender that checks it cannot be
fooled by an active attacker. Postfix's ``smtp_tls_security_level = dane`` is the model.

What this module does:

* ``lookup``: the TLSA RRset ``_<port>._tcp.<mx host>`` through the configured
  *validating* resolver. Only an answer with the AD bit counts (RFC 7672 §2.1: records
  that are not validated are not DANE); so only a resolver we trust to validate may be
  configured (in AWS the VPC's Route 53 Resolver with DNSSEC validation on, see
  docs/deploy.md). A secure "no such record" means no DANE for that host; a SERVFAIL
  (bogus signatures, or the resolver cannot say) makes the host unusable (§2.2: never
  fall back to unauthenticated TLS when the answer could be an attack): the hop fails
  with 4.7.5 naming the cause.
* ``mx_secure``: DANE applies to MX hosts only when the MX RRset itself validated (§2.2.1).
* ``verify``: after the TLS handshake, the peer's chain against the usable records:
  DANE-EE(3) matches the leaf certificate or its key, no name or date checks (§3.1.1);
  DANE-TA(2) matches a certificate of the presented chain that must issue (through the
  chain) a leaf that is valid now and names the MX host (§3.1.2, §3.2.2). PKIX usages
  (0, 1) are unusable for SMTP (§3.1.3); a host whose records are all unusable still gets
  mandatory, unauthenticated TLS (§2.2).

Precedence over MTA-STS (RFC 8461 §2): a domain whose MX hosts have usable TLSA records
is governed by DANE; delivery.py skips its MTA-STS policy then. The hops a domain's
DANE policies give are routing's (`routing.with_dane`): this module knows no hop.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import dns.exception
import dns.flags
import dns.rdatatype
import dns.resolver

USAGE_DANE_TA = 2
USAGE_DANE_EE = 3
_USABLE_USAGES = (USAGE_DANE_TA, USAGE_DANE_EE)
_SELECTORS = (0, 1)  # full certificate, SubjectPublicKeyInfo
_MATCHING = (0, 1, 2)  # exact, SHA-256, SHA-512


@dataclass(frozen=True, slots=True)
class Tlsa:
    usage: int
    selector: int
    mtype: int
    data: bytes

    @property
    def usable(self) -> bool:
        return (
            self.usage in _USABLE_USAGES
            and self.selector in _SELECTORS
            and self.mtype in _MATCHING
            and bool(self.data)
        )


@dataclass(frozen=True, slots=True)
class DanePolicy:
    """What DANE says about one MX host: its usable TLSA records, or why the host cannot be
    used (``error``: a 4.7.5 text). An empty ``records`` with no error: TLS is mandatory
    but not authenticated (all records unusable)."""

    host: str
    records: tuple[Tlsa, ...] = ()
    error: str = ""


class DaneLookupError(Exception):
    """The validating resolver could not give a secure answer (SERVFAIL, timeout)."""


def tlsa_name(host: str, port: int) -> str:
    return f"_{port}._tcp.{host.rstrip('.')}."


def validating(resolver: dns.resolver.Resolver) -> dns.resolver.Resolver:
    """``resolver`` set to ask for validation (DO and AD, RFC 6840 §5.7), returned. A DNS
    cache (dnscache.py) keys answers by these bits, so what such a resolver caches is never
    served to a plain query, nor a plain (unvalidated) answer to it."""
    resolver.use_edns(0, dns.flags.DO, 1232)
    resolver.flags = dns.flags.RD | dns.flags.AD
    return resolver


def _secure_query(resolver: dns.resolver.Resolver, name: str, rdtype: str) -> dns.resolver.Answer:
    """A query that asks for validation; raises NXDOMAIN / NoAnswer as dnspython does,
    DaneLookupError when the resolver cannot answer. Through a cache, the answer is one a
    validating query fetched, its AD bit as the resolver set it (checked by the caller)."""
    validating(resolver)
    try:
        return resolver.resolve(name, rdtype, raise_on_no_answer=True)
    except (dns.resolver.NXDOMAIN, dns.resolver.NoAnswer):
        raise
    except dns.resolver.NoNameservers as e:
        raise DaneLookupError(f"{rdtype} lookup of {name} failed (SERVFAIL: bogus?)") from e
    except dns.exception.Timeout as e:
        raise DaneLookupError(f"{rdtype} lookup of {name} timed out") from e
    except dns.exception.DNSException as e:
        raise DaneLookupError(f"{rdtype} lookup of {name} failed: {type(e).__name__}") from e


def _authentic(answer: dns.resolver.Answer) -> bool:
    return answer.response is not None and bool(answer.response.flags & dns.flags.AD)


def mx_secure(resolver: dns.resolver.Resolver, domain: str) -> bool:
    """Did the domain's MX RRset validate? (No MX, or a lookup failure: not secure; the
    routing path reports its own MX errors.)"""
    try:
        return _authentic(_secure_query(resolver, domain.rstrip(".") + ".", "MX"))
    except (dns.resolver.NXDOMAIN, dns.resolver.NoAnswer, DaneLookupError):
        return False


def lookup(resolver: dns.resolver.Resolver, host: str, port: int = 25) -> DanePolicy | None:
    """The DANE policy of one MX host; None: no DANE (no TLSA record, or an unsigned zone)."""
    name = tlsa_name(host, port)
    try:
        answer = _secure_query(resolver, name, "TLSA")
    except (dns.resolver.NXDOMAIN, dns.resolver.NoAnswer):
        return None
    except DaneLookupError as e:
        return DanePolicy(host, (), f"DANE: TLSA {e}; host {host} not used")
    if not _authentic(answer):
        return None  # insecure (unsigned) zone: not DANE (RFC 7672 §2.1.1)
    records = tuple(
        Tlsa(int(r.usage), int(r.selector), int(r.mtype), bytes(r.cert))
        for r in answer
        if r.rdtype == dns.rdatatype.TLSA
    )
    return DanePolicy(host, tuple(r for r in records if r.usable))


# ------------------------------------------------------------------------- matching


def _selected(cert_der: bytes, selector: int) -> bytes:
    if selector == 0:
        return cert_der
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    cert = x509.load_der_x509_certificate(cert_der)
    return cert.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def matches(record: Tlsa, cert_der: bytes) -> bool:
    data = _selected(cert_der, record.selector)
    if record.mtype == 1:
        data = hashlib.sha256(data).digest()
    elif record.mtype == 2:
        data = hashlib.sha512(data).digest()
    return data == record.data


def _name_matches(cert_der: bytes, host: str) -> bool:
    """RFC 7672 §3.2.2: the MX host name among the leaf's DNS names (a wildcard covers
    one leftmost label); the CN only when there is no subjectAltName."""
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    cert = x509.load_der_x509_certificate(cert_der)
    try:
        names = cert.extensions.get_extension_for_class(
            x509.SubjectAlternativeName
        ).value.get_values_for_type(x509.DNSName)
    except x509.ExtensionNotFound:
        names = [str(a.value) for a in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    want = host.rstrip(".").lower()
    for n in names:
        n = n.rstrip(".").lower()
        if n == want:
            return True
        if n.startswith("*.") and "." in want and want.split(".", 1)[1] == n[2:]:
            return True
    return False


def _chain_to(chain: Sequence[bytes], anchor_index: int, now: _dt.datetime) -> bool:
    """Does the leaf (chain[0]) chain up to chain[anchor_index], each certificate issued
    (signature checked) by the next, the leaf valid now?"""
    from cryptography import x509
    from cryptography.exceptions import InvalidSignature

    certs = [x509.load_der_x509_certificate(c) for c in chain[: anchor_index + 1]]
    leaf = certs[0]
    if not leaf.not_valid_before_utc <= now <= leaf.not_valid_after_utc:
        return False
    for child, issuer in zip(certs, certs[1:], strict=False):
        try:
            child.verify_directly_issued_by(issuer)
        except (InvalidSignature, ValueError, TypeError):
            return False
    return True


def verify(
    policy: DanePolicy, chain: Sequence[bytes], now: _dt.datetime | None = None
) -> str | None:
    """None when the presented chain (leaf first, DER) satisfies a usable record; else
    why not (for a 4.7.5 reply)."""
    if not policy.records:
        return None  # all records unusable: encrypted, not authenticated (§2.2)
    if not chain:
        return f"DANE: host {policy.host} presented no certificate"
    when = now or _dt.datetime.now(_dt.UTC)
    for r in policy.records:
        if r.usage == USAGE_DANE_EE and matches(r, chain[0]):
            return None
    for r in policy.records:
        if r.usage != USAGE_DANE_TA:
            continue
        for i, cert in enumerate(chain):
            if i > 0 and matches(r, cert) and _chain_to(chain, i, when):
                if _name_matches(chain[0], policy.host):
                    return None
                return f"DANE: certificate of host {policy.host} does not name it"
    return f"DANE: no TLSA record of host {policy.host} matches its certificate chain"


def peer_chain(sock: object) -> list[bytes]:
    """The certificates the peer sent, leaf first, as DER (Python 3.13 has this public;
    3.11/3.12 have it on the SSL object)."""
    import ssl

    get = getattr(sock, "get_unverified_chain", None)
    if get is None:
        sslobj = getattr(sock, "_sslobj", None)
        get = getattr(sslobj, "get_unverified_chain", None)
    if get is not None:
        certs = get() or []
        out: list[bytes] = []
        for c in certs:
            out.append(c if isinstance(c, bytes) else c.public_bytes(ssl._ssl.ENCODING_DER))  # type: ignore[attr-defined]
        return out
    getpeercert = getattr(sock, "getpeercert", None)
    leaf = getpeercert(binary_form=True) if getpeercert is not None else None
    return [leaf] if leaf else []
