"""`mailqueue doctor`: the DNS checks of :mod:`mailqueue.doctor`, from the CLI and the API.

``mailqueue doctor`` asks the admin API (``GET /v1/queue/doctor``), which checks the
deployed configuration (MQ_HOSTNAME, MQ_SENDING_IPS, MQ_DKIM_DOMAINS, MQ_DKIM_KEY_PREFIX)
with the keys the admin function may read. ``mailqueue doctor --here`` runs the same
checks on this machine (its resolver, or ``--dns-server``; its AWS credentials for the
keys), with flags overriding the MQ_* variables: useful before anything is deployed.
Exit status 0 when every check passes, 1 when some fail (the records to publish follow).
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Mapping
from typing import Any, TextIO

from .config import ConfigError
from .doctor import DoctorSettings, Finding, KeySource, render, run

__all__ = ["add_parser", "cmd_doctor", "default_doctor", "doctor_report", "run_here"]


def doctor_report(findings: list[Finding]) -> dict[str, Any]:
    """The API's answer: every finding, and the records still to publish."""
    publish: list[str] = []
    for f in findings:
        if not f.ok and f.publish:
            publish.extend(r for r in f.publish.split("\n") if r not in publish)
    return {
        "ok": all(f.ok for f in findings),
        "findings": [f.to_json() for f in findings],
        "publish": publish,
    }


def _aws_keys(region: str | None, endpoint_url: str | None) -> KeySource:
    """Keys through boto3, its clients made on the first key asked for (none: no AWS)."""
    made: list[KeySource] = []

    def get(ref: str) -> str | None:
        if not made:
            import boto3

            from .aws.doctor_keys import boto_key_source

            session = boto3.session.Session(region_name=region)
            made.append(
                boto_key_source(
                    session.client("secretsmanager", endpoint_url=endpoint_url),
                    session.client("ssm", endpoint_url=endpoint_url),
                )
            )
        return made[0](ref)

    return get


def default_doctor(
    env: Mapping[str, str] | None = None, keys: KeySource | None = None, **explicit: Any
) -> dict[str, Any]:
    """Run every check with MQ_* settings (explicit values win); ConfigError if invalid."""
    settings = DoctorSettings.from_env(env, **explicit)
    source = env if env is not None else os.environ
    if keys is None:
        keys = _aws_keys(
            source.get("AWS_REGION") or source.get("AWS_DEFAULT_REGION"),
            source.get("MQ_ENDPOINT_URL") or None,
        )
    return doctor_report(run(settings.input(), settings.resolver(), keys))


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "doctor",
        parents=[common],
        help="check PTR/FCrDNS, EHLO name, SPF, DKIM, DMARC; print the records to publish",
    )
    p.add_argument("--here", action="store_true", help="run the checks on this machine")
    p.add_argument("--ehlo", help="--here: EHLO host name (default: $MQ_HOSTNAME)")
    p.add_argument("--ip", action="append", help="--here: a sending IP (repeatable)")
    p.add_argument(
        "--dkim-domains", help='--here: JSON {"domain": ["selector", ...]} ($MQ_DKIM_DOMAINS)'
    )
    p.add_argument("--sender-domains", help="--here: comma list of domains without DKIM")
    p.add_argument("--dkim-key-prefix", help="--here: default $MQ_DKIM_KEY_PREFIX or mailqueue/")
    p.add_argument("--dns-server", help="--here: ask only this resolver (host:port)")


def _print(doc: Mapping[str, Any], ns: argparse.Namespace, out: TextIO) -> int:
    if ns.json:
        out.write(json.dumps(doc) + "\n")
    else:
        out.write(render([Finding(**f) for f in doc.get("findings", [])]))
    return 0 if doc.get("ok") else 1


def cmd_doctor(c: Any, ns: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Over the admin API (or --local, in process)."""
    from .cli import _ok

    return _print(_ok(c.request("GET", "/v1/queue/doctor")), ns, out)


def run_here(
    ns: argparse.Namespace,
    env: Mapping[str, str],
    out: TextIO,
    err: TextIO,
    keys: KeySource | None = None,
) -> int:
    """The checks on this machine; flags override MQ_* variables."""
    explicit: dict[str, Any] = {
        "hostname": ns.ehlo,
        "sending_ips": ",".join(ns.ip) if ns.ip else None,
        "dkim_domains": ns.dkim_domains,
        "sender_domains": ns.sender_domains,
        "dkim_key_prefix": ns.dkim_key_prefix,
        "dns_nameservers": ns.dns_server,
    }
    if keys is None:
        keys = _aws_keys(ns.region or env.get("AWS_REGION"), ns.endpoint_url)
    try:
        doc = default_doctor(env, keys, **explicit)
    except ConfigError as e:
        err.write(f"mailqueue: doctor: {e}\n")
        return 2
    return _print(doc, ns, out)
