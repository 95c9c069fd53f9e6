"""The local API Gateway: HTTP → payload 2.0 events, IAM auth stand-in, answers back."""

from __future__ import annotations

import base64
import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from mailqueue.compose.ingress import build_service
from mailqueue.core.authz import PERMISSIVE_SENDER_POLICY
from mailqueue.services import ingress
from mailqueue_local.gateway import (
    DEFAULT_ROUTES,
    ApiGateway,
    AuthError,
    LocalAuth,
    Route,
    http_api_event,
    http_response,
    match_route,
)
from mailqueue_local.runtime import LocalContext

from functions.ingress import app as ingress_app
from tests.support.aws import AwsEnv, session
from tests.support.events import load_event

TOKEN = "local-test-token-0123456789"


def _shape(doc: Any) -> Any:
    """The key structure of a JSON document, values left out."""
    if isinstance(doc, dict):
        return {k: _shape(v) for k, v in doc.items()}
    return type(doc).__name__ if doc is not None else None


# ----------------------------------------------------------------------------- events
def test_event_has_the_shape_of_the_recorded_api_gateway_event() -> None:
    sample = load_event("http_send")
    auth = LocalAuth(TOKEN)
    principal = auth.authenticate(
        "POST", "http://x/v1/messages", {"authorization": f"Bearer {TOKEN}"}, b""
    )
    event = http_api_event(
        method="POST",
        raw_path="/v1/messages",
        raw_query="",
        headers=[(k, v) for k, v in sample["headers"].items()],
        body=sample["body"].encode(),
        route=Route("POST", "/v1/messages", "ingress"),
        source_ip="198.51.100.23",
        principal=principal,
        domain_name=sample["requestContext"]["domainName"],
        now=datetime(2026, 11, 21, 6, 0, tzinfo=UTC),
    )
    assert _shape(event) == _shape(sample)
    assert event["requestContext"]["time"] == sample["requestContext"]["time"]
    assert event["requestContext"]["timeEpoch"] == sample["requestContext"]["timeEpoch"]
    assert event["body"] == sample["body"] and event["isBase64Encoded"] is False
    assert event["requestContext"]["authorizer"]["iam"]["userArn"].endswith(":user/local-dev")


def test_headers_are_lower_cased_and_repeats_joined_cookies_split() -> None:
    event = http_api_event(
        method="get",
        raw_path="/v1/queue/mails",
        raw_query="state=queued&domain=a.example&state=held&empty=",
        headers=[
            ("Accept", "application/json"),
            ("X-Many", "one"),
            ("x-many", "two"),
            ("Cookie", "a=1; b=2"),
        ],
        body=b"",
        route=Route("ANY", "/v1/queue/{proxy+}", "admin"),
        path_parameters={"proxy": "mails"},
    )
    assert event["headers"] == {"accept": "application/json", "x-many": "one,two"}
    assert event["cookies"] == ["a=1", "b=2"]
    assert event["queryStringParameters"] == {
        "state": "queued,held",
        "domain": "a.example",
        "empty": "",
    }
    assert event["rawQueryString"] == "state=queued&domain=a.example&state=held&empty="
    assert event["pathParameters"] == {"proxy": "mails"}
    assert event["routeKey"] == "ANY /v1/queue/{proxy+}"
    assert event["requestContext"]["http"]["method"] == "GET"
    assert "body" not in event and event["isBase64Encoded"] is False
    assert "authorizer" not in event["requestContext"]


def test_binary_bodies_are_base64_encoded() -> None:
    raw = b"\x00\xffnot text"
    for ctype in ("application/octet-stream", "application/json"):  # invalid UTF-8 too
        event = http_api_event(
            method="POST",
            raw_path="/v1/messages",
            raw_query="",
            headers=[("content-type", ctype)],
            body=raw,
            route=DEFAULT_ROUTES[0],
        )
        assert event["isBase64Encoded"] is True
        assert base64.b64decode(event["body"]) == raw


