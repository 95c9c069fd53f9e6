"""DKIM signing (RFC 6376; ed25519-sha256 per RFC 8463) with dkimpy, at delivery.

Where signing happens, and why: **at delivery**, once per SMTP attempt, over the exact
octets the SMTP client puts on the wire (line ends normalised to CRLF as the client
does, a final CRLF added as the client does; dot-stuffing is transparent to the
receiver). So:

* the stored content stays the client's bytes: ingress idempotency (sha256 of what is
  stored), crash recovery and the admin API's view are unchanged, and no private key is
  needed by ingress or the bounce function;
* DSNs and delay warnings are queued as ordinary null-sender mail by the bounce function
  and are signed by the same code on their way out, with the queue host's domain key;
* a key rotation applies to mail already queued (no mail waits days with a signature
  made by a selector that was withdrawn meanwhile), and ``t=`` is the sending time;
* a retry signs again: each attempt's signature is fresh and verifies on its own.

The price is one read of the whole content into memory per signed attempt (the body
hash must be known before the first header is sent), and dkimpy's relaxed body
canonicalisation, which peaks at ~40x the body; above RELAXED_BODY_MAX the body is
canonicalised "simple" (c=relaxed/simple), so the 40 MiB maximum fits the function.

A domain is signed when ``DkimDomains`` lists it. Which mails without a listed domain
are refused (``DkimUnsignedPolicy=refuse``) is decided at acceptance (ingress, a 422
``dkim_unsigned_domain``), where the client can still be told; the delivery side never
refuses, it signs or sends unsigned (received mail that ingress forwards, and mail
accepted before the configuration changed).

Key storage (shared with ``mailqueue doctor``): one Secrets Manager secret or SSM
SecureString parameter per key, named ``<SecretsPrefix>dkim/<domain>/<selector>`` (SSM:
with a leading ``/``), holding JSON ``{"algorithm": "rsa-sha256" | "ed25519-sha256",
"private_key": ...}``: a PEM for RSA, the base64 of the 32-byte raw seed for ed25519
(dkimpy's format).
"""

from __future__ import annotations

import base64
import functools
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from email.headerregistry import Address
from email.parser import HeaderParser
from email.policy import SMTPUTF8
from typing import Any, Literal

from mailqueue.core.errors import MailqueueError
from mailqueue.core.trace import HEADER_SCAN_LIMIT, header_prefix

Algorithm = Literal["rsa-sha256", "ed25519-sha256"]
ALGORITHMS: tuple[Algorithm, ...] = ("rsa-sha256", "ed25519-sha256")
UnsignedPolicy = Literal["send", "refuse"]
RSA_BITS = 2048
# dkimpy's relaxed body canonicalisation costs about 40x the body in transient memory
# (one Python object per whitespace run) and ~0.2 s/MiB: measured 78 MiB peak for a
# 2 MiB body. Above this size the body is canonicalised "simple" (c=relaxed/simple),
# which costs a few copies: still signed, and our SMTP client changes no body octet.
RELAXED_BODY_MAX = 2 * 1024 * 1024

# RFC 6376 §5.4.1's list, trimmed to what senders set, plus the one-click unsubscribe
# fields (RFC 8058 requires them signed). Each present field is signed; From is signed
# once more than it occurs (oversigned), so a second From cannot be added unnoticed.
SIGNED_HEADERS: tuple[str, ...] = (
    "from", "sender", "reply-to", "subject", "date", "message-id", "to", "cc",
    "mime-version", "content-type", "content-transfer-encoding", "content-disposition",
    "in-reply-to", "references", "list-id", "list-unsubscribe", "list-unsubscribe-post",
    "feedback-id",
)  # fmt: skip
OVERSIGNED: tuple[str, ...] = ("from",)

_SELECTOR = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?$")
_DOMAIN = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)(\.(?!-)[a-z0-9-]{1,63}(?<!-))+$")
_LINE_END = re.compile(rb"\r\n|\r|\n")


class DkimError(MailqueueError):
    """Bad DKIM configuration or key material."""


class KeyUnavailable(DkimError):
    """A configured key could not be loaded or used: the attempt is deferred, not lost."""


class Unsignable(DkimError):
    """The mail itself cannot carry a signature (no From, header dkimpy cannot parse)."""


