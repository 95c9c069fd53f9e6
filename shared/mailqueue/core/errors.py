"""The core's own exceptions. Adapters translate provider errors into these."""

from __future__ import annotations


class MailqueueError(Exception):
    """Base of every error the core raises on purpose."""


class InvalidInput(MailqueueError):
    """Refused input: carries a machine-readable code and the offending field.

    Raised before anything is written, so a refusal never leaves a trace.
    """

    def __init__(self, code: str, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.field = field

    def to_json(self) -> dict[str, str | None]:
        return {"error": self.code, "message": self.message, "field": self.field}


class StorageError(MailqueueError):
    """A storage call failed."""


class TransientStorageError(StorageError):
    """Worth retrying: throttling, timeouts, 5xx from the provider."""


class PermanentStorageError(StorageError):
    """Retrying the same call will not help: misconfiguration, access denied, bad request."""


class NotFound(MailqueueError):
    """The mail or group does not exist (any more)."""


class LeaseLost(MailqueueError):
    """The claim this call relies on is no longer ours (expired and taken, or the item is gone)."""


class Conflict(MailqueueError):
    """The state does not allow this transition (an idempotency key reused for other content)."""


class PoisonMessage(MailqueueError):
    """The record cannot be understood; it fails until SQS moves it to the DLQ."""
