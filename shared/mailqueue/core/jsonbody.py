"""The one JSON reader of the HTTP APIs (ingress and admin): a request body's JSON object
with its size, encoding, depth, duplicate keys and key text checked before anything is
parsed or stored, every refusal an ``InvalidInput`` (a 400), never a 500 (issue 28: the
admin routes answered 500 to 50,000 nested levels). In core so that the admin function
reads it without importing the ingress service (and its DNS stack) at cold start."""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Mapping
from typing import Any

from mailqueue.core.errors import InvalidInput
from mailqueue.core.validate import check_text

__all__ = ["MAX_JSON_DEPTH", "check_depth", "event_body", "parse_body"]

# The deepest a request needs is 3 (object > recipients > recipient object > notify);
# 32 leaves room and stays far below the parser's recursion limit (~1,000).
MAX_JSON_DEPTH = 32
# strings (skipped whole: brackets inside are text), runs of other text, runs of brackets
_JSON_TOKENS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[^"\[\]{}]+|[\[{]+|[\]}]+|"', re.S)


def check_depth(text: str, limit: int = MAX_JSON_DEPTH) -> None:
    """Refuse JSON nested deeper than `limit`, without recursing (the parser does)."""
    depth = 0
    for m in _JSON_TOKENS.finditer(text):
        start, end = m.span()
        c = text[start]
        if c in "[{":
            depth += end - start
            if depth > limit:
                raise InvalidInput(
                    "json_too_deep", f"request nested deeper than {limit} levels", None
                )
        elif c in "]}":
            depth = max(0, depth - (end - start))


def event_body(event: Mapping[str, Any]) -> bytes | None:
    """An API Gateway (payload 2.0) event's body as the client sent it: bytes, never
    decoded as text here, so that a body that is not UTF-8 reaches `parse_body` and is
    refused there as ``invalid_json`` (Powertools' ``decoded_body`` decodes it and raised
    a 500 on the admin routes: issue 43 item 11)."""
    raw = event.get("body")
    if raw is None:
        return None
    if event.get("isBase64Encoded"):
        try:
            return base64.b64decode(str(raw), validate=False)
        except (binascii.Error, ValueError):
            return b"\xff"  # not base64, so not JSON: refused as invalid_json
    # a lone surrogate has no UTF-8 form: kept as (invalid) bytes, refused as invalid_json
    return str(raw).encode("utf-8", "surrogatepass")


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object: keys are text, and each at most once (parsers disagree on which
    of two wins, so neither is guessed)."""
    out: dict[str, Any] = {}
    for k, v in pairs:
        check_text(k, None)
        if k in out:
            raise InvalidInput("duplicate_field", f"field {k!r} given twice", k)
        out[k] = v
    return out


def _no_constant(name: str) -> Any:
    raise InvalidInput("invalid_json", f"{name} is not JSON", None)


def parse_body(body: bytes | str | None, *, max_body: int | None = None) -> dict[str, Any]:
    """The request's JSON object: size, encoding and depth checked before parsing."""
    if body is None or body == b"" or body == "":
        raise InvalidInput("invalid_json", "request body is empty", None)
    if max_body is not None and len(body) > max_body:
        raise InvalidInput("too_large", f"request body exceeds {max_body} octets", None)
    if isinstance(body, bytes):
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError as e:
            raise InvalidInput("invalid_json", "request body is not UTF-8", None) from e
    else:
        text = body
    check_depth(text)
    try:
        doc = json.loads(text, object_pairs_hook=_object, parse_constant=_no_constant)
    except InvalidInput:
        raise
    except RecursionError as e:  # not reached after check_depth; never a 500 regardless
        raise InvalidInput("json_too_deep", "request is nested too deeply", None) from e
    except ValueError as e:  # JSONDecodeError, and integers over Python's digit limit
        raise InvalidInput("invalid_json", "request body is not valid JSON", None) from e
    if not isinstance(doc, dict):
        raise InvalidInput("invalid_json", "request body must be a JSON object", None)
    return doc
