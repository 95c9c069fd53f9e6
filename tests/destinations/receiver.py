"""A webhook receiver on loopback, as an application would run one: it checks each POST's
signature and replay window, records the event, and can be down (not listening) or refuse
with a status for a while.

Its check (`verify`) is written from docs/operations.md ("Verifying a webhook's
signature") alone, not from mailqueue's code: it imports nothing of the sender's, so a
sender that drifts from the documentation fails against it."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

EVENT_ID_HEADER = "X-Mailqueue-Event-Id"  # as documented
SIGNATURE_HEADER = "X-Mailqueue-Signature"
WINDOW_SECONDS = 300


def verify(key: str, header: str, body: bytes, now: float) -> bool:
    """The documented steps: split `t=…,v1=…`; refuse a `t` more than 300 s from our clock;
    HMAC-SHA256(key, t + "." + body) in lowercase hex, compared in constant time."""
    parts: dict[str, str] = {}
    for part in header.split(","):
        name, sep, value = part.partition("=")
        if sep:
            parts[name.strip()] = value.strip()
    t, v1 = parts.get("t", ""), parts.get("v1", "")
    if not t.isdigit() or not v1:
        return False
    if abs(now - int(t)) > WINDOW_SECONDS:
        return False
    mac = hmac.new(key.encode("utf-8"), t.encode("ascii") + b"." + body, hashlib.sha256)
    return hmac.compare_digest(mac.hexdigest(), v1)


class Receiver:
    def __init__(self, port: int, secret: str, status: int = 200, fail_first: int = 0) -> None:
        self.port, self.secret, self.status = port, secret, status
        self.fail_first = fail_first  # the first signed POSTs answered 503 (a brief outage)
        self.posts: list[tuple[str, dict[str, Any]]] = []  # (event id, event) per POST
        self.bad_signatures = 0
        self.lock = threading.Lock()
        self.server: ThreadingHTTPServer | None = None
        self.thread: threading.Thread | None = None

    def start(self) -> Receiver:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                ok = verify(outer.secret, self.headers.get(SIGNATURE_HEADER, ""), body, time.time())
                with outer.lock:
                    code = outer.status if ok else 401
                    if not ok:
                        outer.bad_signatures += 1
                    elif outer.fail_first > 0:
                        outer.fail_first -= 1
                        code = 503
                    elif outer.status == 200:
                        eid = self.headers.get(EVENT_ID_HEADER, "")
                        outer.posts.append((eid, json.loads(body)))
                self.send_response(code)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def unique(self) -> dict[str, dict[str, Any]]:
        """Event id -> event, after de-duplication (what the application keeps)."""
        with self.lock:
            return {eid: ev for eid, ev in self.posts}
