"""`mailqueue pool show [NAME]`: the egress pools and their warm-up through the admin API.

mailqueue pool show            every pool: addresses, EHLO name, paused, warm-up step/budget
mailqueue pool show bulk       one pool
(pause a pool: `mailqueue suspend --pool P --for 2h`; a site for one pool:
`mailqueue suspend --pool P --site google --for 1h`: cli/suspend.py)
"""

from __future__ import annotations

import argparse
import json
import urllib.parse
from typing import Any, TextIO

__all__ = ["COMMANDS", "add_parsers", "render"]


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("pool", parents=[common], help="egress pools and their warm-up")
    psub = p.add_subparsers(dest="pool_command", required=True)
    s = psub.add_parser("show", parents=[common], help="the pools (or one)")
    s.add_argument("name", nargs="?", help="a pool's name")


def render(doc: dict[str, Any]) -> str:
    """One pool in a few lines (no addresses of recipients: none are in the answer)."""
    from mailqueue.cli.common import printable

    flags = [f for f, on in (("default", doc.get("default")), ("paused", doc.get("paused"))) if on]
    head = f"{doc['name']}{' (' + ', '.join(flags) + ')' if flags else ''}"
    lines = [
        head,
        f"  addresses  {', '.join(doc.get('addresses') or []) or '-'}",
        f"  ehlo       {doc.get('ehlo')}" + (f"   bind {doc['bind']}" if doc.get("bind") else ""),
    ]
    w = doc.get("warmup")
    if w:
        if w.get("warm"):
            lines.append(f"  warm-up    done (past step {w['last_step']})")
        else:
            held = "  HELD (bounce or complaint rate over the band)" if w.get("held") else ""
            rep = w.get("reputation") or {}
            rates = (
                f", {rep.get('bounceRate', 0):.2%} bounces / {rep.get('complaintRate', 0):.2%} "
                f"complaints over {rep.get('sends', 0)} sends"
                if rep
                else ""
            )
            lines.append(
                f"  warm-up    step {w['step']}/{w['last_step']}, {w['day']}: "
                f"{w['sent']}/{w['total']} sent{rates}{held}"
            )
            for site, n in (w.get("sites") or {}).items():
                lines.append(f"             {site}: {n}/{w['per_site']}")
    return "\n".join(printable(x) for x in lines) + "\n"


def cmd_pool(c: Any, ns: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from mailqueue.cli.common import EXIT_OK, _ok

    if ns.name:
        docs = [_ok(c.request("GET", f"/v1/queue/pools/{urllib.parse.quote(ns.name, safe='')}"))]
    else:
        docs = _ok(c.request("GET", "/v1/queue/pools")).get("items", [])
    for d in docs:
        out.write(json.dumps(d) + "\n" if ns.json else render(d))
    return EXIT_OK


COMMANDS = {"pool": cmd_pool}
