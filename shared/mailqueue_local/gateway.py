"""A local API Gateway HTTP API: HTTP requests → payload 2.0 events → the real handlers.

`http_api_event` builds the event API Gateway hands a Lambda proxy integration (payload
format 2.0: version, routeKey, rawPath, rawQueryString, cookies, lower-cased headers
with repeated values comma-joined, queryStringParameters, pathParameters, requestContext
with http{method,path,protocol,sourceIp,userAgent}, authorizer.iam, requestId, stage
"$default", body + isBase64Encoded); `http_response` turns the function's answer back
into status, headers and body, including API Gateway's inference for an answer without
a ``statusCode``. `ApiGateway` serves both on 127.0.0.1 with `http.server`.

Authorization reproduces the template's ``AuthorizationType: AWS_IAM`` with two ways in
(see `LocalAuth`): the development token (``Authorization: Bearer <token>``) or a real
SigV4 signature made with the local key pair. Either way the function sees a verified
IAM principal in ``requestContext.authorizer.iam``; anything else is refused with 403
before any function runs, as API Gateway does.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TextIO
from urllib.parse import parse_qsl, urlsplit

from mailqueue_local.runtime import ACCOUNT_ID, REGION

log = logging.getLogger(__name__)

MAX_BODY = 10 * 1024 * 1024  # API Gateway's payload limit
MAX_EVENT = 6 * 1024 * 1024  # Lambda's synchronous invocation payload limit
_TEXT_TYPES = re.compile(
    r"^(text/.*|application/(json|.*\+json|xml|.*\+xml|javascript|x-www-form-urlencoded))$"
)


# ----------------------------------------------------------------------------- routes
@dataclass(frozen=True)
class Route:
    """A route as the template declares it: ``POST /v1/messages``, ``ANY /v1/queue/{proxy+}``."""

    method: str
    path: str
    function: str
    auth: str = "AWS_IAM"  # "NONE": a public route (the template's Auth.Authorizer: NONE)
    _regex: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        pattern = ""
        for part in re.split(r"(\{[^}]+\})", self.path):
            if part.startswith("{") and part.endswith("}"):
                name = part[1:-1]
                if name.endswith("+"):
                    pattern += f"(?P<{name[:-1]}>.+)"
                else:
                    pattern += f"(?P<{name}>[^/]+)"
            else:
                pattern += re.escape(part)
        object.__setattr__(self, "method", self.method.upper())
        object.__setattr__(self, "_regex", re.compile(f"^{pattern}$"))

    @property
    def route_key(self) -> str:
        return f"{self.method} {self.path}"

    @property
    def specificity(self) -> tuple[int, int, int]:
        """Exact paths beat parameters, parameters beat greedy ones; then the longer."""
        greedy = self.path.count("+}")
        params = self.path.count("{")
        return (greedy, params, -len(self.path))

    def match(self, method: str, path: str) -> dict[str, str] | None:
        if self.method not in ("ANY", method.upper()):
            return None
        m = self._regex.match(path)
        return None if m is None else dict(m.groupdict())


DEFAULT_ROUTES: tuple[Route, ...] = (
    Route("POST", "/v1/messages", "ingress"),
    Route("POST", "/v1/messages/batch", "ingress"),
    Route("POST", "/v1/uploads", "ingress"),
    Route("ANY", "/v1/queue/{proxy+}", "admin"),
)


def match_route(
    routes: Iterable[Route], method: str, path: str
) -> tuple[Route, dict[str, str]] | None:
    found = [(r, p) for r in routes if (p := r.match(method, path)) is not None]
    if not found:
        return None
    return min(found, key=lambda rp: (rp[0].specificity, rp[0].method == "ANY"))


# ----------------------------------------------------------------------------- auth
@dataclass(frozen=True)
class Principal:
    """The caller as API Gateway's IAM authorizer describes it."""

    user_arn: str
    access_key: str
    user_id: str
    account_id: str = ACCOUNT_ID

    def iam(self) -> dict[str, Any]:
        return {
            "accessKey": self.access_key,
            "accountId": self.account_id,
            "callerId": self.user_id,
            "cognitoIdentity": None,
            "principalOrgId": None,
            "userArn": self.user_arn,
            "userId": self.user_id,
        }


class AuthError(Exception):
    """Refused by the IAM authorizer: 403 with API Gateway's message."""


