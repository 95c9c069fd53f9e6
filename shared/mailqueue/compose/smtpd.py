"""Composition of `mailqueue smtpd`: the ingress service on AWS (as the ingress function
builds it), the credentials store (a file, or Secrets Manager) and the TLS context."""

from __future__ import annotations

import json
import ssl
import tempfile
from pathlib import Path

import boto3

from mailqueue.backends.aws.clients import AwsClients, make_clients
from mailqueue.backends.aws.smtpd_secrets import load_secret
from mailqueue.backends.credentials_file import load_file
from mailqueue.compose.ingress import build_service
from mailqueue.core.config import ConfigError
from mailqueue.core.events import EventEmitter
from mailqueue.services.ingress import IngressService, IngressSettings
from mailqueue.services.smtpd import CredentialStore, SmtpdSettings, SmtpServer
from mailqueue.services.smtpd.tls import server_context

__all__ = ["build_server", "credentials_store", "tls_context"]


def tls_context(
    settings: SmtpdSettings, *, region: str | None = None, endpoint_url: str | None = None
) -> ssl.SSLContext | None:
    """A server context (`services.smtpd.tls`: Mozilla's intermediate profile) from the
    certificate files or the secret, None without either."""
    if settings.cert_file:
        return server_context(settings.cert_file, settings.key_file)
    if not settings.tls_secret:
        return None
    client = boto3.session.Session().client(
        "secretsmanager", region_name=region, endpoint_url=endpoint_url
    )
    try:
        doc = json.loads(client.get_secret_value(SecretId=settings.tls_secret)["SecretString"])
        cert, key = doc["cert"], doc["key"]
    except (KeyError, TypeError, ValueError) as e:
        raise ConfigError(f"smtpd tls_secret: expected {{'cert': PEM, 'key': PEM}}: {e}") from e
    # ssl loads a chain from files only: a private directory, removed once loaded
    with tempfile.TemporaryDirectory(prefix="smtpd-tls-") as d:
        cert_path, key_path = Path(d, "cert.pem"), Path(d, "key.pem")
        cert_path.write_text(cert)
        key_path.touch(mode=0o600)
        key_path.write_text(key)
        return server_context(str(cert_path), str(key_path))


def credentials_store(
    settings: SmtpdSettings, *, region: str | None = None, endpoint_url: str | None = None
) -> CredentialStore | None:
    kind, _, where = settings.credentials.partition(":")
    if kind == "file":
        return load_file(where)
    if kind == "secretsmanager":
        client = boto3.session.Session().client(
            "secretsmanager", region_name=region, endpoint_url=endpoint_url
        )
        return load_secret(client, where)
    return None


def build_server(
    smtpd: SmtpdSettings,
    ingress: IngressSettings,
    clients: AwsClients | None = None,
    *,
    service: IngressService | None = None,
    emitter: EventEmitter | None = None,
) -> SmtpServer:
    """The server on the same ingress service the HTTP API's function builds."""
    clients = clients or make_clients(
        region=ingress.storage.region, endpoint_url=ingress.storage.endpoint_url
    )
    svc = service or build_service(ingress, clients, emitter=emitter)
    store = credentials_store(
        smtpd, region=ingress.storage.region, endpoint_url=ingress.storage.endpoint_url
    )
    tls = tls_context(
        smtpd, region=ingress.storage.region, endpoint_url=ingress.storage.endpoint_url
    )
    return SmtpServer(smtpd, svc, store, tls)
