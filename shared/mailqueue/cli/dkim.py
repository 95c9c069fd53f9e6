"""`mailqueue dkim keygen DOMAIN SELECTOR`: make a DKIM key, store it, print its DNS record.

The key goes where the delivery function looks for it (dkim.py's contract): Secrets
Manager secret ``<prefix>dkim/<domain>/<selector>`` or SSM SecureString
``/<prefix>dkim/<domain>/<selector>``. An existing key is never overwritten: a rotation
is a new selector (publish it, add it to DkimDomains next to the old one, remove the old
one after the queue lifetime). The private key is never printed.

Exit status: 0 stored and printed, 1 refused (key exists, bad input), 4 AWS failure.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

from mailqueue.outbound.dkim import (
    Algorithm,
    generate_key,
    key_json,
    key_name,
    public_txt,
    txt_strings,
)

_LABEL = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?$")
_ALGORITHMS: dict[str, Algorithm] = {"rsa": "rsa-sha256", "ed25519": "ed25519-sha256"}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mailqueue dkim", description="DKIM key management")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p = sub.add_parser("keygen", help="generate and store a key, print its DNS TXT record")
    p.add_argument("domain", help="the signing domain (d=), e.g. example.com")
    p.add_argument("selector", help="the selector (s=), e.g. s2026r")
    p.add_argument("--algorithm", choices=sorted(_ALGORITHMS), default="rsa")
    p.add_argument(
        "--store",
        choices=("secretsmanager", "ssm"),
        help="where the key goes (default: $MQ_DKIM_KEY_STORE or secretsmanager)",
    )
    p.add_argument("--prefix", help="SecretsPrefix (default: $MQ_DKIM_KEY_PREFIX or mailqueue/)")
    p.add_argument("--region", help="AWS region")
    p.add_argument("--profile", help="AWS profile")
    p.add_argument("--endpoint-url", help="AWS endpoint (moto, local stack)")
    return parser


def dns_record(domain: str, selector: str, txt: str) -> str:
    """The zone-file line to publish (character-strings of at most 255 octets)."""
    strings = " ".join(f'"{s}"' for s in txt_strings(txt))
    return f"{selector}._domainkey.{domain}. IN TXT ( {strings} )"


def store_key(session: Any, store: str, name: str, value: str, endpoint_url: str | None) -> str:
    """Create the secret/parameter; refuses to replace an existing one. Returns its ref."""
    if store == "secretsmanager":
        sm = session.client("secretsmanager", endpoint_url=endpoint_url)
        sm.create_secret(Name=name, SecretString=value, Description="mailqueue DKIM private key")
        return f"secretsmanager:{name}"
    ssm = session.client("ssm", endpoint_url=endpoint_url)
    ssm.put_parameter(
        Name="/" + name,
        Value=value,
        Type="SecureString",
        Overwrite=False,
        Description="mailqueue DKIM private key",
    )
    return f"ssm:/{name}"


def main(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
    session: Any = None,
) -> int:
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    environ = os.environ if env is None else env
    try:
        ns = build_parser().parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    domain = ns.domain.lower().rstrip(".")
    labels = domain.split(".")
    if len(labels) < 2 or not all(_LABEL.match(label) for label in labels):
        err.write(f"mailqueue dkim: {ns.domain!r} is not a domain (use A-labels)\n")
        return 1
    if not _LABEL.match(ns.selector):
        err.write(f"mailqueue dkim: {ns.selector!r} is not a selector (one DNS label)\n")
        return 1
    store = ns.store or environ.get("MQ_DKIM_KEY_STORE") or "secretsmanager"
    prefix = ns.prefix or environ.get("MQ_DKIM_KEY_PREFIX") or "mailqueue/"
    algorithm = _ALGORITHMS[ns.algorithm]
    private = generate_key(algorithm)
    txt = public_txt(algorithm, private)
    if session is None:
        import boto3

        session = boto3.session.Session(profile_name=ns.profile, region_name=ns.region)
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        ref = store_key(
            session, store, key_name(prefix, domain, ns.selector), key_json(algorithm, private),
            ns.endpoint_url,
        )  # fmt: skip
    except ClientError as e:
        code = e.response.get("Error", {}).get("Code", "")
        if code in ("ResourceExistsException", "ParameterAlreadyExists"):
            err.write(
                f"mailqueue dkim: a key for {domain}/{ns.selector} exists; use a new selector\n"
            )
            return 1
        err.write(f"mailqueue dkim: cannot store the key: {code or e}\n")
        return 4
    except BotoCoreError as e:
        err.write(f"mailqueue dkim: cannot store the key: {e}\n")
        return 4
    err.write(f"stored {algorithm} key as {ref}\n")
    err.write(f'add "{ns.selector}" to DkimDomains["{domain}"] once this record is published:\n')
    out.write(dns_record(domain, ns.selector, txt) + "\n")
    return 0
