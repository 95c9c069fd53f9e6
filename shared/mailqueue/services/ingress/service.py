"""`IngressService`: the doors of ingress over one acceptance pipeline, built together.

The doors (`doors/http.py`, `batch.py`, `smtp.py`, `ses.py`) each turn their input into
one `Submission` for the pipeline (`pipeline.py`: validation, sender policy, suppression,
DKIM signability, enqueue); this class only wires them to the same stores and clock and
keeps the entry points the handler (`functions/ingress/app.py`) and tests call. The SMTP
front door calls its door, `IngressService.smtp`, directly.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from mailqueue.core.events import EventEmitter
from mailqueue.core.model import utcnow
from mailqueue.outbound.suppression import SuppressionStore
from mailqueue.services.feedback.service import FeedbackService
from mailqueue.services.ingress.answers import Answer, http_status
from mailqueue.services.ingress.doors.batch import BatchDoor
from mailqueue.services.ingress.doors.http import HttpDoor
from mailqueue.services.ingress.doors.ses import SesDoor, SesResult
from mailqueue.services.ingress.doors.smtp import SmtpDoor, SmtpSubmission
from mailqueue.services.ingress.pipeline import Acceptance
from mailqueue.services.ingress.ports import IngressStorage, RawStore
from mailqueue.services.ingress.settings import IngressSettings

__all__ = [
    "Answer",
    "IngressService",
    "IngressStorage",
    "RawStore",
    "SesResult",
    "SmtpSubmission",
    "http_status",
]


class IngressService:
    def __init__(
        self,
        settings: IngressSettings,
        storage: IngressStorage,
        uploads: RawStore,
        inbound: RawStore,
        emitter: EventEmitter,
        *,
        clock: Callable[[], datetime] = utcnow,
        suppression: SuppressionStore | None = None,
        feedback: FeedbackService | None = None,
    ) -> None:
        self.s = settings
        self.storage = storage
        self.uploads = uploads
        self.inbound = inbound
        self.emitter = emitter
        self.clock = clock
        self.suppression = suppression
        self.feedback = feedback  # reports to the bounce domain (services/feedback)
        self.acceptance = Acceptance(
            settings, storage, emitter, clock=clock, suppression=suppression
        )
        self.http = HttpDoor(settings, self.acceptance, uploads, clock)
        self.batch = BatchDoor(settings, self.http, self.acceptance, clock)
        self.smtp = SmtpDoor(settings, self.acceptance, clock, feedback)
        self.ses = SesDoor(settings, self.acceptance, inbound, emitter, clock, feedback)

    # the handler's entry points (functions/ingress/app.py), one door each
    @property
    def max_body(self) -> int:
        return self.http.max_body

    def upload_key(self, principal: str, upload_id: str) -> str:
        return self.http.upload_key(principal, upload_id)

    def create_upload(self, principal: str | None) -> Answer:
        return self.http.create_upload(principal)

    def submit(
        self,
        body: bytes | str | None,
        *,
        principal: str | None,
        idempotency_key: str | None,
        client_ip: str | None = None,
    ) -> Answer:
        return self.http.submit(
            body, principal=principal, idempotency_key=idempotency_key, client_ip=client_ip
        )

    def submit_batch(
        self,
        body: bytes | str | None,
        *,
        principal: str | None,
        client_ip: str | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> Answer:
        return self.batch.submit_batch(
            body, principal=principal, client_ip=client_ip, monotonic=monotonic
        )

    def receive_ses(self, event: Mapping[str, Any]) -> SesResult:
        return self.ses.receive(event)
