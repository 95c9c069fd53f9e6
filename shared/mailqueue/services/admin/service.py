"""Queue administration: browse, size, inspect, shape, and operator actions.

Every change goes through the storage's own conditional transitions: `admin_claim` takes
the same lease a delivery attempt takes (so an operator and a delivery exclude each
other), and `mark` writes the new recipient states and releases that lease in one
conditional write, recording `op` for the event writer's Operator events. No operator
action can race a delivery into a double send or a lost mail.

One piece (~830 lines): `QueueAdmin`'s one-mail actions and its bulk jobs are the same
claim, perform, give-back sequence over the same index walk that browse pages through;
the parts that stand alone (counting in `size.py`, `shape.py`, `filters.py`, the job
records in `jobs.py`, suppressions, suspensions, reputation, and the API's request
handling in `api.py`) are their own modules.
"""

from __future__ import annotations

import base64
import binascii
import enum
import json
import logging
import re
import secrets
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.parser import HeaderParser
from email.policy import default as default_policy
from typing import TYPE_CHECKING, Any, BinaryIO, Protocol

from mailqueue.core.authz import parse_principals, principal_matches
from mailqueue.core.config import ConfigError, StorageSettings, settings_from_env
from mailqueue.core.errors import Conflict, InvalidInput, LeaseLost, NotFound
from mailqueue.core.model import (
    Claim,
    Group,
    GroupState,
    MailRef,
    Notify,
    Page,
    Recipient,
    RecipientState,
    Result,
    new_mail_id,
    to_iso,
    utcnow,
)
from mailqueue.core.ports import BounceHandoff
from mailqueue.core.storage import ClaimRefused, Transition, read_scope
from mailqueue.outbound.pools import load_pools
from mailqueue.outbound.suppression import SuppressionStore
from mailqueue.outbound.suspensions import SuspensionStore

if TYPE_CHECKING:
    from mailqueue.services.admin.pools import PoolsApi
    from mailqueue.services.admin.reputation import ReputationApi
from mailqueue.services.admin.filters import QueueFilter, parse_filter
from mailqueue.services.admin.jobs import DONE, Job, JobStore, lease_expired
from mailqueue.services.admin.shape import Shape, build_shape
from mailqueue.services.admin.size import STATES as SIZE_STATES
from mailqueue.services.admin.size import Counts, count_groups

log = logging.getLogger(__name__)

MAIL_ID_RE = re.compile(r"^[0-9A-Z]{26}$")
# bounce-now: RFC 3463 X.4.7 "delivery time expired", reported as failed like a lifetime
# expiry; code 0 because no SMTP server said anything (Diagnostic-Code: x-mailqueue; ...)
OPERATOR_EXPIRY = Result(code=0, status="4.4.7", text="message expired by operator")


class Action(enum.StrEnum):
    HOLD = "hold"
    RELEASE = "release"
    RETRY = "retry"
    DELETE = "delete"
    BOUNCE = "bounce"


# the group states each action applies to; others are left unchanged
APPLIES: dict[Action, frozenset[GroupState]] = {
    Action.HOLD: frozenset({GroupState.QUEUED, GroupState.INFLIGHT}),
    Action.RELEASE: frozenset({GroupState.HELD}),
    Action.RETRY: frozenset({GroupState.QUEUED}),
    Action.DELETE: frozenset({GroupState.QUEUED, GroupState.INFLIGHT, GroupState.HELD}),
    Action.BOUNCE: frozenset({GroupState.QUEUED, GroupState.INFLIGHT, GroupState.HELD}),
}


class Outcome(enum.StrEnum):
    APPLIED = "applied"
    UNCHANGED = "unchanged"  # the group's state does not call for the action
    FINISHED = "finished"  # nothing pending any more
    BUSY = "busy"  # a delivery attempt holds the group's lease


class Busy(Conflict):
    """A delivery attempt holds a live lease on these groups; nothing was changed."""

    def __init__(self, mail_id: str, groups: Sequence[str]) -> None:
        super().__init__(f"{mail_id}: a delivery attempt is in progress; try again shortly")
        self.mail_id = mail_id
        self.groups = tuple(groups)


