"""The SMTP front door of the local stack (`make run`): `mailqueue smtpd` on a free
loopback port, a self-signed certificate and a development user, on the same ingress
service settings the stack gives its ingress function."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from mailqueue.backends.credentials_file import read_users, write_users
from mailqueue.services.smtpd import SmtpServer, User, quiet_aiosmtpd_logs
from mailqueue.services.smtpd.credentials import hash_password

from mailqueue_local.runtime import ACCOUNT_ID
from mailqueue_local.tlscert import self_signed

DEV_USER = "dev"
# the development user's principal: one of the stack's local callers
DEV_PRINCIPAL = f"arn:aws:iam::{ACCOUNT_ID}:user/local-smtp"


@dataclass
class LocalSmtpd:
    server: SmtpServer
    user: str
    password: str
    cert: Path

    def readiness(self) -> dict[str, Any]:
        return {
            "host": "127.0.0.1",
            "port": self.server.port_of("submission"),
            "receive_port": self.server.port_of("receive"),
            "user": self.user,
            "password": self.password,
            "cafile": str(self.cert),
        }

    def stop(self) -> None:
        self.server.stop()


def _dev_password(var_dir: Path, creds: Path) -> str:
    """Kept in <var>/smtpd/dev-password across runs (like the development token). Never
    starting with "-": swaks would read `--auth-password -x...` as an option (1 run in 64
    printed a swaks line that failed)."""
    path = var_dir / "dev-password"
    if path.exists() and DEV_USER in read_users(creds):
        kept = path.read_text().strip()
        if not kept.startswith("-"):
            return kept
    password = secrets.token_urlsafe(18)
    while password.startswith("-"):
        password = secrets.token_urlsafe(18)
    path.write_text(password + "\n")
    path.chmod(0o600)
    write_users(creds, {DEV_USER: User(DEV_PRINCIPAL, hash_password(password))})
    return password


def start_local_smtpd(
    var_dir: Path, host: str, *, port: int = 0, receive_port: int = -1, **settings: Any
) -> LocalSmtpd:
    """Start it on the process's MQ_* settings (the stack has set them)."""
    from mailqueue.compose.smtpd import build_server
    from mailqueue.services.ingress import ingress_settings_from_env
    from mailqueue.services.smtpd import SmtpdSettings

    directory = var_dir / "smtpd"
    directory.mkdir(parents=True, exist_ok=True)
    cert, key = self_signed(directory)
    creds = directory / "credentials.json"
    password = _dev_password(directory, creds)
    quiet_aiosmtpd_logs()
    # every local client is 127.0.0.1: the per-address cap (20) would cap them all, and
    # `make bench-smtp`'s 20 smtp-source sessions sit right at it (a session closing as
    # the next opens would get 421); the total (200) and stress mode still apply
    total = settings.get("max_connections")
    if total is None:
        total = next(f.default for f in fields(SmtpdSettings) if f.name == "max_connections")
    settings.setdefault("max_connections_per_ip", total)
    smtpd = SmtpdSettings(
        host=host,
        port=port,
        receive_port=receive_port,
        cert_file=str(cert),
        key_file=str(key),
        credentials=f"file:{creds}",
        **settings,
    )
    server = build_server(smtpd, ingress_settings_from_env()).start()
    return LocalSmtpd(server, DEV_USER, password, cert)


def try_lines(r: dict[str, Any]) -> list[str]:
    """The banner's lines: swaks and Python, ready to paste."""
    port, user, pw, ca = r["port"], r["user"], r["password"], r["cafile"]
    py = (
        f"import smtplib, ssl; c = smtplib.SMTP('127.0.0.1', {port}); "
        f"c.starttls(context=ssl.create_default_context(cafile={ca!r})); "
        f"c.login({user!r}, {pw!r}); "
        "c.sendmail('a@example.org', ['b@example.net'], open('message.eml','rb').read())"
    )
    return [
        f"  swaks --server 127.0.0.1:{port} --tls --tls-verify --tls-ca-path {ca} "
        f"--auth-user {user} --auth-password {pw} --from a@example.org --to b@example.net "
        "--data @message.eml",
        f'  .venv/bin/python -c "{py}"',
    ]
