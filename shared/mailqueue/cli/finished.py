"""What the CLI says where a newcomer was misled (issue 28): `mailqueue show` of a mail
that is finished or already gone (no "next attempt" for a mail nothing more will be tried
for, and where its story is), and why a request to the API cannot be signed."""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from typing import Any

from mailqueue.cli.common import EXIT_USAGE, TOKEN_HINT, CliError

EVENT_LOG = (
    "its events (Send, Delivery, Bounce, DSN) are in the event log: `make report` locally "
    "(var/events), the events/ prefix of the content bucket when deployed"
)
GONE = (
    "not in the queue. A mail leaves the queue once every recipient is final (delivered, "
    f"bounced or deleted) and its content and state are cleaned up; {EVENT_LOG}"
)


def finished_status(doc: Mapping[str, Any]) -> str:
    """The status line for a finished mail ("" for one still in the queue)."""
    if doc.get("cleaned_up"):
        until = doc.get("tombstone_expires_at") or "-"
        return (
            "status: finished and cleaned up (content and state removed; its Idempotency-Key "
            f"is remembered until {until}); {EVENT_LOG}\n"
        )
    if not doc.get("finished"):
        return ""
    gone = doc.get("expires_at")
    removal = f"; its record is removed by {gone}" if gone else ""
    return (
        "status: finished: every recipient is final, nothing more will be tried; content "
        f"{doc.get('content', 'cleaned up')}{removal}; {EVENT_LOG}\n"
    )


def group_line(g: Mapping[str, Any]) -> str:
    """One group of `show`: a finished group says when it finished, not a next attempt."""
    when = (
        f"finished at: {g.get('finished_at') or '-'}"
        if "finished_at" in g
        else f"next attempt: {g.get('next_attempt_at') or '-'}"
    )
    return f"group: {g['group']}  state: {g['state']}  {when}  attempts: {g.get('attempts', 0)}\n"


def unsignable(api: str, why: str) -> CliError:
    """Why a request to ``api`` cannot be signed. Against the local stack (a loopback API)
    the missing token is the likelier problem, so that is said first (issue 28, item 2)."""
    host = urllib.parse.urlsplit(api).hostname or ""
    if host in ("localhost", "::1") or host.startswith("127."):
        return CliError(f"no token: {TOKEN_HINT}\n(to sign instead: {why})", EXIT_USAGE)
    return CliError(f"{why}\nhint: {TOKEN_HINT}", EXIT_USAGE)
