"""Factories for envelopes and content: variations without copy-paste."""

from __future__ import annotations

from mailqueue.core.model import Envelope, Notify, Recipient, Ret


def content(size: int = 1024, subject: str = "hello") -> bytes:
    head = (
        f"From: Alice <alice@example.org>\r\nTo: bob@example.net\r\nSubject: {subject}\r\n"
        "Message-ID: <orig-1@example.org>\r\nDate: Sat, 21 Nov 2026 06:00:00 +0000\r\n\r\n"
    ).encode()
    line = b"The quick brown fox jumps over the lazy dog 0123456789.\r\n"
    n = max(2, size - len(head))
    body = (line * (n // len(line) + 1))[: n - 2] + b"\r\n"
    return head + body


def incompressible(size: int = 10 * 1024, subject: str = "noise") -> bytes:
    """A mail of random octets in 76-octet lines: zlib cannot shrink it, so the AWS
    backend keeps it in S3 (small mails' content lives in the mail item)."""
    import os

    raw = bytes(b for b in os.urandom(size * 2) if b not in (0, 10, 13))[:size]
    head = f"Subject: {subject}\r\n\r\n".encode()
    return head + b"".join(raw[i : i + 76] + b"\r\n" for i in range(0, len(raw), 76))


def envelope(
    *addresses: str,
    sender: str = "alice@example.org",
    notify: tuple[Notify, ...] = (),
    ret: Ret | None = None,
    envid: str | None = None,
) -> Envelope:
    addrs = addresses or ("bob@example.net",)
    return Envelope(
        sender=sender,
        recipients=tuple(Recipient(rid="", address=a, notify=notify) for a in addrs),
        ret=ret,
        envid=envid,
    )


def spread(n: int, domains: int) -> tuple[str, ...]:
    """n recipients spread evenly over `domains` domains."""
    return tuple(f"user{i}@d{i % domains}.example" for i in range(n))