def test_route_matching_prefers_the_most_specific() -> None:
    routes = [
        Route("ANY", "/v1/queue/{proxy+}", "admin"),
        Route("GET", "/v1/queue/mails/{mail_id}", "inspect"),
        Route("GET", "/v1/queue/mails", "browse"),
    ]
    found = match_route(routes, "GET", "/v1/queue/mails")
    assert found is not None and found[0].function == "browse"
    found = match_route(routes, "GET", "/v1/queue/mails/01ABC")
    assert found is not None and found == (routes[1], {"mail_id": "01ABC"})
    found = match_route(routes, "POST", "/v1/queue/mails/01ABC/hold")
    assert found is not None and found == (routes[0], {"proxy": "mails/01ABC/hold"})
    assert match_route(routes, "GET", "/v1/other") is None
    assert match_route(DEFAULT_ROUTES, "GET", "/v1/messages") is None  # POST only


def test_responses_map_back_like_api_gateway() -> None:
    status, headers, body = http_response(
        {
            "statusCode": 202,
            "headers": {"Content-Type": "application/json"},
            "cookies": ["s=1"],
            "body": '{"ok":true}',
            "isBase64Encoded": False,
        }
    )
    assert status == 202 and body == b'{"ok":true}'
    assert ("set-cookie", "s=1") in headers and ("Content-Type", "application/json") in headers
    status, _, body = http_response({"statusCode": 200, "body": "AAE=", "isBase64Encoded": True})
    assert body == b"\x00\x01"
    # no statusCode: API Gateway infers 200 and JSON
    status, headers, body = http_response({"mail_id": "x"})
    assert status == 200 and json.loads(body) == {"mail_id": "x"}


# ----------------------------------------------------------------------------- auth
def _signed(url: str, body: bytes, key: str, secret: str) -> dict[str, str]:
    req = AWSRequest(
        method="POST", url=url, data=body, headers={"content-type": "application/json"}
    )
    SigV4Auth(Credentials(key, secret), "execute-api", "us-east-1").add_auth(req)
    headers = {k.lower(): v for k, v in req.headers.items()}
    headers["host"] = url.split("/")[2]
    return headers


def test_bearer_token_and_sigv4_are_verified() -> None:
    auth = LocalAuth(TOKEN)
    url = "http://127.0.0.1:3000/v1/messages?x=1"
    body = b'{"sender":"a@example.org"}'
    assert auth.authenticate(
        "POST", url, {"authorization": f"Bearer {TOKEN}"}, body
    ).user_arn.endswith("user/local-dev")
    good = _signed(url, body, "MQLOCALDEV", TOKEN)
    assert auth.authenticate("POST", url, good, body).user_arn.endswith("user/local-sigv4")
    refusals = [
        {},
        {"authorization": "Bearer wrong-token-wrong-token"},
        {"authorization": "Basic dXNlcjpwYXNz"},
        _signed(url, body, "MQLOCALDEV", "another secret"),
        _signed(url, body, "AKIAOTHERKEY", TOKEN),
    ]
    for headers in refusals:
        with pytest.raises(AuthError):
            auth.authenticate("POST", url, headers, body)
    # a signature older than 15 minutes is refused
    later = LocalAuth(TOKEN, clock=lambda: datetime.now(UTC) + timedelta(minutes=16))
    with pytest.raises(AuthError, match="expired"):
        later.authenticate("POST", url, good, body)
    # a body changed after signing no longer matches
    with pytest.raises(AuthError):
        auth.authenticate("POST", url, good, body + b" ")


# ----------------------------------------------------------------------------- server
@pytest.fixture()
def gateway() -> Iterator[tuple[ApiGateway, list[dict[str, Any]]]]:
    seen: list[dict[str, Any]] = []

    def echo(event: dict[str, Any]) -> dict[str, Any]:
        seen.append(event)
        return {"statusCode": 200, "headers": {"x-echo": "1"}, "body": json.dumps({"n": len(seen)})}

    def broken(event: dict[str, Any]) -> dict[str, Any]:
        raise RuntimeError("boom")

    routes = [Route("POST", "/v1/messages", "echo"), Route("GET", "/v1/broken", "broken")]
    gw = ApiGateway(routes, {"echo": echo, "broken": broken}, LocalAuth(TOKEN), port=0).start()
    try:
        yield gw, seen
    finally:
        gw.stop()