FORBIDDEN = "Forbidden"
BAD_SIGNATURE = (
    "The request signature we calculated does not match the signature you provided. "
    "Check your AWS Secret Access Key and signing method. "
    "Consult the service documentation for details."
)
_SIGV4 = re.compile(
    r"^AWS4-HMAC-SHA256 Credential=(?P<key>[^/]+)/(?P<date>\d{8})/(?P<region>[^/]+)/"
    r"(?P<service>[^/]+)/aws4_request,\s*SignedHeaders=(?P<signed>[^,\s]+),\s*"
    r"Signature=(?P<signature>[0-9a-f]{64})$"
)


class LocalAuth:
    """The local stand-in for IAM auth.

    * ``Authorization: Bearer <token>``: the development token printed at start; the caller
      becomes ``arn:aws:iam::123456789012:user/local-dev``.
    * SigV4 (service ``execute-api``) signed with access key `access_key_id` and the token
      as the secret key: verified like API Gateway does (signature, scope, 15 min skew);
      the caller becomes ``arn:aws:iam::123456789012:user/local-sigv4``.
    """

    def __init__(
        self,
        token: str,
        *,
        access_key_id: str = "MQLOCALDEV",
        region: str = REGION,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        if len(token) < 16:
            raise ValueError("the development token must have at least 16 characters")
        self.token = token
        self.access_key_id = access_key_id
        self.region = region
        self.clock = clock

    def authenticate(
        self, method: str, url: str, headers: Mapping[str, str], body: bytes
    ) -> Principal:
        value = headers.get("authorization", "")
        if value.startswith("Bearer "):
            if hmac.compare_digest(value[7:].strip().encode(), self.token.encode()):
                return Principal(
                    f"arn:aws:iam::{ACCOUNT_ID}:user/local-dev", "LOCALDEVTOKEN", "AIDALOCALDEV"
                )
            raise AuthError(FORBIDDEN)
        if value.startswith("AWS4-HMAC-SHA256 "):
            return self._sigv4(method, url, headers, body, value)
        raise AuthError(FORBIDDEN)

    def _sigv4(
        self, method: str, url: str, headers: Mapping[str, str], body: bytes, value: str
    ) -> Principal:
        from botocore.auth import SigV4Auth
        from botocore.awsrequest import AWSRequest
        from botocore.credentials import Credentials

        m = _SIGV4.match(value)
        if m is None:
            raise AuthError(
                f"Authorization header requires existence of a valid Credential. {FORBIDDEN}"
            )
        if m["key"] != self.access_key_id:
            raise AuthError("The security token included in the request is invalid.")
        if m["service"] != "execute-api" or m["region"] != self.region:
            raise AuthError(BAD_SIGNATURE)
        amz_date = headers.get("x-amz-date", "")
        try:
            signed_at = datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
        except ValueError as e:
            raise AuthError("Authorization header requires 'X-Amz-Date'.") from e
        if abs(self.clock() - signed_at) > timedelta(minutes=15) or amz_date[:8] != m["date"]:
            raise AuthError(f"Signature expired: {amz_date} is now outside the allowed window")
        names = m["signed"].split(";")
        if "host" not in names or any(n not in headers for n in names):
            raise AuthError(BAD_SIGNATURE)
        # botocore's canonical request takes x-amz-content-sha256 as the payload's hash
        # without hashing the body; API Gateway checks the payload against the signature,
        # so a body swapped under a valid signature must not pass: hash it ourselves
        claimed = headers.get("x-amz-content-sha256")
        if claimed is not None and not hmac.compare_digest(
            claimed.strip().lower(), hashlib.sha256(body).hexdigest()
        ):
            raise AuthError(BAD_SIGNATURE)
        request = AWSRequest(
            method=method, url=url, data=body, headers={n: headers[n] for n in names}
        )
        request.context["timestamp"] = amz_date
        signer = SigV4Auth(Credentials(self.access_key_id, self.token), "execute-api", self.region)
        canonical = signer.canonical_request(request)
        expected = signer.signature(signer.string_to_sign(request, canonical), request)
        if not hmac.compare_digest(expected, m["signature"]):
            raise AuthError(BAD_SIGNATURE)
        return Principal(
            f"arn:aws:iam::{ACCOUNT_ID}:user/local-sigv4", self.access_key_id, "AIDALOCALSIGV4"
        )


# ----------------------------------------------------------------------------- events
def http_api_event(
    *,
    method: str,
    raw_path: str,
    raw_query: str,
    headers: Sequence[tuple[str, str]],
    body: bytes,
    route: Route,
    path_parameters: Mapping[str, str] | None = None,
    source_ip: str = "127.0.0.1",
    principal: Principal | None = None,
    request_id: str | None = None,
    now: datetime | None = None,
    domain_name: str = "localhost",
    api_id: str = "local",
    stage: str = "$default",
) -> dict[str, Any]:
    """The payload 2.0 event API Gateway sends a Lambda proxy integration for one request."""
    now = now or datetime.now(UTC)
    merged: dict[str, str] = {}
    cookies: list[str] = []
    for name, value in headers:
        key = name.lower()
        if key == "cookie":
            cookies.extend(c.strip() for c in value.split(";") if c.strip())
            continue
        merged[key] = f"{merged[key]},{value}" if key in merged else value
    query: dict[str, str] = {}
    for k, v in parse_qsl(raw_query, keep_blank_values=True):
        query[k] = f"{query[k]},{v}" if k in query else v
    request_id = request_id or base64.b32encode(uuid.uuid4().bytes).decode()[:16]
    event: dict[str, Any] = {
        "version": "2.0",
        "routeKey": route.route_key,
        "rawPath": raw_path,
        "rawQueryString": raw_query,
        "headers": merged,
    }
    if cookies:
        event["cookies"] = cookies
    if query:
        event["queryStringParameters"] = query
    ctx: dict[str, Any] = {
        "accountId": ACCOUNT_ID,
        "apiId": api_id,
        "domainName": domain_name,
        "domainPrefix": domain_name.split(".", 1)[0],
        "http": {
            "method": method.upper(),
            "path": raw_path,
            "protocol": "HTTP/1.1",
            "sourceIp": source_ip,
            "userAgent": merged.get("user-agent", ""),
        },
        "requestId": request_id,
        "routeKey": route.route_key,
        "stage": stage,
        "time": now.strftime("%d/%b/%Y:%H:%M:%S +0000"),
        "timeEpoch": int(now.timestamp() * 1000),
    }
    if principal is not None:
        ctx["authorizer"] = {"iam": principal.iam()}
    event["requestContext"] = ctx
    if path_parameters:
        event["pathParameters"] = dict(path_parameters)
    if body:
        ctype = merged.get("content-type", "").split(";", 1)[0].strip().lower()
        text = None
        if _TEXT_TYPES.match(ctype):
            try:
                text = body.decode("utf-8")
            except UnicodeDecodeError:
                text = None
        if text is not None:
            event["body"] = text
            event["isBase64Encoded"] = False
        else:
            event["body"] = base64.b64encode(body).decode("ascii")
            event["isBase64Encoded"] = True
    else:
        event["isBase64Encoded"] = False
    return event


def http_response(result: Any) -> tuple[int, list[tuple[str, str]], bytes]:
    """A function's answer → (status, headers, body), as API Gateway maps payload 2.0."""
    if not isinstance(result, dict) or "statusCode" not in result:
        # no statusCode: API Gateway assumes 200 and returns the answer as JSON
        return 200, [("content-type", "application/json")], json.dumps(result).encode()
    status = int(result["statusCode"])
    headers: list[tuple[str, str]] = []
    for k, v in (result.get("headers") or {}).items():
        headers.append((str(k), str(v)))
    for k, values in (result.get("multiValueHeaders") or {}).items():
        headers.extend((str(k), str(v)) for v in values)
    headers.extend(("set-cookie", str(c)) for c in result.get("cookies") or [])
    raw = result.get("body")
    if raw is None:
        body = b""
    elif result.get("isBase64Encoded"):
        body = base64.b64decode(raw)
    else:
        body = str(raw).encode("utf-8")
    return status, headers, body


# ----------------------------------------------------------------------------- server
Invoke = Callable[[dict[str, Any]], Any]

#: the listen backlog: API Gateway takes bursts of thousands of connections (its account
#: burst quota, "Amazon API Gateway quotas": 5,000 requests); http.server's default of 5
#: overflowed the accept queue under a burst of 20 clients (issue 43 item 16). Linux caps
#: it at net.core.somaxconn (4096 on current kernels).
LISTEN_BACKLOG = 1024


class _Server(ThreadingHTTPServer):
    request_queue_size = LISTEN_BACKLOG


class ApiGateway:
    """The HTTP API on 127.0.0.1: routes → functions, IAM auth → `LocalAuth`."""

    def __init__(
        self,
        routes: Sequence[Route],
        functions: Mapping[str, Invoke],
        auth: LocalAuth,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        access_log: TextIO | None = None,
    ) -> None:
        self.routes = [r for r in routes if r.function in functions]
        # each request in an execution environment of its own, as Lambda scales a function
        # out for concurrent synchronous invocations ("Lambda function scaling"): through
        # container 0's lock, one slow admin request (a job slice runs up to 20 s inline)
        # held every other admin request behind it until clients gave up (issue 43 item 18)
        self.functions = {name: getattr(fn, "invoke_pooled", fn) for name, fn in functions.items()}
        self.auth = auth
        self.access_log = access_log
        self._log_lock = threading.Lock()
        gateway = self

        class Handler(_RequestHandler):
            gw = gateway

        self.server = _Server((host, port), Handler)
        # join in-flight requests on close: a stop never cuts a submission in half
        self.server.daemon_threads = False
        self.server.block_on_close = True
        bound_host, bound_port = self.server.server_address[:2]
        self.host = bound_host.decode() if isinstance(bound_host, bytes) else str(bound_host)
        self.port = int(bound_port)
        self._thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.2}, name="api-gateway"
        )

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> ApiGateway:
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread.is_alive():
            self.server.shutdown()
            self._thread.join(10)
        self.server.server_close()

    def handle(
        self,
        method: str,
        target: str,
        headers: Sequence[tuple[str, str]],
        body: bytes,
        source_ip: str,
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        """One request, end to end: route, authorize, build the event, invoke, map back."""
        parts = urlsplit(target)
        raw_path, raw_query = parts.path or "/", parts.query
        found = match_route(self.routes, method, raw_path)
        if found is None:
            return _message(404, "Not Found")
        route, params = found
        lower = {k.lower(): v for k, v in headers}
        host = lower.get("host") or f"{self.host}:{self.port}"
        url = f"http://{host}{target}"
        try:
            principal = (
                None
                if route.auth == "NONE"
                else self.auth.authenticate(method.upper(), url, lower, body)
            )
        except AuthError as e:
            return _message(403, str(e))
        event = http_api_event(
            method=method,
            raw_path=raw_path,
            raw_query=raw_query,
            headers=headers,
            body=body,
            route=route,
            path_parameters=params,
            source_ip=source_ip,
            principal=principal,
            domain_name=host.split(":", 1)[0],
        )
        if len(json.dumps(event)) > MAX_EVENT:
            return _message(413, "Request Entity Too Large")
        try:
            result = self.functions[route.function](event)
        except Exception as e:  # noqa: BLE001 - the traceback is in the function's log
            log.error("%s: invocation failed (%s: %s)", route.function, type(e).__name__, e)
            return _message(500, "Internal Server Error")
        try:
            return http_response(result)
        except (ValueError, TypeError) as e:
            log.error("%s: malformed Lambda response (%s)", route.function, e)
            return _message(500, "Internal Server Error")

    def log_access(self, line: str) -> None:
        if self.access_log is None:
            return
        with self._log_lock:
            self.access_log.write(line + "\n")
            self.access_log.flush()


def _message(status: int, message: str) -> tuple[int, list[tuple[str, str]], bytes]:
    body = json.dumps({"message": message}).encode()
    return status, [("content-type", "application/json")], body


class _RequestHandler(BaseHTTPRequestHandler):
    gw: ApiGateway
    server_version = "mailqueue-local-apigw"
    sys_version = ""
    timeout = 30  # a client that stalls mid-request cannot hold a stop forever

    def _serve(self) -> None:
        started = time.monotonic()
        length_header = self.headers.get("content-length")
        if self.headers.get("transfer-encoding", "").lower() == "chunked":
            status, headers, body = _message(411, "Length Required")
        else:
            try:
                length = int(length_header or 0)
            except ValueError:
                length = -1
            if length < 0:
                status, headers, body = _message(400, "Bad Request")
            elif length > MAX_BODY:
                status, headers, body = _message(413, "Request Entity Too Large")
            else:
                data = self.rfile.read(length) if length else b""
                status, headers, body = self.gw.handle(
                    self.command,
                    self.path,
                    list(self.headers.items()),
                    data,
                    self.client_address[0],
                )
        self.send_response(status)
        names = {k.lower() for k, _ in headers}
        for k, v in headers:
            if k.lower() not in ("content-length", "connection", "transfer-encoding"):
                self.send_header(k, v)
        if "content-type" not in names and body:
            self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.send_header("apigw-requestid", uuid.uuid4().hex[:16])
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        self.gw.log_access(
            f"{self.client_address[0]} [{datetime.now(UTC):%d/%b/%Y:%H:%M:%S +0000}] "
            f'"{self.command} {urlsplit(self.path).path} {self.request_version}" {status} '
            f"{len(body)} {1000 * (time.monotonic() - started):.1f}ms"
        )

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = _serve

    def __getattr__(self, name: str) -> Any:
        """Any other method (TRACE, CONNECT, PROPFIND, made-up ones) goes to the routes
        too, which answer a 4xx as API Gateway does, instead of http.server's 501."""
        if name.startswith("do_"):
            return self._serve
        raise AttributeError(name)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("api: " + format, *args)
