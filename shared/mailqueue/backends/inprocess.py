"""The ports in one process: queues, stores and workers without AWS.

`MemoryQueue` keeps SQS's semantics that the services rely on (a message becomes visible
at a time; a receive hides it behind a receipt for the visibility timeout; a re-arm
moves it; a delete removes it; a stale receipt is refused), so the delivery and bounce
services run on `FsStorage` exactly as they run on AWS. `Worker` is the event source
mapping: a batch per call, the records that raised stay on the queue with the
visibility the service set, the others are deleted.
"""

from __future__ import annotations

import copy
import json
import secrets
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from mailqueue.core.errors import Conflict, NotFound
from mailqueue.core.model import MailRef, Priority
from mailqueue.core.ports import PollResult  # one batch's outcome at an event source
from mailqueue.outbound.mtasts import MemoryPolicyCache
from mailqueue.outbound.reputation import MemoryReputationStore
from mailqueue.outbound.shaping import SiteState, SlotTake
from mailqueue.outbound.suppression import Entry
from mailqueue.outbound.suspensions import Scope, Suspension
from mailqueue.services.admin.jobs import CANCELLED, RUNNING, Job
from mailqueue.services.bounce import BounceService, BounceStats, parse_ref
from mailqueue.services.delivery import DeliveryPorts, DeliveryService

MAX_VISIBILITY = 12 * 3600  # as SQS: one re-arm hop at most


def trigger_body(ref: MailRef) -> str:
    """The message naming a group: the same JSON the AWS adapter sends."""
    return json.dumps({"v": 1, **ref.to_json()}, separators=(",", ":"))


@dataclass
class _Message:
    id: str
    body: str
    visible_at: float
    receipt: str | None = None
    receives: int = 0


@dataclass(frozen=True)
class Received:
    message_id: str
    receipt_handle: str
    body: str


