"""The storage protocol on a local filesystem: a crash-safe queue directory (kannader-like).

Layout under `root`:
  data/<mail_id>/content          the RFC 5322 bytes, written once
  data/<mail_id>/mail.json        envelope summary (sha256, digest, groups), or a tombstone
  data/<mail_id>/g/<group>.json   one destination group: recipients, schedule, lease
Every file is written to a temporary name, fsynced and renamed into place (atomic on one
filesystem), and the directory is fsynced: after a crash each file is either the old or
the new version. A group is changed only under an exclusive `flock` on its lock file, so
a claim is a real compare-and-set between processes. Order of enqueue is content →
groups → mail.json (the commit point), as qmail's mess → intd → todo. Triggers and the
bounce hand-off are the ports of `mailqueue.core.ports` (in one process:
`mailqueue.backends.inprocess`);
without them a local worker polls `list_queue`.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import math
import os
import secrets
import shutil
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from mailqueue.core import transitions
from mailqueue.core.errors import Conflict, InvalidInput, LeaseLost, MailqueueError, NotFound
from mailqueue.core.model import (
    Attempt,
    Claim,
    Envelope,
    Group,
    GroupState,
    MailRef,
    Page,
    QueuedMail,
    Recipient,
    RecipientState,
    Result,
    Ret,
    derive_group_state,
    from_iso,
    mail_id_for_key,
    new_mail_id,
    pool_of,
    principal_of,
    priority_of,
    to_iso,
    utcnow,
    wait_item,
)
from mailqueue.core.storage import ClaimRefused, InflightMail, PendingCleanup, Transition
from mailqueue.core.transitions import envelope_digest

if TYPE_CHECKING:
    from mailqueue.core.ports import BounceHandoff, Triggers


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _ceil_seconds(d: timedelta) -> int:
    """A delay in whole seconds, rounded up: a trigger never comes back before its time."""
    return max(0, math.ceil(d.total_seconds()))


def _safe(name: str) -> str:
    if not name or "/" in name or name.startswith(".") or "\x00" in name:
        raise InvalidInput("invalid_id", "not a valid id", "mail_id")
    return name


class FsStorage:
    """`QueueStorage` on a directory. With `triggers`/`bounces`, every change posts or
    re-arms them as the AWS backend does with SQS; without, a worker polls `list_queue`."""

    def __init__(
        self,
        root: Path | str,
        *,
        max_size: int = 40 * 1024 * 1024,
        max_recipients: int = 1000,
        group_recipient_limit: int = 50,
        lease_seconds: int = 360,
        history_limit: int = 10,
        clock: Callable[[], datetime] = utcnow,
        triggers: Triggers | None = None,
        bounces: BounceHandoff | None = None,
    ) -> None:
        self.triggers = triggers
        self.bounces = bounces
        self.root = Path(root)
        self.data = self.root / "data"
        self.data.mkdir(parents=True, exist_ok=True)
        self.max_size = max_size
        self.max_recipients = max_recipients
        self.group_recipient_limit = group_recipient_limit
        self.lease_seconds = lease_seconds
        self.history_limit = history_limit
        self.clock = clock

    # ------------------------------------------------------------------ files
    def _dir(self, mail_id: str) -> Path:
        return self.data / _safe(mail_id)

    def _gpath(self, ref: MailRef) -> Path:
        return self._dir(ref.mail_id) / "g" / f"{_safe(ref.group)}.json"

    @contextlib.contextmanager
    def _locked(self, ref: MailRef) -> Iterator[dict[str, Any] | None]:
        path = self._gpath(ref)
        if not path.parent.exists():
            yield None
            return
        with open(path.with_suffix(".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield json.loads(path.read_bytes()) if path.exists() else None
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _save(self, ref: MailRef, item: dict[str, Any]) -> None:
        _write_atomic(self._gpath(ref), json.dumps(item, sort_keys=True).encode())

    def _group(self, item: dict[str, Any]) -> Group:
        recipients = tuple(Recipient.from_json(r) for r in item["rcpts"])
        st = item.get("st") or derive_group_state(recipients).value
        state = GroupState(st)
        if state == GroupState.INFLIGHT:
            recipients = tuple(
                r.with_(state=RecipientState.INFLIGHT)
                if r.state in (RecipientState.QUEUED, RecipientState.HELD)
                else r
                for r in recipients
            )
        next_at = from_iso(item["next_at"]) or self.clock()
        return Group(
            mail_id=item["mail_id"],
            key=item["key"],
            sender=item["sender"],
            recipients=recipients,
            state=state,
            next_attempt_at=next_at,
            arrival=from_iso(item["arrival"]) or next_at,
            content_key=str(self._dir(item["mail_id"]) / "content"),
            size=int(item["size"]),
            ret=Ret(item["ret"]) if item.get("ret") else None,
            envid=item.get("envid"),
            smtputf8=bool(item.get("smtputf8")),
            lease_until=from_iso(item.get("lease_until")),
            lease_token=item.get("lease_token"),
            history=tuple(Attempt.from_json(a) for a in item.get("history", [])),
            groups_in_mail=int(item.get("ng", 0)),
            principal=principal_of(item.get("tags")),
            tags=tuple((str(k), str(v)) for k, v in (item.get("tags") or {}).items()),
            reservation=item.get("rsv"),
            wait=dict(item["wt"]) if item.get("wt") else None,
        )

    def _items(self) -> Iterator[dict[str, Any]]:
        """Groups of committed mails only: mail.json is the commit point of enqueue."""
        for mail in sorted(self.data.iterdir()):
            gdir = mail / "g"
            if not gdir.is_dir() or not (mail / "mail.json").exists():
                continue
            for p in sorted(gdir.glob("*.json")):
                with contextlib.suppress(FileNotFoundError):  # cleaned meanwhile
                    yield json.loads(p.read_bytes())

    # ------------------------------------------------------------------ enqueue
    def validate(self, envelope: Envelope, content: bytes) -> None:
        transitions.validate_envelope(
            envelope, content, max_recipients=self.max_recipients, max_size=self.max_size
        )

    def enqueue(
        self,
        envelope: Envelope,
        content: bytes,
        *,
        idempotency_key: str | None = None,
        not_before: datetime | None = None,
    ) -> QueuedMail:
        self.validate(envelope, content)
        now = self.clock()
        mail_id = mail_id_for_key("fs", idempotency_key) if idempotency_key else new_mail_id()
        plan = transitions.plan_enqueue(
            envelope,
            mail_id,
            group_limit=self.group_recipient_limit,
            now=now,
            not_before=not_before,
        )
        groups, due, answer = plan.groups, plan.due, plan.answer
        sha = hashlib.sha256(content).hexdigest()
        digest = envelope_digest(envelope)
        d = self._dir(mail_id)
        mail_file = d / "mail.json"
        if mail_file.exists():  # the commit point was reached: a retry, or a tombstone
            stored = json.loads(mail_file.read_bytes())
            if stored["sha256"] != sha or stored["env_sha"] != digest:
                raise Conflict("idempotency key reused with different content or envelope")
            return replace(answer, duplicate=True)
        (d / "g").mkdir(parents=True, exist_ok=True)
        _write_atomic(d / "content", content)
        for gkey, rs in groups.items():
            self._save(
                MailRef(mail_id, gkey),
                {
                    "mail_id": mail_id,
                    "key": gkey,
                    "sender": envelope.sender,
                    "rcpts": [r.to_json() for r in rs],
                    "st": GroupState.QUEUED.value,
                    "next_at": to_iso(due),
                    "arrival": to_iso(now),
                    "size": len(content),
                    "ret": envelope.ret.value if envelope.ret else None,
                    "envid": envelope.envid,
                    "smtputf8": envelope.smtputf8,
                    **({"tags": dict(envelope.tags)} if envelope.tags else {}),
                    "ng": len(groups),
                    "history": [],
                },
            )
        meta = {"sha256": sha, "env_sha": digest, "groups": list(groups), "arrival": to_iso(now)}
        _write_atomic(mail_file, json.dumps(meta).encode())
        if self.triggers is not None:
            self.triggers.post(
                [MailRef(mail_id, g) for g in groups],
                _ceil_seconds(due - now),
                priority=priority_of(envelope.tags),
                pool=pool_of(envelope.tags),
            )
        return answer

    # ------------------------------------------------------------------ reads
    def _page(self, items: list[Group], limit: int, cursor: str | None) -> Page:
        start = int(cursor) if cursor else 0
        chunk = items[start : start + limit]
        more = start + limit < len(items)
        return Page(items=tuple(chunk), cursor=str(start + limit) if more else None)

    def list_queue(
        self,
        *,
        state: GroupState = GroupState.QUEUED,
        due_before: datetime | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> Page:
        groups = [self._group(it) for it in self._items() if it.get("st") == state.value]
        if due_before is not None:
            groups = [g for g in groups if g.next_attempt_at <= due_before]
        groups.sort(key=lambda g: (g.next_attempt_at, g.mail_id, g.key))
        return self._page(groups, limit, cursor)

    def count_state(self, state: GroupState) -> int:
        """Groups in `state` (the admin service's size; a scan of the directory here)."""
        return sum(1 for it in self._items() if it.get("st") == GroupState(state).value)

    def find_inflight(self, now: datetime, *, limit: int = 100, cursor: str | None = None) -> Page:
        groups = [
            self._group(it)
            for it in self._items()
            if it.get("st") == GroupState.INFLIGHT.value
            and (from_iso(it.get("lease_until")) or now) < now
        ]
        groups.sort(key=lambda g: (g.lease_until or now, g.mail_id))
        return self._page(groups, limit, cursor)

    def find_pending_cleanup(
        self,
        now: datetime,
        *,
        grace_seconds: int = 300,
        orphan_grace_seconds: int = 129600,
        orphans: bool = True,
    ) -> Iterator[PendingCleanup]:
        for mail in sorted(self.data.iterdir()):
            if not (mail / "content").exists() and not (mail / "g").exists():
                continue
            items = self._mail_items(mail.name)
            if not (mail / "mail.json").exists():  # an enqueue that never committed
                with contextlib.suppress(FileNotFoundError):
                    age = now.timestamp() - (mail / "content").stat().st_mtime
                    if orphans and age > orphan_grace_seconds:
                        yield PendingCleanup(mail.name, "orphan")
                continue
            if all(it.get("st") == GroupState.DONE.value for it in items):
                done_at = max(from_iso(it.get("done_at")) or now for it in items)
                if done_at < now - timedelta(seconds=grace_seconds):
                    yield PendingCleanup(mail.name, "finished")

    def _mail_items(self, mail_id: str) -> list[dict[str, Any]]:
        gdir = self._dir(mail_id) / "g"
        out = []
        for p in sorted(gdir.glob("*.json")) if gdir.exists() else []:
            with contextlib.suppress(FileNotFoundError):
                out.append(json.loads(p.read_bytes()))
        return out

    def get_mail(self, mail_id: str) -> tuple[dict[str, Any] | None, list[Group]]:
        items = self._mail_items(mail_id)
        meta_file = self._dir(mail_id) / "mail.json"
        if not items and not meta_file.exists():
            raise NotFound(mail_id)
        meta = json.loads(meta_file.read_bytes()) if meta_file.exists() else None
        return meta, [self._group(it) for it in items]

    def content_exists(self, mail_id: str) -> bool:
        return (self._dir(mail_id) / "content").exists()

    def read_content(self, mail_id: str) -> BinaryIO:
        try:
            return open(self._dir(mail_id) / "content", "rb")
        except FileNotFoundError as e:
            raise NotFound(mail_id) from e

    def get_group(self, ref: MailRef) -> Group:
        path = self._gpath(ref)
        try:
            return self._group(json.loads(path.read_bytes()))
        except FileNotFoundError as e:
            raise NotFound(f"{ref.mail_id}/{ref.group}") from e

    def find_orphans(self, older_than: datetime) -> Iterator[PendingCleanup]:
        """Content of an enqueue that never reached its commit point (no mail.json)."""
        for mail in sorted(self.data.iterdir()):
            if (mail / "mail.json").exists():
                continue
            with contextlib.suppress(FileNotFoundError):
                if (mail / "content").stat().st_mtime < older_than.timestamp():
                    yield PendingCleanup(mail.name, "orphan")

    # ------------------------------------------------------------------ claims
    def send_start(
        self,
        ref: MailRef,
        now: datetime,
        *,
        lease_seconds: int | None = None,
        receipt_handle: str | None = None,
    ) -> Claim | ClaimRefused:
        with self._locked(ref) as item:
            if item is None:
                return ClaimRefused("gone")
            st = item.get("st")
            next_at = from_iso(item["next_at"]) or now
            lease_until = from_iso(item.get("lease_until"))
            due = st == GroupState.QUEUED.value and next_at <= now
            stale = (
                st == GroupState.INFLIGHT.value and lease_until is not None and lease_until < now
            )
            if not (due or stale):
                if st == GroupState.QUEUED.value:
                    return ClaimRefused("not_due", next_at)
                if st == GroupState.INFLIGHT.value:
                    return ClaimRefused("claimed", lease_until)
                if st == GroupState.HELD.value:
                    return ClaimRefused("held")
                return ClaimRefused("finished")
            token = secrets.token_hex(8)
            until = now + timedelta(seconds=lease_seconds or self.lease_seconds)
            item.update(st=GroupState.INFLIGHT.value, lease_token=token, lease_until=to_iso(until))
            self._save(ref, item)
            return Claim(self._group(item), token, receipt_handle, now)

    def admin_claim(
        self, ref: MailRef, now: datetime, *, lease_seconds: int = 60
    ) -> Claim | ClaimRefused:
        """Claim a queued (due or not) or held group for an operator action, under the
        same lease as delivery (an operator and a delivery attempt exclude each other)."""
        with self._locked(ref) as item:
            if item is None:
                return ClaimRefused("gone")
            st = item.get("st")
            lease_until = from_iso(item.get("lease_until"))
            stale = (
                st == GroupState.INFLIGHT.value and lease_until is not None and lease_until < now
            )
            if st not in (GroupState.QUEUED.value, GroupState.HELD.value) and not stale:
                if st == GroupState.INFLIGHT.value:
                    return ClaimRefused("claimed", lease_until)
                return ClaimRefused("finished")
            token = secrets.token_hex(8)
            until = now + timedelta(seconds=lease_seconds)
            item.update(st=GroupState.INFLIGHT.value, lease_token=token, lease_until=to_iso(until))
            self._save(ref, item)
            # held recipients count as pending for an operator claim (`_group` marks them)
            return Claim(self._group(item), token, None, now)

    def mark(
        self,
        claim: Claim,
        changed: dict[str, Recipient],
        *,
        next_attempt_at: datetime | None = None,
        op: dict[str, Any] | None = None,
    ) -> Transition:
        """An operator transition under a claim (hold, release, delete, retry-now); `op`
        ({action, actor, job}) is kept on the group as the AWS backend keeps it."""
        t = self._transition(claim, changed, next_attempt_at=next_attempt_at, op=op)
        if t.released and t.group.state == GroupState.QUEUED and self.triggers is not None:
            delay = _ceil_seconds(t.group.next_attempt_at - self.clock())
            self.triggers.post(
                [claim.ref], delay, priority=claim.group.priority, pool=claim.group.pool
            )
        return t

    def read_inflight(self, claim: Claim) -> InflightMail:
        path = self._dir(claim.group.mail_id) / "content"
        try:
            f: BinaryIO = open(path, "rb")
        except FileNotFoundError as e:
            raise NotFound(claim.group.mail_id) from e
        return InflightMail(claim.group, f, path.stat().st_size)

    # ------------------------------------------------------------------ transitions
    def _transition(
        self,
        claim: Claim,
        changed: dict[str, Recipient],
        *,
        next_attempt_at: datetime | None = None,
        attempt: Attempt | None = None,
        op: dict[str, Any] | None = None,
        reservation: str | None = None,  # "": clear it; None: leave it
        wait: dict[str, str] | None = None,  # postpone's reason to wait (Group.wait)
    ) -> Transition:
        if claim.released:
            raise LeaseLost("this claim was already released")
        now = self.clock()
        with self._locked(claim.ref) as item:
            if item is None or item.get("lease_token") != claim.token:
                raise LeaseLost(f"{claim.group.mail_id}/{claim.group.key}")
            stored = {r["rid"]: Recipient.from_json(r) for r in item["rcpts"]}
            seen = {r.rid: r for r in claim.group.recipients}
            for rid, r in changed.items():
                if rid not in stored:
                    raise InvalidInput("unknown_recipient", f"{rid} is not in this group", "rids")
                if rid in seen and r.dsn_pending == seen[rid].dsn_pending:
                    # a flag we did not change: the bounce path may have cleared it since
                    r = r.with_(dsn_pending=stored[rid].dsn_pending)
                stored[rid] = (
                    r.with_(state=RecipientState.QUEUED)
                    if (r.state == RecipientState.INFLIGHT)
                    else r
                )
            resolved = claim.resolved | set(changed)
            release = not [r for r in claim.group.pending() if r.rid not in resolved]
            item["rcpts"] = [r.to_json() for r in stored.values()]
            if attempt is not None:
                item["history"] = [
                    a.to_json()
                    for a in transitions.with_attempt(
                        [Attempt.from_json(a) for a in item.get("history", [])],
                        attempt,
                        self.history_limit,
                    )
                ]
            if next_attempt_at is not None:
                item["next_at"] = to_iso(next_attempt_at)
            if op is not None:
                item["op"] = {**op, "at": to_iso(now)}
            if wait is not None:
                item["wt"] = wait
            if reservation:
                item["rsv"] = reservation
            elif reservation is not None:
                item.pop("rsv", None)
            if release:
                state = derive_group_state(tuple(stored.values()))
                item["st"] = state.value
                item.pop("lease_token", None)
                item.pop("lease_until", None)
                if state in (GroupState.DONE, GroupState.DSN):
                    item["done_at"] = to_iso(now)
            self._save(claim.ref, item)
            group = self._group(item)
        claim.resolved = resolved
        claim.group = group
        claim.released = release
        finished = cleaned = False
        if release and group.state == GroupState.DONE:
            finished = all(
                it.get("st") == GroupState.DONE.value for it in self._mail_items(group.mail_id)
            )
            cleaned = finished and self.cleanup(group.mail_id)
        return Transition(group, release, finished, cleaned)

    def _attempt(self, claim: Claim, result: Result, tls: bool = False) -> Attempt:
        return Attempt(
            claim.attempt_number,
            claim.group.next_attempt_at,
            claim.started_at,
            self.clock(),
            result,
            tls=tls,
            site=claim.site,
            shaping=claim.shaping,
            pool=claim.sending_pool,
        )

    def _hand_to_bounce(self, ref: MailRef) -> None:
        if self.bounces is not None:
            self.bounces.post([ref])

    def _rearm(self, claim: Claim, delay_seconds: int) -> None:
        """The group's trigger comes back after `delay_seconds`: the received one if its
        receipt is still good, else a fresh one (never a group left without a trigger)."""
        if self.triggers is None:
            return
        if claim.receipt_handle:
            try:
                self.triggers.rearm(claim.receipt_handle, delay_seconds, queue=claim.receipt_queue)
                return
            except MailqueueError:
                pass
        self.triggers.post(
            [claim.ref],
            delay_seconds,
            priority=claim.group.priority,
            pool=claim.hand_to or claim.group.pool,
        )

    def send_done(
        self, claim: Claim, rids: Sequence[str], result: Result, *, tls: bool = False
    ) -> Transition:
        changed = transitions.delivered(claim.group, rids, result, self.clock())
        t = self._transition(claim, changed, attempt=self._attempt(claim, result, tls))
        if any(c.dsn_pending == "delivered" for c in changed.values()):
            self._hand_to_bounce(claim.ref)
        return t

    def send_cancel(self, claim: Claim) -> Group:
        now = self.clock()
        t = self._transition(
            claim,
            {r.rid: r.with_(state=RecipientState.QUEUED) for r in claim.unresolved()},
            next_attempt_at=min(claim.group.next_attempt_at, now),
        )
        self._rearm(claim, 0)
        return t.group

    def postpone(
        self,
        claim: Claim,
        delay_seconds: int,
        *,
        reservation: str | None = None,
        wait: Result | None = None,
    ) -> Group:
        until = self.clock() + timedelta(seconds=delay_seconds)
        t = self._transition(
            claim,
            {r.rid: r.with_(state=RecipientState.QUEUED) for r in claim.unresolved()},
            next_attempt_at=max(claim.group.next_attempt_at, until),
            reservation=reservation or "",
            wait=wait_item(wait, self.clock(), until),
        )
        self._rearm(claim, delay_seconds)
        return t.group

    def reschedule(
        self,
        claim: Claim,
        results: dict[str, Result],
        next_attempt_at: datetime,
        *,
        delay_warning: bool = False,
        tls: bool = False,
    ) -> Transition:
        changed, warn = transitions.deferred(
            claim.group, results, self.clock(), delay_warning=delay_warning
        )
        first = next(iter(results.values()))
        t = self._transition(
            claim,
            changed,
            next_attempt_at=max(next_attempt_at, claim.group.next_attempt_at),
            attempt=self._attempt(claim, first, tls),
        )
        if warn:
            self._hand_to_bounce(claim.ref)
        if t.released and t.group.state == GroupState.QUEUED:
            self._rearm(claim, _ceil_seconds(t.group.next_attempt_at - self.clock()))
        return t

    def drop(self, claim: Claim, results: dict[str, Result], *, tls: bool = False) -> Transition:
        changed = transitions.bounced(claim.group, results, self.clock())
        first = next(iter(results.values()))
        t = self._transition(claim, changed, attempt=self._attempt(claim, first, tls))
        if any(c.dsn_pending for c in changed.values()):
            self._hand_to_bounce(claim.ref)
        return t

    # ------------------------------------------------------------------ bounce path
    def dsn_sent(self, ref: MailRef, rids: Sequence[str], kind: str) -> Transition | None:
        if not rids:
            return None
        with self._locked(ref) as item:
            if item is None:
                return None
            stored = {r["rid"]: Recipient.from_json(r) for r in item["rcpts"]}
            if any(rid not in stored or stored[rid].dsn_pending != kind for rid in rids):
                return None  # a repeat: the first call cleared them
            for rid in rids:
                stored[rid] = stored[rid].with_(dsn_pending=None)
            item["rcpts"] = [r.to_json() for r in stored.values()]
            self._settle_item(item)
            self._save(ref, item)
            group = self._group(item)
        return self._after_settle(group)

    def settle(self, group: Group) -> Transition:
        with self._locked(group.ref) as item:
            if item is None:
                return Transition(group, False, False, False)
            if self._settle_item(item):
                self._save(group.ref, item)
            group = self._group(item)
        return self._after_settle(group)

    def _settle_item(self, item: dict[str, Any]) -> bool:
        """A group at rest (dsn/done) moves to the state its recipients imply."""
        if item.get("st") not in (GroupState.DSN.value, GroupState.DONE.value):
            return False
        target = derive_group_state(tuple(Recipient.from_json(r) for r in item["rcpts"]))
        if target.value == item.get("st"):
            return False
        item["st"] = target.value
        item["done_at"] = to_iso(self.clock())
        return True

    def _after_settle(self, group: Group) -> Transition:
        if group.state != GroupState.DONE:
            return Transition(group, False, False, False)
        finished = all(
            it.get("st") == GroupState.DONE.value for it in self._mail_items(group.mail_id)
        )
        cleaned = finished and self.cleanup(group.mail_id)
        return Transition(group, False, finished, cleaned)

    # ------------------------------------------------------------------ cleanup
    def cleanup(self, mail_id: str) -> bool:
        """Finished mail: content and groups go (a keyed mail keeps mail.json as its
        tombstone). A mail that never reached its commit point (no mail.json) was never
        accepted: everything goes (the sweeper asks only after the orphan grace)."""
        d = self._dir(mail_id)
        items = self._mail_items(mail_id)
        committed = (d / "mail.json").exists()
        if committed and any(it.get("st") != GroupState.DONE.value for it in items):
            return False
        with contextlib.suppress(FileNotFoundError):
            os.unlink(d / "content")
        if (d / "g").exists():
            shutil.rmtree(d / "g")
        meta_file = d / "mail.json"
        if meta_file.exists() and not mail_id.startswith("K"):
            os.unlink(meta_file)  # a keyed mail keeps mail.json as its tombstone
        if d.exists() and not any(d.iterdir()):
            d.rmdir()
        return True
