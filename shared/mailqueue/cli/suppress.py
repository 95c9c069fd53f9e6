"""`mailqueue suppression ...`: the suppression list through the admin API (or --local).

mailqueue suppression list [--all] [--expired]   entries (one page, or every page)
mailqueue suppression show ADDRESS               one entry (exit 1 if not suppressed)
mailqueue suppression add ADDRESS... [--reason TEXT] [--ttl-days N]
mailqueue suppression remove ADDRESS...
mailqueue suppression import FILE [--ttl-days N] lines "address[,reason]" or JSON lines
                                                 {"address", "reason"} (- for stdin)
mailqueue suppression export                     every active entry as JSON lines
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import urllib.parse
from collections.abc import Iterator
from typing import Any, TextIO

__all__ = ["add_parser", "cmd_suppression"]

_IMPORT_BATCH = 1000  # the API's limit per POST


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "suppression",
        parents=[common],
        help="the suppression list: list, show, add, remove, import, export",
    )
    ops = p.add_subparsers(dest="op", required=True, metavar="OP")
    q = ops.add_parser("list", parents=[common], help="entries, one page (--all: every page)")
    q.add_argument("--all", action="store_true", help="follow every page")
    q.add_argument("--expired", action="store_true", help="include expired entries")
    q.add_argument("--limit", type=int, default=100)
    q.add_argument("--cursor")
    q = ops.add_parser("show", parents=[common], help="one address")
    q.add_argument("address")
    q = ops.add_parser("add", parents=[common], help="suppress addresses")
    q.add_argument("addresses", nargs="+", metavar="ADDRESS")
    q.add_argument("--reason", default="added by an operator")
    q.add_argument("--ttl-days", type=float)
    q = ops.add_parser("remove", aliases=["rm"], parents=[common], help="unsuppress addresses")
    q.add_argument("addresses", nargs="+", metavar="ADDRESS")
    q = ops.add_parser("import", parents=[common], help="add entries from a file")
    q.add_argument("file", help='lines "address[,reason]" or JSON lines; - for stdin')
    q.add_argument("--ttl-days", type=float)
    ops.add_parser("export", parents=[common], help="every active entry, JSON lines")


def _path(address: str) -> str:
    return "/v1/queue/suppressions/" + urllib.parse.quote(address, safe="@")


def _pages(c: Any, query: dict[str, str]) -> Iterator[dict[str, Any]]:
    from mailqueue.cli.common import _ok

    while True:
        doc = _ok(c.request("GET", "/v1/queue/suppressions", query))
        yield from doc.get("items", [])
        if not doc.get("cursor"):
            return
        query = {**query, "cursor": doc["cursor"]}


def _line(e: dict[str, Any]) -> str:
    from mailqueue.cli.common import printable

    src = f" mail {e['source']}" if e.get("source") else ""
    who = f" by {e['actor']}" if e.get("actor") else ""
    return printable(
        f"{e['address']:<40} until {e['expires_at']}  since {e['added_at']}{who}{src}"
        f"  {e.get('reason') or ''}"
    ) + "\n"


def _read_import(data: bytes) -> list[tuple[int, dict[str, Any]]]:
    """Every entry of an import file with its line number, the whole file checked before
    anything is sent: UTF-8 (a spreadsheet's BOM stripped), each address and reason valid
    as the API will judge it, so a bad line 99,999 is refused before line 1 is written."""
    from mailqueue.cli.common import CliError
    from mailqueue.core.errors import InvalidInput
    from mailqueue.core.validate import check_text
    from mailqueue.outbound.suppression import MAX_REASON, normalise

    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        lineno = data[: e.start].count(b"\n") + 1
        raise CliError(
            f"line {lineno}: not UTF-8 (byte 0x{data[e.start]:02x}); save the file as UTF-8"
        ) from None
    out: list[tuple[int, dict[str, Any]]] = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("{"):
            try:
                doc = json.loads(line)
            except (ValueError, RecursionError):
                raise CliError(f"line {n}: not JSON") from None
            if not isinstance(doc, dict) or not isinstance(doc.get("address"), str):
                raise CliError(f"line {n}: a JSON line needs an address")
            address, reason = doc["address"], doc.get("reason") or "imported"
            if not isinstance(reason, str):
                raise CliError(f"line {n}: reason must be text")
        else:
            address, _, reason = line.partition(",")
            address, reason = address.strip(), reason.strip() or "imported"
        try:
            normalise(address)
            check_text(reason, "reason")
        except InvalidInput as e:
            raise CliError(f"line {n}: {e.code}: {e.message}") from None
        if len(reason) > MAX_REASON:
            raise CliError(f"line {n}: reason longer than {MAX_REASON} characters")
        out.append((n, {"address": address, "reason": reason}))
    return out


def _import(c: Any, entries: list[tuple[int, dict[str, Any]]], extra: dict[str, Any]) -> int:
    """POST the checked entries in chunks; a refusal names the file's line, not the
    index inside a chunk."""
    from mailqueue.cli.common import _refusal

    added = 0
    for i in range(0, len(entries), _IMPORT_BATCH):
        chunk = entries[i : i + _IMPORT_BATCH]
        body = {"entries": [e for _, e in chunk], **extra}
        status, doc, _ = c.request("POST", "/v1/queue/suppressions", body=body)
        if status != 200:
            m = re.fullmatch(r"entries\[(\d+)\]", str(doc.get("field") or ""))
            line = chunk[int(m.group(1))][0] if m and int(m.group(1)) < len(chunk) else 0
            if line:
                doc = {**doc, "field": None, "message": f"line {line}: {doc.get('message')}"}
            err = _refusal(status, doc)
            if added:
                err = type(err)(f"{err} ({added} entries before it were added)", err.code)
            raise err
        added += int(doc.get("added", 0))
    return added


def cmd_suppression(c: Any, ns: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from mailqueue.cli.common import EXIT_OK, _ok

    if ns.op == "list":
        query = {"limit": str(ns.limit)}
        if ns.expired:
            query["all"] = "true"
        if ns.cursor:
            query["cursor"] = ns.cursor
        if ns.all:
            items = list(_pages(c, query))
            cursor = None
        else:
            doc = _ok(c.request("GET", "/v1/queue/suppressions", query))
            items, cursor = doc.get("items", []), doc.get("cursor")
        for e in items:
            out.write(json.dumps(e) + "\n" if ns.json else _line(e))
        if cursor and not ns.quiet:
            err.write(f"more: --cursor {cursor}\n")
        return EXIT_OK
    if ns.op == "export":
        for e in _pages(c, {"limit": "1000"}):
            out.write(json.dumps(e) + "\n")
        return EXIT_OK
    if ns.op == "show":
        e = _ok(c.request("GET", _path(ns.address)))
        out.write(json.dumps(e) + "\n" if ns.json else _line(e))
        return EXIT_OK
    if ns.op in ("remove", "rm"):
        for a in ns.addresses:
            doc = _ok(c.request("DELETE", _path(a)))
            if not ns.quiet:
                out.write(f"removed {doc['removed']['address']}\n")
        return EXIT_OK
    extra = {"ttl_days": ns.ttl_days} if ns.ttl_days is not None else {}
    if ns.op == "add":
        entries = [(0, {"address": a, "reason": ns.reason}) for a in ns.addresses]
    elif ns.file == "-":
        entries = _read_import(sys.stdin.buffer.read())
    else:
        with open(ns.file, "rb") as f:
            entries = _read_import(f.read())
    added = _import(c, entries, extra)
    if not ns.quiet:
        out.write(f"suppressed {added} address(es)\n")
    return EXIT_OK
