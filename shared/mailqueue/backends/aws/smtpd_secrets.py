"""SMTP AUTH credentials from a Secrets Manager secret (the container's store on AWS).

The secret's string is the same JSON document as the local file
(`mailqueue.services.smtpd.credentials`); it is read once at start, so a changed secret
takes effect when the tasks are replaced (a deployment), as with the DKIM keys.
"""

from __future__ import annotations

from typing import Any

from mailqueue.core.config import ConfigError
from mailqueue.services.smtpd.credentials import StaticStore, parse_store


def load_secret(secretsmanager: Any, secret_id: str) -> StaticStore:
    try:
        got = secretsmanager.get_secret_value(SecretId=secret_id)
    except Exception as e:  # botocore's ClientError and friends: no start without users
        raise ConfigError(f"smtpd credentials secret {secret_id}: {e}") from e
    text = got.get("SecretString")
    if not isinstance(text, str):
        raise ConfigError(f"smtpd credentials secret {secret_id}: no SecretString")
    return StaticStore(parse_store(text, f"secret {secret_id}"))
