"""`mailqueue smtpd`: SMTP submission (and, optionally, receiving) into the ingress service.

`server.SmtpServer` runs the listeners; `credentials` maps AUTH users to principals;
`data` reads DATA with Postfix's rules for bare newlines; `replies` turns the ingress
service's refusal codes into SMTP replies. `mailqueue.compose.smtpd` wires it.
"""

from __future__ import annotations

from mailqueue.services.smtpd.credentials import CredentialStore, StaticStore, User
from mailqueue.services.smtpd.server import SmtpServer, quiet_aiosmtpd_logs
from mailqueue.services.smtpd.settings import SmtpdSettings, smtpd_settings_from_env

__all__ = [
    "CredentialStore",
    "SmtpServer",
    "SmtpdSettings",
    "StaticStore",
    "User",
    "quiet_aiosmtpd_logs",
    "smtpd_settings_from_env",
]