# ---------------------------------------------------------------------- keys
def key_name(prefix: str, domain: str, selector: str) -> str:
    """The secret's name: ``<SecretsPrefix>dkim/<domain>/<selector>``."""
    return f"{prefix}dkim/{domain}/{selector}"


def key_ref(store: str, prefix: str, domain: str, selector: str) -> str:
    """``secretsmanager:<name>`` or ``ssm:/<name>`` (SSM hierarchies start with ``/``)."""
    name = key_name(prefix, domain, selector)
    return f"secretsmanager:{name}" if store == "secretsmanager" else f"ssm:/{name}"


def parse_key(value: str | bytes | Mapping[str, Any]) -> tuple[Algorithm, str]:
    """The stored JSON → (algorithm, private key); raises DkimError when malformed."""
    try:
        data = json.loads(value) if isinstance(value, str | bytes) else dict(value)
    except ValueError as e:
        raise DkimError("DKIM key secret is not JSON") from e
    if not isinstance(data, dict):
        raise DkimError("DKIM key secret must be a JSON object")
    algorithm, private = data.get("algorithm"), data.get("private_key")
    if algorithm not in ALGORITHMS or not isinstance(private, str) or not private:
        raise DkimError(
            "DKIM key secret needs 'algorithm' (rsa-sha256 | ed25519-sha256) and 'private_key'"
        )
    return algorithm, private


def key_json(algorithm: Algorithm, private_key: str) -> str:
    return json.dumps({"algorithm": algorithm, "private_key": private_key})


def generate_key(algorithm: Algorithm) -> str:
    """A new private key in the stored format: RSA 2048 PEM, or base64 ed25519 seed."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519, rsa

    if algorithm == "rsa-sha256":
        rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=RSA_BITS)
        return rsa_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        ).decode("ascii")
    if algorithm == "ed25519-sha256":
        ed_key = ed25519.Ed25519PrivateKey.generate()
        seed = ed_key.private_bytes(
            serialization.Encoding.Raw,
            serialization.PrivateFormat.Raw,
            serialization.NoEncryption(),
        )
        return base64.b64encode(seed).decode("ascii")
    raise DkimError(f"unknown algorithm {algorithm!r}")


def public_txt(algorithm: Algorithm, private_key: str) -> str:
    """The DNS TXT value for ``<selector>._domainkey.<domain>``: ``v=DKIM1; k=...; p=...``.

    RSA: base64 of the DER SubjectPublicKeyInfo (RFC 6376 §3.6.1); ed25519: base64 of the
    32-byte raw public key (RFC 8463 §4).
    """
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519

    try:
        if algorithm == "rsa-sha256":
            key = serialization.load_pem_private_key(private_key.encode("ascii"), password=None)
            der = key.public_key().public_bytes(
                serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
            )
            return f"v=DKIM1; k=rsa; p={base64.b64encode(der).decode('ascii')}"
        if algorithm == "ed25519-sha256":
            seed = base64.b64decode(private_key, validate=True)
            pub = ed25519.Ed25519PrivateKey.from_private_bytes(seed).public_key()
            raw = pub.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
            return f"v=DKIM1; k=ed25519; p={base64.b64encode(raw).decode('ascii')}"
    except (ValueError, TypeError) as e:
        raise DkimError(f"unreadable {algorithm} private key: {e}") from e
    raise DkimError(f"unknown algorithm {algorithm!r}")


def txt_strings(value: str, size: int = 255) -> list[str]:
    """Split a TXT value into DNS character-strings (at most 255 octets each)."""
    return [value[i : i + size] for i in range(0, len(value), size)] or [""]


# ---------------------------------------------------------------------- configuration
@dataclass(frozen=True, slots=True)
class DkimConfig:
    """Which domains sign with which selectors; validated at start (policy as data)."""

    domains: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    unsigned_policy: UnsignedPolicy = "send"
    host_domain: str = ""  # signs DSNs and delay warnings (null-sender mail)

    @classmethod
    def parse(cls, domains_json: str, unsigned_policy: str, host_domain: str) -> DkimConfig:
        try:
            raw = json.loads(domains_json or "{}")
        except ValueError as e:
            raise DkimError(f"dkim_domains is not JSON: {e}") from e
        if not isinstance(raw, dict):
            raise DkimError('dkim_domains must be a JSON object {"domain": ["selector", ...]}')
        domains: dict[str, tuple[str, ...]] = {}
        for domain, selectors in raw.items():
            d = str(domain).lower().rstrip(".")
            if not _DOMAIN.match(d):
                raise DkimError(f"dkim_domains: {domain!r} is not a domain (use A-labels)")
            if (
                not isinstance(selectors, list)
                or not selectors
                or not all(isinstance(s, str) and _SELECTOR.match(s) for s in selectors)
            ):
                raise DkimError(f"dkim_domains[{domain!r}] must be a non-empty list of selectors")
            domains[d] = tuple(dict.fromkeys(selectors))
        if unsigned_policy not in ("send", "refuse"):
            raise DkimError("dkim_unsigned_policy must be 'send' or 'refuse'")
        policy: UnsignedPolicy = "refuse" if unsigned_policy == "refuse" else "send"
        return cls(domains, policy, host_domain.lower().rstrip("."))

    @property
    def enabled(self) -> bool:
        return bool(self.domains)

    def signing_domain(self, from_domain: str | None, null_sender: bool) -> str | None:
        """The d= domain for a mail, or None (unsigned). The From domain when listed
        (DMARC alignment); null-sender mail (DSNs, delay warnings) otherwise takes the
        queue host's domain when that is listed."""
        if from_domain and from_domain in self.domains:
            return from_domain
        if null_sender and self.host_domain in self.domains:
            return self.host_domain
        return None

    def refuses(self, from_domain: str | None, null_sender: bool) -> bool:
        """Acceptance-time rule: `refuse` policy and nothing would sign the mail."""
        return (
            self.unsigned_policy == "refuse"
            and self.signing_domain(from_domain, null_sender) is None
        )


