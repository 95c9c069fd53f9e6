"""SMTP AUTH credentials from a local JSON file (`mailqueue smtpd passwd` writes it)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from mailqueue.core.config import ConfigError
from mailqueue.services.smtpd.credentials import StaticStore, User, dump_store, parse_store


def load_file(path: str | Path) -> StaticStore:
    """The users of the file, validated whole; read once at start."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"smtpd credentials {p}: {e.strerror}") from e
    return StaticStore(parse_store(text, str(p)))


def read_users(path: str | Path) -> dict[str, User]:
    p = Path(path)
    if not p.exists():
        return {}
    return parse_store(p.read_text(encoding="utf-8"), str(p))


def write_users(path: str | Path, users: dict[str, User]) -> None:
    """Atomically (rename), readable by its owner only: it holds password hashes."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=".credentials-")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(dump_store(users))
        os.chmod(tmp, 0o600)
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
