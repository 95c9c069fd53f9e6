"""What the CLI's commands share: exit codes, the error they raise, reading the API's answer.

Its own module so that the command modules (`cli.doctor`, `cli.suppress`, ...) and
`cli.main`, which registers them, import it and not each other.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

EXIT_OK, EXIT_REFUSED, EXIT_USAGE, EXIT_BUSY, EXIT_FAILED, EXIT_GAVE_UP = 0, 1, 2, 3, 4, 5
EXIT_CONFLICT, EXIT_UNAUTHORISED = 6, 7
TOKEN_HINT = (
    "the local stack wants its development token: export MAILQUEUE_TOKEN=<token from "
    "`make run`'s banner> (or --token); a deployed API wants SigV4 credentials"
)

_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f]")


def printable(text: object) -> str:
    """Text from the API for a terminal: control characters (ESC, CR, LF, ...) shown as
    escapes, never written raw (a stored reason must not drive the operator's terminal)."""
    return _UNPRINTABLE.sub(lambda m: f"\\x{ord(m.group()):02x}", str(text))


class CliError(Exception):
    def __init__(self, message: str, code: int = EXIT_REFUSED) -> None:
        super().__init__(message)
        self.code = code


Answer = tuple[int, dict[str, Any], dict[str, str]]  # status, JSON body, headers


def _lower(items: Any) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in items}


def _json_body(raw: bytes) -> dict[str, Any]:
    try:
        doc = json.loads(raw or b"{}")
    except ValueError:
        return {"error": "bad_response", "message": raw[:200].decode("utf-8", "replace")}
    return doc if isinstance(doc, dict) else {"value": doc}


def _refusal(status: int, body: Mapping[str, Any]) -> CliError:
    code = body.get("error") or f"http_{status}"
    msg = body.get("message") or ""
    field = body.get("field")
    text = f"{code}: {msg}" + (f" (field: {field})" if field else "")
    if status == 409:
        groups = body.get("groups")
        if code == "busy" or groups:
            if groups:
                text += f" [busy: {', '.join(groups)}]"
            return CliError(text, EXIT_BUSY)
        return CliError(text, EXIT_CONFLICT)  # the same request again gets the same 409
    if status in (401, 403):
        # the gateway's own refusal (no "error" of ours): a missing token or signature
        gateway = status == 401 or "error" not in body
        return CliError(text + (f"\nhint: {TOKEN_HINT}" if gateway else ""), EXIT_UNAUTHORISED)
    return CliError(text, EXIT_FAILED if status >= 500 else EXIT_REFUSED)


def _ok(answer: Answer, expect: tuple[int, ...] = (200,)) -> dict[str, Any]:
    status, body, _ = answer
    if status not in expect:
        raise _refusal(status, body)
    return body


# ---------------------------------------------------------------------- rendering
