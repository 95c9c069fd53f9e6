"""SMTP credentials from Secrets Manager or SSM through Powertools parameters (cached)."""

from __future__ import annotations

from mailqueue.outbound.routing import Credentials, credentials_from_secret, parse_credentials_ref


def powertools_credentials(ref: str) -> Credentials:
    """Resolve `secretsmanager:<id>` or `ssm:<name>`; cached by Powertools for 5 minutes."""
    from aws_lambda_powertools.utilities import parameters

    kind, name = parse_credentials_ref(ref)
    if kind == "secretsmanager":
        value = parameters.get_secret(name, max_age=300)
    else:
        value = parameters.get_parameter(name, decrypt=True, max_age=300)
    return credentials_from_secret(value)
