"""`mailqueue reputation`: a principal's or sender domain's rates, and the resume of an
automatic pause (outbound/reputation.py), through the admin API.

mailqueue reputation show   (--principal ARN | --sender-domain D)
mailqueue reputation resume (--principal ARN | --sender-domain D)

--principal takes the ARN or its digest (sha256:…, what the mail's tag holds when traces
are private); the admin API finds the counters under either, whatever trace_private says.
"""

from __future__ import annotations

import argparse
import json
import urllib.parse
from typing import Any, TextIO

__all__ = ["COMMANDS", "add_parsers"]


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "reputation", parents=[common], help="bounce/complaint rates; resume an automatic pause"
    )
    p.add_argument("action", choices=("show", "resume"))
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument(
        "--principal", help="a submitting IAM principal: its ARN, or its sha256: digest"
    )
    g.add_argument("--sender-domain", dest="sender_domain", help="an envelope sender domain")


def _path(ns: argparse.Namespace) -> str:
    scope, target = (
        ("principal", ns.principal) if ns.principal else ("sender_domain", ns.sender_domain)
    )
    return f"/v1/queue/reputation/{scope}/{urllib.parse.quote(target, safe='')}"


def cmd_reputation(c: Any, ns: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from mailqueue.cli.common import EXIT_OK, _ok

    if ns.action == "resume":
        doc = _ok(c.request("POST", _path(ns) + "/resume"))
        if ns.json:
            out.write(json.dumps(doc) + "\n")
        else:
            r = doc.get("resumed") or {}
            out.write(f"resumed {r.get('scope')} {r.get('target')} (was: {r.get('reason')})\n")
        return EXIT_OK
    doc = _ok(c.request("GET", _path(ns)))
    if ns.json:
        out.write(json.dumps(doc) + "\n")
        return EXIT_OK
    paused = doc.get("paused")
    out.write(
        f"{doc['scope']} {doc['target']}: {doc['sends']} sends, "
        f"bounces {doc['bounceRate']:.2%} ({doc['bounces']} hard; "
        f"{doc.get('softBounces', 0)} soft apart), complaints {doc['complaintRate']:.3%} "
        f"({doc['complaints']}), unsubscribes {doc.get('unsubscribes', 0)}, "
        f"{doc['verdict']}{' (PAUSED: ' + str(paused.get('reason')) + ')' if paused else ''}\n"
    )
    return EXIT_OK


COMMANDS = {"reputation": cmd_reputation}
