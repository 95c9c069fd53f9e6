"""Ingress: the HTTP API (`POST /v1/messages`, `POST /v1/uploads`) and SES receipt.

`IngressService` holds the logic and knows no boto3 types; `mailqueue.compose.ingress`
wires it to the AWS adapters.
"""

from __future__ import annotations

from mailqueue.services.ingress.service import (
    Answer,
    IngressService,
    IngressStorage,
    RawStore,
    SesResult,
    SmtpSubmission,
    http_status,
)
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
