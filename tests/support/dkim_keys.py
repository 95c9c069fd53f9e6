"""DKIM test support: keys stored in moto by the real keygen code path, their public
halves served by the loopback DNS server, and dkimpy's verifier asking that server."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field

import dkim
import dns.exception
import dns.resolver
from mailqueue.outbound.dkim import (
    Algorithm,
    generate_key,
    key_json,
    key_name,
    public_txt,
    txt_strings,
)

from tests.support.aws import AwsEnv, session
from tests.support.dns_peer import DnsPeer

PREFIX = "mailqueue/"


@dataclass
class Keyring:
    """Keys made here, stored in moto's Secrets Manager (or SSM), published as TXT."""

    aws: AwsEnv
    store: str = "secretsmanager"
    txt: dict[str, str] = field(default_factory=dict)  # "<sel>._domainkey.<dom>" -> value

    def add(self, domain: str, selector: str, algorithm: Algorithm) -> str:
        private = generate_key(algorithm)
        name = key_name(PREFIX, domain, selector)
        value = key_json(algorithm, private)
        if self.store == "secretsmanager":
            self.secrets_client().create_secret(Name=name, SecretString=value)
        else:
            self.ssm_client().put_parameter(Name="/" + name, Value=value, Type="SecureString")
        self.txt[f"{selector}._domainkey.{domain}"] = public_txt(algorithm, private)
        return private

    def secrets_client(self):  # type: ignore[no-untyped-def]
        return session().client("secretsmanager", endpoint_url=self.aws.endpoint)

    def ssm_client(self):  # type: ignore[no-untyped-def]
        return session().client("ssm", endpoint_url=self.aws.endpoint)

    def zone(self) -> dict[str, dict[str, list[str]]]:
        return {
            name: {"TXT": [" ".join(json.dumps(s) for s in txt_strings(value))]}
            for name, value in self.txt.items()
        }


def dnsfunc_for(peer: DnsPeer) -> Callable[..., bytes | None]:
    """dkimpy's dnsfunc: the TXT record, asked of the loopback DNS server over UDP."""
    resolver = peer.resolver()

    def txt(name: bytes, timeout: int = 5) -> bytes | None:
        try:
            answer = resolver.resolve(name.decode("ascii"), "TXT")
        except (dns.resolver.NXDOMAIN, dns.resolver.NoAnswer, dns.exception.Timeout):
            return None
        return b"".join(answer[0].strings)  # type: ignore[attr-defined]

    return txt


def signatures(message: bytes) -> list[dict[bytes, bytes]]:
    """The tags of each DKIM-Signature field, top first."""
    d = dkim.DKIM(message)
    out = []
    for name, value in d.headers:
        if name.lower() == b"dkim-signature":
            out.append(dkim.util.parse_tag_value(value))
    return out


def verify_all(message: bytes, dnsfunc: Callable[..., bytes | None]) -> list[bool]:
    """dkimpy's verdict on every DKIM-Signature of the message (not only the first)."""
    out = []
    for i in range(len(signatures(message))):
        try:
            out.append(bool(dkim.DKIM(message).verify(idx=i, dnsfunc=dnsfunc)))
        except dkim.DKIMException:  # dkim.verify() answers False for these too
            out.append(False)
    return out
