"""Bounce path: recipients with a DSN due → one RFC 3464 DSN per mail and kind → enqueued.

The DSN is itself a mail: it goes through the same `enqueue` (from the null sender) and
the same delivery function. The enqueue uses an idempotency key derived from the mail,
the kind and the recipients, so a retried bounce batch never produces a second DSN. Only
after the DSN is durably queued are the original's recipients released (`dsn_sent`),
which is what lets the original's content be cleaned up.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from mailqueue.core.config import ConfigError
from mailqueue.core.dsn import (
    DEFAULT_MAX_RETURNED,
    Action,
    DsnRecipient,
    DsnRequest,
    build_dsn,
    dsn_wanted,
)
from mailqueue.core.errors import Conflict, NotFound, PoisonMessage
from mailqueue.core.model import (
    PRIORITY_TAG,
    Envelope,
    Group,
    GroupState,
    MailRef,
    Recipient,
    utcnow,
)
from mailqueue.core.storage import QueueStorage

log = logging.getLogger(__name__)

_KIND_ACTION = {"failed": Action.FAILED, "delayed": Action.DELAYED, "delivered": Action.DELIVERED}


@dataclass(frozen=True, slots=True)
class BounceSettings:
    hostname: str = "mailqueue.invalid"  # Reporting-MTA
    postmaster_domain: str = ""  # From: MAILER-DAEMON@<domain>; default: hostname
    max_returned_size: int = DEFAULT_MAX_RETURNED
    delay_for_default_notify: bool = True  # RFC 3461 §4.1: no NOTIFY may mean FAILURE,DELAY
    max_queue_lifetime_seconds: int = 5 * 86400

    def __post_init__(self) -> None:
        if not self.hostname or " " in self.hostname:
            raise ConfigError("hostname must be a host name")
        if self.max_returned_size < 1024:
            raise ConfigError("max_returned_size must be at least 1024")

    @property
    def mailer_domain(self) -> str:
        return self.postmaster_domain or self.hostname


@dataclass
class BounceStats:
    dsns: int = 0
    suppressed: int = 0
    mails: int = 0
    kinds: dict[str, int] = field(default_factory=dict)


class BounceService:
    def __init__(
        self,
        settings: BounceSettings,
        storage: QueueStorage,
        *,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.settings = settings
        self.storage = storage
        self.clock = clock

    def handle_mail(self, mail_id: str, stats: BounceStats | None = None) -> BounceStats:
        stats = stats or BounceStats()
        try:
            mail_item, groups = self.storage.get_mail(mail_id)
        except NotFound:
            return stats  # already cleaned: its DSNs were sent
        stats.mails += 1
        due: dict[str, list[tuple[Group, Recipient]]] = {}
        for g in groups:
            for r in g.recipients:
                if r.dsn_pending in _KIND_ACTION:
                    due.setdefault(r.dsn_pending, []).append((g, r))
        for g in groups:
            if g.state == GroupState.DSN and not any(r.dsn_pending for r in g.recipients):
                self.storage.settle(g)  # a previous run cleared the flags, then died
        if not due:
            return stats
        content = self._content(mail_id)
        first = groups[0]
        envelope = Envelope(
            sender=first.sender,
            recipients=tuple(r for g in groups for r in g.recipients),
            ret=first.ret,
            envid=first.envid,
            smtputf8=first.smtputf8,
        )
        for kind in ("failed", "delayed", "delivered"):
            items = due.get(kind)
            if not items:
                continue
            action = _KIND_ACTION[kind]
            wanted = [
                (g, r)
                for g, r in items
                if dsn_wanted(
                    envelope.sender, r.notify, action, self.settings.delay_for_default_notify
                )
            ]
            stats.suppressed += len(items) - len(wanted)
            if wanted:
                self._send(mail_id, kind, action, envelope, first, wanted, content)
                stats.dsns += 1
                stats.kinds[kind] = stats.kinds.get(kind, 0) + 1
            # release every recipient of this kind, reported or suppressed
            by_group: dict[str, list[str]] = {}
            for g, r in items:
                by_group.setdefault(g.key, []).append(r.rid)
            for gkey, rids in by_group.items():
                self.storage.dsn_sent(MailRef(mail_id, gkey), rids, kind)
        return stats

    def _content(self, mail_id: str) -> bytes | None:
        try:
            body = self.storage.read_content(mail_id)
        except NotFound:
            return None
        try:
            # bounded: never more than the returned-size limit plus headers are needed,
            # but headers may be anywhere up to that; read at most limit + 1 MiB
            data: bytes = body.read(self.settings.max_returned_size + (1 << 20))
        finally:
            close = getattr(body, "close", None)
            if close is not None:
                close()
        return data

    def _send(
        self,
        mail_id: str,
        kind: str,
        action: Action,
        envelope: Envelope,
        group: Group,
        items: list[tuple[Group, Recipient]],
        content: bytes | None,
    ) -> None:
        until = group.arrival + timedelta(seconds=self.settings.max_queue_lifetime_seconds)
        reports = []
        for _, r in items:
            if action is Action.FAILED and r.last_result and r.last_result.status == "4.4.7":
                reports.append(DsnRecipient.for_expiry(r))
            elif action is Action.DELAYED:
                reports.append(DsnRecipient.from_recipient(r, action, will_retry_until=until))
            else:
                reports.append(DsnRecipient.from_recipient(r, action))
        request = DsnRequest.for_envelope(
            envelope,
            reports,
            reporting_mta=self.settings.hostname,
            postmaster_domain=self.settings.mailer_domain,
            arrival_date=group.arrival,
            content=content,
            max_returned_size=self.settings.max_returned_size,
        )
        rids = ",".join(sorted(f"{g.key}/{r.rid}" for g, r in items))
        key = f"dsn:{mail_id}:{kind}:{rids}"
        # Date from the recipients' own times, not the clock: a retried build must be
        # byte-identical, or the idempotent enqueue would see a conflict.
        stamps = [t for _, r in items for t in (r.final_at, r.last_attempt_at) if t is not None]
        when = max(stamps) if stamps else group.arrival
        dsn = build_dsn(request, now=when, message_id=_message_id(key, self.settings))
        # a DSN takes its mail's delivery path: a bulk campaign's bounces stay off the
        # transactional queue
        envelope = replace(dsn.envelope, tags=((PRIORITY_TAG, group.priority.value),))
        try:
            queued = self.storage.enqueue(envelope, dsn.content, idempotency_key=key)
        except Conflict:
            # the key names exactly these recipients of this mail and kind: a DSN for them
            # is already queued, so this one must not go out a second time
            log.warning("dsn already queued with other content", extra={"mail_id": mail_id})
            return
        log.info(
            "dsn queued",
            extra={
                "mail_id": mail_id,
                "dsn_mail_id": queued.mail_id,
                "kind": kind,
                "recipients": len(items),
                "duplicate": queued.duplicate,
            },
        )


def _message_id(key: str, settings: BounceSettings) -> str:
    """Deterministic per DSN, so a retried build produces byte-identical content."""
    import hashlib

    digest = hashlib.sha256(key.encode()).hexdigest()[:24]
    return f"<dsn.{digest}@{settings.hostname}>"


def parse_ref(body: str) -> MailRef:
    try:
        data: dict[str, Any] = json.loads(body)
        return MailRef(mail_id=str(data["mail_id"]), group=str(data["group"]))
    except (ValueError, KeyError, TypeError) as e:
        raise PoisonMessage("unreadable bounce message") from e
