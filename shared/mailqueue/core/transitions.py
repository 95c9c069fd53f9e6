"""The queue's rules, shared by every storage backend: what enqueue refuses, how recipients
are grouped, and what a delivery outcome does to a recipient.

Pure functions over the model. The backends (`aws.backend`, `fs`) differ only in how they
make a change durable; keeping the rules here means the same envelope is refused, and the
same result recorded, whichever backend holds the queue.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from mailqueue.core.address import AddressError
from mailqueue.core.address import key as mailbox_key
from mailqueue.core.errors import InvalidInput
from mailqueue.core.model import (
    Attempt,
    Envelope,
    Group,
    Notify,
    QueuedMail,
    Recipient,
    RecipientState,
    Result,
    group_key_for,
)
from mailqueue.core.validate import check_text, validate_address, validate_content, validate_sender

ORCPT_MAX = 500
ENVID_MAX = 100
# SES's message tags: at most 50, names and values of ASCII letters, digits, '_' and '-',
# each at most 256 characters; `ses:` is SES's and `mailqueue:` ours (set by the queue)
TAGS_MAX = 50
TAG_MAX = 256
TAG_RE = re.compile(r"^[A-Za-z0-9_-]{1,256}$")
TAG_VALUE_RE = re.compile(r"^[A-Za-z0-9_.,@:/=+-]{1,256}$")
RESERVED_TAG_PREFIXES = ("ses:", "mailqueue:", "aws:")


def validate_envelope(
    envelope: Envelope, content: bytes, *, max_recipients: int, max_size: int
) -> None:
    """Everything enqueue refuses, checked before anything is written."""
    # text first: a lone surrogate cannot be encoded (by the checks below, nor by boto3)
    check_text(envelope.sender, "sender")
    validate_sender(envelope.sender, smtputf8=envelope.smtputf8)
    if not envelope.recipients:
        raise InvalidInput("no_recipients", "at least one recipient is required", "recipients")
    if len(envelope.recipients) > max_recipients:
        raise InvalidInput(
            "too_many_recipients", f"at most {max_recipients} recipients", "recipients"
        )
    for i, r in enumerate(envelope.recipients):
        check_text(r.address, f"recipients[{i}].address")
        validate_address(r.address, f"recipients[{i}].address", smtputf8=envelope.smtputf8)
        if r.orcpt is not None:
            check_text(r.orcpt, f"recipients[{i}].orcpt")
            if len(r.orcpt) > ORCPT_MAX:
                raise InvalidInput("orcpt_too_long", "orcpt too long", f"recipients[{i}].orcpt")
        if Notify.NEVER in r.notify and len(r.notify) > 1:
            raise InvalidInput(
                "invalid_notify",
                "NEVER excludes other NOTIFY values",
                f"recipients[{i}].notify",
            )
    if envelope.envid is not None:
        check_text(envelope.envid, "envid")
        if len(envelope.envid) > ENVID_MAX:
            raise InvalidInput(
                "envid_too_long", f"envid longer than {ENVID_MAX} characters", "envid"
            )
    validate_tags(envelope.tags)
    validate_content(content, max_size=max_size)


def validate_tags(tags: Sequence[tuple[str, str]], *, ours: bool = True) -> None:
    """SES's rules for message tags; our own `mailqueue:` tags (the queue sets them) are
    the only names with a prefix, and their values may hold an ARN's `:` and `/`."""
    if len(tags) > TAGS_MAX + 5:
        raise InvalidInput("too_many_tags", f"at most {TAGS_MAX} tags", "tags")
    user = [t for t in tags if not t[0].startswith("mailqueue:")]
    if len(user) > TAGS_MAX:
        raise InvalidInput("too_many_tags", f"at most {TAGS_MAX} tags", "tags")
    seen: set[str] = set()
    for name, value in tags:
        field = f"tags.{name}" if len(name) <= TAG_MAX else "tags"
        if name in seen:
            raise InvalidInput("duplicate_tag", f"tag {name!r} given twice", field)
        seen.add(name)
        if name.startswith("mailqueue:") and ours:
            if not TAG_RE.match(name.removeprefix("mailqueue:")) or not TAG_VALUE_RE.match(value):
                raise InvalidInput("invalid_tag", "malformed mailqueue: tag", field)
            continue
        if name.lower().startswith(RESERVED_TAG_PREFIXES):
            raise InvalidInput(
                "reserved_tag", "tag names starting ses:, aws: or mailqueue: are reserved", field
            )
        if not TAG_RE.match(name):
            raise InvalidInput(
                "invalid_tag",
                "a tag name has 1-256 ASCII letters, digits, '_' or '-'",
                field,
            )
        if not TAG_RE.match(value):
            raise InvalidInput(
                "invalid_tag",
                "a tag value has at most 256 ASCII letters, digits, '_' or '-'",
                field,
            )


