"""Read DKIM keys for `mailqueue doctor` (a `mailqueue.outbound.doctor.KeySource`) with boto3.

Only reads: ``secretsmanager:<name>`` through GetSecretValue, ``ssm:<name>`` through
GetParameter with decryption. A missing key is None (a finding, not an error).
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from mailqueue.outbound.doctor import KeySource


def boto_key_source(secrets: Any, ssm: Any) -> KeySource:
    """`secrets`/`ssm`: boto3 clients (created by the caller, endpoint and region included)."""

    def get(ref: str) -> str | None:
        kind, _, name = ref.partition(":")
        try:
            if kind == "secretsmanager":
                return str(secrets.get_secret_value(SecretId=name)["SecretString"])
            if kind == "ssm":
                resp = ssm.get_parameter(Name=name, WithDecryption=True)
                return str(resp["Parameter"]["Value"])
        except ClientError as e:
            code = e.response.get("Error", {}).get("Code", "")
            if code in ("ResourceNotFoundException", "ParameterNotFound"):
                return None
            raise
        raise ValueError(f"unknown key reference {ref!r}")

    return get