def header_from_domain(head: bytes) -> str | None:
    """The domain of the From field (lower case, A-label), None when absent, unparsable,
    or naming several domains (then no single d= aligns with it)."""
    try:
        msg = HeaderParser(policy=SMTPUTF8).parsestr(head.decode("utf-8", "replace"))
        field_ = msg.get("From")
        addresses: Sequence[Address] = getattr(field_, "addresses", ()) if field_ else ()
        domains = {a.domain.lower().rstrip(".") for a in addresses if a.domain}
    except (ValueError, TypeError, IndexError, AttributeError):
        return None
    if len(domains) != 1:
        return None
    domain = domains.pop()
    try:
        return domain.encode("idna").decode("ascii")
    except UnicodeError:
        return None


def header_section(content: bytes, limit: int = HEADER_SCAN_LIMIT) -> bytes:
    """The header section of a mail as ingress and delivery both read it: up to the
    first empty line, at most the one HEADER_SCAN_LIMIT (core.trace), cut at a field."""
    return header_prefix(content, limit)


def wire_form(content: bytes) -> bytes:
    """The content as the SMTP client sends it, before dot-stuffing: every CR, LF or
    CRLF becomes CRLF (smtp.DotStuffer's rule) and a last line is ended."""
    data = _LINE_END.sub(b"\r\n", content)
    return data if data.endswith(b"\r\n") else data + b"\r\n"


def unsignable(content: bytes) -> str | None:
    """Why :func:`sign_one` would refuse this mail before any key is read (None: it can
    sign it): dkimpy's own header parser over the header section, and a From field.
    Ingress asks under ``DkimUnsignedPolicy=refuse``, so such a mail is a 422 instead of
    leaving unsigned. The reason names no header value (they hold addresses)."""
    import dkim as dkimpy  # here, not at import: see sign_one

    try:
        headers, _ = dkimpy.rfc822_parse(wire_form(header_section(content)))
    except dkimpy.MessageFormatError:
        return (
            "a header field is not in the syntax DKIM signs (obsolete syntax such as "
            "whitespace before the colon)"
        )
    if not any(bytes(name).lower() == b"from" for name, _ in headers):
        return "no From field"
    return None


def body_length(message: bytes) -> int:
    """Octets of the body of a CRLF message (after the first empty line)."""
    end = message.find(b"\r\n\r\n")
    return 0 if end < 0 else len(message) - end - 4


