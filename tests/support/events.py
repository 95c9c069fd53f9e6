"""The one loader of `events/*.json`, with factories for the variations tests need.

`load_event(name, **overrides)`: a fresh deep copy of `events/<name>.json`; each override
key is a path with `__` between segments (list indexes as digits), e.g.
`load_event("ses_receipt", Records__0__ses__mail__source="x@example.org")`. A dict
given for an HTTP `body` is serialised to JSON; the value `REMOVE` deletes the key.
The factories below name the usual variations so tests do not spell paths.
"""

from __future__ import annotations

import base64
import copy
import functools
import json
from pathlib import Path
from typing import Any

EVENTS_DIR = Path(__file__).resolve().parents[2] / "events"
_MISSING = object()
REMOVE = object()  # as an override value: delete that key


@functools.cache
def _raw(name: str) -> str:
    return (EVENTS_DIR / f"{name}.json").read_text()


def load_event(name: str, **overrides: Any) -> dict[str, Any]:
    event: dict[str, Any] = json.loads(_raw(name))
    for path, value in overrides.items():
        if path == "body" and isinstance(value, dict | list):
            value = json.dumps(value)
        _set(event, path.split("__"), value if value is REMOVE else copy.deepcopy(value))
    return event


def _set(doc: Any, path: list[str], value: Any) -> None:
    node = doc
    for seg in path[:-1]:
        node = node[int(seg)] if isinstance(node, list) else node.setdefault(seg, {})
    last = path[-1]
    if isinstance(node, list):
        node[int(last)] = value
    elif value is REMOVE:
        node.pop(last, None)
    else:
        node[last] = value


# ---------------------------------------------------------------- HTTP API
def send_body(**fields: Any) -> dict[str, Any]:
    """The sample request's JSON body, with fields replaced (None removes a field)."""
    body: dict[str, Any] = json.loads(load_event("http_send")["body"])
    for k, v in fields.items():
        if v is None:
            body.pop(k, None)
        else:
            body[k] = v
    return body


def b64(content: bytes) -> str:
    return base64.b64encode(content).decode()


def http_send(
    body: dict[str, Any] | str | bytes | None = None,
    *,
    key: str | None | object = _MISSING,
    principal: str | None | object = _MISSING,
    base64_body: bool = False,
    **fields: Any,
) -> dict[str, Any]:
    """`POST /v1/messages`: `body` replaces the body (or `fields` edit the sample's);
    `key` sets (None removes) the Idempotency-Key; `principal` the caller's ARN."""
    event = load_event("http_send")
    if body is None:
        body = send_body(**fields)
    raw = body if isinstance(body, str | bytes) else json.dumps(body)
    if base64_body:
        raw_bytes = raw if isinstance(raw, bytes) else raw.encode()
        event["body"] = base64.b64encode(raw_bytes).decode()
        event["isBase64Encoded"] = True
    else:
        event["body"] = raw.decode() if isinstance(raw, bytes) else raw
    if key is None:
        event["headers"].pop("idempotency-key", None)
    elif key is not _MISSING:
        event["headers"]["idempotency-key"] = key
    _principal(event, principal)
    return event


def http_batch(
    messages: list[Any] | None = None,
    *,
    body: str | bytes | None = None,
    principal: str | None | object = _MISSING,
    base64_body: bool = False,
) -> dict[str, Any]:
    """`POST /v1/messages/batch` with `{"messages": messages}` (or `body` verbatim); no
    Idempotency-Key header (a batch's keys are fields of its messages)."""
    event = http_send(
        body if body is not None else json.dumps({"messages": messages}),
        key=None,
        principal=principal,
        base64_body=base64_body,
    )
    path = "/v1/messages/batch"
    event["routeKey"] = event["requestContext"]["routeKey"] = f"POST {path}"
    event["rawPath"] = event["requestContext"]["http"]["path"] = path
    return event


def http_upload(*, principal: str | None | object = _MISSING) -> dict[str, Any]:
    event = load_event("http_upload")
    _principal(event, principal)
    return event


def http_request(method: str, path: str, **kw: Any) -> dict[str, Any]:
    """Any route (e.g. unknown ones), built from the upload sample."""
    event = http_upload(**kw)
    event["routeKey"] = f"{method} {path}"
    event["rawPath"] = path
    event["requestContext"]["routeKey"] = f"{method} {path}"
    event["requestContext"]["http"].update(method=method, path=path)
    return event


def _principal(event: dict[str, Any], principal: str | None | object) -> None:
    if principal is None:
        event["requestContext"].pop("authorizer", None)
    elif principal is not _MISSING:
        event["requestContext"]["authorizer"]["iam"]["userArn"] = principal


def principal_of(event: dict[str, Any]) -> str:
    arn: str = event["requestContext"]["authorizer"]["iam"]["userArn"]
    return arn


# ---------------------------------------------------------------- SES
def ses_receipt(
    *,
    message_id: str | None = None,
    source: str | None = None,
    recipients: list[str] | None = None,
    spam: str | None = None,
    virus: str | None = None,
    invocation_type: str | None = None,
) -> dict[str, Any]:
    """An SES Lambda-action event; `recipients` sets both receipt.recipients and
    mail.destination (SES lists all envelope recipients in both for a one-rule set)."""
    event = load_event("ses_receipt")
    ses = event["Records"][0]["ses"]
    if message_id is not None:
        ses["mail"]["messageId"] = message_id
    if source is not None:
        ses["mail"]["source"] = source
    if recipients is not None:
        ses["receipt"]["recipients"] = list(recipients)
        ses["mail"]["destination"] = list(recipients)
    if spam is not None:
        ses["receipt"]["spamVerdict"]["status"] = spam
    if virus is not None:
        ses["receipt"]["virusVerdict"]["status"] = virus
    if invocation_type is not None:
        ses["receipt"]["action"]["invocationType"] = invocation_type
    return event


def ses_message_id(event: dict[str, Any]) -> str:
    mid: str = event["Records"][0]["ses"]["mail"]["messageId"]
    return mid
