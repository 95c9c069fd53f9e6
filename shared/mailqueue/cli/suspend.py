"""`mailqueue suspend | resume | suspensions`: operator suspensions through the admin API.

mailqueue suspend (--site S | --domain D | --sender-domain D | --pool P [--site S]) --for 2h
                  [--reason TEXT]
mailqueue resume  (--site S | --domain D | --sender-domain D | --pool P [--site S])

`--pool P --site S` suspends site S for egress pool P only (the other pools go on
sending there); `--pool P` alone pauses everything pool P sends (outbound/pools.py).
mailqueue suspensions [--expired]
mailqueue reputation show|resume (--principal ARN | --sender-domain D): cli/reputation.py
"""

from __future__ import annotations

import argparse
import json
import urllib.parse
from typing import Any, TextIO

from mailqueue.cli import reputation as cli_reputation

__all__ = ["COMMANDS", "add_parsers"]


def _target(p: argparse.ArgumentParser) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("--site", help="a shaping site (e.g. google, mx:mx1.example.net)")
    g.add_argument("--domain", help="a recipient domain")
    g.add_argument("--sender-domain", dest="sender_domain", help="an envelope sender domain")
    p.add_argument("--pool", help="an egress pool: alone, the whole pool; with --site, "
                   "that site for this pool only")  # fmt: skip


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("suspend", parents=[common], help="stop delivery to/from X for a while")
    _target(p)
    p.add_argument("--for", dest="duration", required=True, help="30m, 2h, 1d (at most 30d)")
    p.add_argument("--reason", default="")
    p = sub.add_parser("resume", parents=[common], help="end a suspension now")
    _target(p)
    p = sub.add_parser("suspensions", parents=[common], help="active suspensions")
    p.add_argument("--expired", action="store_true", help="include expired ones")
    cli_reputation.add_parsers(sub, common)  # automatic pauses: reputation.py


class UsageError(ValueError):
    """The flags name no target, or a pool with a domain (answered as a usage error)."""


def _scope(ns: argparse.Namespace) -> tuple[str, str]:
    pool = getattr(ns, "pool", None)
    if pool:
        if getattr(ns, "domain", None) or getattr(ns, "sender_domain", None):
            raise UsageError("--pool goes with --site or alone, not with a domain")
        site = getattr(ns, "site", None)
        return ("site", f"{pool}|{site}") if site else ("pool", pool)
    for scope in ("site", "domain", "sender_domain"):
        value = getattr(ns, scope, None)
        if value:
            return scope, value
    raise UsageError("one of --site, --domain, --sender-domain or --pool is required")


def _line(s: dict[str, Any]) -> str:
    from mailqueue.cli.common import printable

    who = f" by {s['actor']}" if s.get("actor") else ""
    line = f"{s['scope']:<13} {s['target']:<32} until {s['until']}{who}  {s.get('reason') or ''}"
    return printable(line) + "\n"


def _usage(ns: argparse.Namespace, err: TextIO) -> tuple[str, str] | None:
    try:
        return _scope(ns)
    except UsageError as e:
        err.write(f"mailqueue: {e}\n")
        return None


def cmd_suspend(c: Any, ns: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from mailqueue.cli.common import EXIT_OK, EXIT_USAGE, _ok

    got = _usage(ns, err)
    if got is None:
        return EXIT_USAGE
    scope, target = got
    body = {"scope": scope, "target": target, "duration": ns.duration, "reason": ns.reason}
    doc = _ok(c.request("POST", "/v1/queue/suspensions", body=body))
    out.write(json.dumps(doc) + "\n" if ns.json else "suspended " + _line(doc))
    return EXIT_OK


def cmd_resume(c: Any, ns: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from mailqueue.cli.common import EXIT_OK, EXIT_USAGE, _ok

    got = _usage(ns, err)
    if got is None:
        return EXIT_USAGE
    scope, target = got
    path = f"/v1/queue/suspensions/{scope}/{urllib.parse.quote(target, safe='')}"
    doc = _ok(c.request("DELETE", path))
    out.write(json.dumps(doc) + "\n" if ns.json else "resumed " + _line(doc["resumed"]))
    return EXIT_OK


def cmd_suspensions(c: Any, ns: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from mailqueue.cli.common import EXIT_OK, _ok

    query = {"all": "true"} if ns.expired else {}
    for s in _ok(c.request("GET", "/v1/queue/suspensions", query)).get("items", []):
        out.write(json.dumps(s) + "\n" if ns.json else _line(s))
    return EXIT_OK


COMMANDS = {
    "suspend": cmd_suspend,
    "resume": cmd_resume,
    "suspensions": cmd_suspensions,
    **cli_reputation.COMMANDS,
}