def envelope_digest(envelope: Envelope) -> str:
    """What an idempotent retry must repeat exactly: sender, DSN parameters, recipients."""
    parts = [envelope.sender, str(envelope.ret), str(envelope.envid)]
    parts += [
        f"{r.address}|{','.join(n.value for n in r.notify)}|{r.orcpt or ''}"
        for r in envelope.recipients
    ]
    # the submitter's tags (absent ones leave earlier digests unchanged); ours derive from
    # the principal, which the idempotency key already holds
    parts += [f"tag:{n}={v}" for n, v in sorted(envelope.tags) if not n.startswith("mailqueue:")]
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()


def plan_groups(recipients: Sequence[Recipient], limit: int) -> dict[str, list[Recipient]]:
    """Split recipients into destination groups: per domain, at most `limit` per group."""
    by_domain: dict[str, list[Recipient]] = {}
    for r in recipients:
        by_domain.setdefault(group_key_for(r.address), []).append(r)
    groups: dict[str, list[Recipient]] = {}
    for domain, rs in by_domain.items():
        for i in range(0, len(rs), limit):
            key = domain if i == 0 else f"{domain}#{i // limit}"
            groups[key] = rs[i : i + limit]
    return groups


@dataclass(frozen=True)
class EnqueuePlan:
    """What an accepted envelope becomes, before a backend makes it durable."""

    recipients: tuple[Recipient, ...]  # numbered r0, r1, ... and queued
    groups: dict[str, list[Recipient]]
    due: datetime  # first attempt: now, or the caller's not_before if later
    answer: QueuedMail


def merge_duplicates(
    recipients: Sequence[Recipient],
) -> tuple[tuple[Recipient, ...], tuple[str, ...]]:
    """Number the recipients r0, r1, ..., one per mailbox: a recipient equivalent to an
    earlier one (:attr:`mailqueue.core.address.Mailbox.key`: domain case-insensitive, quoting
    ignored) is merged into it, keeping the first one's address, NOTIFY and ORCPT — one
    RCPT TO per mailbox, one delivery, one DSN. Returns the numbered recipients and, for
    every submitted recipient in order, the rid it was merged into (the answer's ids)."""
    merged: list[Recipient] = []
    rid_of: dict[str, str] = {}
    rids: list[str] = []
    for r in recipients:
        try:
            k = mailbox_key(r.address)
        except AddressError:  # validated before planning; kept apart if not
            k = r.address
        if k not in rid_of:
            rid_of[k] = f"r{len(merged)}"
            merged.append(r.with_(rid=rid_of[k], state=RecipientState.QUEUED))
        rids.append(rid_of[k])
    return tuple(merged), tuple(rids)


