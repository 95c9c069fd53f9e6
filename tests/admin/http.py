"""API Gateway HTTP API (payload 2.0) events for the admin routes, and a tiny local HTTP
server that turns real HTTP requests into such events for the CLI's HTTP mode.

The server checks each request's SigV4 signature with the test credentials, as API
Gateway's IAM authorizer would, and passes the caller's identity on in the event.
"""

from __future__ import annotations

import json
import threading
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from tests.admin.conftest import ACTOR
from tests.support import events as ev
from tests.support.lambda_context import LambdaContext

Handler = Callable[[dict[str, Any], Any], dict[str, Any]]


def v2_event(
    method: str,
    path: str,
    query: Mapping[str, str] | None = None,
    body: Any = None,
    *,
    principal: str = ACTOR,
    headers: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    event = ev.http_request(method, path, principal=principal)
    event["rawQueryString"] = urllib.parse.urlencode(dict(query or {}))
    if query:
        event["queryStringParameters"] = dict(query)
    else:
        event.pop("queryStringParameters", None)
    if headers is not None:  # a real request's headers replace the sample's
        event["headers"] = {k.lower(): v for k, v in headers.items()}
    if body is None:
        event.pop("body", None)
    else:
        event["body"] = body if isinstance(body, str) else json.dumps(body)
        event["isBase64Encoded"] = False
    return event


def answer(resp: dict[str, Any]) -> tuple[int, dict[str, Any], dict[str, str]]:
    return resp["statusCode"], json.loads(resp["body"]), dict(resp.get("headers") or {})


def context(remaining_ms: int = 30_000) -> Any:
    """A Lambda context (typed Any: it stands in for Powertools' LambdaContext)."""
    return LambdaContext(
        function_name="mailqueue-admin",
        invoked_function_arn="arn:aws:lambda:us-east-1:123456789012:function:mailqueue-admin",
        remaining_ms=remaining_ms,
    )


def _signature_ok(method: str, url: str, headers: Mapping[str, str], body: bytes) -> bool:
    """Recompute the SigV4 signature (credentials "testing"), as IAM auth would."""
    auth = headers.get("Authorization") or headers.get("authorization") or ""
    date = headers.get("X-Amz-Date") or headers.get("x-amz-date")
    if not auth.startswith("AWS4-HMAC-SHA256 ") or not date:
        return False
    fields = dict(p.strip().split("=", 1) for p in auth[len("AWS4-HMAC-SHA256 ") :].split(","))
    region = fields["Credential"].split("/")[2]
    signed = fields["SignedHeaders"].split(";")
    req = AWSRequest(
        method=method,
        url=url,
        data=body or None,
        headers={k: v for k, v in headers.items() if k.lower() in signed},
    )
    req.context["timestamp"] = date
    signer = SigV4Auth(Credentials("testing", "testing"), "execute-api", region)
    canonical = signer.canonical_request(req)
    expected = signer.signature(signer.string_to_sign(req, canonical), req)
    return bool(expected == fields["Signature"])


@contextmanager
def serve(routes: Mapping[str, Handler], *, require_signature: bool = True) -> Iterator[str]:
    """HTTP on 127.0.0.1 → v2 events → the handler whose path prefix matches."""

    class Adapter(BaseHTTPRequestHandler):
        def _do(self) -> None:
            parts = urllib.parse.urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            headers = {k: v for k, v in self.headers.items()}
            host = f"http://{self.headers.get('Host')}"
            if require_signature and not _signature_ok(
                self.command, host + self.path, headers, body
            ):
                self._reply(403, {"message": "Forbidden"})
                return
            query = dict(urllib.parse.parse_qsl(parts.query, keep_blank_values=True))
            event = v2_event(
                self.command,
                parts.path,
                query,
                body.decode() if body else None,
                headers=headers,
            )
            handler = next(h for prefix, h in routes.items() if parts.path.startswith(prefix))
            resp = handler(event, context())
            self._reply(resp["statusCode"], json.loads(resp["body"]), resp.get("headers") or {})

        def _reply(self, status: int, doc: Any, headers: Mapping[str, str] | None = None) -> None:
            raw = json.dumps(doc).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            for k, v in (headers or {}).items():
                if k.lower() not in ("content-type", "content-length"):
                    self.send_header(k, v)
            self.end_headers()
            self.wfile.write(raw)

        do_GET = do_POST = do_DELETE = _do

        def log_message(self, format: str, *args: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Adapter)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
