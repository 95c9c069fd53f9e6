"""Composition of the one-click unsubscribe endpoint (services/unsubscribe.py) on AWS: the
suppression list and the outbox in the state table; served by the ingress function on
its public routes (``GET|POST /u/{token}``, no IAM authorizer).

Nothing here is cached: the ingress function module keeps the built service (its
``unsubscribe_service``), as it keeps its other per-container state, so a fresh container
(and the local stack's container, which clears the function module's caches when a new
stack starts in the same process) reads the settings again. A cache in this shared module
outlived the stack that filled it: a second stack in one process (the test suite's
workers run several) verified its links with the first stack's keys, a 400
``invalid_token`` for every genuine link."""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any

from mailqueue.services.unsubscribe import UnsubscribeService, UnsubscribeSettings

__all__ = ["handle_http", "is_unsubscribe", "service_from_env"]

PREFIX = "/u/"


def is_unsubscribe(event: Mapping[str, Any]) -> bool:
    return str(event.get("rawPath") or "").startswith(PREFIX)


def service_from_env() -> UnsubscribeService:
    """The service from MQ_* variables (the ingress function's storage settings); the
    function module caches it once per container."""
    from mailqueue.backends.aws.clients import make_clients
    from mailqueue.backends.aws.outbox import TableOutboxEmitter
    from mailqueue.backends.aws.suppression_store import DynamoSuppressionStore
    from mailqueue.compose.ingress import feedback_guard
    from mailqueue.services import ingress

    ing = ingress.ingress_settings_from_env()
    clients = make_clients(region=ing.storage.region, endpoint_url=ing.storage.endpoint_url)
    settings = UnsubscribeSettings.from_env()
    if not settings.keys().keys and settings.list_unsubscribe_key_name:  # never in the env
        from dataclasses import replace

        from mailqueue.compose.aws import key_clients
        from mailqueue.outbound.dkim import powertools_key_source
        from mailqueue.outbound.unsubscribe import keys_from_secret

        get = powertools_key_source(**key_clients(ing.storage))
        keys = keys_from_secret(get(f"secretsmanager:{settings.list_unsubscribe_key_name}"))
        settings = replace(
            settings,
            list_unsubscribe_keys=json.dumps(
                {k: base64.b64encode(v).decode() for k, v in keys.keys.items()}
            ),
            list_unsubscribe_kid=keys.current,
        )
    return UnsubscribeService(
        settings,
        DynamoSuppressionStore(clients.dynamodb, ing.storage.table),
        TableOutboxEmitter(ing.outbox_table, clients.dynamodb),
        reputation=feedback_guard(ing, clients),
    )


def handle_http(event: Mapping[str, Any], service: UnsubscribeService) -> dict[str, Any]:
    """An HTTP API (payload 2.0) request to /u/{token} → the page, as API Gateway wants it."""
    http = (event.get("requestContext") or {}).get("http") or {}
    raw = event.get("body")
    body: bytes | None = None
    if raw is not None:
        body = base64.b64decode(raw) if event.get("isBase64Encoded") else str(raw).encode()
    headers = {str(k).lower(): str(v) for k, v in (event.get("headers") or {}).items()}
    token = str(event.get("rawPath") or "")[len(PREFIX) :]
    page = service.handle(
        str(http.get("method") or "GET"),
        token,
        source_ip=str(http.get("sourceIp") or ""),
        body=body,
        content_type=headers.get("content-type", ""),
    )
    return {"statusCode": page.status, "headers": page.headers, "body": page.body}