def plan_enqueue(
    envelope: Envelope,
    mail_id: str,
    *,
    group_limit: int,
    now: datetime,
    not_before: datetime | None = None,
) -> EnqueuePlan:
    """Duplicates merged (see `merge_duplicates`), groups planned; the answer names every
    submitted recipient in order, a duplicate with the id of the one it was merged into."""
    recipients, rids = merge_duplicates(envelope.recipients)
    groups = plan_groups(recipients, group_limit)
    return EnqueuePlan(
        recipients=recipients,
        groups=groups,
        due=max(now, not_before) if not_before else now,
        answer=QueuedMail(
            mail_id=mail_id,
            recipients=tuple(
                (rid, r.address) for rid, r in zip(rids, envelope.recipients, strict=True)
            ),
            groups=tuple(groups),
        ),
    )


def attempted(r: Recipient, result: Result, now: datetime) -> Recipient:
    """One more attempt with `result`."""
    return r.with_(
        attempts=r.attempts + 1,
        first_attempt_at=r.first_attempt_at or now,
        last_attempt_at=now,
        last_result=result,
    )


def delivered(
    group: Group, rids: Sequence[str], result: Result, now: datetime
) -> dict[str, Recipient]:
    """Accepted by the next hop; a success DSN is due where NOTIFY asked for one."""
    by_rid = {r.rid: r for r in group.recipients}
    out: dict[str, Recipient] = {}
    for rid in rids:
        r = by_rid[rid]
        wants = Notify.SUCCESS in r.notify and group.sender != ""
        out[rid] = attempted(r, result, now).with_(
            state=RecipientState.DELIVERED,
            final_at=now,
            dsn_pending="delivered" if wants else r.dsn_pending,
        )
    return out


def deferred(
    group: Group, results: Mapping[str, Result], now: datetime, *, delay_warning: bool
) -> tuple[dict[str, Recipient], bool]:
    """Back to the queue; with `delay_warning`, each recipient gets at most one delay DSN
    (never for the null sender or NOTIFY=NEVER). Returns the recipients and whether a
    warning became due."""
    by_rid = {r.rid: r for r in group.recipients}
    out: dict[str, Recipient] = {}
    warn = False
    for rid, res in results.items():
        r = attempted(by_rid[rid], res, now).with_(state=RecipientState.QUEUED)
        if delay_warning and not r.delay_warned and group.sender != "":
            if Notify.NEVER not in r.notify:
                r = r.with_(delay_warned=True, dsn_pending=r.dsn_pending or "delayed")
                warn = True
        out[rid] = r
    return out, warn


def bounced(group: Group, results: Mapping[str, Result], now: datetime) -> dict[str, Recipient]:
    """Failed for good; a failure DSN is due unless the sender is null or NOTIFY=NEVER."""
    by_rid = {r.rid: r for r in group.recipients}
    out: dict[str, Recipient] = {}
    for rid, res in results.items():
        r = by_rid[rid]
        dsn = group.sender != "" and Notify.NEVER not in r.notify
        out[rid] = attempted(r, res, now).with_(
            state=RecipientState.BOUNCED,
            final_at=now,
            dsn_pending="failed" if dsn else r.dsn_pending,
        )
    return out


def with_attempt(history: Sequence[Attempt], attempt: Attempt, limit: int) -> list[Attempt]:
    """The group's history with `attempt` recorded: one entry per attempt number.

    One SMTP transaction is one attempt whatever its per-recipient outcomes; it may be
    recorded in several writes (delivered, then bounced, then deferred), so a later write
    of the same number replaces the entry: the least successful result stands for it.
    """
    out = list(history)
    if out and out[-1].number == attempt.number:
        prev = out[-1]
        keep = prev if _rank(prev.result) > _rank(attempt.result) else attempt
        out[-1] = replace(
            keep,
            started_at=min(prev.started_at, attempt.started_at),
            finished_at=max(prev.finished_at, attempt.finished_at),
            tls=prev.tls or attempt.tls,
        )
    else:
        out.append(attempt)
    return out[-limit:] if limit > 0 else []


def _rank(result: Result) -> int:
    """Deferred above bounced above delivered: what the attempt's summary shows."""
    return 0 if result.success else (2 if not result.permanent else 1)
