"""`make bench` (SMTP front door): mails/s accepted over SMTP next to the HTTP API's,
acceptance latency and server CPU per mail, on one local stack.

    .venv/bin/python -m mailqueue_local.smtpbench [--mails 2000] [--sessions 20]

The stack runs as `make run` starts it, in this process (moto in its own), with the
receiving listener on (recipients @bench.example, routed explicitly to the sink) and the
delivery function's triggers disabled (`disabled_triggers`: its queue fills, nothing
consumes it), so the CPU measured is the acceptance path's only. Per size (1 KB, 100 KB):

- SMTP rate: Postfix's ``smtp-source -s 20 -m 2000 -l SIZE`` against the listener;
- HTTP rate: the same count of ``POST /v1/messages`` from 20 client threads in a child
  process (its CPU is not the server's);
- latency: a child process times, per mail, end of DATA → 250 and request → 202;
- CPU per mail: this process's (the stack: API gateway and ingress function, or smtpd and
  the same ingress service) and moto's, over each run.
"""

from __future__ import annotations

import argparse
import base64
import functools
import json
import os
import resource
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

DOMAIN = "bench.example"
SIZES = (1024, 100 * 1024)


def message(i: int, size: int) -> bytes:
    head = (
        f"From: bench@sender.example\r\nTo: user@{DOMAIN}\r\nSubject: bench {i}\r\n"
        f"Message-ID: <smtpbench-{i}-{time.time_ns()}@sender.example>\r\n\r\n"
    ).encode()
    line = b"x" * 76 + b"\r\n"
    return head + line * max(1, (size - len(head)) // len(line))


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


# ---------------------------------------------------------------- the child clients
def http_client(api: str, token: str, mails: int, size: int, clients: int) -> dict[str, Any]:
    lat: list[float] = []
    bad: list[int] = []
    lock = threading.Lock()

    def one(i: int) -> None:
        doc = {
            "sender": "bench@sender.example",
            "recipients": [f"user@{DOMAIN}"],
            "content": base64.b64encode(message(i, size)).decode(),
        }
        req = urllib.request.Request(
            f"{api}/v1/messages",
            data=json.dumps(doc).encode(),
            headers={"content-type": "application/json", "authorization": f"Bearer {token}"},
            method="POST",
        )
        t = time.monotonic()
        for attempt in range(10):  # the local gateway's listen backlog is short
            try:
                with urllib.request.urlopen(req, timeout=60) as resp:
                    status = resp.status
                break
            except urllib.error.HTTPError as e:
                status = e.code
                break
            except (ConnectionError, urllib.error.URLError):
                time.sleep(0.01 * (attempt + 1))
        else:
            status = 0
        dt = time.monotonic() - t
        with lock:
            if status == 202:
                lat.append(dt)
            else:
                bad.append(status)

    t0 = time.monotonic()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(one, range(mails)))
    return {
        "seconds": time.monotonic() - t0,
        "latencies": lat,
        "errors": len(bad),
        "codes": bad[:5],
    }


def smtp_client(port: int, mails: int, size: int, clients: int) -> dict[str, Any]:
    """One session per mail, as smtp-source does; the time from the final dot to 250."""
    lat: list[float] = []
    bad: list[str] = []
    lock = threading.Lock()

    def reply(s: socket.socket) -> bytes:
        buf = b""
        while not any(ln[3:4] == b" " for ln in buf.split(b"\r\n")[:-1]):
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
        return buf

    def one(i: int) -> None:
        with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
            reply(s)
            for cmd in (
                b"EHLO bench.client\r\n",
                b"MAIL FROM:<bench@sender.example>\r\n",
                f"RCPT TO:<user@{DOMAIN}>\r\n".encode(),
                b"DATA\r\n",
            ):
                s.sendall(cmd)
                reply(s)
            s.sendall(message(i, size) + b".\r\n")
            t = time.monotonic()
            r = reply(s)
            dt = time.monotonic() - t
            s.sendall(b"QUIT\r\n")
        with lock:
            if r.startswith(b"250"):
                lat.append(dt)
            else:
                bad.append(r[:60].decode(errors="replace"))

    t0 = time.monotonic()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(one, range(mails)))
    return {"seconds": time.monotonic() - t0, "latencies": lat, "errors": len(bad)}


def _child(args: list[str]) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "mailqueue_local.smtpbench", "--child", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=1800,
    )
    if out.returncode != 0:
        raise RuntimeError(f"bench client failed: {out.stderr[-2000:]}")
    doc: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return doc


# ---------------------------------------------------------------- the measured runs
def _cpu(moto_pid: int | None) -> tuple[float, float]:
    from mailqueue_local.bench import _cpu_of

    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime, _cpu_of(moto_pid) or 0.0


def measured(moto_pid: int | None, fn: Callable[[], Any]) -> tuple[Any, float, float, float]:
    c0, m0 = _cpu(moto_pid)
    t0 = time.monotonic()
    result = fn()
    seconds = time.monotonic() - t0
    c1, m1 = _cpu(moto_pid)
    return result, seconds, c1 - c0, m1 - m0


