"""Where the VERP keys come from, and the MAIL FROM of a delivery (core/verp.py has the
address form and the MAC).

The key ring is a secret: ``return_path_keys`` names it as ``secretsmanager:<id>`` or
``ssm:<name>`` (read through the same cached key source DKIM uses: Powertools, 5 minutes,
so a rotation reaches every container within that), ``file:<path>`` (local runs), or is
the JSON itself (tests). Rotation: add the new version to the ring, make it current;
keep the old one for as long as late reports for older mail may come (weeks), then drop it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from mailqueue.core.config import ConfigError
from mailqueue.core.errors import MailqueueError
from mailqueue.core.verp import KeyRing, ReturnPathPolicy, mail_from

SecretSource = Callable[[str], str]  # "secretsmanager:<id>" | "ssm:<name>" -> the value


class KeysUnavailable(MailqueueError):
    """The key ring could not be read (a temporary condition: the mail waits)."""


class ReturnPaths:
    """The policy plus a cached key ring; `mail_from` is what delivery asks."""

    def __init__(
        self, policy: ReturnPathPolicy, keys_ref: str, source: SecretSource | None = None
    ) -> None:
        self.policy = policy
        self.keys_ref = keys_ref.strip()
        self.source = source
        self._cache: tuple[str, KeyRing] | None = None
        if policy.enabled and not self.keys_ref:
            raise ConfigError("return_path_policy is set but return_path_keys is empty")
        kind = self.keys_ref.partition(":")[0]
        if kind in ("secretsmanager", "ssm") and source is None:
            raise ConfigError("return_path_keys names a secret but no secret source was given")
        if self.keys_ref.startswith("{"):
            KeyRing.parse(self.keys_ref)  # fail fast on an inline ring

    @classmethod
    def from_settings(
        cls, policy: str, keys_ref: str, source: SecretSource | None = None
    ) -> ReturnPaths:
        return cls(ReturnPathPolicy.parse(policy), keys_ref, source)

    def _text(self) -> str:
        ref = self.keys_ref
        if ref.startswith("{"):
            return ref
        if ref.startswith("file:"):
            return Path(ref[5:]).read_text(encoding="utf-8")
        assert self.source is not None
        return self.source(ref)

    def ring(self) -> KeyRing:
        """The current ring (parsed once per distinct secret value)."""
        try:
            text = self._text()
        except (OSError, MailqueueError, ValueError) as e:
            raise KeysUnavailable(f"return path keys unavailable: {type(e).__name__}") from e
        except Exception as e:  # the secret source's client errors, whatever the backend
            raise KeysUnavailable(f"return path keys unavailable: {type(e).__name__}") from e
        if self._cache is not None and self._cache[0] == text:
            return self._cache[1]
        try:
            ring = KeyRing.parse(text)
        except ConfigError as e:
            raise KeysUnavailable(str(e)) from e
        self._cache = (text, ring)
        return ring

    def mail_from(
        self, sender: str, mail_id: str, rids: list[str] | tuple[str, ...], principal: str = ""
    ) -> str:
        """MAIL FROM for one transaction of a mail `principal` submitted (raises
        KeysUnavailable when a VERP is due but the keys cannot be read)."""
        if not self.policy.bounce_domain(sender, principal):
            return sender
        return mail_from(self.policy, self.ring(), sender, mail_id, rids, principal)