def _call(
    url: str,
    method: str = "POST",
    body: bytes | None = b"{}",
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], Any]:
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, dict(resp.headers.items()), json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers.items()), json.loads(e.read() or b"null")


def test_server_refuses_unauthenticated_and_unknown_routes(
    gateway: tuple[ApiGateway, list[dict[str, Any]]],
) -> None:
    gw, seen = gateway
    assert _call(gw.url + "/v1/messages")[::2] == (403, {"message": "Forbidden"})
    assert _call(gw.url + "/v1/nothing", headers={"authorization": f"Bearer {TOKEN}"})[::2] == (
        404,
        {"message": "Not Found"},
    )
    status, _, doc = _call(gw.url + "/v1/broken", "GET", None, {"authorization": f"Bearer {TOKEN}"})
    assert (status, doc) == (500, {"message": "Internal Server Error"})
    assert seen == []  # no function ran for any of them


def test_server_invokes_with_the_event_and_maps_the_answer(
    gateway: tuple[ApiGateway, list[dict[str, Any]]],
) -> None:
    gw, seen = gateway
    status, headers, doc = _call(
        gw.url + "/v1/messages?a=1",
        body=b'{"hello":"world"}',
        headers={
            "authorization": f"Bearer {TOKEN}",
            "content-type": "application/json",
            "Idempotency-Key": "k1",
        },
    )
    assert (status, doc, headers.get("x-echo")) == (200, {"n": 1}, "1")
    (event,) = seen
    assert event["body"] == '{"hello":"world"}' and event["rawQueryString"] == "a=1"
    assert event["headers"]["idempotency-key"] == "k1"
    assert event["requestContext"]["http"]["sourceIp"] == "127.0.0.1"
    assert event["requestContext"]["authorizer"]["iam"]["userArn"].endswith(":user/local-dev")


def test_the_real_ingress_handler_queues_a_mail_through_the_gateway(aws: AwsEnv) -> None:
    settings = ingress.IngressSettings(storage=aws.settings, sender_policy=PERMISSIVE_SENDER_POLICY)
    service = build_service(settings, aws.clients, session=session())

    def invoke(event: dict[str, Any]) -> Any:
        return ingress_app.handle(event, LocalContext("mailqueue-ingress", 29), service)  # type: ignore[arg-type]

    gw = ApiGateway(DEFAULT_ROUTES, {"ingress": invoke}, LocalAuth(TOKEN), port=0).start()
    try:
        content = b"Subject: hi\r\n\r\nhello\r\n"
        doc = {
            "sender": "a@example.org",
            "recipients": ["b@example.net"],
            "content": base64.b64encode(content).decode(),
        }
        status, _, answer = _call(
            gw.url + "/v1/messages",
            body=json.dumps(doc).encode(),
            headers={"authorization": f"Bearer {TOKEN}", "content-type": "application/json"},
        )
        assert status == 202, answer
        _, groups = aws.storage().get_mail(answer["mail_id"])
        assert [r.address for g in groups for r in g.recipients] == ["b@example.net"]
        bad = {**doc, "recipients": ["not an address"]}
        status, _, answer = _call(
            gw.url + "/v1/messages",
            body=json.dumps(bad).encode(),
            headers={"authorization": f"Bearer {TOKEN}", "content-type": "application/json"},
        )
        assert status in (400, 422) and answer["field"].startswith("recipients")
    finally:
        gw.stop()


def test_a_body_swapped_under_a_signed_payload_hash_is_refused() -> None:
    """Issue 28, item 16: x-amz-content-sha256 is signed, but the body must hash to it
    (botocore's canonical request trusts the header; API Gateway checks the payload)."""
    import hashlib

    auth = LocalAuth(TOKEN)
    url = "http://127.0.0.1:3000/v1/messages"
    body = b'{"sender":"a@example.org"}'
    req = AWSRequest(
        method="POST",
        url=url,
        data=body,
        headers={"x-amz-content-sha256": hashlib.sha256(body).hexdigest()},
    )
    SigV4Auth(Credentials("MQLOCALDEV", TOKEN), "execute-api", "us-east-1").add_auth(req)
    headers = {k.lower(): v for k, v in req.headers.items()}
    headers["host"] = "127.0.0.1:3000"
    assert "x-amz-content-sha256" in headers["authorization"]  # the hash header is signed
    assert auth.authenticate("POST", url, headers, body).user_arn.endswith("local-sigv4")
    with pytest.raises(AuthError):
        auth.authenticate("POST", url, headers, b'{"sender":"evil@example.org"}')