def smtp_source(port: int, mails: int, sessions: int, size: int) -> tuple[int, str]:
    exe = shutil.which("smtp-source") or "/usr/sbin/smtp-source"
    cmd = [exe, "-s", str(sessions), "-m", str(mails), "-l", str(size)]
    cmd += ["-f", "bench@sender.example", "-t", f"user@{DOMAIN}", f"127.0.0.1:{port}"]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, check=False)
    return run.returncode, (run.stdout + run.stderr)[-500:]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stored(stack: Any) -> int:
    """Distinct mails in the table (a mail is its mail item and group items, or one)."""
    ids: set[str] = set()
    pages = stack.clients.dynamodb.get_paginator("scan").paginate(
        TableName=stack.deployment.table, ProjectionExpression="pk"
    )
    for page in pages:
        ids.update(it["pk"]["S"] for it in page["Items"] if it["pk"]["S"].startswith("M#"))
    return len(ids)


def run(mails: int, sessions: int, var: Path) -> dict[str, Any]:
    from mailqueue_local.stack import LocalStack, StackOptions

    sink_port = _free_port()
    routes = {"default": {"next_hop": f"[127.0.0.1]:{sink_port}", "tls": "none"}}
    routes[DOMAIN] = {"next_hop": f"[127.0.0.1]:{sink_port}", "tls": "none"}
    options = StackOptions(
        var_dir=var,
        api_port=0,
        sink_port=sink_port,
        sweep_interval=86400,
        smtpd_receive_port=0,
        settings={
            "MQ_RECEIVING_DOMAINS": DOMAIN,
            "MQ_ROUTES": json.dumps(routes),
        },
        disabled_triggers=frozenset({"delivery"}),
    )
    out: dict[str, Any] = {"mails": mails, "sessions": sessions, "sizes": {}}
    with LocalStack(options) as stack:
        port = stack.smtpd.server.port_of("receive")
        moto = stack.moto_pid
        for size in SIZES:
            row: dict[str, Any] = {}
            before = _stored(stack)
            (rc, tail), sec, cpu, mcpu = measured(
                moto, functools.partial(smtp_source, port, mails, sessions, size)
            )
            got = _stored(stack) - before
            row["smtp"] = {
                "rc": rc,
                "stored": got,
                "seconds": round(sec, 2),
                "mails_per_s": round(got / sec, 1),
                "cpu_ms_per_mail": round(1000 * cpu / max(1, got), 2),
                "moto_cpu_ms_per_mail": round(1000 * mcpu / max(1, got), 2),
            }
            if rc != 0 or got < mails:
                row["smtp"]["tail"] = tail
            before = _stored(stack)
            args = ["http", stack.api_url, stack.token, str(mails), str(size), str(sessions)]
            res, sec, cpu, mcpu = measured(moto, functools.partial(_child, args))
            got = _stored(stack) - before
            row["http"] = {
                "errors": res["errors"],
                "codes": res.get("codes"),
                "stored": got,
                "seconds": round(sec, 2),
                "mails_per_s": round(got / sec, 1),
                "cpu_ms_per_mail": round(1000 * cpu / max(1, got), 2),
                "moto_cpu_ms_per_mail": round(1000 * mcpu / max(1, got), 2),
                "p50_ms": round(1000 * _pct(res["latencies"], 0.5), 1),
                "p99_ms": round(1000 * _pct(res["latencies"], 0.99), 1),
            }
            n = max(100, mails // 5)
            args = ["smtp", str(port), str(n), str(size), str(sessions)]
            res = _child(args)
            row["smtp"]["latency_sample"] = n
            row["smtp"]["p50_ms"] = round(1000 * _pct(res["latencies"], 0.5), 1)
            row["smtp"]["p99_ms"] = round(1000 * _pct(res["latencies"], 0.99), 1)
            row["smtp_over_http_cpu"] = round(
                row["smtp"]["cpu_ms_per_mail"] / max(1e-9, row["http"]["cpu_ms_per_mail"]), 2
            )
            out["sizes"][f"{size // 1024} KB"] = row
            print(json.dumps({f"{size // 1024} KB": row}), flush=True)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--child"]:
        kind, rest = args[1], args[2:]
        if kind == "http":
            doc = http_client(rest[0], rest[1], int(rest[2]), int(rest[3]), int(rest[4]))
        else:
            doc = smtp_client(int(rest[0]), int(rest[1]), int(rest[2]), int(rest[3]))
        print(json.dumps(doc))
        return 0
    p = argparse.ArgumentParser(prog="python -m mailqueue_local.smtpbench", description=__doc__)
    p.add_argument("--mails", type=int, default=2000)
    p.add_argument("--sessions", type=int, default=20)
    p.add_argument("--var", type=Path, default=Path("var/smtpbench"))
    p.add_argument("--out", type=Path, default=Path("var/smtpbench/result.json"))
    ns = p.parse_args(args)
    if not (shutil.which("smtp-source") or os.path.exists("/usr/sbin/smtp-source")):
        print("smtp-source (Debian's postfix package) is not installed", file=sys.stderr)
        return 2
    result = run(ns.mails, ns.sessions, ns.var)
    ns.out.parent.mkdir(parents=True, exist_ok=True)
    ns.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
