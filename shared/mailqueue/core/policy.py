"""Retry policy and SMTP reply classification: pure functions, no I/O.

Classification follows Postfix's SMTP client (``smtp_chat.c``, ``smtp_proto.c``,
``smtp_connect.c``) so that operators see the statuses they already know:

* an RFC 3463 enhanced status code at the start of the reply text (RFC 2034) is used
  only when its class agrees with the first digit of the basic code; otherwise it is
  ignored ("out-of-protocol", as Postfix puts it) and ``X.0.0`` is derived from the
  basic code, so ``421`` without a detail is ``4.0.0`` (Postfix has no 421 special case);
* a reply that is not ``2yz``/``4yz``/``5yz`` (garbage, an out-of-context ``3yz``) is a
  protocol error, ``5.5.0`` as in Postfix;
* connection failures are ``4.4.1`` (no answer), broken or timed-out conversations
  ``4.4.2`` (bad connection); DNS: NXDOMAIN ``5.1.2``, null MX ``5.1.10`` (RFC 7505),
  SERVFAIL or timeout ``4.4.3``.

Transient versus permanent is decided by the class of the status (``Result.permanent``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import timedelta

from mailqueue.core.model import Result

__all__ = [
    "DIAGNOSTIC_LIMIT",
    "MAX_DELAY_SECONDS",
    "MAX_VISIBILITY_TIMEOUT",
    "SQS_MAX_RETENTION",
    "RetryPolicy",
    "backoff",
    "classify",
    "clean_text",
    "connect_failure",
    "conversation_failure",
    "default_status",
    "delay_warning_due",
    "dns_nxdomain",
    "dns_null_mx",
    "dns_temporary",
    "expired",
    "lifetime_text",
    "local_result",
    "parse_enhanced_status",
    "visibility_hops",
]

#: Longest diagnostic text kept in a Result (RFC 5321 replies are at most 512 octets a line).
DIAGNOSTIC_LIMIT = 512
#: SQS limits: ChangeMessageVisibility at most 12 h, SendMessage DelaySeconds at most 15 min.
MAX_VISIBILITY_TIMEOUT = 43_200
MAX_DELAY_SECONDS = 900
#: SQS keeps a message at most 14 days; a mail must bounce before its message is dropped.
SQS_MAX_RETENTION = timedelta(days=14)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Postfix-like retry schedule, scaled to a queue that lives on SQS.

    Defaults: first retry after 5 min (Postfix ``minimal_backoff_time`` is 300 s), doubling
    each attempt, at most 4 h apart, bounce after 5 days (``maximal_queue_lifetime``).
    ``delay_warning`` (None: off, as Postfix's ``delay_warning_time = 0``) says when a
    sender asked for DELAY notifications should get one.
    """

    minimal_backoff: timedelta = timedelta(minutes=5)
    maximal_backoff: timedelta = timedelta(hours=4)
    maximal_queue_lifetime: timedelta = timedelta(days=5)
    multiplier: float = 2.0
    delay_warning: timedelta | None = None

    def __post_init__(self) -> None:
        if self.minimal_backoff <= timedelta(0):
            raise ValueError("minimal_backoff must be positive")
        if self.maximal_backoff < self.minimal_backoff:
            raise ValueError("maximal_backoff must be >= minimal_backoff")
        if self.maximal_queue_lifetime <= timedelta(0):
            raise ValueError("maximal_queue_lifetime must be positive")
        if self.maximal_queue_lifetime >= SQS_MAX_RETENTION:
            raise ValueError(
                "maximal_queue_lifetime must be shorter than the 14-day SQS retention, "
                "or queued messages would vanish before they bounce"
            )
        if self.maximal_backoff > self.maximal_queue_lifetime:
            raise ValueError("maximal_backoff must not exceed maximal_queue_lifetime")
        if not (math.isfinite(self.multiplier) and self.multiplier >= 1.0):
            raise ValueError("multiplier must be a finite number >= 1")
        if self.delay_warning is not None and not (
            timedelta(0) < self.delay_warning < self.maximal_queue_lifetime
        ):
            raise ValueError("delay_warning must be positive and below the queue lifetime")


def backoff(attempts: int, age: timedelta, policy: RetryPolicy) -> timedelta | None:
    """Delay before the next attempt, or None when the mail must bounce (4.4.7).

    ``attempts`` is how many attempts have been made (the one that just failed included;
    0 is treated as 1), ``age`` how long the mail has been queued. The delay is
    ``minimal * multiplier**(attempts-1)`` capped at ``maximal_backoff``; None when the
    next attempt would fall after ``maximal_queue_lifetime``. A negative age (clock skew
    between invocations) counts as zero.
    """
    if attempts < 0:
        raise ValueError("attempts must be >= 0")
    age = max(age, timedelta(0))
    cap = policy.maximal_backoff.total_seconds()
    delay = policy.minimal_backoff.total_seconds()
    if policy.multiplier > 1.0:
        for _ in range(max(attempts, 1) - 1):  # ends after a few dozen steps at the cap
            delay *= policy.multiplier
            if delay >= cap:
                break
    wait = timedelta(seconds=min(delay, cap))
    if age + wait > policy.maximal_queue_lifetime:
        return None
    return wait


def delay_warning_due(age: timedelta, policy: RetryPolicy, already_warned: bool) -> bool:
    """Whether a DELAY notification (RFC 3464 action=delayed) is due now."""
    return policy.delay_warning is not None and not already_warned and age >= policy.delay_warning