@pytest.mark.parametrize("method", ["TRACE", "CONNECT", "PROPFIND", "FROBNICATE"])
def test_unknown_methods_get_a_4xx_not_501(
    gateway: tuple[ApiGateway, list[dict[str, Any]]], method: str
) -> None:
    import http.client

    gw, seen = gateway
    host, port = gw.url.split("//")[1].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        target = f"{host}:{port}" if method == "CONNECT" else "/v1/messages"
        conn.request(method, target, headers={"authorization": f"Bearer {TOKEN}"})
        status = conn.getresponse().status
    finally:
        conn.close()
    assert 400 <= status < 500, status
    assert seen == []


def test_a_burst_of_250_connections_is_answered_without_a_reset(
    gateway: tuple[ApiGateway, list[dict[str, Any]]],
) -> None:
    """Issue 43 item 16: http.server's listen backlog is 5, so a burst of connections
    overflowed the accept queue while the serving thread was busy spawning handlers, and
    the kernel reset some (20 clients with 4 connections each: 18 of 80 reset). All of
    them connect at once (a barrier), then each sends one request and reads the answer."""
    import socket
    import threading

    gw, _ = gateway
    n = 250
    barrier = threading.Barrier(n)
    outcomes: list[str] = []
    lock = threading.Lock()
    request = (
        f"POST /v1/messages HTTP/1.1\r\nHost: {gw.host}:{gw.port}\r\n"
        f"Authorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n"
        "Content-Length: 2\r\nConnection: close\r\n\r\n{}"
    ).encode()

    def one() -> None:
        barrier.wait(30)
        try:
            with socket.create_connection((gw.host, gw.port), timeout=30) as s:
                s.sendall(request)
                data = b""
                while chunk := s.recv(65536):
                    data += chunk
            result = data.split(b"\r\n", 1)[0].decode()
        except OSError as e:
            result = type(e).__name__
        with lock:
            outcomes.append(result)

    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(outcomes) == n
    bad = [o for o in outcomes if o != "HTTP/1.0 200 OK"]
    from collections import Counter

    assert bad == [], f"{len(bad)} of {n}: {Counter(bad)}"


def test_a_slow_request_does_not_hold_the_next_one_of_the_same_function(
    tmp_path: Any,
) -> None:
    """Issue 43 item 18: the gateway invoked every request in the function's container 0,
    one at a time; a job POST running its inline slice (up to 20 s) held every admin
    request behind it, and after a long fuzz 9 job POSTs were never answered. Lambda runs
    concurrent invocations in environments of their own: so does the gateway now."""
    import io
    import threading

    from mailqueue_local.runtime import FunctionSpec, LocalFunction

    fn = LocalFunction(FunctionSpec("slow", "tests.local.slow_function"), io.StringIO(), None)
    routes = [Route("POST", "/v1/slow", "slow")]
    gw = ApiGateway(routes, {"slow": fn}, LocalAuth(TOKEN), port=0).start()
    release = tmp_path / "release"
    headers = {"authorization": f"Bearer {TOKEN}", "content-type": "application/json"}
    first: list[Any] = []
    try:
        blocked = threading.Thread(
            target=lambda: first.append(
                _call(gw.url + "/v1/slow", body=json.dumps({"wait_for": str(release)}).encode(),
                      headers=headers)
            )
        )  # fmt: skip
        blocked.start()
        deadline = time.monotonic() + 10
        while fn.running == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert fn.running == 1  # the first request is in its invocation
        try:
            second = _call(gw.url + "/v1/slow", body=b"{}", headers=headers)
        except TimeoutError:
            second = None
        assert second is not None and second[0] == 200, "the second request waited for the first"
        assert first == []  # ... which is still running
        release.touch()
        blocked.join(30)
        assert first and first[0][0] == 200
        assert fn.containers == 2
    finally:
        release.touch()
        gw.stop()
