"""The HTTP door: `POST /v1/messages` (one mail, inline content or an upload) and
`POST /v1/uploads` (a presigned PUT for content too large to inline).

A body is parsed (`request.py`), keyed per caller, and handed to the pipeline with the
door's Received: field; `submit_doc` is also what the batch door calls per mail.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from mailqueue.core.errors import InvalidInput
from mailqueue.core.jsonbody import parse_body
from mailqueue.core.model import Envelope, QueuedMail
from mailqueue.core.trace import address_literal, principal_tag, received_field
from mailqueue.services.ingress.answers import Answer, refusal
from mailqueue.services.ingress.pipeline import Acceptance, Stamp, Submission
from mailqueue.services.ingress.ports import RawStore
from mailqueue.services.ingress.request import (
    body_limit,
    check_idempotency_key,
    guard_parse,
    parse_submission,
)
from mailqueue.services.ingress.settings import IngressSettings

KEY_HEADER = "Idempotency-Key"


class HttpDoor:
    def __init__(
        self,
        settings: IngressSettings,
        acceptance: Acceptance,
        uploads: RawStore,
        clock: Callable[[], datetime],
    ) -> None:
        self.s = settings
        self.acceptance = acceptance
        self.uploads = uploads
        self.clock = clock

    @property
    def max_body(self) -> int:
        """The largest request body read at all (413 `too_large` above it)."""
        return body_limit(self.s.max_size, self.s.max_recipients)

    def key(self, principal: str, key: str) -> str:
        """Idempotency keys are scoped per caller: two callers never share a mail."""
        return f"http\x1f{principal}\x1f{key}"

    def upload_key(self, principal: str, upload_id: str) -> str:
        """Uploads live under a per-caller folder: one caller cannot send another's upload."""
        tag = hashlib.sha256(principal.encode()).hexdigest()[:20]
        return f"{self.s.upload_prefix}{tag}/{upload_id}"

    def create_upload(self, principal: str | None) -> Answer:
        if not principal:
            return refusal(InvalidInput("unauthenticated", "no IAM principal in the request", None))
        upload_id = secrets.token_hex(16)
        url = self.uploads.presign_put(self.upload_key(principal, upload_id), self.s.upload_expires)
        return Answer(
            201,
            {
                "upload_id": upload_id,
                "url": url,
                "method": "PUT",
                "expires_in": self.s.upload_expires,
                "max_size": self.s.max_size,
            },
        )

    def submit(
        self,
        body: bytes | str | None,
        *,
        principal: str | None,
        idempotency_key: str | None,
        client_ip: str | None = None,
    ) -> Answer:
        """POST /v1/messages: 202 only once content, state and trigger are durable."""
        now = self.clock()
        key: str | None = None
        try:
            if not principal:
                raise InvalidInput("unauthenticated", "no IAM principal in the request", None)
            if idempotency_key is not None:
                key = self.key(principal, check_idempotency_key(idempotency_key))
            # parsing and validation: whatever fails in them is a 4xx (guard_parse)
            doc = guard_parse(lambda: parse_body(body, max_body=self.max_body))
        except InvalidInput as e:
            self.acceptance.reject(e, None, key, now, 0)
            return refusal(e)
        return self.submit_doc(doc, principal, key, KEY_HEADER, client_ip, now)

    def submit_doc(
        self,
        doc: dict[str, Any],
        principal: str,
        key: str | None,
        key_field: str,
        client_ip: str | None,
        now: datetime,
    ) -> Answer:
        """A parsed body: its submission to the pipeline; 202 once durable, else a 4xx."""
        try:
            parsed = guard_parse(
                lambda: parse_submission(
                    doc,
                    max_size=self.s.max_size,
                    now=now,
                    max_delay_seconds=self.s.max_delay_seconds,
                    max_recipients=self.s.max_recipients,
                )
            )
        except InvalidInput as e:
            self.acceptance.reject(e, doc, key, now, 0)
            return refusal(e)

        def trace(env: Envelope) -> Stamp:
            return self._trace(principal, client_ip, env, key)

        content: bytes | _Upload
        if parsed.upload_id is not None:
            content = _Upload(self, principal, parsed.upload_id)
        else:
            assert parsed.content is not None
            content = parsed.content
        sub = Submission(
            envelope=parsed.envelope,
            content=content,
            trace=trace,
            principal=principal,
            key=key,
            not_before=parsed.not_before,
            priority=parsed.priority,
        )
        return self.acceptance.answer(sub, doc, key_field, now)

    def _trace(
        self, principal: str, client_ip: str | None, envelope: Envelope, key: str | None
    ) -> Stamp:
        """The Received: field of an HTTP submission, as a function of its date.

        The queue id is known here only for keyed submissions (the id is derived from the
        key); an unkeyed mail's id is drawn inside `enqueue`, so its field has no ``id``.
        """
        literal = None if self.s.trace_private or not client_ip else address_literal(client_ip)
        who = principal_tag(principal) if self.s.trace_private else principal
        if len(who) > 128:
            who = principal_tag(principal)
        mail_id = self.acceptance.mail_id(key) if key else None
        rcpts = [r.address for r in envelope.recipients]

        def build(date: datetime) -> bytes:
            return received_field(
                by=self.s.hostname,
                date=date,
                from_domain="http-api",
                tcp_info=literal,
                from_comment=f"principal {who}",
                by_comment="mailqueue HTTPS API",
                queue_id=mail_id,
                recipients=rcpts,
            )

        return build


@dataclass(frozen=True, slots=True)
class _Upload:
    """A caller's upload as the pipeline reads it (pipeline.Upload)."""

    door: HttpDoor
    principal: str
    upload_id: str

    @property
    def key(self) -> str:
        return self.door.key(self.principal, f"upload:{self.upload_id}")

    def read(self, key: str, envelope: Envelope) -> bytes | QueuedMail:
        s, uploads = self.door.s, self.door.uploads
        obj = self.door.upload_key(self.principal, self.upload_id)
        size = uploads.size(obj)
        if size is None:
            replay = self.door.acceptance.replay(key, envelope)
            if replay is not None:
                return replay
            raise InvalidInput("unknown_upload", "no such upload (or it expired)", "upload_id")
        if size > s.max_size:
            raise InvalidInput("too_large", f"upload exceeds {s.max_size} octets", "upload_id")
        data = uploads.read(obj, s.max_size)
        if data is None:  # removed between HEAD and GET: a concurrent identical request
            replay = self.door.acceptance.replay(key, envelope)
            if replay is not None:
                return replay
            raise InvalidInput("unknown_upload", "no such upload (or it expired)", "upload_id")
        if len(data) > s.max_size:
            raise InvalidInput("too_large", f"upload exceeds {s.max_size} octets", "upload_id")
        return data

    def consume(self) -> None:
        self.door.uploads.delete(self.door.upload_key(self.principal, self.upload_id))