# ---------------------------------------------------------------------- signing
KeySource = Callable[[str], str]
"""Resolves ``secretsmanager:<name>`` / ``ssm:<name>`` to the secret's string (cached)."""


@dataclass(frozen=True, slots=True)
class Signature:
    domain: str
    selector: str
    algorithm: Algorithm


class DkimSigner:
    """Signs a mail with every configured selector of its signing domain."""

    def __init__(
        self,
        config: DkimConfig,
        keys: KeySource,
        *,
        prefix: str,
        store: str = "secretsmanager",
        relaxed_body_max: int = RELAXED_BODY_MAX,
    ) -> None:
        if store not in ("secretsmanager", "ssm"):
            raise DkimError("dkim key store must be 'secretsmanager' or 'ssm'")
        self.config = config
        self.keys = keys
        self.prefix = prefix
        self.store = store
        self.relaxed_body_max = relaxed_body_max

    def load(self, domain: str, selector: str) -> tuple[Algorithm, str]:
        ref = key_ref(self.store, self.prefix, domain, selector)
        try:
            value = self.keys(ref)
        except Exception as e:  # any store failure (re-raised as KeyUnavailable): defer
            raise KeyUnavailable(
                f"DKIM key {domain}/{selector} unavailable: {type(e).__name__}"
            ) from e
        try:
            return parse_key(value)
        except DkimError as e:
            raise KeyUnavailable(f"DKIM key {domain}/{selector}: {e}") from e

    def sign(
        self, content: bytes, *, from_domain: str | None, null_sender: bool
    ) -> tuple[bytes, list[Signature]]:
        """The wire form of ``content`` with one DKIM-Signature per selector in front,
        or the wire form alone when nothing signs it. Raises KeyUnavailable (defer) or
        Unsignable (send unsigned)."""
        message = wire_form(content)
        domain = self.config.signing_domain(from_domain, null_sender)
        if domain is None:
            return message, []
        fields: list[bytes] = []
        done: list[Signature] = []
        # the threshold is on the body, which the body canonicalisation costs (not headers)
        small = body_length(message) <= self.relaxed_body_max
        body: BodyCanon = "relaxed" if small else "simple"
        for selector in self.config.domains[domain]:
            algorithm, private = self.load(domain, selector)
            fields.append(sign_one(message, domain, selector, algorithm, private, body=body))
            done.append(Signature(domain, selector, algorithm))
        return b"".join(fields) + message, done


BodyCanon = Literal["relaxed", "simple"]


def sign_one(
    message: bytes,
    domain: str,
    selector: str,
    algorithm: Algorithm,
    private_key: str,
    *,
    body: BodyCanon = "relaxed",
) -> bytes:
    """One DKIM-Signature field (CRLF-terminated) over a CRLF message: relaxed header
    canonicalisation, ``body`` for the body (relaxed unless the mail is large)."""
    # imported here, not at module level: dkimpy pulls in dnspython's resolver and PyNaCl,
    # which ingress (header parsing, config) and unsigned deliveries never use (cold start)
    import dkim as dkimpy

    try:
        d = _dkim_class()(message, signature_algorithm=algorithm.encode(), linesep=b"\r\n")
    except dkimpy.MessageFormatError as e:
        raise Unsignable(f"header section not parsable: {e}") from e
    present = [bytes(name).lower() for name, _ in d.headers]
    include = [h.encode() for h in SIGNED_HEADERS if h.encode() in present]
    include += [h.encode() for h in OVERSIGNED if h.encode() in present]
    if b"from" not in include:
        raise Unsignable("no From field")
    try:
        if algorithm == "rsa-sha256":
            d.rsa_key = _rsa_key(private_key)
        field_ = d.sign(
            selector.encode(),
            domain.encode(),
            private_key.encode("ascii"),
            canonicalize=(b"relaxed", body.encode()),
            include_headers=include,
        )
    except (dkimpy.KeyFormatError, dkimpy.NaClNotFoundError) as e:
        raise KeyUnavailable(f"DKIM key {domain}/{selector}: {e}") from e
    except dkimpy.DKIMException as e:
        raise Unsignable(str(e)) from e
    return bytes(field_)


