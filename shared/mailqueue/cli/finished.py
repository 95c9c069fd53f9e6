"""What `mailqueue show` says about a mail that is finished or already gone (issue 28):
no "next attempt" for a mail nothing more will be tried for, and where its story is."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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