class AdminStorage(Protocol):
    """What administration needs of the storage (AwsStorage provides it); the bounce
    path is reached through the `BounceHandoff` port."""

    def get_mail(self, mail_id: str) -> tuple[dict[str, Any] | None, list[Group]]: ...
    def get_group(self, ref: MailRef) -> Group: ...
    def list_queue(
        self,
        *,
        state: GroupState = GroupState.QUEUED,
        due_before: datetime | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> Page: ...
    def count_state(self, state: GroupState) -> int: ...
    def admin_claim(
        self, ref: MailRef, now: datetime, *, lease_seconds: int = 60
    ) -> Claim | ClaimRefused: ...
    def mark(
        self,
        claim: Claim,
        changed: dict[str, Recipient],
        *,
        next_attempt_at: datetime | None = None,
        op: dict[str, Any] | None = None,
    ) -> Transition: ...
    def read_content(self, mail_id: str) -> BinaryIO: ...


@dataclass(frozen=True, slots=True)
class AdminSettings:
    storage: StorageSettings
    admin_lease_seconds: int = 60  # an operator claim: longer than one mark() takes
    browse_max_evaluated: int = 2000  # groups one browse request reads at most
    arrival_sort_max: int = 20000  # sort=arrival reads the selection whole, up to this
    job_page_size: int = 25  # groups per job checkpoint
    job_slice_seconds: float = 20.0  # one API request's share of a job (inline runner)
    busy_give_up_seconds: int = 900  # a job waits this long for a busy group
    job_runner: str = "lambda"  # lambda: async self-invocation | inline: in the request
    header_max_bytes: int = 256 * 1024
    body_max_bytes: int = 1024 * 1024
    job_ttl_seconds: int = 30 * 86400
    # IAM principal ARN patterns allowed to administer (mailqueue.core.authz); empty: nobody.
    # Defence in depth behind the route-scoped IAM policies of the template.
    admin_principals: str = ""
    # the delivery function's reputation thresholds (outbound/reputation.py), same JSON
    reputation_thresholds: str = ""
    # the delivery functions' pools file (outbound/pools.py): the /pools routes
    pools: str = ""

    def __post_init__(self) -> None:
        self.operators()  # fail fast on a bad pattern
        if self.job_runner not in ("lambda", "inline"):
            raise ConfigError("job_runner must be lambda or inline")
        load_pools(self.pools)  # a bad pools file refuses the start
        if not 10 <= self.admin_lease_seconds <= 900:
            raise ConfigError("admin_lease_seconds must be within 10..900")
        if not 1 <= self.job_page_size <= 500:
            raise ConfigError("job_page_size must be within 1..500")
        if self.job_slice_seconds <= 0 or self.busy_give_up_seconds < 0:
            raise ConfigError("job_slice_seconds must be positive")

    def operators(self) -> tuple[str, ...]:
        return parse_principals(self.admin_principals, "admin_principals")

    def is_operator(self, principal: str) -> bool:
        return principal_matches(principal, self.operators())


def admin_settings_from_env(env: Mapping[str, str] | None = None, **explicit: Any) -> AdminSettings:
    """Storage and admin settings from ``MQ_*`` (explicit arguments win)."""
    storage = explicit.pop("storage", None) or settings_from_env(StorageSettings, env=env)
    return settings_from_env(AdminSettings, env=env, storage=storage, **explicit)


@dataclass(frozen=True, slots=True)
class OpContext:
    actor: str
    job: str | None = None
    # bulk retry: a group whose next attempt lies between this and now was made due by
    # this job already (or became due by itself): skip it, or the walk would chase it
    retry_not_before: datetime | None = None


@dataclass(frozen=True, slots=True)
class GroupOutcome:
    group: str
    outcome: Outcome
    recipients: int = 0


@dataclass(frozen=True, slots=True)
class ActionResult:
    mail_id: str
    action: Action
    groups: tuple[GroupOutcome, ...]

    @property
    def recipients(self) -> int:
        return sum(g.recipients for g in self.groups)

    def to_json(self) -> dict[str, Any]:
        return {
            "mail_id": self.mail_id,
            "action": self.action.value,
            "recipients": self.recipients,
            "groups": [
                {"group": g.group, "outcome": g.outcome.value, "recipients": g.recipients}
                for g in self.groups
            ],
        }


@dataclass(frozen=True, slots=True)
class BrowsePage:
    items: tuple[Group, ...]
    cursor: str | None
    evaluated: int


# ---------------------------------------------------------------------- views
def recipient_view(r: Recipient) -> dict[str, Any]:
    lr = r.last_result
    return {
        "id": r.rid,
        "address": r.address,
        "state": r.state.value,
        "attempts": r.attempts,
        "first_attempt_at": to_iso(r.first_attempt_at),
        "last_attempt_at": to_iso(r.last_attempt_at),
        "last_result": lr.to_json() if lr else None,
        "notify": [n.value for n in r.notify],
        "dsn_pending": r.dsn_pending,
        "final_at": to_iso(r.final_at),
    }


def group_view(g: Group, now: datetime, *, history: bool = False) -> dict[str, Any]:
    """One queue entry, as browse lists it (one JSON object per line with --json)."""
    doc: dict[str, Any] = {
        "mail_id": g.mail_id,
        "group": g.key,
        "state": g.state.value,
        "sender": g.sender,
        "arrival": to_iso(g.arrival),
        "age_seconds": max(0, int((now - g.arrival).total_seconds())),
        # a finished group has no next attempt (its schedule field is left as it was)
        "next_attempt_at": None if _finished(g) else to_iso(g.next_attempt_at),
        "lease_until": to_iso(g.lease_until),
        "size": g.size,
        "attempts": g.attempts,
        "recipients": [recipient_view(r) for r in g.recipients],
    }
    if history:
        doc["history"] = [a.to_json() for a in g.history]
    if _finished(g):
        ends = [r.final_at or r.last_attempt_at for r in g.recipients]
        doc["finished_at"] = to_iso(max((e for e in ends if e is not None), default=None))
    return doc


def _epoch_iso(value: Any) -> str | None:
    """An item's TTL attribute (epoch seconds) as ISO 8601, None when absent."""
    try:
        return to_iso(datetime.fromtimestamp(int(value), UTC)) if value is not None else None
    except (TypeError, ValueError, OverflowError):
        return None


def _finished(g: Group) -> bool:
    """Every recipient final (delivered, bounced, deleted): nothing more will be tried."""
    return bool(g.recipients) and all(r.state.final for r in g.recipients)


# ---------------------------------------------------------------------- cursors
def _enc(doc: dict[str, Any]) -> str:
    raw = json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _dec(cursor: str, fingerprint: str) -> dict[str, Any]:
    bad = InvalidInput(
        "invalid_cursor",
        "cursor is not one this listing issued (same filters, same sort)",
        "cursor",
    )
    try:
        doc = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except (ValueError, binascii.Error):
        raise bad from None
    if not isinstance(doc, dict) or doc.get("v") != 1 or doc.get("fp") != fingerprint:
        raise bad
    return doc


Position = tuple[int, str | None]  # (index into the walked states, index cursor)


def check_mail_id(mail_id: str) -> str:
    if not MAIL_ID_RE.match(mail_id or ""):
        raise InvalidInput("invalid_mail_id", "not a mail id (26 characters, 0-9 A-Z)", "mail_id")
    return mail_id


def job_states(action: Action, flt: QueueFilter) -> tuple[GroupState, ...]:
    """The index partitions a bulk action walks: the filter's states it applies to."""
    states = tuple(s for s in flt.states if s in APPLIES[action])
    if not states:
        allowed = "|".join(sorted(s.value for s in APPLIES[action]))
        raise InvalidInput(
            "contradictory_filter",
            f"{action.value} applies to {allowed} groups, the filter selects none of them",
            "state",
        )
    return states


class QueueAdmin:
    def __init__(
        self,
        settings: AdminSettings,
        storage: AdminStorage,
        jobs: JobStore,
        *,
        clock: Callable[[], datetime] = utcnow,
        sleep: Callable[[float], None] = time.sleep,
        bounces: BounceHandoff,
        suppressions: SuppressionStore | None = None,
        suspensions: SuspensionStore | None = None,
        reputation: ReputationApi | None = None,
        pools: PoolsApi | None = None,
    ) -> None:
        self.s = settings
        self.reputation = reputation  # the /reputation routes (admin/reputation.py)
        self.pools = pools  # the /pools routes (admin/pools.py)
        self.storage = storage
        self.bounces = bounces
        # the operator lists (the API's /suppressions and /suspensions); the composition
        # root gives them (build_admin: in the state table)
        self.suppressions = suppressions
        self.suspensions = suspensions
        self.jobs = jobs
        self.clock = clock
        self.sleep = sleep

    # ------------------------------------------------------------------ reading
    def walk(
        self, states: Sequence[GroupState], pos: Position, limit: int
    ) -> tuple[tuple[Group, ...], Position | None]:
        """One index page of the walk over `states` (each in its index order) and the next
        position; None once every state is exhausted. Pages of the storage's own cursor,
        so a resumed walk restarts exactly after the last page it finished."""
        idx, cursor = pos
        if not 0 <= idx < len(states):
            raise InvalidInput("invalid_cursor", "cursor out of range", "cursor")
        page = self.storage.list_queue(state=states[idx], limit=limit, cursor=cursor)
        if page.cursor:
            return page.items, (idx, page.cursor)
        if idx + 1 < len(states):
            return page.items, (idx + 1, None)
        return page.items, None

    def browse(
        self,
        flt: QueueFilter,
        *,
        sort: str = "next",
        limit: int = 50,
        cursor: str | None = None,
    ) -> BrowsePage:
        """Groups matching `flt`, a page at a time, from the by_state index (never a scan).

        sort=next: each state in its index order (queued by next attempt, inflight by lease
        end, held by time held), states one after the other. A page may hold fewer than
        `limit` items when the filter is selective; only a null cursor ends the listing.
        sort=arrival: oldest first, read whole (up to `arrival_sort_max` groups).
        One read scope (core.storage.read_scope): the page's walks share one index read.
        """
        with read_scope():
            return self._browse(flt, sort=sort, limit=limit, cursor=cursor)

    def _browse(self, flt: QueueFilter, *, sort: str, limit: int, cursor: str | None) -> BrowsePage:
        if sort not in ("next", "arrival"):
            raise InvalidInput("invalid_sort", "sort must be next or arrival", "sort")
        if not 1 <= limit <= 1000:
            raise InvalidInput("out_of_range", "limit must be within 1..1000", "limit")
        fp = flt.fingerprint(sort)
        now = self.clock()
        if sort == "arrival":
            return self._browse_by_arrival(flt, limit, cursor, fp, now)
        pos: Position | None = (0, None)
        if cursor:
            doc = _dec(cursor, fp)
            p = doc.get("p")
            if not (isinstance(p, list) and len(p) == 2 and isinstance(p[0], int)):
                raise InvalidInput("invalid_cursor", "cursor is malformed", "cursor")
            pos = (p[0], p[1] if isinstance(p[1], str) else None)
        items: list[Group] = []
        evaluated = 0
        while pos is not None and evaluated < self.s.browse_max_evaluated:
            need = limit - len(items)
            if need <= 0 or (items and need < max(1, limit // 4)):
                break  # rather a slightly short page than many tiny index reads
            groups, pos = self.walk(flt.states, pos, need)
            evaluated += len(groups)
            # the index is read eventually consistently: a group a delivery is moving can
            # show under two states at once; a page lists it once
            seen = {(g.mail_id, g.key) for g in items}
            items.extend(
                g for g in groups if flt.matches(g, now) and (g.mail_id, g.key) not in seen
            )
        out = _enc({"v": 1, "fp": fp, "p": list(pos)}) if pos is not None else None
        return BrowsePage(tuple(items), out, evaluated)

    def _browse_by_arrival(
        self, flt: QueueFilter, limit: int, cursor: str | None, fp: str, now: datetime
    ) -> BrowsePage:
        after: tuple[str, str, str] | None = None
        if cursor:
            a = _dec(cursor, fp).get("a")
            if not (isinstance(a, list) and len(a) == 3 and all(isinstance(x, str) for x in a)):
                raise InvalidInput("invalid_cursor", "cursor is malformed", "cursor")
            after = (a[0], a[1], a[2])
        selected: list[tuple[tuple[str, str, str], Group]] = []
        evaluated = 0
        pos: Position | None = (0, None)
        while pos is not None:
            groups, pos = self.walk(flt.states, pos, 500)
            evaluated += len(groups)
            if evaluated > self.s.arrival_sort_max:
                raise InvalidInput(
                    "too_many_to_sort",
                    f"sort=arrival reads the whole selection; more than "
                    f"{self.s.arrival_sort_max} groups: narrow the state filter or use sort=next",
                    "sort",
                )
            for g in groups:
                if flt.matches(g, now):
                    selected.append(((to_iso(g.arrival) or "", g.mail_id, g.key), g))
        selected.sort(key=lambda t: t[0])
        if after is not None:
            selected = [t for t in selected if t[0] > after]
        page = selected[:limit]
        more = len(selected) > limit
        out = _enc({"v": 1, "fp": fp, "a": list(page[-1][0])}) if more and page else None
        return BrowsePage(tuple(g for _, g in page), out, evaluated)

    def size(self) -> Counts:
        """Counts by state and recipient domain, read from the by_state index when asked
        (pages of up to 1,000 groups; ~0.5 read units per 4 KB of groups: see
        `mailqueue.services.admin.size`). Never a table scan."""

        def pages() -> Iterator[Group]:  # a page at a time: a large backlog is not held
            pos: Position | None = (0, None)
            while pos is not None:
                page, pos = self.walk(SIZE_STATES, pos, 1000)
                yield from page

        with read_scope():  # five states, one index read, each group read once
            return count_groups(pages())

    def shape(
        self,
        flt: QueueFilter,
        *,
        bucket_minutes: int = 5,
        buckets: int = 10,
        by: str = "recipient",
    ) -> Shape:
        """qshape: pending recipients per domain × age since arrival, from the index."""
        now = self.clock()
        groups: list[Group] = []
        pos: Position | None = (0, None)
        with read_scope():  # the filter's states, one index read, each group read once
            while pos is not None:
                page, pos = self.walk(flt.states, pos, 500)
                groups.extend(g for g in page if flt.matches(g, now))
        return build_shape(groups, now, flt, bucket_minutes=bucket_minutes, buckets=buckets, by=by)

    def inspect(self, mail_id: str, *, body: bool = False) -> dict[str, Any]:
        """Envelope, per-recipient state and history, headers; the body only on request."""
        check_mail_id(mail_id)
        mail, groups = self.storage.get_mail(mail_id)
        now = self.clock()
        first = groups[0] if groups else None
        m = mail or {}
        doc: dict[str, Any] = {
            "mail_id": mail_id,
            "sender": m.get("sender", first.sender if first else None),
            "arrival": m.get("arrival") or (to_iso(first.arrival) if first else None),
            "size": m.get("size", first.size if first else None),
            "sha256": m.get("sha256"),
            "ret": m.get("ret"),
            "envid": m.get("envid"),
            "smtputf8": bool(m.get("smtputf8", False)),
            "recipient_count": m.get("rcpt_count", sum(len(g.recipients) for g in groups)),
            "groups": [group_view(g, now, history=True) for g in groups],
        }
        doc.update(self._content_view(mail_id, body))
        # what happened to it, said plainly (issue 28): finished, cleaned up, where the rest is
        tomb = bool(m.get("tomb"))
        finished = tomb or bool(groups) and all(_finished(g) for g in groups)
        doc["finished"] = finished
        if finished and doc.get("content") == "missing":
            doc["content"] = "cleaned up"
        if tomb:  # a keyed mail after cleanup: kept so a late retry of its key is answered
            doc["cleaned_up"] = True
            doc["tombstone_expires_at"] = _epoch_iso(m.get("expires_at"))
        elif finished and m.get("expires_at"):
            # a finished mail's items stay until cleanup or DynamoDB's TTL removes them
            doc["expires_at"] = _epoch_iso(m.get("expires_at"))
        return doc

    def _content_view(self, mail_id: str, with_body: bool) -> dict[str, Any]:
        try:
            stream = self.storage.read_content(mail_id)
        except NotFound:
            return {"content": "missing", "headers": None}
        try:
            head, rest = _read_header(stream, self.s.header_max_bytes)
            out: dict[str, Any] = {
                "content": "present",
                "headers": _headers(head),
                # the block as stored (folding, order, duplicates kept), like `postcat -h`
                "header_block": _header_block(head),
            }
            if with_body:
                data = rest + stream.read(max(0, self.s.body_max_bytes + 1 - len(rest)))
                out["body_truncated"] = len(data) > self.s.body_max_bytes
                out["body"] = data[: self.s.body_max_bytes].decode("utf-8", "replace")
        finally:
            stream.close()
        return out

    # ------------------------------------------------------------------ one group
    def _claim(self, ref: MailRef) -> Claim | Outcome:
        got = self.storage.admin_claim(ref, self.clock(), lease_seconds=self.s.admin_lease_seconds)
        if isinstance(got, ClaimRefused):
            return Outcome.BUSY if got.reason == "claimed" else Outcome.FINISHED
        return got

    def _perform(self, claim: Claim, action: Action, ctx: OpContext) -> GroupOutcome:
        """The action's transition under our claim: one conditional write that also
        releases the lease (every pending recipient is resolved by it)."""
        now = self.clock()
        pending = claim.unresolved()
        changed: dict[str, Recipient]
        next_at: datetime | None = None
        dsn = False
        if action == Action.HOLD:
            changed = {r.rid: r.with_(state=RecipientState.HELD) for r in pending}
        elif action in (Action.RELEASE, Action.RETRY):
            changed = {r.rid: r.with_(state=RecipientState.QUEUED) for r in pending}
            if action == Action.RETRY:
                next_at = now
        elif action == Action.DELETE:
            changed = {r.rid: r.with_(state=RecipientState.DELETED, final_at=now) for r in pending}
        else:  # BOUNCE: forced expiry, a failure DSN as drop() would request one
            sender = claim.group.sender
            changed = {}
            for r in pending:
                wants = sender != "" and Notify.NEVER not in r.notify
                dsn = dsn or wants
                changed[r.rid] = r.with_(
                    state=RecipientState.BOUNCED,
                    final_at=now,
                    last_result=OPERATOR_EXPIRY,
                    dsn_pending="failed" if wants else r.dsn_pending,
                )
        op = {"action": action.value, "actor": ctx.actor, "job": ctx.job}
        try:
            self.storage.mark(claim, changed, next_attempt_at=next_at, op=op)
        except LeaseLost:
            return GroupOutcome(claim.group.key, Outcome.BUSY)
        if dsn:
            self.bounces.post([claim.ref])
        if not changed:
            return GroupOutcome(claim.group.key, Outcome.FINISHED)
        return GroupOutcome(claim.group.key, Outcome.APPLIED, len(changed))

    def _give_back(self, claim: Claim, before: Group) -> None:
        """Release a claim untouched: pending recipients back to their resting state."""
        rest = RecipientState.HELD if before.state == GroupState.HELD else RecipientState.QUEUED
        self.storage.mark(claim, {r.rid: r.with_(state=rest) for r in claim.unresolved()})

    def apply_group(self, group: Group, action: Action, ctx: OpContext) -> GroupOutcome:
        """The action on one group as a bulk job sees it (busy is an outcome, not an error)."""
        if group.state not in APPLIES[action]:
            return GroupOutcome(group.key, Outcome.UNCHANGED)
        if action == Action.RETRY and ctx.retry_not_before is not None:
            if ctx.retry_not_before <= group.next_attempt_at <= self.clock():
                return GroupOutcome(group.key, Outcome.UNCHANGED)
        claim = self._claim(group.ref)
        if isinstance(claim, Outcome):
            return GroupOutcome(group.key, claim)
        return self._perform(claim, action, ctx)

    # ------------------------------------------------------------------ one mail
    def act(
        self, mail_id: str, action: Action, ctx: OpContext, *, group: str | None = None
    ) -> ActionResult:
        """The action on one mail (or one of its groups), all or nothing against deliveries:
        every applicable group is claimed first; if a delivery holds one, the others are
        given back untouched and `Busy` is raised."""
        check_mail_id(mail_id)
        _, groups = self.storage.get_mail(mail_id)
        if group is not None:
            groups = [g for g in groups if g.key == group]
            if not groups:
                raise NotFound(f"{mail_id}/{group}")
        outcomes: dict[str, GroupOutcome] = {}
        claimed: list[tuple[Group, Claim]] = []
        busy: list[str] = []
        for g in groups:
            if g.state not in APPLIES[action]:
                outcomes[g.key] = GroupOutcome(
                    g.key,
                    Outcome.FINISHED
                    if g.state in (GroupState.DSN, GroupState.DONE)
                    else Outcome.UNCHANGED,
                )
                continue
            c = self._claim(g.ref)
            if c == Outcome.BUSY:
                busy.append(g.key)
                break
            if isinstance(c, Outcome):
                outcomes[g.key] = GroupOutcome(g.key, c)
            else:
                claimed.append((g, c))
        if busy:
            for g, c in claimed:
                self._give_back(c, g)
            raise Busy(mail_id, busy)
        for g, c in claimed:
            outcomes[g.key] = self._perform(c, action, ctx)
        return ActionResult(mail_id, action, tuple(outcomes[g.key] for g in groups))

    # ------------------------------------------------------------------ jobs
    def start_job(
        self, action: Action, flt: QueueFilter, *, actor: str, everything: bool = False
    ) -> Job:
        """A bulk action as a resumable job. An empty filter needs `everything` (purge),
        and `everything` refuses filters: a typo must never widen a delete."""
        if flt.empty and not everything:
            raise InvalidInput(
                "filter_required",
                "give a filter, or all=true to act on the whole queue",
                "filter",
            )
        if everything and not flt.empty:
            raise InvalidInput(
                "contradictory_filter", "all=true acts on the whole queue: drop the filter", "all"
            )
        states = job_states(action, flt)
        # the groups in the states walked: Select=COUNT on the index (same read units
        # as reading them, no items transferred)
        estimate = sum(self.storage.count_state(s) for s in states)
        now = self.clock()
        job = Job(
            job_id=new_mail_id(),
            action=action.value,
            filter=flt.to_params(),
            all=everything,
            actor=actor,
            created_at=now,
            updated_at=now,
            estimate=estimate,
        )
        self.jobs.create(job)
        log.info("job created", extra={"job": job.job_id, "action": action.value})
        return job

    def get_job(self, job_id: str) -> Job:
        _check_job_id(job_id)
        return self.jobs.get(job_id)

    def cancel_job(self, job_id: str) -> Job:
        _check_job_id(job_id)
        return self.jobs.cancel(job_id, self.clock())

    def job_stalled(self, job: Job) -> bool:
        """Running, and nobody holds its lease: it needs to be launched again."""
        return job.running and lease_expired(job, self.clock())

    def run_job(
        self,
        job_id: str,
        *,
        budget_seconds: float,
        progress: Callable[[Job], None] | None = None,
    ) -> Job:
        """Advance a job for about `budget_seconds`, checkpointing after every page.

        Returns the job as saved; still running if the budget ran out (run it again), or
        someone else's view if another runner holds the lease or the job was cancelled.
        """
        _check_job_id(job_id)
        deadline = time.monotonic() + budget_seconds
        token = secrets.token_hex(8)
        now = self.clock()
        lease = now + timedelta(seconds=budget_seconds + self.s.admin_lease_seconds)
        job = self.jobs.acquire(job_id, token, now, lease)
        if job is None:
            return self.jobs.get(job_id)
        action = Action(job.action)
        flt = parse_filter(job.filter)
        states = job_states(action, flt)
        ctx = OpContext(
            actor=job.actor,
            job=job.job_id,
            retry_not_before=job.created_at if action == Action.RETRY else None,
        )
        try:
            while job.running and time.monotonic() < deadline:
                if job.phase == "scan" and len(job.busy) < 1000:
                    self._job_page(job, action, flt, states, ctx)
                elif job.busy:
                    waited = self._job_busy_pass(job, action, flt, ctx)
                    if job.busy and not waited:
                        self.sleep(max(0.0, min(1.0, deadline - time.monotonic())))
                if job.phase == "busy" and not job.busy:
                    job.state = DONE
                    job.finished_at = self.clock()
                job.updated_at = self.clock()
                job.last_error = None
                if not self.jobs.save(job, token):
                    return self.jobs.get(job_id)  # lease taken over, or cancelled
                if progress is not None:
                    progress(job)
        except Exception as e:
            job.last_error = f"{type(e).__name__}: {e}"[:500]
            job.lease_until = self.clock()
            self.jobs.save(job, token)
            raise
        if job.running:
            job.lease_until = self.clock()  # free for the next slice at once
            if not self.jobs.save(job, token):
                return self.jobs.get(job_id)
        return job

    def _record(self, job: Job, group: Group, out: GroupOutcome) -> None:
        key = f"{group.mail_id}/{group.key}"
        if out.outcome == Outcome.BUSY:
            job.busy.setdefault(key, int(self.clock().timestamp() * 1000))
            return
        job.busy.pop(key, None)
        if out.outcome == Outcome.APPLIED:
            job.count("applied")
            job.count("recipients", out.recipients)
        else:
            job.count(out.outcome.value)

    def _job_page(
        self,
        job: Job,
        action: Action,
        flt: QueueFilter,
        states: tuple[GroupState, ...],
        ctx: OpContext,
    ) -> None:
        pos: Position = (0, None)
        if job.cursor is not None:
            pos = (int(job.cursor[0]), job.cursor[1])
        groups, nxt = self.walk(states, pos, self.s.job_page_size)
        now = self.clock()
        for g in groups:
            job.count("examined")
            if not flt.matches(g, now):
                continue
            job.count("matched")
            self._record(job, g, self.apply_group(g, action, ctx))
        job.cursor = list(nxt) if nxt is not None else None
        if nxt is None:
            job.phase = "busy"

    def _job_busy_pass(self, job: Job, action: Action, flt: QueueFilter, ctx: OpContext) -> bool:
        """Try every busy group once more; True if one of them moved on."""
        moved = False
        now = self.clock()
        give_up_ms = int(now.timestamp() * 1000) - self.s.busy_give_up_seconds * 1000
        for key, first_seen in list(job.busy.items()):
            mail_id, _, gkey = key.partition("/")
            try:
                g = self.storage.get_group(MailRef(mail_id, gkey))
            except NotFound:
                job.busy.pop(key)
                job.count("finished")
                moved = True
                continue
            if not flt.matches(g, now):
                job.busy.pop(key)
                job.count("finished" if g.state not in APPLIES[action] else "unchanged")
                moved = True
                continue
            out = self.apply_group(g, action, ctx)
            if out.outcome == Outcome.BUSY:
                if first_seen < give_up_ms:
                    job.busy.pop(key)
                    job.count("given_up")
                    moved = True
                continue
            self._record(job, g, out)
            moved = True
        return moved


def _check_job_id(job_id: str) -> None:
    if not MAIL_ID_RE.match(job_id or ""):
        raise InvalidInput("invalid_job_id", "not a job id (26 characters, 0-9 A-Z)", "job_id")


def _read_header(stream: BinaryIO, limit: int) -> tuple[bytes, bytes]:
    """The header section (up to the empty line) and what was read past it."""
    buf = b""
    while len(buf) <= limit:
        chunk = stream.read(64 * 1024)
        if not chunk:
            break
        buf += chunk
        for sep in (b"\r\n\r\n", b"\n\n"):
            i = buf.find(sep)
            if i >= 0:
                return buf[: i + len(sep)], buf[i + len(sep) :]
        if buf.startswith((b"\r\n", b"\n")):  # no header at all
            return b"", buf
    return buf[:limit], buf[limit:]


def _header_block(head: bytes) -> str:
    text = head.decode("utf-8", "replace")
    for sep in ("\r\n\r\n", "\n\n"):
        if text.endswith(sep):
            return text[: -len(sep) // 2]
    return text


def _headers(head: bytes) -> list[list[str]]:
    msg = HeaderParser(policy=default_policy).parsestr(
        head.decode("utf-8", "replace"), headersonly=True
    )
    return [[name, str(value)] for name, value in msg.items()]
