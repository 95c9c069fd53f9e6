"""Bulk operator jobs: an item in the queue table holds filter, cursor and progress.

Item: ``pk = "J#<job_id>"``, ``sk = "J"``. It never carries `st`/`due`, so it stays out
of the by_state index. One runner at a time holds the job's lease (`lease_token`,
`lease_ms`); every progress write is conditional on that lease and on the job still
running, so a runner that lost its lease (timed out, then taken over) or a cancelled job
stops at its next checkpoint. A runner that dies leaves the last checkpoint: the next one
resumes from its cursor and re-reads at most one page, whose groups are either in their
target state by now (and so skipped) or processed once more, harmlessly.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

from mailqueue.core.model import to_iso

__all__ = [
    "COUNT_KEYS",
    "InlineLauncher",
    "Job",
    "JobLauncher",
    "JobStore",
    "NullLauncher",
]

RUNNING = "running"
DONE = "done"
CANCELLED = "cancelled"
COUNT_KEYS = (
    "examined",  # groups read from the index
    "matched",  # of those, selected by the filter
    "applied",  # groups changed
    "recipients",  # recipients changed (each one gets an Operator event)
    "unchanged",  # selected, but their state does not call for the action
    "finished",  # nothing pending any more when we got there
    "given_up",  # held by deliveries for longer than the job would wait
)


def _ms(ts: datetime) -> int:
    return int(ts.timestamp() * 1000)


@dataclass(slots=True)
class Job:
    job_id: str
    action: str
    filter: dict[str, str]
    all: bool
    actor: str
    created_at: datetime
    state: str = RUNNING
    phase: str = "scan"  # scan: walking the index | busy: waiting for busy groups
    updated_at: datetime | None = None
    finished_at: datetime | None = None
    cursor: list[Any] | None = None  # [state index, index cursor]
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNT_KEYS, 0))
    busy: dict[str, int] = field(default_factory=dict)  # "mail_id/group" → first seen, ms
    estimate: int | None = None  # groups in the states walked (Select=COUNT on the index)
    last_error: str | None = None
    lease_token: str | None = None
    lease_until: datetime | None = None

    @property
    def running(self) -> bool:
        return self.state == RUNNING

    def count(self, key: str, n: int = 1) -> None:
        self.counts[key] = self.counts.get(key, 0) + n

    def to_json(self) -> dict[str, Any]:
        """The public view (no lease token, no cursor internals)."""
        return {
            "job_id": self.job_id,
            "action": self.action,
            "filter": dict(self.filter),
            "all": self.all,
            "actor": self.actor,
            "state": self.state,
            "phase": self.phase,
            "created_at": to_iso(self.created_at),
            "updated_at": to_iso(self.updated_at),
            "finished_at": to_iso(self.finished_at),
            "counts": {k: self.counts.get(k, 0) for k in COUNT_KEYS},
            "busy": len(self.busy),
            "estimate": self.estimate,
            "last_error": self.last_error,
        }



class JobStore(Protocol):
    def create(self, job: Job) -> None: ...
    def get(self, job_id: str) -> Job: ...
    def acquire(self, job_id: str, token: str, now: datetime, until: datetime) -> Job | None: ...
    def save(self, job: Job, token: str) -> bool: ...
    def cancel(self, job_id: str, now: datetime) -> Job: ...


def lease_expired(job: Job, now: datetime) -> bool:
    return job.lease_until is None or job.lease_until <= now


# ---------------------------------------------------------------------- launchers
class JobLauncher(Protocol):
    """Gets a job's next slice run somewhere; duplicates are harmless (the job lease)."""

    def launch(self, job_id: str) -> None: ...


class NullLauncher:
    """The caller drives the job itself (the CLI in --local mode)."""

    def launch(self, job_id: str) -> None:
        return None


class InlineLauncher:
    """Runs a slice in the current request: the local stack, where polling drives a job."""

    def __init__(self, run: Callable[[str], object]) -> None:
        self.run = run

    def launch(self, job_id: str) -> None:
        self.run(job_id)


def lease_for(now: datetime, seconds: float) -> datetime:
    return now + timedelta(seconds=seconds)