def visibility_hops(delay: timedelta, *, max_hop: int = MAX_VISIBILITY_TIMEOUT) -> list[int]:
    """Split a delay into SQS hops of at most ``max_hop`` whole seconds each.

    SQS cannot hide a message for longer than 12 h (``MAX_VISIBILITY_TIMEOUT``) per
    receive, nor delay a send by more than 15 min (pass ``max_hop=MAX_DELAY_SECONDS``
    when re-sending with DelaySeconds). The delay is rounded up, never down, so a mail
    is not woken early; full hops come first, the remainder last. Zero or negative: [].
    """
    if max_hop < 1:
        raise ValueError("max_hop must be >= 1")
    total = math.ceil(delay.total_seconds())
    if total <= 0:
        return []
    full, rest = divmod(total, max_hop)
    return [max_hop] * full + ([rest] if rest else [])


_ENHANCED = re.compile(r"([245])\.(\d{1,3})\.(\d{1,3})(?=[\s]|$)")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")


def parse_enhanced_status(text: str) -> str | None:
    """The RFC 3463 ``class.subject.detail`` code starting ``text`` (RFC 2034), or None.

    Leading spaces are skipped; subject and detail are 1 to 3 digits, leading zeros are
    dropped (``5.01.001`` is ``5.1.1``), and the code must be followed by a space or the
    end of the line.
    """
    m = _ENHANCED.match(text.lstrip(" "))
    if m is None:
        return None
    return f"{m.group(1)}.{int(m.group(2))}.{int(m.group(3))}"


def default_status(reply_code: int) -> str:
    """``X.0.0`` for a reply code of class X, ``5.5.0`` (protocol error) otherwise."""
    cls = reply_code // 100
    if 200 <= reply_code <= 599 and cls in (2, 4, 5):
        return f"{cls}.0.0"
    return "5.5.0"


def clean_text(text: str, limit: int = DIAGNOSTIC_LIMIT) -> str:
    """Diagnostic text safe for logs and DSNs: one line, no control characters, bounded."""
    one_line = " ".join(_CONTROL.sub(" ", text).split())
    if len(one_line) > limit:
        one_line = one_line[: max(limit - 3, 0)] + "..."
    return one_line


def classify(reply_code: int, text: str, remote_mta: str | None = None) -> Result:
    """Turn an SMTP reply into a Result (see the module docstring for the rules).

    ``text`` is the reply text without the code, lines joined by newlines (what smtplib
    returns); the enhanced status is read from its first line.
    """
    first_line = text.split("\n", 1)[0]
    status = parse_enhanced_status(first_line)
    fallback = default_status(reply_code)
    if status is None or fallback == "5.5.0" or status[0] != fallback[0]:
        status = fallback
    return Result(code=reply_code, status=status, text=clean_text(text), remote_mta=remote_mta)


def local_result(status: str, text: str, remote_mta: str | None = None, code: int = 0) -> Result:
    """A verdict of our own (code 0 unless a server reply is being re-classed)."""
    if parse_enhanced_status(status) != status:
        raise ValueError(f"not an enhanced status code: {status!r}")
    return Result(code=code, status=status, text=clean_text(text), remote_mta=remote_mta)


def connect_failure(text: str, remote_mta: str | None = None) -> Result:
    """Could not connect (refused, unreachable, connect timeout): 4.4.1 No answer from host."""
    return local_result("4.4.1", text, remote_mta)


def conversation_failure(text: str, remote_mta: str | None = None) -> Result:
    """Connection lost or timed out mid-conversation: 4.4.2 Bad connection."""
    return local_result("4.4.2", text, remote_mta)


def dns_nxdomain(domain: str) -> Result:
    """The recipient domain does not exist: 5.1.2 Bad destination system address."""
    return local_result("5.1.2", f"Host or domain name not found: {domain}: no such domain")


def dns_null_mx(domain: str) -> Result:
    """The domain publishes a null MX (RFC 7505 §4.2: 5.1.10)."""
    return local_result("5.1.10", f"Domain {domain} does not accept mail (null MX)")


def dns_temporary(name: str, rdtype: str, why: str) -> Result:
    """SERVFAIL, timeout or another transient DNS error: 4.4.3 Directory server failure."""
    return local_result(
        "4.4.3",
        f"Host or domain name not found. Name service error for name={name} "
        f"type={rdtype}: {why}, try again",
    )


def lifetime_text(lifetime: timedelta) -> str:
    """A queue lifetime as Postfix words it: ``5 days``, ``1 day``, ``36 hours``, ``90
    minutes``, ``45 seconds`` (the largest unit that divides it; not timedelta's text)."""
    seconds = int(lifetime.total_seconds())
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size and seconds % size == 0:
            n = seconds // size
            return f"{n} {unit}{'s' if n != 1 else ''}"
    return f"{seconds} second{'s' if seconds != 1 else ''}"


def expired(last: Result | None, lifetime: timedelta) -> Result:
    """The bounce for a mail older than the queue lifetime (RFC 3463 X.4.7).

    The queue's own verdict, not a server's reply: code 0, so the DSN and the event log
    say ``x-mailqueue; message expired after 5 days`` (Postfix: "message expired"), with
    the last server's reply kept in the text. Class 4 as in sendmail/Postfix DSNs
    ("failed" with the transient cause kept in the text): callers must treat it as final
    even though ``Result.permanent`` is False.
    """
    why = ""
    if last is not None and last.text:
        said = f"{last.code} {last.text}" if last.code else last.text
        why = f"; last error: {said}"
    return local_result(
        "4.4.7",
        f"message expired after {lifetime_text(lifetime)}{why}",
        last.remote_mta if last is not None else None,
    )
