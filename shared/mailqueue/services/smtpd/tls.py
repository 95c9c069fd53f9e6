"""The TLS settings of every smtpd listener: Mozilla's "intermediate" profile.

Mozilla Server Side TLS, guidelines version 5.7 (2023-05-15;
https://ssl-config.mozilla.org/guidelines/5.7.json, the ssl-config-generator's
CHANGELOG): TLS 1.2 and 1.3; for TLS 1.2 only the AEAD suites with forward secrecy below
(5.6's eight, and DHE-RSA-CHACHA20-POLY1305 appended in 5.7); TLS 1.3's three suites
(OpenSSL's defaults, which `set_ciphers` does not touch); the client's order
(`server_preferred_order: false`). Python's default server context also takes the CBC
suites ECDHE-*-AES128-SHA256 and -AES256-SHA384, which the profile leaves to "old".

Not settable from Python's ssl module: the key-exchange groups (the profile lists X25519,
prime256v1, secp384r1; OpenSSL's default list offers those and X448, secp521r1 too) and
DH parameters (none are loaded, so the three DHE suites are never chosen: ECDHE is).
The submission, submissions and receiving listeners share this one context.
"""

from __future__ import annotations

import ssl

PROFILE = "Mozilla Server Side TLS 5.7, intermediate"
INTERMEDIATE_TLS12 = (
    "ECDHE-ECDSA-AES128-GCM-SHA256",
    "ECDHE-RSA-AES128-GCM-SHA256",
    "ECDHE-ECDSA-AES256-GCM-SHA384",
    "ECDHE-RSA-AES256-GCM-SHA384",
    "ECDHE-ECDSA-CHACHA20-POLY1305",
    "ECDHE-RSA-CHACHA20-POLY1305",
    "DHE-RSA-AES128-GCM-SHA256",
    "DHE-RSA-AES256-GCM-SHA384",
    "DHE-RSA-CHACHA20-POLY1305",
)
INTERMEDIATE_TLS13 = (
    "TLS_AES_128_GCM_SHA256",
    "TLS_AES_256_GCM_SHA384",
    "TLS_CHACHA20_POLY1305_SHA256",
)


def server_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    """A server context with the certificate chain loaded and the profile applied."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_ciphers(":".join(INTERMEDIATE_TLS12))
    ctx.options &= ~ssl.OP_CIPHER_SERVER_PREFERENCE
    ctx.options |= ssl.OP_NO_COMPRESSION | ssl.OP_NO_RENEGOTIATION
    ctx.load_cert_chain(cert_file, key_file)
    return ctx


__all__ = ["INTERMEDIATE_TLS12", "INTERMEDIATE_TLS13", "PROFILE", "server_context"]
