"""What ingress answers: an HTTP-shaped `Answer` for every door (the SMTP door turns it
into its replies), the HTTP status of each refusal code, and the 202 of a queued mail.

Door-neutral, so the acceptance pipeline and each door build the same answers.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from mailqueue.core.errors import InvalidInput
from mailqueue.core.model import QueuedMail

log = logging.getLogger(__name__)

# HTTP status per error code; anything not listed is 422 (well-formed but refused)
_STATUS = {
    "invalid_json": 400,
    "invalid_type": 400,
    "missing_field": 400,
    "unknown_field": 400,
    "invalid_base64": 400,
    "ambiguous_content": 400,
    "invalid_idempotency_key": 400,
    "forbidden_character": 400,
    "invalid_unicode": 400,
    "json_too_deep": 400,
    "duplicate_field": 400,
    "invalid_request": 400,
    "unauthenticated": 403,
    "null_sender_forbidden": 403,
    "sender_not_allowed": 403,
    "priority_not_allowed": 403,
    "invalid_priority": 400,
    "idempotency_conflict": 409,
    "too_large": 413,
}


def http_status(code: str) -> int:
    return _STATUS.get(code, 422)


@dataclass(frozen=True, slots=True)
class Answer:
    """An HTTP answer, independent of API Gateway's response format."""

    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)
    error: str | None = None  # the error code of a refusal
    duplicate: bool = False
    batch: tuple[Answer, ...] = ()  # a batch's answer: each mail's own, in order


def refusal(e: InvalidInput) -> Answer:
    return Answer(http_status(e.code), e.to_json(), error=e.code)


def error_body(code: str, message: str) -> dict[str, Any]:
    return {"error": code, "message": message, "field": None}


def unavailable(code: str, message: str) -> Answer:
    """What the single route answers when storage is unavailable: 503, retry."""
    return Answer(503, error_body(code, message), {"Retry-After": "1"}, error=code)


def accepted(queued: QueuedMail) -> Answer:
    """The 202 of a durable mail (a replayed one says so in `Idempotent-Replayed`)."""
    body = queued.to_json()
    body.pop("duplicate", None)
    headers = {"Idempotent-Replayed": "true"} if queued.duplicate else {}
    log.info(
        "queued",
        extra={
            "mail_id": queued.mail_id,
            "groups": len(queued.groups),
            "recipients": len(queued.recipients),
            "duplicate": queued.duplicate,
        },
    )
    return Answer(202, body, headers, duplicate=queued.duplicate)
