"""The batch door: `POST /v1/messages/batch`, up to `max_batch` mails in one request,
each taken exactly as the HTTP door takes one, with one result per mail, in order."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from mailqueue.core.errors import InvalidInput, PermanentStorageError, TransientStorageError
from mailqueue.core.jsonbody import parse_body
from mailqueue.services.ingress.answers import Answer, error_body, refusal, unavailable
from mailqueue.services.ingress.doors.http import HttpDoor
from mailqueue.services.ingress.pipeline import Acceptance
from mailqueue.services.ingress.request import check_idempotency_key, guard_parse, parse_batch
from mailqueue.services.ingress.settings import IngressSettings

log = logging.getLogger(__name__)

# a batch item's idempotency key: the field in place of the single route's header
BATCH_KEY_FIELD = "idempotency_key"


def batch_body(results: Sequence[Answer]) -> dict[str, Any]:
    """A batch's 207 body: per mail, in request order, the status, body and headers the
    single route would have answered; and how many were accepted, refused, unavailable."""
    out: list[dict[str, Any]] = []
    for a in results:
        one: dict[str, Any] = {"status": a.status, "body": a.body}
        if a.headers:
            one["headers"] = a.headers
        out.append(one)
    return {
        "results": out,
        "accepted": sum(1 for a in results if a.status == 202),
        "refused": sum(1 for a in results if 400 <= a.status < 500),
        "failed": sum(1 for a in results if a.status >= 500),
    }


class BatchDoor:
    def __init__(
        self,
        settings: IngressSettings,
        http: HttpDoor,
        acceptance: Acceptance,
        clock: Callable[[], datetime],
    ) -> None:
        self.s = settings
        self.http = http
        self.acceptance = acceptance
        self.clock = clock

    def submit_batch(
        self,
        body: bytes | str | None,
        *,
        principal: str | None,
        client_ip: str | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> Answer:
        """POST /v1/messages/batch: up to `max_batch` mails, each taken exactly as
        `submit` takes one (its `idempotency_key` field in place of the header), with
        one result per mail, in order.

        A problem of the request as a whole (not JSON, no `messages` list, too many, too
        large, no principal) is one 4xx and nothing is queued. Otherwise the answer is
        207 with each mail's own status and body: 202 means that mail is durable, as for
        the single route. A storage failure ends only its own mail (503, retryable, as
        the single route answers); mails not started within `batch_time_budget` are
        answered 503 `not_attempted` without being tried.
        """
        started = monotonic()
        now = self.clock()
        try:
            if not principal:
                raise InvalidInput("unauthenticated", "no IAM principal in the request", None)
            doc = guard_parse(lambda: parse_body(body, max_body=self.s.max_batch_body))
            items = guard_parse(lambda: parse_batch(doc, max_batch=self.s.max_batch))
        except InvalidInput as e:
            self.acceptance.reject(e, None, None, now, len(body or b""))
            return refusal(e)
        results: list[Answer] = []
        for item in items:
            if monotonic() - started >= self.s.batch_time_budget:
                results.append(unavailable("not_attempted", "not attempted in time; retry it"))
                continue
            try:
                results.append(self._submit_item(item, principal, client_ip))
            except TransientStorageError as e:
                log.warning("storage unavailable for a mail of a batch", extra={"cause": str(e)})
                results.append(unavailable("unavailable", "try again"))
            except PermanentStorageError:
                log.exception("storage failure for a mail of a batch")
                results.append(
                    Answer(500, error_body("internal", "storage failure"), error="internal")
                )
        return Answer(207, batch_body(results), batch=tuple(results))

    def _submit_item(self, item: Any, principal: str, client_ip: str | None) -> Answer:
        """One mail of a batch: what `submit` does with a body, the key from its field."""
        now = self.clock()
        key: str | None = None
        try:
            if not isinstance(item, dict):  # what parse_body says of a body that is no object
                raise InvalidInput("invalid_json", "a message must be a JSON object", None)
            doc = dict(item)
            raw_key = doc.pop(BATCH_KEY_FIELD, None)
            if raw_key is not None:
                if not isinstance(raw_key, str):
                    raise InvalidInput(
                        "invalid_idempotency_key", "must be a string", BATCH_KEY_FIELD
                    )
                key = self.http.key(principal, check_idempotency_key(raw_key, BATCH_KEY_FIELD))
        except InvalidInput as e:
            self.acceptance.reject(e, item, key, now, 0)
            return refusal(e)
        return self.http.submit_doc(doc, principal, key, BATCH_KEY_FIELD, client_ip, now)
