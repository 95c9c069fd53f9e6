"""Ingress: the HTTP API (`POST /v1/messages`, `/v1/messages/batch`, `/v1/uploads`), SES
receipt and the SMTP front door's decisions.

One door per module (`doors/`), one acceptance pipeline (`pipeline.py`) they all hand
their submissions to; `IngressService` builds them together and knows no boto3 types;
`mailqueue.compose.ingress` wires it to the AWS adapters.
"""

from __future__ import annotations

from mailqueue.services.ingress.answers import Answer, http_status
from mailqueue.services.ingress.doors.ses import SesResult
from mailqueue.services.ingress.doors.smtp import SmtpSubmission
from mailqueue.services.ingress.ports import IngressStorage, RawStore
from mailqueue.services.ingress.service import IngressService
from mailqueue.services.ingress.settings import IngressSettings, ingress_settings_from_env

__all__ = [
    "Answer",
    "IngressService",
    "IngressSettings",
    "IngressStorage",
    "RawStore",
    "SesResult",
    "SmtpSubmission",
    "http_status",
    "ingress_settings_from_env",
]
