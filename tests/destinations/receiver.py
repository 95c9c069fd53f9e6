"""A webhook receiver on loopback, as an application would run one: it checks each POST's
signature and replay window, records the event, and can be down (not listening) or refuse
with a status for a while."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from mailqueue.services.destinations import EVENT_ID_HEADER, SIGNATURE_HEADER, verify_signature


class Receiver:
    def __init__(self, port: int, secret: str, status: int = 200) -> None:
        self.port, self.secret, self.status = port, secret, status
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
                ok = verify_signature(
                    outer.secret, self.headers.get(SIGNATURE_HEADER, ""), body, time.time()
                )
                with outer.lock:
                    if not ok:
                        outer.bad_signatures += 1
                    elif outer.status == 200:
                        eid = self.headers.get(EVENT_ID_HEADER, "")
                        outer.posts.append((eid, json.loads(body)))
                code = outer.status if ok else 401
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
