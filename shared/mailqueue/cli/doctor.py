"""`mailqueue doctor`: the DNS checks of :mod:`mailqueue.outbound.doctor`, from the CLI and the API.

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
from collections.abc import Mapping
from typing import Any, TextIO

from mailqueue.compose.admin import aws_keys, default_doctor
from mailqueue.core.config import ConfigError
from mailqueue.outbound.doctor import Finding, KeySource, doctor_report, render

__all__ = ["add_parser", "cmd_doctor", "default_doctor", "doctor_report", "run_here"]


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
    elif doc.get("skipped"):
        out.write(f"not checked: {doc['skipped']}\n")
    else:
        out.write(render([Finding(**f) for f in doc.get("findings", [])]))
    return 0 if doc.get("ok") else 1


def cmd_doctor(c: Any, ns: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Over the admin API (or --local, in process)."""
    from mailqueue.cli.common import _ok

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
        keys = aws_keys(ns.region or env.get("AWS_REGION"), ns.endpoint_url)
    try:
        doc = default_doctor(env, keys, **explicit)
    except ConfigError as e:
        err.write(f"mailqueue: doctor: {e}\n")
        return 2
    return _print(doc, ns, out)