@functools.lru_cache(maxsize=32)
def _rsa_key(pem: str) -> Any:
    """The RSA key as OpenSSL's object, loaded once per container and key (a rotation
    is a new PEM, so a new entry); dkimpy would re-parse the PEM in Python per mail."""
    import dkim as dkimpy
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    try:
        key = load_pem_private_key(pem.encode("ascii"), password=None)
    except (ValueError, TypeError, UnicodeError) as e:
        raise dkimpy.KeyFormatError(f"unreadable RSA private key: {e}") from e
    if not isinstance(key, rsa.RSAPrivateKey):
        raise dkimpy.KeyFormatError("not an RSA private key")
    return key


@functools.cache
def _dkim_class() -> type:
    """dkimpy's DKIM with the RSA signature made by OpenSSL (`cryptography`) instead of
    dkimpy's pure-Python modular arithmetic: ~6 ms → ~1 ms of CPU per RSA-2048
    signature. RSASSA-PKCS1-v1_5 is deterministic, so the field is byte for byte the
    one dkimpy makes (tests/test_dkim.py compares them). Everything else — header
    selection, canonicalisation, the tag list, folding — is dkimpy's own; `gen_header`
    below is dkimpy 1.1.8's for a DKIM-Signature (standardize=False), with the one call
    replaced. Ed25519 (already C, through PyNaCl) is left to dkimpy."""
    import base64 as b64

    import dkim as dkimpy
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import padding, utils

    class FastRsaDKIM(dkimpy.DKIM):  # type: ignore[misc]
        rsa_key: Any = None

        def gen_header(
            self,
            fields: list[tuple[bytes, bytes]],
            include_headers: Any,
            canon_policy: Any,
            header_name: bytes,
            pk: Any,
            standardize: bool = False,
        ) -> bytes:
            if self.rsa_key is None or standardize or self.signature_algorithm != b"rsa-sha256":
                return super().gen_header(  # type: ignore[no-any-return]
                    fields, include_headers, canon_policy, header_name, pk, standardize
                )
            header_value = b"; ".join(b"=".join(x) for x in fields)
            header_value = dkimpy.fold(header_value, namelen=len(header_name), linesep=b"\r\n")
            header_value = dkimpy.RE_BTAG.sub(b"\\1", header_value)
            header = (header_name, b" " + header_value)
            h = dkimpy.HashThrough(self.hasher(), self.debug_content)
            sig = dict(fields)
            headers = canon_policy.canonicalize_headers(self.headers)
            self.signed_headers = dkimpy.hash_headers(
                h, canon_policy, headers, include_headers, header, sig
            )
            signature = self.rsa_key.sign(
                h.digest(), padding.PKCS1v15(), utils.Prehashed(hashes.SHA256())
            )
            idx = [i for i in range(len(fields)) if fields[i][0] == b"b"][0]
            fields[idx] = (b"b", b64.b64encode(signature))
            header_value = b"; ".join(b"=".join(x) for x in fields) + self.linesep
            return dkimpy.fold(  # type: ignore[no-any-return]
                header_value, namelen=len(header_name), linesep=self.linesep
            )

    return FastRsaDKIM


def powertools_key_source(
    *, secrets_client: Any = None, ssm_client: Any = None, max_age: int = 300
) -> KeySource:
    """Keys through Powertools parameters, cached per container for ``max_age`` seconds.
    Clients default to Powertools' own (tests pass moto's)."""
    from aws_lambda_powertools.utilities.parameters import SecretsProvider, SSMProvider

    secrets = SecretsProvider(boto3_client=secrets_client) if secrets_client else None
    ssm = SSMProvider(boto3_client=ssm_client) if ssm_client else None

    def get(ref: str) -> str:
        from aws_lambda_powertools.utilities import parameters

        kind, _, name = ref.partition(":")
        if kind == "secretsmanager":
            value = (
                secrets.get(name, max_age=max_age)
                if secrets
                else parameters.get_secret(name, max_age=max_age)
            )
        elif kind == "ssm":
            value = (
                ssm.get(name, max_age=max_age, decrypt=True)
                if ssm
                else parameters.get_parameter(name, max_age=max_age, decrypt=True)
            )
        else:
            raise DkimError(f"unknown key store in {ref!r}")
        return value if isinstance(value, str) else bytes(value).decode()  # type: ignore[arg-type]

    return get
