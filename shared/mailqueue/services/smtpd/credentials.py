"""SMTP AUTH credentials: user → (password hash, principal), behind a port.

A user's principal is what the HTTP API calls the caller (an IAM principal ARN on AWS),
so the per-principal sender policy, priority class and tags apply to SMTP submissions
exactly as they do to the API's. Passwords are stored as scrypt hashes (hashlib, no new
dependency): ``scrypt$<n>$<r>$<p>$<salt b64>$<hash b64>``. The store is a JSON document
``{"users": {"<user>": {"principal": "...", "hash": "scrypt$..."}}}``: a file locally
(`mailqueue.backends.credentials_file`), a Secrets Manager secret on AWS
(`mailqueue.backends.aws.smtpd_secrets`).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
from dataclasses import dataclass
from typing import Any, Protocol

from mailqueue.core.config import ConfigError

SCHEME = "scrypt"
# scrypt cost: 2^14 × 8 × 128 B = 16 MiB and ~50 ms a check on one core: slow enough
# for a guess, fast enough for a submission (the server checks it off its event loop)
N, R, P = 2**14, 8, 1
MAX_USER = 256
MAX_PASSWORD = 1024


@dataclass(frozen=True, slots=True)
class User:
    principal: str
    hash: str


class CredentialStore(Protocol):
    """Who may AUTH: the user's record, None when there is no such user."""

    def lookup(self, user: str) -> User | None: ...


def hash_password(password: str, *, n: int = N, r: int = R, p: int = P) -> str:
    salt = secrets.token_bytes(16)
    digest = hashlib.scrypt(password.encode(), salt=salt, n=n, r=r, p=p, maxmem=64 * 2**20)
    b64 = base64.b64encode
    return f"{SCHEME}${n}${r}${p}${b64(salt).decode()}${b64(digest).decode()}"


def _parse_hash(value: str) -> tuple[int, int, int, bytes, bytes]:
    parts = value.split("$")
    if len(parts) != 6 or parts[0] != SCHEME:
        raise ConfigError("a password hash must be scrypt$n$r$p$salt$hash")
    try:
        n, r, p = int(parts[1]), int(parts[2]), int(parts[3])
        salt, digest = base64.b64decode(parts[4]), base64.b64decode(parts[5])
    except ValueError as e:
        raise ConfigError(f"a password hash is malformed: {e}") from e
    if n < 2**10 or n > 2**20 or n & (n - 1) or not 1 <= r <= 32 or not 1 <= p <= 16:
        raise ConfigError("scrypt parameters out of range (n a power of 2 in 2^10..2^20)")
    if len(salt) < 8 or len(digest) < 16:
        raise ConfigError("scrypt salt or hash too short")
    return n, r, p, salt, digest


def verify_password(password: bytes, stored: str) -> bool:
    n, r, p, salt, digest = _parse_hash(stored)
    got = hashlib.scrypt(password, salt=salt, n=n, r=r, p=p, dklen=len(digest), maxmem=64 * 2**20)
    return hmac.compare_digest(got, digest)


# checked against when the user does not exist, so a miss costs what a hit costs
_DUMMY = "scrypt$16384$8$1$AAAAAAAAAAAAAAAAAAAAAA==$" + base64.b64encode(bytes(32)).decode()


def authenticate(store: CredentialStore, user: bytes, password: bytes) -> str | None:
    """The user's principal when the password is right, else None (same cost either way)."""
    if not user or len(user) > MAX_USER or len(password) > MAX_PASSWORD:
        return None
    try:
        name = user.decode("utf-8")
    except UnicodeDecodeError:
        return None
    record = store.lookup(name)
    ok = verify_password(password, record.hash if record else _DUMMY)
    return record.principal if ok and record is not None else None


def parse_store(text: str, source: str) -> dict[str, User]:
    """The JSON document of a store, validated whole (a bad entry fails the start)."""
    try:
        doc: Any = json.loads(text)
    except ValueError as e:
        raise ConfigError(f"{source}: not JSON: {e}") from e
    users = doc.get("users") if isinstance(doc, dict) else None
    if not isinstance(users, dict):
        raise ConfigError(f'{source}: expected {{"users": {{...}}}}')
    out: dict[str, User] = {}
    for name, rec in users.items():
        if not isinstance(rec, dict) or not isinstance(rec.get("principal"), str):
            raise ConfigError(f"{source}: user {name!r} needs a principal")
        if not isinstance(rec.get("hash"), str):
            raise ConfigError(f"{source}: user {name!r} needs a password hash")
        if not name or len(name.encode()) > MAX_USER or not rec["principal"]:
            raise ConfigError(f"{source}: bad user name or principal for {name!r}")
        _parse_hash(rec["hash"])
        out[name] = User(rec["principal"], rec["hash"])
    return out


def dump_store(users: dict[str, User]) -> str:
    doc = {"users": {k: {"principal": u.principal, "hash": u.hash} for k, u in users.items()}}
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


class StaticStore:
    """Users held in memory (parsed from a file or a secret at start)."""

    def __init__(self, users: dict[str, User]) -> None:
        self._users = dict(users)

    def lookup(self, user: str) -> User | None:
        return self._users.get(user)
