"""Composition of the destinations function: the outbox queue in; webhooks, EventBridge and
SNS out."""

from __future__ import annotations

import json
from typing import Any

import boto3

from mailqueue.backends.aws.clients import make_clients
from mailqueue.backends.aws.destinations import EventBridgeSender, SnsSender, SqsRetry
from mailqueue.backends.webhook import WebhookSender
from mailqueue.core.config import ConfigError, settings_from_env
from mailqueue.services.destinations import (
    DestinationService,
    DestinationSettings,
    parse_destinations,
)

__all__ = ["destination_service_from_env", "webhook_keys"]


def webhook_keys(ref: str, secretsmanager: Any = None) -> dict[str, str]:
    """name -> signing key, from `secretsmanager:<id>` or `json:{...}`; a bad one fails
    the cold start."""
    if not ref:
        return {}
    if ref.startswith("json:"):
        text = ref[5:]
    elif ref.startswith("secretsmanager:"):
        if secretsmanager is None:
            from aws_lambda_powertools.utilities import parameters

            text = str(parameters.get_secret(ref.split(":", 1)[1], max_age=300))
        else:
            text = secretsmanager.get_secret_value(SecretId=ref.split(":", 1)[1])["SecretString"]
    else:
        raise ConfigError("MQ_WEBHOOK_KEYS: secretsmanager:<id> or json:{...}")
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise ConfigError(f"MQ_WEBHOOK_KEYS: not JSON: {e}") from e
    if not isinstance(doc, dict) or not all(isinstance(v, str) for v in doc.values()):
        raise ConfigError("MQ_WEBHOOK_KEYS: a JSON object of name -> key")
    return {str(k): v for k, v in doc.items()}


def destination_service_from_env() -> tuple[DestinationService, SqsRetry]:
    """Built from MQ_* variables; a bad list, URL or secret fails the cold start (boto3
    imported with the module, as every handler's: in the init phase)."""
    s = settings_from_env(DestinationSettings)
    if not s.destinations_queue_url or not s.destinations_dlq_url:
        raise ConfigError("MQ_DESTINATIONS_QUEUE_URL and MQ_DESTINATIONS_DLQ_URL must be set")
    kw: dict[str, Any] = {"region_name": s.region}
    if s.endpoint_url:
        kw["endpoint_url"] = s.endpoint_url
    sm = boto3.client("secretsmanager", **kw) if s.endpoint_url else None
    dests = parse_destinations(
        s.event_destinations,
        secrets=webhook_keys(s.webhook_keys, sm),
        allow_http_loopback=s.allow_http_loopback,
    )
    clients = make_clients(region=s.region, endpoint_url=s.endpoint_url)
    senders = {
        "webhook": WebhookSender(timeout=s.webhook_timeout_seconds),
        "eventbridge": EventBridgeSender(boto3.client("events", **kw)),
        "sns": SnsSender(boto3.client("sns", **kw)),
    }
    service = DestinationService(s, dests, senders)  # type: ignore[arg-type]
    return service, SqsRetry(clients.sqs, s.destinations_queue_url, s.destinations_dlq_url)
