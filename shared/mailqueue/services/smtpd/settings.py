"""Settings of `mailqueue smtpd`: one typed object, validated at start (MQ_SMTPD_*)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mailqueue.core.config import ConfigError, settings_from_env

BARE_NEWLINE_MODES = ("normalize", "reject")


@dataclass(frozen=True, slots=True)
class SmtpdSettings:
    """Listeners, TLS, credentials and limits. Ports: -1 off, 0 any free port.

    `bare_newline` is Postfix's smtpd_forbid_bare_newline: "normalize" (Postfix 3.9's
    default; a bare LF ends a line, only CRLF.CRLF ends DATA) or "reject" (a bare LF is
    refused with 550 5.5.2 and the session closed).
    """

    host: str = "127.0.0.1"
    port: int = 587  # submission: STARTTLS, then AUTH
    tls_port: int = -1  # submissions (465): implicit TLS, then AUTH
    receive_port: int = -1  # receiving (25): no AUTH, the receiving and bounce domains only
    cert_file: str = ""
    key_file: str = ""
    # instead of the two files: a Secrets Manager secret {"cert": PEM, "key": PEM} (ECS)
    tls_secret: str = ""
    credentials: str = ""  # file:/path | secretsmanager:<secret id or ARN>
    max_connections: int = 200
    # a tenth of the total: a handful of addresses holding idle connections cannot take
    # every slot (at 50 of 200, four could; Postfix's anvil default is 50 of its 100)
    max_connections_per_ip: int = 20
    max_recipients: int = 100  # per transaction (452 4.5.3 past it)
    idle_timeout: float = 300.0  # seconds without a command (421 4.4.2)
    # stress mode (Postfix's STRESS_README): from this share of max_connections on, every
    # session's timeout is stress_timeout (Postfix: ${stress?{10}:{300}}s; never longer
    # than idle_timeout)
    stress_threshold: float = 0.8
    stress_timeout: float = 10.0
    command_rate: float = 50.0  # commands a second a session may sustain …
    command_burst: int = 300  # … after this many at once (421 4.7.0 past it)
    max_auth_failures: int = 3  # per session, then 421 4.7.0 and close
    max_auth_failures_per_ip: int = 20  # within auth_failure_window, then 454 4.7.0
    auth_failure_window: float = 600.0
    auth_failure_delay: float = 1.0  # seconds before a 535 is answered
    bare_newline: str = "normalize"
    workers: int = 16  # threads that call the ingress service (its AWS requests block)

    def __post_init__(self) -> None:
        for name in ("port", "tls_port", "receive_port"):
            if not -1 <= getattr(self, name) <= 65535:
                raise ConfigError(f"smtpd {name} must be -1 (off), 0 (any) or a port")
        if self.port < 0 and self.tls_port < 0 and self.receive_port < 0:
            raise ConfigError("smtpd: no listener (port, tls_port and receive_port are off)")
        submission = self.port >= 0 or self.tls_port >= 0
        if submission and not (self.cert_file and self.key_file) and not self.tls_secret:
            raise ConfigError("smtpd: submission needs cert_file and key_file, or tls_secret")
        if submission and not self.credentials:
            raise ConfigError("smtpd: submission needs credentials (file:… or secretsmanager:…)")
        if self.credentials and not self.credentials.startswith(("file:", "secretsmanager:")):
            raise ConfigError("smtpd credentials must be file:<path> or secretsmanager:<id>")
        if self.bare_newline not in BARE_NEWLINE_MODES:
            raise ConfigError(f"smtpd bare_newline must be one of {BARE_NEWLINE_MODES}")
        for name in (
            "max_connections",
            "max_connections_per_ip",
            "max_recipients",
            "command_burst",
            "max_auth_failures",
            "max_auth_failures_per_ip",
            "workers",
        ):
            if getattr(self, name) < 1:
                raise ConfigError(f"smtpd {name} must be positive")
        for name in ("idle_timeout", "stress_timeout", "command_rate", "auth_failure_window"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"smtpd {name} must be positive")
        if not 0 < self.stress_threshold <= 1:
            raise ConfigError("smtpd stress_threshold must be within (0, 1] of max_connections")
        if not 0 <= self.auth_failure_delay <= 30:
            raise ConfigError("smtpd auth_failure_delay must be within 0..30 s")


def smtpd_settings_from_env(env: Mapping[str, str] | None = None, **explicit: Any) -> SmtpdSettings:
    return settings_from_env(SmtpdSettings, prefix="MQ_SMTPD_", env=env, **explicit)