class MemoryQueue:
    """A queue in one process (thread-safe), on the monotonic clock."""

    def __init__(
        self,
        visibility_timeout: float = 60.0,
        *,
        max_delay: int = 900,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.visibility_timeout = visibility_timeout
        self.max_delay = max_delay
        self.clock = clock
        self._messages: dict[str, _Message] = {}
        self._lock = threading.Lock()
        self.sent = 0
        self.rearms = 0  # visibility changes (the delivery path's re-arms)

    def send(self, body: str, delay_seconds: int = 0) -> str:
        delay = max(0, min(self.max_delay, delay_seconds))
        mid = secrets.token_hex(8)
        with self._lock:
            self._messages[mid] = _Message(mid, body, self.clock() + delay)
            self.sent += 1
        return mid

    def receive(self, max_messages: int = 10) -> list[Received]:
        now = self.clock()
        out: list[Received] = []
        with self._lock:
            due = sorted(
                (m for m in self._messages.values() if m.visible_at <= now),
                key=lambda m: m.visible_at,
            )
            for m in due[:max_messages]:
                m.receipt = secrets.token_hex(12)
                m.receives += 1
                m.visible_at = now + self.visibility_timeout
                out.append(Received(m.id, m.receipt, m.body))
        return out

    def _by_receipt(self, receipt_handle: str) -> _Message:
        for m in self._messages.values():
            if m.receipt == receipt_handle:
                return m
        raise NotFound("receipt handle is no longer valid")

    def change_visibility(self, receipt_handle: str, seconds: float) -> None:
        with self._lock:
            m = self._by_receipt(receipt_handle)
            if m.visible_at <= self.clock():  # visible again: the receipt has lapsed
                raise NotFound("message not in flight")
            m.visible_at = self.clock() + max(0.0, min(MAX_VISIBILITY, seconds))
            self.rearms += 1

    def delete(self, receipt_handle: str) -> None:
        with self._lock:
            try:
                m = self._by_receipt(receipt_handle)
            except NotFound:
                return  # as SQS: deleting with a stale receipt is not an error
            del self._messages[m.id]

    def visible(self) -> int:
        now = self.clock()
        with self._lock:
            return sum(1 for m in self._messages.values() if m.visible_at <= now)

    def invisible(self) -> int:
        now = self.clock()
        with self._lock:
            return sum(1 for m in self._messages.values() if m.visible_at > now)

    def make_visible(self) -> int:
        """Every message visible now (a test's stand-in for time passing); how many."""
        now = self.clock()
        with self._lock:
            for m in self._messages.values():
                m.visible_at = min(m.visible_at, now)
            return len(self._messages)


class QueueTriggers:
    """`Triggers` on a `MemoryQueue`: one queue for every priority (one process has
    one worker; the priorities' separate consumers are an AWS matter)."""

    def __init__(self, queue: MemoryQueue) -> None:
        self.queue = queue

    def post(
        self,
        refs: Sequence[MailRef],
        delay_seconds: int = 0,
        *,
        priority: Priority = Priority.TRANSACTIONAL,
        pool: str = "",
    ) -> None:
        for ref in refs:
            self.queue.send(trigger_body(ref), delay_seconds)

    def queue_of(self, source: str | None) -> str | None:
        return None

    def rearm(self, receipt_handle: str, delay_seconds: int, *, queue: str | None = None) -> None:
        self.queue.change_visibility(receipt_handle, delay_seconds)


class QueueBounces:
    """`BounceHandoff` on a `MemoryQueue`."""

    def __init__(self, queue: MemoryQueue) -> None:
        self.queue = queue

    def post(self, refs: Sequence[MailRef]) -> None:
        for ref in refs:
            self.queue.send(trigger_body(ref))


# ----------------------------------------------------------------------------- stores


class MemorySuppressionStore:
    """`SuppressionStore` in a dict."""

    def __init__(self) -> None:
        self.requests = 0
        self._items: dict[str, Entry] = {}
        self._lock = threading.Lock()

    def get_many(self, addresses: Sequence[str]) -> dict[str, Entry]:
        with self._lock:
            self.requests += 1
            return {a: self._items[a] for a in addresses if a in self._items}

    def put_many(self, entries: Sequence[Entry]) -> None:
        with self._lock:
            self.requests += 1
            for e in entries:
                self._items[e.address] = e

    def delete(self, address: str) -> Entry | None:
        with self._lock:
            self.requests += 1
            return self._items.pop(address, None)

    def page(self, cursor: str | None, limit: int) -> tuple[list[Entry], str | None]:
        with self._lock:
            self.requests += 1
            keys = sorted(self._items)
            start = int(cursor) if cursor else 0
            chunk = [self._items[k] for k in keys[start : start + limit]]
            more = start + limit < len(keys)
            return chunk, (str(start + limit) if more else None)


class MemorySuspensionStore:
    """`SuspensionStore` in a dict."""

    def __init__(self) -> None:
        self.requests = 0
        self._items: dict[tuple[str, str], Suspension] = {}
        self._lock = threading.Lock()

    def all(self) -> list[Suspension]:
        with self._lock:
            self.requests += 1
            return list(self._items.values())

    def put(self, s: Suspension) -> None:
        with self._lock:
            self.requests += 1
            self._items[(s.scope, s.target)] = s

    def delete(self, scope: Scope, target: str) -> Suspension | None:
        with self._lock:
            self.requests += 1
            return self._items.pop((scope, target), None)


class MemoryBudgetCounters:
    """`BudgetCounters` (outbound/warmup.py) in a dict, one lock: atomic in one process."""

    def __init__(self) -> None:
        self.requests = 0
        self._n: dict[str, int] = {}
        self._ramps: dict[str, tuple[str, int]] = {}
        self._lock = threading.Lock()

    def take(self, key: str, limit: int, ttl: float) -> bool:
        with self._lock:
            self.requests += 1
            if self._n.get(key, 0) >= limit:
                return False
            self._n[key] = self._n.get(key, 0) + 1
            return True

    def give_back(self, key: str) -> None:
        with self._lock:
            self.requests += 1
            if self._n.get(key, 0) > 0:
                self._n[key] -= 1

    def add(self, key: str, n: int, ttl: float) -> None:
        with self._lock:
            self.requests += 1
            self._n[key] = self._n.get(key, 0) + n

    def get(self, keys: Sequence[str]) -> dict[str, int]:
        with self._lock:
            self.requests += 1
            return {k: self._n[k] for k in keys if k in self._n}

    def ramp(self, pool: str) -> tuple[str, int] | None:
        with self._lock:
            self.requests += 1
            return self._ramps.get(pool)

    def set_ramp(self, pool: str, day: str, step: int, expected: str | None) -> bool:
        with self._lock:
            self.requests += 1
            cur = self._ramps.get(pool)
            if (cur[0] if cur else None) != expected:
                return False
            self._ramps[pool] = (day, step)
            return True


class MemoryJobStore:
    """The admin service's `JobStore` in memory, with the DynamoDB store's conditions:
    create once, one lease holder at a time, progress saved only under the lease of a
    running job, cancel only a running one."""

    def __init__(self) -> None:
        self._jobs: dict[str, Job] = {}
        self._lock = threading.Lock()

    def create(self, job: Job) -> None:
        with self._lock:
            if job.job_id in self._jobs:
                raise Conflict(f"job {job.job_id} exists")
            self._jobs[job.job_id] = copy.deepcopy(job)

    def get(self, job_id: str) -> Job:
        with self._lock:
            if job_id not in self._jobs:
                raise NotFound(f"job {job_id}")
            return copy.deepcopy(self._jobs[job_id])

    def acquire(self, job_id: str, token: str, now: datetime, until: datetime) -> Job | None:
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None or job.state != RUNNING:
                return None
            if job.lease_until is not None and job.lease_until > now:
                return None
            job.lease_token, job.lease_until = token, until
            return copy.deepcopy(job)

    def save(self, job: Job, token: str) -> bool:
        with self._lock:
            held = self._jobs.get(job.job_id)
            if held is None or held.lease_token != token or held.state != RUNNING:
                return False
            self._jobs[job.job_id] = copy.deepcopy(job)
            return True

    def cancel(self, job_id: str, now: datetime) -> Job:
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None:
                raise NotFound(f"job {job_id}")
            if job.state == RUNNING:
                job.state, job.finished_at, job.updated_at = CANCELLED, now, now
            return copy.deepcopy(job)


class MemoryShapingStore:
    """`ShapingStore` in a dict: the same compare-and-set on `version`."""

    def __init__(self) -> None:
        self.requests = 0
        self.requests_by_key: Counter[str] = Counter()  # per item (a site's shards too)
        self._items: dict[str, SiteState] = {}
        self._lock = threading.Lock()

    def load(self, site: str) -> SiteState:
        with self._lock:
            self.requests += 1
            self.requests_by_key[site] += 1
            return self._items.get(site, SiteState())

    def save(self, site: str, state: SiteState, expected_version: int) -> SiteState | None:
        with self._lock:
            self.requests += 1
            self.requests_by_key[site] += 1
            current = self._items.get(site, SiteState())
            if current.version != expected_version:
                return current
            self._items[site] = replace(state, version=expected_version + 1)
            return None

    def _guarded(
        self,
        site: str,
        guard: SiteState,
        key: str,
        new_tat: Callable[[float | None], float | None],
        slot: SlotTake | None = None,
    ) -> tuple[bool, SiteState]:
        """Set TAT `key` to `new_tat(stored TAT)` unless that is None, if the stored
        suspension and scale are `guard`'s (ShapingStore.advance / restart); and take
        `slot` in the same write, under `take`'s condition."""
        with self._lock:
            self.requests += 1
            self.requests_by_key[site] += 1
            current = self._items.get(site, SiteState())
            value = new_tat(current.tats.get(key))
            if (
                current.version == 0
                or value is None
                or (current.suspended_until, current.scale, current.scaled_at)
                != (guard.suspended_until, guard.scale, guard.scaled_at)
                or (
                    slot is not None
                    and slot.holder not in current.slots
                    and len(current.slots) >= slot.max_connections
                )
            ):
                return False, current
            slots = current.slots if slot is None else {**current.slots, slot.holder: slot.until}
            new = replace(
                current,
                tats={**current.tats, key: value},
                slots=slots,
                version=current.version + 1,
            )
            self._items[site] = new
            return True, new

    def advance(
        self,
        site: str,
        key: str,
        delta: float,
        floor: float,
        guard: SiteState,
        slot: SlotTake | None = None,
    ) -> tuple[bool, SiteState]:
        return self._guarded(
            site, guard, key, lambda t: None if t is None or t < floor else t + delta, slot
        )

    def restart(
        self,
        site: str,
        key: str,
        value: float,
        before: float,
        guard: SiteState,
        slot: SlotTake | None = None,
    ) -> tuple[bool, SiteState]:
        return self._guarded(
            site, guard, key, lambda t: value if t is None or t < before else None, slot
        )

    def take(
        self, site: str, holder: str, until: float, max_connections: int, now: float
    ) -> tuple[bool, SiteState]:
        with self._lock:
            self.requests += 1
            self.requests_by_key[site] += 1
            current = self._items.get(site, SiteState())
            if (
                current.version == 0
                or current.suspended_until > now
                or (holder not in current.slots and len(current.slots) >= max_connections)
            ):
                return False, current
            new = replace(
                current, slots={**current.slots, holder: until}, version=current.version + 1
            )
            self._items[site] = new
            return True, new

    def give_back(self, site: str, holder: str) -> SiteState | None:
        with self._lock:
            self.requests += 1
            self.requests_by_key[site] += 1
            current = self._items.get(site, SiteState())
            if holder not in current.slots:
                return None
            slots = {h: t for h, t in current.slots.items() if h != holder}
            new = replace(current, slots=slots, version=current.version + 1)
            self._items[site] = new
            return new


@dataclass
class InProcess:
    """The delivery and bounce queues and the stores delivery needs, in this process."""

    delivery: MemoryQueue
    bounce: MemoryQueue
    suppression: MemorySuppressionStore
    suspensions: MemorySuspensionStore
    shaping: MemoryShapingStore
    mta_sts_cache: MemoryPolicyCache
    reputation: MemoryReputationStore = field(default_factory=MemoryReputationStore)
    reputation_events: list[dict[str, Any]] = field(default_factory=list)
    budgets: MemoryBudgetCounters = field(default_factory=MemoryBudgetCounters)

    @classmethod
    def new(cls, visibility_timeout: float = 60.0) -> InProcess:
        return cls(
            MemoryQueue(visibility_timeout),
            MemoryQueue(visibility_timeout),
            MemorySuppressionStore(),
            MemorySuspensionStore(),
            MemoryShapingStore(),
            MemoryPolicyCache(),
        )

    @property
    def triggers(self) -> QueueTriggers:
        return QueueTriggers(self.delivery)

    @property
    def bounces(self) -> QueueBounces:
        return QueueBounces(self.bounce)

    def delivery_ports(self) -> DeliveryPorts:
        return DeliveryPorts(
            triggers=self.triggers,
            suspensions=self.suspensions,
            suppression=self.suppression,
            mta_sts_cache=self.mta_sts_cache,
            shaping=self.shaping,
            reputation=self.reputation,
            reputation_events=self.reputation_events.append,
            budgets=self.budgets,
        )


# ----------------------------------------------------------------------------- workers


BatchHandler = Callable[[list[Received], Callable[[], float]], set[str]]


class Worker:
    """An event source mapping in one process: queue → batch handler → deletes.

    The handler returns the ids of the records that failed; they stay on the queue (with
    the visibility the service gave them), the rest are deleted. A handler that raises
    fails the whole batch, as a crashed Lambda invocation does.
    """

    def __init__(
        self,
        queue: MemoryQueue,
        handler: BatchHandler,
        *,
        batch_size: int = 10,
        timeout_seconds: float = 300.0,
    ) -> None:
        self.queue = queue
        self.handler = handler
        self.batch_size = batch_size
        self.timeout_seconds = timeout_seconds

    def poll_once(self) -> PollResult:
        records = self.queue.receive(self.batch_size)
        if not records:
            return PollResult(0, 0, 0, [])
        started = time.monotonic()
        receipts = [r.receipt_handle for r in records]

        def time_left() -> float:
            return max(0.0, self.timeout_seconds - (time.monotonic() - started))

        try:
            failed = self.handler(records, time_left)
        except Exception as e:  # noqa: BLE001 - a crashed invocation: nothing is deleted
            return PollResult(len(records), len(records), 0, receipts, e)
        done = [r for r in records if r.message_id not in failed]
        for r in done:
            self.queue.delete(r.receipt_handle)
        return PollResult(len(records), len(records) - len(done), len(done), receipts)


def delivery_handler(service: DeliveryService, *, reserve: float = 5.0) -> BatchHandler:
    """One invocation per batch, its records at once on the invocation's lanes (as the
    Lambda); a record that raised (KeepMessage and errors alike) is kept."""

    def handle(records: list[Received], time_left: Callable[[], float]) -> set[str]:
        with service.invocation(lambda: time_left() - reserve) as inv:
            outcomes = inv.handle_all([(r.body, r.receipt_handle, None) for r in records])
        return {
            r.message_id
            for r, outcome in zip(records, outcomes, strict=True)
            if isinstance(outcome, Exception)
        }

    return handle


def bounce_handler(service: BounceService, stats: BounceStats | None = None) -> BatchHandler:
    """All of a mail's pending reports in one DSN per kind (as the Lambda)."""

    def handle(records: list[Received], time_left: Callable[[], float]) -> set[str]:
        failed: set[str] = set()
        done: set[str] = set()
        st = stats or BounceStats()
        for r in records:
            try:
                mail_id = parse_ref(r.body).mail_id
                if mail_id not in done:
                    service.handle_mail(mail_id, st)
                    done.add(mail_id)
            except Exception:  # noqa: BLE001 - kept for the next receive
                failed.add(r.message_id)
        return failed

    return handle


def bodies(queue: MemoryQueue) -> list[dict[str, Any]]:
    """Receive and delete every visible message; their JSON bodies (tests, tools)."""
    out: list[dict[str, Any]] = []
    while True:
        got = queue.receive(10)
        if not got:
            return out
        for r in got:
            out.append(json.loads(r.body))
            queue.delete(r.receipt_handle)


__all__ = [
    "InProcess",
    "MemoryQueue",
    "MemoryShapingStore",
    "MemorySuppressionStore",
    "MemorySuspensionStore",
    "MemoryJobStore",
    "PollResult",
    "QueueBounces",
    "QueueTriggers",
    "Received",
    "Worker",
    "bodies",
    "bounce_handler",
    "delivery_handler",
    "trigger_body",
]
