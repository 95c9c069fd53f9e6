"""The storage protocol on S3 (content), DynamoDB (state) and SQS (triggers).

Table layout (one table, see README "Data model"):
  pk = "M#<mail_id>"  sk = "M"            the mail: envelope summary, content key, sha256
  pk = "M#<mail_id>"  sk = "G#<group>"    a destination group: recipients map, schedule, lease
A "solo" mail (one group, no idempotency key, small inline content) is its group item
alone: the mail's fields and content live in it (`solo_item_max_bytes`).
GSI "by_state" (sparse, keys only): partition `st` ("<state>#<shard>": queued | held | dsn
| done), sort `due` (epoch ms: next attempt for queued, finish time for done/dsn). A claim
does not move a group in it: the lease is `lease_token` + `lease_ms` on the item, and a
queued group holding a lease token is `inflight` (items claimed before that change carry
`st = inflight#<shard>`, `due` = the lease's end; they are still read and claimed).
A group item carries everything an attempt needs, so a claim returns it whole and an
attempt costs no extra read.

One piece (~1,500 lines): `AwsStorage` is one state machine over one table, every method a
conditional write whose condition depends on what the others wrote (lease tokens, the
`st`/`due` index keys, inline and solo content, the mail item's cleanup). The item codec
(keys, typed values, inline content) is `items.py`; the worst-case check `capacity.py`.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import math
import re
import secrets
import time
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any, BinaryIO

from botocore.exceptions import ClientError

from mailqueue.backends.aws import index_walk
from mailqueue.backends.aws.clients import (
    AwsClients,
    ContentStream,
    batch_write,
    error_code,
    translate,
)
from mailqueue.backends.aws.items import (  # noqa: F401 (re-exported names)
    _BATCH_RETRIES,
    _BODY,
    _DSN_RACE_RETRIES,
    _LEASE_SET,
    _MAIL_FIELDS,
    _SOLO_DROPS,
    _SOLO_SEP,
    _UNRECORDED_OK,
    CLAIM_GROWTH,
    CONTENT_PREFIXES,
    CONTENT_SK,
    GSI_STATE,
    INLINE_PREFIX,
    LEASE_ATTRS,
    LEASE_FREE,
    MAX_DELAY,
    MAX_VISIBILITY,
    S3_SOLO_MARK,
    SOLO_MARK,
    _add_headers,
    _AlreadyStored,
    _bounded_attempt,
    _check_same,
    _content_key_of,
    _dec_cursor,
    _deser,
    _enc_cursor,
    _from_ddb,
    _gsk,
    _mail_view,
    _ms,
    _pk,
    _plain,
    _Refused,
    _resting,
    _rid_order,
    _ser,
    _to_ddb,
    _transition_dsn_request,
    _TransitionPlan,
    content_elsewhere,
    content_item_key,
    content_shard,
    inline_body,
    inline_key,
    is_content_item,
    is_inline,
    is_s3_solo,
    is_solo,
    object_key,
    read_inline,
    solo_key,
    state_key,
    state_keys,
    state_of,
)
from mailqueue.core import transitions
from mailqueue.core.config import StorageSettings
from mailqueue.core.errors import (
    Conflict,
    InvalidInput,
    LeaseLost,
    NotFound,
    TransientStorageError,
)
from mailqueue.core.model import (
    Attempt,
    Claim,
    Envelope,
    Group,
    GroupState,
    MailRef,
    Page,
    Priority,
    QueuedMail,
    Recipient,
    RecipientState,
    Result,
    Ret,
    derive_group_state,
    from_iso,
    group_key_for,
    mail_id_for_key,
    new_mail_id,
    pool_of,
    principal_of,
    priority_of,
    to_iso,
    utcnow,
    wait_item,
)
from mailqueue.core.storage import (
    ClaimRefused,
    InflightMail,
    PendingCleanup,
    Transition,
    read_scope_cache,
)
from mailqueue.core.transitions import envelope_digest
from mailqueue.core.validate import check_no_ctl

log = logging.getLogger(__name__)


def _lease_end(item: dict[str, Any]) -> datetime | None:
    """When an item's lease ends: `lease_ms`, or `lease_until` on an item claimed before
    the claim left the index."""
    ms = item.get("lease_ms")
    if ms is not None:
        return datetime.fromtimestamp(int(ms) / 1000, tz=UTC)
    return from_iso(item.get("lease_until"))


#: a queued group is due by its own schedule (`next_at`, ISO 8601 UTC to the millisecond:
#: ordered as text), not by its index entry's `due`, which may lag it (needs :now, :now_ms)
_DUE_NOW = "(next_at <= :now OR (attribute_not_exists(next_at) AND due <= :now_ms))"


def _index_due(item: dict[str, Any], shards: int) -> datetime | None:
    """A queued item's position in `by_state` (its `due`), which may lag its `next_at` by
    up to `index_due_slack_seconds`; None for other states and for an entry not under its
    own shard's key (unsharded, legacy `inflight#`): those move at their next release."""
    due = item.get("due")
    if due is None or item.get("st") != state_key(
        GroupState.QUEUED.value, str(item["pk"])[2:], shards
    ):
        return None
    return datetime.fromtimestamp(int(due) / 1000, tz=UTC)


def _expired(item: dict[str, Any], now_s: float) -> bool:
    """A finished item out of the state index whose TTL has passed: gone for every reader
    but the table, which deletes it within days (DynamoDB's TTL; moto never does)."""
    ttl = item.get("expires_at")
    return "st" not in item and ttl is not None and int(ttl) <= now_s


def _folded(items: list[dict[str, Any]]) -> dict[str, Any]:
    """A one-group mail's mail item folded into its group item (typed values): what only
    keyed retries need, or what is derived, left out (`_SOLO_DROPS`)."""
    mail, grp = items  # both hold the content key (`_items_for`'s common fields)
    return {**grp, **{k: v for k, v in mail.items() if k not in _SOLO_DROPS}}


def _seconds_until(at: datetime, now: datetime) -> int:
    """Whole seconds from `now` to `at`, rounded up (≥ 0): a trigger armed for it never
    comes back before `at` (rounded down it came up to a second early, its claim was
    refused as not due, and the visibility was changed once more: issue 25, finding 5)."""
    return max(0, math.ceil((at - now).total_seconds()))


class AwsStorage:
    """`Storage` on S3 + DynamoDB + SQS. Holds no mutable module state; clients are injected."""

    #: index entries one Scan may read to serve a walk whole (index_walk); 0: always Query
    index_snapshot_limit: int = index_walk.SNAPSHOT_LIMIT

    def __init__(
        self,
        settings: StorageSettings,
        clients: AwsClients,
        *,
        clock: Any = utcnow,
    ) -> None:
        self.s = settings
        self.c = clients
        self.clock = clock
        from mailqueue.backends.aws.capacity import check_group_limit

        # Refuse at start a group size whose worst-case result write DynamoDB would refuse.
        check_group_limit(self)

    @property
    def group_recipient_limit(self) -> int:
        return self.s.group_recipient_limit

    # ------------------------------------------------------------------ helpers
    def content_key(self, mail_id: str) -> str:
        """The S3 key of a mail's content: under one of `CONTENT_PREFIXES` hashed prefixes
        (`content/3f/<mail_id>`). S3 serves 3,500 writes and 5,500 reads a second per
        partitioned prefix and partitions by key range; mail ids grow with time (ULIDs),
        so without the hash every new object lands in the same range (AWS, "Best practices
        design patterns: optimizing Amazon S3 performance"; README, "Data model")."""
        return f"{self.s.content_prefix}{content_shard(mail_id)}/{mail_id}"

    def _legacy_content_key(self, mail_id: str) -> str:
        """Where a mail enqueued before the hashed prefixes keeps its content (its items
        name the key; this is for the cleanup of an orphan that has none)."""
        return f"{self.s.content_prefix}{mail_id}"

    def _group_from_item(self, raw: dict[str, Any]) -> Group:
        d = raw
        rcpts = d.get("rcpts") or {}
        recipients = tuple(Recipient.from_json(rcpts[rid]) for rid in sorted(rcpts, key=_rid_order))
        st = state_of(d.get("st"))
        derived = derive_group_state(recipients)
        state = GroupState(st) if st else derived
        if state == GroupState.QUEUED and d.get("lease_token"):
            state = GroupState.INFLIGHT  # claimed: the lease is the state (see _LEASE_SET)
        if state == GroupState.INFLIGHT:
            recipients = tuple(
                r.with_(state=RecipientState.INFLIGHT) if r.state == RecipientState.QUEUED else r
                for r in recipients
            )
        next_at = from_iso(d.get("next_at")) or self.clock()
        arrival = from_iso(d.get("arrival")) or next_at
        return Group(
            mail_id=d["pk"][2:],
            key=d["sk"][2:],
            sender=d.get("sender", ""),
            recipients=recipients,
            state=state,
            next_attempt_at=next_at,
            arrival=arrival,
            content_key=_content_key_of(d) or self.content_key(d["pk"][2:]),
            size=int(d.get("size", 0)),
            ret=Ret(d["ret"]) if d.get("ret") else None,
            envid=d.get("envid"),
            smtputf8=bool(d.get("smtputf8", False)),
            lease_until=_lease_end(d),
            lease_token=d.get("lease_token"),
            history=tuple(Attempt.from_json(a) for a in d.get("history") or ()),
            groups_in_mail=int(d.get("ng", 0)),
            priority=priority_of(d.get("tags")),
            principal=principal_of(d.get("tags")),
            tags=tuple((str(k), str(v)) for k, v in (d.get("tags") or {}).items()),
            reservation=d.get("rsv"),
            wait={str(k): str(v) for k, v in d["wt"].items()} if d.get("wt") else None,
            index_due=_index_due(d, self.s.state_shards),
        )

    def _batch_write(self, requests: list[dict[str, Any]]) -> int:
        """BatchWriteItem in chunks of 25; unprocessed items are retried with backoff."""
        return batch_write(self.c.dynamodb, self.s.table, requests)

    # ---- priority: every trigger goes to its group's queue (transactional | bulk) ----
    def _send_triggers(
        self,
        refs: Sequence[MailRef],
        delay: int = 0,
        priority: Priority = Priority.TRANSACTIONAL,
        pool: str = "",
    ) -> None:
        """SendMessageBatch in chunks of 10 to the delivery queue of the group's pool
        (StorageSettings.pool_queue_urls) or else its priority's; failed entries are
        retried, never dropped."""
        entries = [
            {
                "Id": str(i),
                "MessageBody": json.dumps({"v": 1, **ref.to_json()}, separators=(",", ":")),
                "DelaySeconds": max(0, min(MAX_DELAY, self.s.max_delay_seconds, delay)),
            }
            for i, ref in enumerate(refs)
        ]
        self._send_batch(self.s.queue_url(priority, pool), entries)

    def _send_batch(self, queue_url: str, entries: list[dict[str, Any]]) -> None:
        for i in range(0, len(entries), 10):
            chunk = entries[i : i + 10]
            for attempt in range(_BATCH_RETRIES):
                with translate("sqs:SendMessageBatch"):
                    resp = self.c.sqs.send_message_batch(QueueUrl=queue_url, Entries=chunk)
                failed = resp.get("Failed") or []
                if not failed:
                    break
                if any(f.get("SenderFault") for f in failed):
                    raise TransientStorageError(
                        f"sqs:SendMessageBatch: sender fault {failed[0].get('Code')}"
                    )
                ids = {f["Id"] for f in failed}
                chunk = [e for e in chunk if e["Id"] in ids]
                time.sleep(min(0.05 * (2**attempt), 1.0))
            else:
                raise TransientStorageError("sqs:SendMessageBatch: failed entries after retries")

    def post_bounce(self, refs: Sequence[MailRef]) -> None:
        entries = [
            {
                "Id": str(i),
                "MessageBody": json.dumps({"v": 1, **ref.to_json()}, separators=(",", ":")),
            }
            for i, ref in enumerate(refs)
        ]
        self._send_batch(self.s.bounce_queue_url, entries)

    def repost(
        self,
        refs: Sequence[MailRef],
        delay: int = 0,
        *,
        priority: Priority = Priority.TRANSACTIONAL,
        pool: str = "",
    ) -> None:
        """Post fresh triggers (sweeper: a trigger lost between state write and SQS send)."""
        self._send_triggers(refs, delay, priority, pool)

    def repost_groups(self, groups: Sequence[Group], delay: int = 0) -> None:
        """Fresh triggers for these groups, each on its own pool's or priority's queue."""
        for p, pool in sorted({(g.priority, g.pool) for g in groups}):
            refs = [g.ref for g in groups if (g.priority, g.pool) == (p, pool)]
            self._send_triggers(refs, delay, p, pool)

    # ------------------------------------------------------------------ enqueue
    def validate(self, envelope: Envelope, content: bytes) -> None:
        """Everything enqueue refuses, checked before anything is written."""
        transitions.validate_envelope(
            envelope, content, max_recipients=self.s.max_recipients, max_size=self.s.max_size
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
        if idempotency_key is not None:
            check_no_ctl(idempotency_key, "idempotency_key")
            mail_id = mail_id_for_key(self.s.idempotency_scope, idempotency_key)
        else:
            mail_id = new_mail_id()
        plan = transitions.plan_enqueue(
            envelope,
            mail_id,
            group_limit=self.s.group_recipient_limit,
            now=now,
            not_before=not_before,
        )
        recipients, groups, due, answer = plan.recipients, plan.groups, plan.due, plan.answer
        sha = hashlib.sha256(content).hexdigest()
        packed = self._packed(content)
        if packed is not None and idempotency_key is None and len(groups) == 1:
            single = self._enqueue_single(
                mail_id, sha, packed, content, answer, envelope, recipients, groups, now, due
            )
            if single is not None:
                return single
        if packed is not None and len(packed) <= self.s.inline_content_max_bytes:
            return self._enqueue_inline(
                mail_id,
                sha,
                packed,
                len(content),
                answer,
                envelope,
                recipients,
                groups,
                now,
                due,
                keyed=idempotency_key is not None,
            )
        key = self.content_key(mail_id)

        if idempotency_key is not None:
            # The key must outlive the mail: a finished keyed mail leaves a tombstone, and a
            # retry arriving after cleanup must find it rather than queue the mail again.
            # One consistent read, paid only by keyed submissions.
            with translate("dynamodb:GetItem"):
                got = self.c.dynamodb.get_item(
                    TableName=self.s.table,
                    Key={"pk": {"S": _pk(mail_id)}, "sk": {"S": "M"}},
                    ConsistentRead=True,
                )
            if "Item" in got:
                stored = _from_ddb(got["Item"])
                _check_same(stored, sha, envelope)
                if stored.get("tomb"):
                    return replace(answer, duplicate=True)

        # 1. content, written once
        try:
            with translate("s3:PutObject"):
                try:
                    self.c.s3.put_object(
                        Bucket=self.s.bucket,
                        Key=key,
                        Body=content,
                        IfNoneMatch="*",
                        ContentType="message/rfc822",
                        Metadata={"sha256": sha},
                    )
                except ClientError as e:
                    if error_code(e) in ("PreconditionFailed", "412"):
                        raise _AlreadyStored() from e
                    raise
        except _AlreadyStored:
            return self._resume_enqueue(
                mail_id, sha, answer, envelope, recipients, groups, now, due
            )

        # 2. state: one mail item + one item per group, one BatchWriteItem for ≤ 24 groups
        if idempotency_key is None and len(groups) == 1 and self.s.solo_item_max_bytes > 0:
            # one group, no key to keep: an S3 solo mail, one item (see S3_SOLO_MARK)
            items = self._items_for(
                mail_id, sha, envelope, recipients, groups, now, due, S3_SOLO_MARK + key,
                len(content),
            )  # fmt: skip
            # without content it is the group item plus a few fields, whatever its size
            solo = _folded(items)
            _add_headers(solo, content, reserve=CLAIM_GROWTH)
            return self._put_solo(solo, answer, groups, envelope, now, due)
        items = self._items_for(
            mail_id, sha, envelope, recipients, groups, now, due, key, len(content)
        )
        _add_headers(items[0], content)
        self._batch_write([{"PutRequest": {"Item": it}} for it in items])
        # 3. triggers
        self._send_triggers(
            [MailRef(mail_id, g) for g in groups],
            _seconds_until(due, now),
            priority_of(envelope.tags),
            pool_of(envelope.tags),
        )
        return answer

    # ---- content in the mail item (issue 18): enqueue ------------------------------------
    def _content_items(self) -> bool:
        """Whether a one-group mail may keep its content in an item of its own: content
        in DynamoDB at all (`inline_content_max_bytes`), solo mails, content items on."""
        s = self.s
        return min(s.inline_content_max_bytes, s.solo_item_max_bytes, s.content_item_max_bytes) > 0

    def _packed(self, content: bytes) -> bytes | None:
        """zlib(content) when it is small enough to live in the mail item or in a content
        item, else None (the caller checks which: the mail item's limit is the smaller)."""
        limit = self.s.inline_content_max_bytes
        if limit > 0 and self._content_items():
            limit = max(limit, self.s.content_item_max_bytes)
        if limit <= 0 or len(content) > 64 * limit:  # not worth compressing to find out
            return None
        packed = zlib.compress(content, 6)
        return packed if len(packed) <= limit else None

    def _enqueue_single(
        self,
        mail_id: str,
        sha: str,
        packed: bytes,
        content: bytes,
        answer: QueuedMail,
        envelope: Envelope,
        recipients: tuple[Recipient, ...],
        groups: dict[str, list[Recipient]],
        now: datetime,
        due: datetime,
    ) -> QueuedMail | None:
        """A one-group unkeyed mail with content for DynamoDB: one solo item when it
        stays within one write unit through its claim (or content items are off), else
        its content in an item of its own and a group item of one unit (CONTENT_SK);
        None when neither fits (the caller stores it as before)."""
        from mailqueue.backends.aws.limits import item_size

        # built once: the solo item is these items with the content folded in (its key
        # is SOLO_MARK, whatever this one), the content item's group item these as they are
        items = self._items_for(
            mail_id, sha, envelope, recipients, groups, now, due, content_item_key(mail_id),
            len(content),
        )  # fmt: skip
        solo = None
        if len(packed) <= self.s.inline_content_max_bytes:
            mail, grp = items
            solo = self._solo_item([{**mail, _BODY: {"B": packed}}, grp])
        on = self._content_items()
        if solo is not None and (not on or item_size(solo) <= self.s.content_item_above_bytes):
            return self._put_solo(solo, answer, groups, envelope, now, due)
        if on:
            keep = timedelta(
                seconds=self.s.max_queue_lifetime_seconds + self.s.content_item_margin_seconds
            )
            citem = {
                "pk": {"S": _pk(mail_id)},
                "sk": {"S": CONTENT_SK},
                _BODY: {"B": packed},
                "expires_at": {"N": str(int((max(now, due) + keep).timestamp()))},
            }
            if item_size(citem) <= self.s.content_item_max_bytes:
                grp = _folded(items)
                _add_headers(grp, content, reserve=CLAIM_GROWTH)
                # the content first, durable before any group names it (a crash between
                # leaves an item no group names, which its TTL removes)
                with translate("dynamodb:PutItem"):
                    self.c.dynamodb.put_item(TableName=self.s.table, Item=citem)
                return self._put_solo(grp, answer, groups, envelope, now, due)
        if solo is not None:
            return self._put_solo(solo, answer, groups, envelope, now, due)
        return None

    def _keep_content(self, mail_id: str) -> None:
        """A held mail's content item kept `content_expiration_days` from now (as S3's
        backstop keeps its objects): a hold has no lifetime. Never creates the item."""
        until = int(self.clock().timestamp()) + self.s.content_expiration_days * 86400
        with translate("dynamodb:UpdateItem"):
            try:
                self.c.dynamodb.update_item(
                    TableName=self.s.table,
                    Key={"pk": {"S": _pk(mail_id)}, "sk": {"S": CONTENT_SK}},
                    UpdateExpression="SET expires_at = :t",
                    ConditionExpression="attribute_exists(pk) AND expires_at < :t",
                    ExpressionAttributeValues={":t": {"N": str(until)}},
                )
            except ClientError as e:
                # gone (nothing to keep), or kept at least as long already
                if error_code(e) != "ConditionalCheckFailedException":
                    raise

    def _enqueue_inline(
        self,
        mail_id: str,
        sha: str,
        packed: bytes,
        size: int,
        answer: QueuedMail,
        envelope: Envelope,
        recipients: tuple[Recipient, ...],
        groups: dict[str, list[Recipient]],
        now: datetime,
        due: datetime,
        *,
        keyed: bool,
    ) -> QueuedMail:
        """Content in the mail item, written with (unkeyed) or before (keyed) the groups.

        Unkeyed: one BatchWriteItem of the mail item (content included) and the groups;
        the id is fresh, nobody else writes it. Keyed: the mail item first, only if absent
        (what S3's If-None-Match did): a retry, a concurrent twin or a tombstone finds the
        stored item in the refusal and is answered from it, as before; and the content is
        durable before any group names it.
        """
        key = inline_key(mail_id)
        items = self._items_for(
            mail_id, sha, envelope, recipients, groups, now, due, key, size, body=packed
        )
        rest = items
        if keyed:
            try:
                with translate("dynamodb:PutItem"):
                    try:
                        self.c.dynamodb.put_item(
                            TableName=self.s.table,
                            Item=items[0],
                            ConditionExpression="attribute_not_exists(pk)",
                            ReturnValuesOnConditionCheckFailure="ALL_OLD",
                        )
                    except ClientError as e:
                        if error_code(e) == "ConditionalCheckFailedException":
                            raise _Refused(e.response.get("Item")) from e
                        raise
            except _Refused as r:
                stored = _from_ddb(r.item) if r.item else self._mail_item(mail_id)
                if stored is None:  # gone again meanwhile (TTL): answer as a retry would
                    raise TransientStorageError("mail item changed during enqueue") from None
                _check_same(stored, sha, envelope)
                if stored.get("tomb"):
                    return replace(answer, duplicate=True)
                return self._resume_enqueue(
                    mail_id,
                    sha,
                    answer,
                    envelope,
                    recipients,
                    groups,
                    now,
                    due,
                    key=str(stored.get("content_key") or key),
                    size=int(stored.get("size", size)),
                )
            rest = items[1:]
        self._batch_write([{"PutRequest": {"Item": it}} for it in rest])
        self._send_triggers(
            [MailRef(mail_id, g) for g in groups],
            _seconds_until(due, now),
            priority_of(envelope.tags),
            pool_of(envelope.tags),
        )
        return answer

    def _solo_item(self, items: list[dict[str, Any]]) -> dict[str, Any] | None:
        """The mail item, content included, folded into its only group item, if that
        stays small enough; its content key is SOLO_MARK (the content is in it)."""
        from mailqueue.backends.aws.limits import item_size

        if self.s.solo_item_max_bytes <= 0:
            return None
        solo = {**_folded(items), "content_key": {"S": SOLO_MARK}}
        return solo if item_size(solo) <= self.s.solo_item_max_bytes else None

    def _put_solo(
        self,
        solo: dict[str, Any],
        answer: QueuedMail,
        groups: dict[str, list[Recipient]],
        envelope: Envelope,
        now: datetime,
        due: datetime,
    ) -> QueuedMail:
        """A solo mail's one item, then its trigger. One item, fresh id: nothing to race
        with; durable (3 AZs) when the PutItem returns."""
        with translate("dynamodb:PutItem"):
            self.c.dynamodb.put_item(TableName=self.s.table, Item=solo)
        self._send_triggers(
            [MailRef(answer.mail_id, g) for g in groups],
            _seconds_until(due, now),
            priority_of(envelope.tags),
            pool_of(envelope.tags),
        )
        return answer

    def _mail_item(self, mail_id: str) -> dict[str, Any] | None:
        with translate("dynamodb:GetItem"):
            got = self.c.dynamodb.get_item(
                TableName=self.s.table,
                Key={"pk": {"S": _pk(mail_id)}, "sk": {"S": "M"}},
                ConsistentRead=True,
            )
        return _from_ddb(got["Item"]) if "Item" in got else None

    # ---- end content in the mail item: enqueue --------------------------------------------

    def _items_for(
        self,
        mail_id: str,
        sha: str,
        envelope: Envelope,
        recipients: tuple[Recipient, ...],
        groups: dict[str, list[Recipient]],
        now: datetime,
        due: datetime,
        key: str,
        size: int,
        body: bytes | None = None,
    ) -> list[dict[str, Any]]:
        common: dict[str, Any] = {
            "pk": _pk(mail_id),
            "sender": envelope.sender,
            "arrival": to_iso(now),
            "content_key": key,
            "size": size,
            "ret": envelope.ret.value if envelope.ret else None,
            "envid": envelope.envid,
            "smtputf8": envelope.smtputf8,
        }
        if envelope.tags:  # on every item: the event log reads a mail's tags from each
            common["tags"] = dict(envelope.tags)
        mail: dict[str, Any] = {
            **common,
            "sk": "M",
            "sha256": sha,
            "env_sha": envelope_digest(envelope),
            "groups": list(groups),
            "rcpt_count": len(recipients),
        }
        if body is not None:
            mail[_BODY] = body  # content in the mail item (see INLINE_PREFIX)
        out = [mail]
        for gkey, rs in groups.items():
            out.append(
                {
                    **common,
                    "sk": _gsk(gkey),
                    "dom": group_key_for(rs[0].address),
                    "ng": len(groups),
                    "rcpts": {r.rid: r.to_json() for r in rs},
                    "st": state_key(GroupState.QUEUED.value, mail_id, self.s.state_shards),
                    "due": _ms(due),
                    "next_at": to_iso(due),
                }
            )
        return [_to_ddb(it) for it in out]

    def _resume_enqueue(
        self,
        mail_id: str,
        sha: str,
        answer: QueuedMail,
        envelope: Envelope,
        recipients: tuple[Recipient, ...],
        groups: dict[str, list[Recipient]],
        now: datetime,
        due: datetime,
        *,
        key: str | None = None,
        size: int | None = None,
    ) -> QueuedMail:
        """A retried enqueue (same idempotency key): finish what the first call left.

        `key`/`size`: where the first call stored the content and its size (a mail item
        that holds or names it); without them, the S3 object's metadata tells.
        """
        if key is None or size is None:
            key = self.content_key(mail_id)
            with translate("s3:HeadObject"):
                head = self.c.s3.head_object(Bucket=self.s.bucket, Key=key)
            if head.get("Metadata", {}).get("sha256") != sha:
                raise Conflict("idempotency key reused with different content")
            size = int(head.get("ContentLength", 0))
        existing = {it["sk"]: it for it in self._query_mail(mail_id)}
        mail_item = existing.get("M")
        if mail_item is not None:
            if mail_item.get("sha256") != sha or mail_item.get("env_sha") != envelope_digest(
                envelope
            ):
                raise Conflict("idempotency key reused with a different envelope")
            # answer with what was stored first (arrival, groups)
            arrival = from_iso(mail_item.get("arrival")) or now
            stored_groups = {g: groups.get(g, []) for g in mail_item.get("groups", [])}
            if set(stored_groups) != set(groups):
                raise Conflict("idempotency key reused with different recipients")
            now = arrival
        items = self._items_for(
            mail_id,
            sha,
            envelope,
            recipients,
            groups,
            now,
            due,
            key,
            size,
        )
        missing = [it for it in items if it["sk"]["S"] not in existing]
        if missing:
            self._batch_write([{"PutRequest": {"Item": it}} for it in missing])
        # A trigger may have been lost with the first call; duplicates are harmless (claims
        # are conditional), so re-post for groups that never had an attempt.
        fresh = [
            MailRef(mail_id, g)
            for g in groups
            if _gsk(g) not in existing
            or (
                state_of(existing[_gsk(g)].get("st")) == GroupState.QUEUED.value
                and not any(
                    r.get("attempts") for r in (existing[_gsk(g)].get("rcpts") or {}).values()
                )
            )
        ]
        if fresh:
            self._send_triggers(
                fresh,
                _seconds_until(due, self.clock()),
                priority_of(envelope.tags),
                pool_of(envelope.tags),
            )
        return replace(answer, duplicate=True)

    # ------------------------------------------------------------------ reads
    def _query_mail(self, mail_id: str) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        kw: dict[str, Any] = {
            "TableName": self.s.table,
            "KeyConditionExpression": "pk = :pk",
            "ExpressionAttributeValues": {":pk": {"S": _pk(mail_id)}},
            "ConsistentRead": True,
        }
        while True:
            with translate("dynamodb:Query"):
                resp = self.c.dynamodb.query(**kw)
            out.extend(_from_ddb(it) for it in resp.get("Items", []))
            lek = resp.get("LastEvaluatedKey")
            if not lek:
                return out
            kw["ExclusiveStartKey"] = lek

    def get_mail(self, mail_id: str) -> tuple[dict[str, Any] | None, list[Group]]:
        """The mail item and its groups (consistent read). Raises NotFound if none exist."""
        items = self._query_mail(mail_id)
        if not items:
            raise NotFound(mail_id)
        mail = next((it for it in items if it["sk"] == "M"), None)
        if mail is not None:
            mail = {k: v for k, v in mail.items() if k != _BODY}  # content: read_content
        else:
            solo = next((it for it in items if is_solo(it.get("content_key"))), None)
            mail = _mail_view(solo) if solo is not None else None
        groups = [self._group_from_item(it) for it in items if it["sk"].startswith("G#")]
        return mail, groups

    def get_group(self, ref: MailRef) -> Group:
        with translate("dynamodb:GetItem"):
            resp = self.c.dynamodb.get_item(
                TableName=self.s.table,
                Key={"pk": {"S": _pk(ref.mail_id)}, "sk": {"S": _gsk(ref.group)}},
                ConsistentRead=True,
            )
        if "Item" not in resp:
            raise NotFound(f"{ref.mail_id}/{ref.group}")
        return self._group_from_item(_from_ddb(resp["Item"]))

    def _query_state(
        self,
        state: str,
        *,
        due_op: str | None,
        due: datetime | None,
        limit: int,
        cursor: str | None,
        lease_before: datetime | None = None,
    ) -> Page:
        """A page of groups in `state`, over every shard of the state index in turn.

        The cursor is the position in that walk: which shard ("s", an index into the
        index key values walked) and where in it ("k", DynamoDB's LastEvaluatedKey).
        Groups are in `due` order within a shard, not across shards. A page may take
        several Queries (empty shards are skipped within the same call).

        `inflight` is not an index key any more (a claim leaves the index alone): its
        groups are the `queued` entries whose item holds a lease, plus entries written
        `inflight#<shard>` before that change. `due` bounds them too (a lease starts at
        or after its group became due); `lease_before` keeps those whose lease ends
        before it."""
        unsharded = self.s.state_unsharded_reads
        keys = state_keys(state, self.s.state_shards, unsharded=unsharded)
        if state == GroupState.INFLIGHT.value:
            keys += state_keys(GroupState.QUEUED.value, self.s.state_shards, unsharded=unsharded)
        pos = _dec_cursor(cursor) or {}
        if pos and ("s" not in pos or not isinstance(pos.get("s"), int)):
            raise InvalidInput("invalid_cursor", "cursor is not one this API issued", "cursor")
        shard = int(pos.get("s", 0))
        start: dict[str, Any] | None = pos.get("k") or None
        want = max(1, min(limit, 1000))
        due_ms = _ms(due) if due_op and due is not None else None
        out: list[Group] = []
        # a small index is read whole in one Scan; a large one by concurrent shard
        # Queries (index_walk says how, and what each costs)
        snap = self._index_snapshot()

        def request(st: str, limit_: int, esk: dict[str, Any] | None) -> dict[str, Any]:
            kw: dict[str, Any] = {
                "TableName": self.s.table,
                "IndexName": GSI_STATE,
                "KeyConditionExpression": "st = :st",
                "ExpressionAttributeValues": {":st": {"S": st}},
                "Limit": limit_,
            }
            if due_ms is not None:
                kw["KeyConditionExpression"] += f" AND due {due_op} :due"
                kw["ExpressionAttributeValues"][":due"] = {"N": str(due_ms)}
            if esk:
                kw["ExclusiveStartKey"] = esk
            return kw

        while shard < len(keys) and len(out) < want:
            remaining = want - len(out)
            answers: list[tuple[int, list[dict[str, Any]], dict[str, Any] | None]] = []
            if snap is not None:  # the shards from here until the page's entries are in
                i, esk, need = shard, start, remaining
                while i < len(keys) and need > 0:
                    rows, lek = snap.page(
                        keys[i], due_op=due_op, due_ms=due_ms, start=esk, limit=need
                    )
                    answers.append((i, rows, lek))
                    need -= len(rows)
                    if lek:
                        break
                    i, esk = i + 1, None
            else:
                window = (
                    [shard]
                    if start
                    else list(range(shard, min(len(keys), shard + index_walk.WALK_CONCURRENCY)))
                )
                resps = index_walk.query_pages(
                    self.c.dynamodb,
                    [request(keys[i], remaining, start if i == shard else None) for i in window],
                )
                answers = [
                    (i, r.get("Items", []), r.get("LastEvaluatedKey") or None)
                    for i, r in zip(window, resps, strict=True)
                ]
            # the answers in shard order, up to the page: where the walk stands after them
            taken: list[dict[str, Any]] = []
            for i, rows, lek in answers:
                room = remaining - len(taken)
                if room <= 0:
                    break  # `shard` is already i: the page filled on the shards before it
                if len(rows) > room:  # a window's Query asked for the whole page
                    rows = rows[:room]
                    lek = index_walk.entry_key(rows[-1])
                taken.extend(rows)
                shard, start = (i, lek) if lek else (i + 1, None)
                if lek:
                    break  # this shard goes on first: the next shards' answers are dropped
            got = self._hydrate(taken, state)  # one BatchGetItem per 100 entries
            if state == GroupState.QUEUED.value and due_op and due is not None:
                # an entry may lag its group's schedule (index_due_slack_seconds): the
                # group's own `next_at` decides
                got = [
                    g
                    for g in got
                    if (g.next_attempt_at <= due if due_op == "<=" else g.next_attempt_at < due)
                ]
            if lease_before is not None:
                got = [g for g in got if g.lease_until is not None and g.lease_until < lease_before]
            out.extend(got)
        more = shard < len(keys)
        nxt = _enc_cursor({"s": shard, "k": start}) if more else None
        return Page(items=tuple(out), cursor=nxt)

    def _index_snapshot(self) -> index_walk.Snapshot | None:
        if self.index_snapshot_limit <= 0:
            return None
        scope = read_scope_cache()  # one operator read: one Scan for all its walks
        if scope is not None and "index_snapshot" in scope:
            cached: index_walk.Snapshot | None = scope["index_snapshot"]
            return cached
        snap = index_walk.snapshot(self.c.dynamodb, self.s.table, self.index_snapshot_limit)
        if scope is not None:
            scope["index_snapshot"] = snap
        return snap

    def _hydrate(self, entries: list[dict[str, Any]], state: str) -> list[Group]:
        """The groups behind index entries, read whole from the table in the index's order.

        The index projects keys only (an index write is then one unit whatever the item's
        size: README, "Data model"), so a page of entries is read back with BatchGetItem,
        strongly consistent; an entry whose item has moved on to another state since (the
        index is eventually consistent; a claimed group is `inflight`) or is gone is left
        out."""
        keys = [{"pk": e["pk"], "sk": e["sk"]} for e in entries if "pk" in e and "sk" in e]
        if not keys:
            return []
        found: dict[tuple[str, str], dict[str, Any] | None]
        if all(k in e for e in entries for k in ("rcpts", "sender")):
            found = {(it["pk"]["S"], it["sk"]["S"]): it for it in entries}  # projection ALL
        else:
            # within one operator read (core.storage.read_scope) each group is read once:
            # `inflight` walks the `queued` entries again
            scope = read_scope_cache()
            found = scope.setdefault("groups", {}) if scope is not None else {}
            missing = [k for k in keys if (k["pk"]["S"], k["sk"]["S"]) not in found]
            for i in range(0, len(missing), 100):
                part = missing[i : i + 100]
                got = {(it["pk"]["S"], it["sk"]["S"]): it for it in self._batch_get(part)}
                for k in part:  # a key not found is remembered as gone
                    found[(k["pk"]["S"], k["sk"]["S"])] = got.get((k["pk"]["S"], k["sk"]["S"]))
        out: list[Group] = []
        for k in keys:
            it = found.get((k["pk"]["S"], k["sk"]["S"]))
            if it is None:
                continue
            g = self._group_from_item(_from_ddb(it))
            if g.state.value != state:
                continue
            out.append(g)
        return out

    def list_queue(
        self,
        *,
        state: GroupState = GroupState.QUEUED,
        due_before: datetime | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> Page:
        value = GroupState(state).value
        return self._query_state(
            value,
            due_op="<=",
            due=due_before,
            limit=limit,
            cursor=cursor,
            lease_before=(  # an inflight group's `due` was its lease's end
                due_before + timedelta(milliseconds=1)
                if due_before is not None and value == GroupState.INFLIGHT.value
                else None
            ),
        )

    def count_state(self, state: GroupState) -> int:
        """Groups in `state`: Select=COUNT on every shard of the state index, paged (the
        read units of reading them, eventually consistent; no items transferred).

        A claimed group keeps its `queued` entry (the lease is not in the index), so it
        is counted as queued; `inflight` counts only entries written before that change.
        A sum over the pending states, what the admin jobs estimate, is exact."""
        keys = state_keys(
            GroupState(state).value,
            self.s.state_shards,
            unsharded=self.s.state_unsharded_reads,
        )
        snap = self._index_snapshot()
        if snap is not None:  # the whole index in one Scan page (index_walk)
            return sum(snap.count(k) for k in keys)
        n = 0
        for i in range(0, len(keys), index_walk.WALK_CONCURRENCY):
            pending = [
                {
                    "TableName": self.s.table,
                    "IndexName": GSI_STATE,
                    "KeyConditionExpression": "st = :st",
                    "ExpressionAttributeValues": {":st": {"S": key}},
                    "Select": "COUNT",
                }
                for key in keys[i : i + index_walk.WALK_CONCURRENCY]
            ]
            while pending:  # each shard paged until it has no LastEvaluatedKey
                resps = index_walk.query_pages(self.c.dynamodb, pending)
                n += sum(int(r.get("Count", 0)) for r in resps)
                pending = [
                    {**kw, "ExclusiveStartKey": r["LastEvaluatedKey"]}
                    for kw, r in zip(pending, resps, strict=True)
                    if r.get("LastEvaluatedKey")
                ]
        return n

    def find_inflight(self, now: datetime, *, limit: int = 100, cursor: str | None = None) -> Page:
        """Groups whose lease ended before `now` (its holder died): the overdue `queued`
        entries read back, those holding an expired lease kept."""
        return self._query_state(
            GroupState.INFLIGHT.value,
            due_op="<",
            due=now,
            limit=limit,
            cursor=cursor,
            lease_before=now,
        )

    def find_pending_cleanup(
        self,
        now: datetime,
        *,
        grace_seconds: int = 300,
        orphan_grace_seconds: int = 129600,
        orphans: bool = True,
    ) -> Iterator[PendingCleanup]:
        seen: set[str] = set()
        cursor: str | None = None
        while True:
            page = self._query_state(
                GroupState.DONE.value,
                due_op="<",
                due=now - timedelta(seconds=grace_seconds),
                limit=200,
                cursor=cursor,
            )
            for g in page.items:
                if g.mail_id not in seen:
                    seen.add(g.mail_id)
                    yield PendingCleanup(g.mail_id, "finished")
            cursor = page.cursor
            if not cursor:
                break
        if orphans:
            yield from self.find_orphans(now - timedelta(seconds=orphan_grace_seconds))

    def find_orphans(self, older_than: datetime) -> Iterator[PendingCleanup]:
        """Content objects with no state, last modified before `older_than` (a failed enqueue).

        Lists the content prefix (1 request per 1,000 objects) and checks candidates with
        BatchGetItem; meant for a slow schedule (daily), not every sweep.
        """
        paginator = self.c.s3.get_paginator("list_objects_v2")
        with translate("s3:ListObjectsV2"):
            pages = list(paginator.paginate(Bucket=self.s.bucket, Prefix=self.s.content_prefix))
        candidates = [
            obj["Key"][len(self.s.content_prefix) :].rsplit("/", 1)[-1]  # hashed prefix off
            for p in pages
            for obj in p.get("Contents", [])
            if obj["LastModified"] < older_than
        ]
        now_s = self.clock().timestamp()
        for i in range(0, len(candidates), 100):
            chunk = candidates[i : i + 100]
            present = self._existing_mail_items(chunk)
            for mid in chunk:
                if mid in present:
                    continue
                if any(not _expired(it, now_s) for it in self._query_mail(mid)):
                    continue  # groups without a mail item (a solo mail): not an orphan
                yield PendingCleanup(mid, "orphan")

    def _existing_mail_items(self, mail_ids: list[str]) -> set[str]:
        keys: list[dict[str, Any]] = [{"pk": {"S": _pk(m)}, "sk": {"S": "M"}} for m in mail_ids]
        return {it["pk"]["S"][2:] for it in self._batch_get(keys, projection="pk")}

    def _batch_get(
        self, keys: list[dict[str, Any]], projection: str | None = None
    ) -> list[dict[str, Any]]:
        """Up to 100 items by key, strongly consistent, unprocessed keys retried with
        backoff (raw DynamoDB items; the ones that exist)."""
        spec: dict[str, Any] = {"Keys": keys, "ConsistentRead": True}
        if projection:
            spec["ProjectionExpression"] = projection
        request: dict[str, Any] = {self.s.table: spec}
        out: list[dict[str, Any]] = []
        for attempt in range(_BATCH_RETRIES):
            with translate("dynamodb:BatchGetItem"):
                resp = self.c.dynamodb.batch_get_item(RequestItems=request)
            out.extend(resp.get("Responses", {}).get(self.s.table, []))
            request = resp.get("UnprocessedKeys") or {}
            if not request:
                return out
            time.sleep(min(0.05 * (2**attempt), 1.0))
        raise TransientStorageError("dynamodb:BatchGetItem: unprocessed keys after retries")

    # ------------------------------------------------------------------ claims
    def send_start(
        self,
        ref: MailRef,
        now: datetime,
        *,
        lease_seconds: int | None = None,
        receipt_handle: str | None = None,
    ) -> Claim | ClaimRefused:
        got = self._lease(
            ref,
            now,
            lease_seconds or self.s.lease_seconds,
            "((begins_with(st, :queued) AND " + _DUE_NOW + ") OR "
            "(begins_with(st, :inflight) AND due < :now_ms)) AND "
            + LEASE_FREE
            + " AND "
            + _UNRECORDED_OK,
        )
        if isinstance(got, ClaimRefused):
            if got.reason == "unrecorded":
                return self._hold_unrecorded(ref, now)
            return got
        group, token, body = got
        return Claim(
            group=group,
            token=token,
            receipt_handle=receipt_handle,
            started_at=now,
            content=body,
        )

    def admin_claim(
        self, ref: MailRef, now: datetime, *, lease_seconds: int = 60
    ) -> Claim | ClaimRefused:
        """Claim a queued (due or not) or held group for an operator action.

        The same lease as delivery, so an operator action and a delivery attempt exclude
        each other: a live delivery lease refuses the operator ("claimed"), and vice versa.
        """
        got = self._lease(
            ref,
            now,
            lease_seconds,
            "(begins_with(st, :queued) OR begins_with(st, :held) OR "
            "(begins_with(st, :inflight) AND due < :now_ms)) AND " + LEASE_FREE,
        )
        if isinstance(got, ClaimRefused):
            return ClaimRefused("finished") if got.reason == "not_due" else got
        group, token, _ = got
        # held recipients count as pending for an operator claim
        group = replace(
            group,
            recipients=tuple(
                r.with_(state=RecipientState.INFLIGHT) if r.state == RecipientState.HELD else r
                for r in group.recipients
            ),
        )
        return Claim(group=group, token=token, started_at=now)

    def _lease(
        self, ref: MailRef, now: datetime, lease_seconds: int, condition: str
    ) -> tuple[Group, str, bytes | None] | ClaimRefused:
        """One conditional write: the group becomes inflight under a fresh lease token.

        The table item only: `st` and `due` are left as they are, so the state index is
        not written (two index writes an attempt fewer than moving the group to an
        `inflight` key and back). Returns the group, the token and, for a solo mail, its
        content (from the same answer)."""
        token = secrets.token_hex(8)
        lease_until = now + timedelta(seconds=lease_seconds)
        values = {
            ":inflight": {"S": GroupState.INFLIGHT.value},
            ":queued": {"S": GroupState.QUEUED.value},
            ":held": {"S": GroupState.HELD.value},
            ":lease_ms": {"N": str(_ms(lease_until))},
            ":tok": {"S": token},
            ":now": {"S": to_iso(now)},
            ":now_ms": {"N": str(_ms(now))},
            ":zero": {"N": "0"},
            ":one": {"N": "1"},
            ":max_claims": {"N": str(self.s.max_unrecorded_claims)},
        }
        used = {
            k: v
            for k, v in values.items()
            if re.search(re.escape(k) + r"\b", condition + " " + _LEASE_SET)
        }
        try:
            with translate("dynamodb:UpdateItem"):
                try:
                    resp = self.c.dynamodb.update_item(
                        TableName=self.s.table,
                        Key={"pk": {"S": _pk(ref.mail_id)}, "sk": {"S": _gsk(ref.group)}},
                        UpdateExpression=_LEASE_SET,
                        ConditionExpression=condition,
                        ExpressionAttributeValues=used,
                        ReturnValues="ALL_NEW",
                        ReturnValuesOnConditionCheckFailure="ALL_OLD",
                    )
                except ClientError as e:
                    if error_code(e) == "ConditionalCheckFailedException":
                        raise _Refused(e.response.get("Item")) from e
                    raise
        except _Refused as r:
            refusal = self._refusal(r.item, now)
            key = ((r.item or {}).get("content_key") or {}).get("S")
            if refusal.reason == "unrecorded" and is_content_item(key):
                self._keep_content(ref.mail_id)  # before the hold that follows (send_start)
            return refusal
        item = _from_ddb(resp["Attributes"])
        group = self._group_from_item(item)
        # a solo mail: the claim returned the content, so the attempt needs no read for it
        body = inline_body(item) if is_solo(group.content_key) else None
        return group, token, body

    def mark(
        self,
        claim: Claim,
        changed: dict[str, Recipient],
        *,
        next_attempt_at: datetime | None = None,
        op: dict[str, Any] | None = None,
    ) -> Transition:
        """An operator transition under a claim (hold, release, delete, retry-now).

        `op` ({action, actor, job}) is recorded on the item so the event writer can emit
        an Operator event per affected recipient.
        """
        if is_content_item(claim.group.content_key) and any(
            r.state == RecipientState.HELD for r in changed.values()
        ):
            self._keep_content(claim.ref.mail_id)  # a hold has no lifetime: before it
        t = self._transition(claim, changed, next_attempt_at=next_attempt_at, op=op)
        if t.released and t.group.state == GroupState.QUEUED:
            self._send_triggers(
                [claim.ref],
                _seconds_until(t.group.next_attempt_at, self.clock()),
                claim.group.priority,
                claim.group.pool,
            )
        return t

    def _hold_unrecorded(self, ref: MailRef, now: datetime) -> ClaimRefused:
        """Park a group whose claims keep ending with nothing recorded (see _UNRECORDED_OK).

        The group goes to `held` with an operator stamp the event writer reports; an
        operator's release (a transition) resets the count. Logged at ERROR with ids only.
        """
        try:
            with translate("dynamodb:UpdateItem"):
                try:
                    self.c.dynamodb.update_item(
                        TableName=self.s.table,
                        Key={"pk": {"S": _pk(ref.mail_id)}, "sk": {"S": _gsk(ref.group)}},
                        UpdateExpression="SET st = :held, due = :now_ms, op = :op "
                        "REMOVE " + ", ".join(LEASE_ATTRS),
                        ConditionExpression="claims >= :max_claims AND "
                        "(begins_with(st, :queued) OR "
                        "(begins_with(st, :inflight) AND due < :now_ms)) AND " + LEASE_FREE,
                        ExpressionAttributeValues={
                            ":held": {
                                "S": state_key(
                                    GroupState.HELD.value, ref.mail_id, self.s.state_shards
                                )
                            },
                            ":queued": {"S": GroupState.QUEUED.value},
                            ":inflight": {"S": GroupState.INFLIGHT.value},
                            ":now_ms": {"N": str(_ms(now))},
                            ":max_claims": {"N": str(self.s.max_unrecorded_claims)},
                            ":op": _ser.serialize(
                                {
                                    "action": "held",
                                    "actor": "mailqueue:unrecorded-attempts",
                                    "job": None,
                                    "at": to_iso(now),
                                }
                            ),
                        },
                    )
                except ClientError as e:
                    if error_code(e) == "ConditionalCheckFailedException":
                        raise _Refused(None) from e
                    raise
        except _Refused:
            return ClaimRefused("claimed")  # someone else moved it meanwhile: not ours
        log.error(
            "group held: %d claims without a recorded result",
            self.s.max_unrecorded_claims,
            extra={"mail_id": ref.mail_id},
        )
        return ClaimRefused("held")

    def _refusal(self, raw: dict[str, Any] | None, now: datetime | None = None) -> ClaimRefused:
        if not raw:
            return ClaimRefused("gone")
        d = _from_ddb(raw)
        st = state_of(d.get("st"))
        now_ms = _ms(now or self.clock())
        leased = d.get("lease_ms") is not None and int(d["lease_ms"]) >= now_ms
        if (
            not leased
            and st in (GroupState.QUEUED.value, GroupState.INFLIGHT.value)
            and int(d.get("claims", 0)) >= self.s.max_unrecorded_claims
        ):
            due_ms = int(d.get("due", 0))
            if st == GroupState.QUEUED.value or due_ms < now_ms:
                return ClaimRefused("unrecorded")
        if leased:
            return ClaimRefused("claimed", _lease_end(d))
        if st == GroupState.QUEUED.value:
            return ClaimRefused("not_due", from_iso(d.get("next_at")))
        if st == GroupState.INFLIGHT.value:
            return ClaimRefused("claimed", _lease_end(d))
        if st == GroupState.HELD.value:
            return ClaimRefused("held")
        return ClaimRefused("finished")

    def read_inflight(self, claim: Claim) -> InflightMail:
        if claim.content is not None:  # a solo mail: the claim brought it
            return InflightMail(
                group=claim.group, content=io.BytesIO(claim.content), size=len(claim.content)
            )
        if is_inline(claim.group.content_key):  # content in the mail item (issue 18)
            data = read_inline(self.c.dynamodb, self.s.table, claim.group.content_key)
            if data is None:
                raise NotFound(claim.group.content_key)
            return InflightMail(group=claim.group, content=io.BytesIO(data), size=len(data))
        with translate("s3:GetObject"):
            try:
                obj = self.c.s3.get_object(
                    Bucket=self.s.bucket, Key=object_key(claim.group.content_key)
                )
            except ClientError as e:
                if error_code(e) in ("NoSuchKey", "404"):
                    raise NotFound(claim.group.content_key) from e
                raise
        return InflightMail(
            group=claim.group,
            content=ContentStream(obj["Body"]),  # type: ignore[arg-type]
            size=int(obj["ContentLength"]),
        )

    # ------------------------------------------------------------------ transitions
    def _transition(
        self,
        claim: Claim,
        changed: dict[str, Recipient],
        *,
        next_attempt_at: datetime | None = None,
        attempt: Attempt | None = None,
        op: dict[str, Any] | None = None,
        reservation: str | None = None,  # postpone's shaping slot; "": clear it
        wait: dict[str, str] | None = None,  # postpone's reason to wait (Group.wait)
    ) -> Transition:
        """Write changed recipients; release the lease when none of the claim is unresolved.

        One UpdateItem whatever the group size: each changed recipient is written whole
        (`rcpts.#rN = :rN`, one action), so the expression grows ~20 characters and one
        operator per recipient (README, "Data model": why 50 fits, and the limit startup
        enforces). A recipient written whole could put back a `dsn_pending` flag that the
        bounce path cleared meanwhile (it does so without our lease), so every flag we
        rewrite unchanged is also a condition; if one was cleared, we take its current
        value and write again.
        """
        if claim.released:
            raise LeaseLost("this claim was already released")
        group = claim.group
        by_rid = {r.rid: r for r in group.recipients}
        for rid in changed:
            if rid not in by_rid:
                raise InvalidInput("unknown_recipient", f"{rid} is not in this group", "rids")
        for _ in range(_DSN_RACE_RETRIES):
            plan = self._transition_request(
                claim, by_rid, changed, next_attempt_at=next_attempt_at, attempt=attempt, op=op
            )
            if reservation is not None:  # one more action in the same UpdateItem
                req = plan.request
                if reservation:
                    req["ExpressionAttributeValues"][":rsv"] = {"S": reservation}
                    req["UpdateExpression"] = req["UpdateExpression"].replace(
                        "SET ", "SET rsv = :rsv, ", 1
                    )
                else:
                    req["UpdateExpression"] += (
                        ", rsv" if " REMOVE " in req["UpdateExpression"] else " REMOVE rsv"
                    )
            if wait is not None:  # the same UpdateItem: no attempt, a DeliveryDelay event
                req = plan.request
                req["ExpressionAttributeValues"][":wt"] = _ser.serialize(wait)
                req["UpdateExpression"] = req["UpdateExpression"].replace(
                    "SET ", "SET wt = :wt, ", 1
                )
            with translate("dynamodb:UpdateItem"):
                try:
                    self.c.dynamodb.update_item(**plan.request)
                    break
                except ClientError as e:
                    if error_code(e) != "ConditionalCheckFailedException":
                        raise
                    current = e.response.get("Item")
                    if not plan.guarded or not self._still_ours(current, claim.token):
                        raise LeaseLost(f"{group.mail_id}/{group.key}") from e
            # The bounce path cleared a flag we were rewriting: adopt its current value.
            assert current is not None
            now_rcpts = _from_ddb(current).get("rcpts") or {}
            for rid in plan.guarded:
                flag = (now_rcpts.get(rid) or {}).get("dsn_pending")
                by_rid[rid] = by_rid[rid].with_(dsn_pending=flag)
                changed = {**changed, rid: changed[rid].with_(dsn_pending=flag)}
        else:
            raise TransientStorageError("dynamodb:UpdateItem: dsn flags kept changing")
        release, state, next_at, history = plan.release, plan.state, plan.next_at, plan.history
        claim.resolved = plan.resolved
        new_group = replace(
            group,
            recipients=tuple(
                r.with_(state=RecipientState.INFLIGHT)
                if (not release and r.state == RecipientState.QUEUED and r.rid not in plan.resolved)
                else r
                for r in plan.resting
            ),
            state=state,
            next_attempt_at=next_at,
            history=tuple(history),
            reservation=(reservation or None) if reservation is not None else group.reservation,
            wait=wait if wait is not None else group.wait,
            lease_token=None if release else group.lease_token,
            lease_until=None if release else group.lease_until,
            index_due=plan.index_due,
        )
        claim.group = new_group
        if release:
            claim.released = True
        finished = False
        cleaned = False
        if release and state == GroupState.DONE:
            finished, cleaned = self._after_group_done(group.mail_id, group.key, new_group)
        return Transition(
            group=new_group, released=release, mail_finished=finished, cleaned=cleaned
        )

    @staticmethod
    def _still_ours(item: dict[str, Any] | None, token: str) -> bool:
        if not item:
            return False
        return bool(item.get("lease_token", {}).get("S") == token)

    def _transition_request(
        self,
        claim: Claim,
        by_rid: dict[str, Recipient],
        changed: dict[str, Recipient],
        *,
        next_attempt_at: datetime | None,
        attempt: Attempt | None,
        op: dict[str, Any] | None,
    ) -> _TransitionPlan:
        """The UpdateItem that records `changed` under the claim's lease (no I/O).

        Also what `transition_capacity` builds with worst-case values to check a group
        size against DynamoDB's limits at startup.
        """
        now = self.clock()
        group = claim.group
        new_rcpts = {rid: changed.get(rid, r) for rid, r in by_rid.items()}
        resolved = claim.resolved | set(changed)
        unresolved = [r for r in group.pending() if r.rid not in resolved]
        release = not unresolved

        names: dict[str, str] = {}
        values: dict[str, Any] = {":tok": {"S": claim.token}}
        sets: list[str] = []
        removes: list[str] = []
        conds = ["lease_token = :tok"]  # a token is one claim's: a later claim replaced it
        guarded: list[str] = []
        for i, (rid, r) in enumerate(changed.items()):
            old = by_rid[rid]
            stored = _resting(r)
            names[f"#r{i}"] = rid
            values[f":r{i}"] = {"M": _to_ddb(stored.to_json())}
            sets.append(f"rcpts.#r{i} = :r{i}")
            if stored.dsn_pending and stored.dsn_pending == old.dsn_pending:
                kind = f":dp_{stored.dsn_pending}"
                names["#dp"] = "dsn_pending"
                values[kind] = {"S": stored.dsn_pending}
                conds.append(f"rcpts.#r{i}.#dp = {kind}")
                guarded.append(rid)
        if content_elsewhere(group.content_key):
            # the header section served the Send (read from the INSERT's image); every
            # later image is smaller without it: a retried S3 or content-item solo group
            # stays within one write unit through its reschedule
            removes.append("hdrs")
        resting_rcpts = tuple(_resting(r) for r in new_rcpts.values())
        history = list(group.history)
        if attempt is not None:
            history = transitions.with_attempt(history, attempt, self.s.history_limit)
            values[":hist"] = _ser.serialize([_bounded_attempt(a) for a in history])
            sets.append("history = :hist")
        if op is not None:
            values[":op"] = _ser.serialize({**op, "at": to_iso(now)})
            sets.append("op = :op")
        else:
            removes.append("op")
        values[":zero"] = {"N": "0"}
        sets.append("claims = :zero")  # something was recorded: see _UNRECORDED_OK
        next_at = next_attempt_at or group.next_attempt_at
        state = GroupState.INFLIGHT
        index_due = group.index_due  # not released: the index is not written
        if release:
            state = derive_group_state(resting_rcpts)
            due = next_at if state == GroupState.QUEUED else now
            lag = self.s.index_due_slack_seconds
            kept = group.index_due  # the entry's `due` when the item is queued (None: not)
            keep_due = (
                state == GroupState.QUEUED
                and kept is not None
                and kept <= next_at <= kept + timedelta(seconds=lag)
            )
            index_due = kept if keep_due else (due if state == GroupState.QUEUED else None)
            values[":next"] = {"S": to_iso(next_at)}
            sets.append("next_at = :next")
            removes += list(LEASE_ATTRS)
            ttl = int(now.timestamp()) + self.s.done_ttl_seconds
            if state == GroupState.DONE and is_solo(group.content_key):
                # A finished solo mail leaves the state index now (one index write, not a
                # move to `done` and then a delete) and expires at once: the delete that
                # follows is its cleanup, and if we die before it, DynamoDB's TTL removes
                # the item (free, within days). Nothing is left for the sweeper to find.
                # The content goes now too: no DSN is due (that would be state `dsn`), and
                # without it the item stays within one write unit for this write and for
                # the delete (each priced by the larger of its images).
                removes += ["st", "due", _BODY]
                ttl = int(now.timestamp())
            elif keep_due:
                # the same `st` and `due`: the index entry is not written (next_at is not
                # projected); readers and the claim go by `next_at`
                pass
            else:
                values[":st"] = {"S": state_key(state.value, group.mail_id, self.s.state_shards)}
                values[":due"] = {"N": str(_ms(due))}
                sets += ["st = :st", "due = :due"]
            if state == GroupState.DONE:
                values[":ttl"] = {"N": str(ttl)}
                sets.append("expires_at = :ttl")
                if attempt is not None and len(history) > 1:
                    # A finished group keeps its last attempt only: the earlier ones are in
                    # the event log (their DeliveryDelay events), the item is deleted or
                    # expires next, and a retried group's result (and its delete, priced on
                    # the same image) stays within the write unit its claim used
                    history = history[-1:]
                    values[":hist"] = _ser.serialize([_bounded_attempt(a) for a in history])
        elif next_attempt_at is not None:
            values[":next"] = {"S": to_iso(next_at)}
            sets.append("next_at = :next")
        expr = "SET " + ", ".join(sets) if sets else ""
        if removes:
            expr += " REMOVE " + ", ".join(removes)
        if not expr:
            expr = "SET lease_token = :tok"
        kw: dict[str, Any] = {
            "TableName": self.s.table,
            "Key": {"pk": {"S": _pk(group.mail_id)}, "sk": {"S": _gsk(group.key)}},
            "UpdateExpression": expr,
            "ConditionExpression": " AND ".join(conds),
            "ExpressionAttributeValues": values,
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
        if names:
            kw["ExpressionAttributeNames"] = names
        return _TransitionPlan(
            request=kw,
            guarded=tuple(guarded),
            resolved=resolved,
            release=release,
            state=state,
            next_at=next_at,
            history=tuple(history),
            resting=resting_rcpts,
            index_due=index_due,
        )

    def _after_group_done(
        self, mail_id: str, gkey: str, group: Group | None = None
    ) -> tuple[bool, bool]:
        """The last group to finish cleans the mail; others leave the cleanup index.

        Strongly consistent reads after our own write: of two groups finishing at once,
        at least the later reader sees both done, so a finished mail is always cleaned
        (or, if we crash here, found by `find_pending_cleanup`). A mail of one group
        (most mail) needs no read: its only group just finished under our lease.
        """
        if group is not None and is_solo(group.content_key):
            # The mail is this one item, already out of the index, without its content and
            # expired: DynamoDB's TTL deletes it for free (the envelope and the results stay
            # readable until then, as they are in the event log), unless told to now.
            if is_s3_solo(group.content_key):
                # its content object goes now (a DELETE is free); cut short, the orphan
                # finder removes it once TTL has taken the item (`find_orphans`)
                with translate("s3:DeleteObject"):
                    self.c.s3.delete_object(Bucket=self.s.bucket, Key=object_key(group.content_key))
            elif is_content_item(group.content_key) and (
                self.s.content_item_delete
                or any(r.state == RecipientState.DELETED for r in group.recipients)
            ):
                # its content item, at once instead of by TTL (its size in write units):
                # when told to, and always after an operator's delete (a purge removes the
                # content, as `postsuper -d` removes the queue file)
                with translate("dynamodb:DeleteItem"):
                    self.c.dynamodb.delete_item(
                        TableName=self.s.table,
                        Key={"pk": {"S": _pk(mail_id)}, "sk": {"S": CONTENT_SK}},
                    )
            if not self.s.solo_delete:
                return True, True
            with translate("dynamodb:DeleteItem"):
                self.c.dynamodb.delete_item(
                    TableName=self.s.table,
                    Key={"pk": {"S": _pk(mail_id)}, "sk": {"S": _gsk(gkey)}},
                )
            return True, True
        if group is not None and group.groups_in_mail == 1 and not mail_id.startswith("K"):
            if not is_inline(group.content_key):  # inline content goes with the mail item
                with translate("s3:DeleteObject"):
                    self.c.s3.delete_object(Bucket=self.s.bucket, Key=group.content_key)
            self._batch_write(
                [
                    {"DeleteRequest": {"Key": {"pk": {"S": _pk(mail_id)}, "sk": {"S": sk}}}}
                    for sk in ("M", _gsk(gkey))
                ]
            )
            return True, True
        items = self._query_mail(mail_id)
        groups = [self._group_from_item(it) for it in items if it["sk"].startswith("G#")]
        if all(g.state == GroupState.DONE for g in groups):
            return True, self.cleanup(mail_id, _items=items)
        with translate("dynamodb:UpdateItem"):
            try:
                self.c.dynamodb.update_item(
                    TableName=self.s.table,
                    Key={"pk": {"S": _pk(mail_id)}, "sk": {"S": _gsk(gkey)}},
                    UpdateExpression="REMOVE st, due",
                    ConditionExpression="begins_with(st, :done)",
                    ExpressionAttributeValues={":done": {"S": GroupState.DONE.value}},
                )
            except ClientError as e:
                # the item is gone (another finisher cleaned the mail) or moved on: fine
                if error_code(e) != "ConditionalCheckFailedException":
                    raise
        return False, False

    def _attempt(self, claim: Claim, result: Result, tls: bool) -> Attempt:
        return Attempt(
            number=claim.attempt_number,
            scheduled_at=claim.group.next_attempt_at,
            started_at=claim.started_at,
            finished_at=self.clock(),
            result=result,
            tls=tls,
            site=claim.site,
            shaping=claim.shaping,
            pool=claim.sending_pool,
        )

    def send_done(
        self, claim: Claim, rids: Sequence[str], result: Result, *, tls: bool = False
    ) -> Transition:
        changed = transitions.delivered(claim.group, rids, result, self.clock())
        t = self._transition(claim, changed, attempt=self._attempt(claim, result, tls))
        if any(c.dsn_pending == "delivered" for c in changed.values()):
            self.post_bounce([claim.ref])
        return t

    def send_cancel(self, claim: Claim) -> Group:
        if claim.released:
            raise LeaseLost("this claim was already released")
        group = claim.group
        now = self.clock()
        t = self._transition(
            claim,
            {r.rid: r.with_(state=RecipientState.QUEUED) for r in claim.unresolved()},
            next_attempt_at=min(group.next_attempt_at, now),
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
        """Give a claimed group back untried for `delay_seconds` (traffic shaping: its
        site is out of budget). Like send_cancel: no attempt, no event; the trigger is
        re-armed for the delay (lifetime is checked when it comes back). `wait`: why
        (Group.wait, a DeliveryDelay in the event log; still not an attempt)."""
        if claim.released:
            raise LeaseLost("this claim was already released")
        group = claim.group
        until = self.clock() + timedelta(seconds=delay_seconds)
        t = self._transition(
            claim,
            {r.rid: r.with_(state=RecipientState.QUEUED) for r in claim.unresolved()},
            next_attempt_at=max(group.next_attempt_at, until),
            reservation=reservation or "",
            wait=wait_item(wait, self.clock(), until),
        )
        self._rearm(claim, delay_seconds)
        return t.group

    def rearm(
        self, receipt_handle: str, delay_seconds: int, *, queue_url: str | None = None
    ) -> None:
        """Keep a delivery trigger invisible for `delay_seconds` (capped at 12 h a hop);
        `queue_url`: the queue the receipt came from (default: the transactional one)."""
        with translate("sqs:ChangeMessageVisibility"):
            self.c.sqs.change_message_visibility(
                QueueUrl=queue_url or self.s.delivery_queue_url,
                ReceiptHandle=receipt_handle,
                VisibilityTimeout=max(0, min(MAX_VISIBILITY, delay_seconds)),
            )

    def _rearm(self, claim: Claim, delay_seconds: int) -> None:
        """Make the trigger come back after `delay_seconds` (≤ 12 h a hop)."""
        if claim.receipt_handle:
            with translate("sqs:ChangeMessageVisibility"):
                try:
                    self.c.sqs.change_message_visibility(
                        # a receipt handle is valid only on the queue it came from
                        QueueUrl=claim.receipt_queue
                        or self.s.queue_url(claim.group.priority, claim.group.pool),
                        ReceiptHandle=claim.receipt_handle,
                        VisibilityTimeout=max(0, min(MAX_VISIBILITY, delay_seconds)),
                    )
                    return
                except ClientError as e:
                    # An expired receipt handle: the message is visible again anyway, or gone;
                    # post a fresh trigger so the group is never left without one.
                    if error_code(e) not in (
                        "ReceiptHandleIsInvalid",
                        "InvalidParameterValue",
                        "MessageNotInflight",
                        "AWS.SimpleQueueService.MessageNotInflight",
                    ):
                        raise
        self._send_triggers(
            [claim.ref], delay_seconds, claim.group.priority, claim.hand_to or claim.group.pool
        )

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
        worst = next(iter(results.values()))
        t = self._transition(
            claim,
            changed,
            next_attempt_at=max(next_attempt_at, claim.group.next_attempt_at),
            attempt=self._attempt(claim, worst, tls),
        )
        if warn:
            self.post_bounce([claim.ref])
        if t.released and t.group.state == GroupState.QUEUED:
            self._rearm(claim, _seconds_until(t.group.next_attempt_at, self.clock()))
        return t

    def drop(self, claim: Claim, results: dict[str, Result], *, tls: bool = False) -> Transition:
        changed = transitions.bounced(claim.group, results, self.clock())
        worst = next(iter(results.values()))
        t = self._transition(claim, changed, attempt=self._attempt(claim, worst, tls))
        if any(c.dsn_pending for c in changed.values()):
            self.post_bounce([claim.ref])
        return t

    def dsn_sent(self, ref: MailRef, rids: Sequence[str], kind: str) -> Transition | None:
        """The DSN of `kind` for `rids` is enqueued: clear their pending flag.

        Not one of the eleven primitives: the bounce path's release of the content.
        Conditional per recipient, so a repeat is a no-op; returns None when nothing was
        pending any more.
        """
        if not rids:
            return None
        try:
            with translate("dynamodb:UpdateItem"):
                try:
                    resp = self.c.dynamodb.update_item(
                        **_transition_dsn_request(self.s.table, ref, rids, kind)
                    )
                except ClientError as e:
                    if error_code(e) == "ConditionalCheckFailedException":
                        raise _Refused(None) from e
                    raise
        except _Refused:
            return None
        group = self._group_from_item(_from_ddb(resp["Attributes"]))
        return self._settle(group)

    def settle(self, group: Group) -> Transition:
        """Move a group that is at rest (no lease) to the state its recipients imply.

        Idempotent; finishes a `dsn_sent` whose second step was cut short by a crash.
        """
        return self._settle(group)

    def _settle(self, group: Group) -> Transition:
        if group.state in (GroupState.INFLIGHT, GroupState.HELD, GroupState.QUEUED):
            return Transition(group=group, released=False, mail_finished=False, cleaned=False)
        target = derive_group_state(group.recipients)
        if target == group.state:
            if target == GroupState.DONE:
                finished, cleaned = self._after_group_done(group.mail_id, group.key)
                return Transition(group, False, finished, cleaned)
            return Transition(group, False, False, False)
        now = self.clock()
        with translate("dynamodb:UpdateItem"):
            try:
                self.c.dynamodb.update_item(
                    TableName=self.s.table,
                    Key={"pk": {"S": _pk(group.mail_id)}, "sk": {"S": _gsk(group.key)}},
                    UpdateExpression="SET st = :to, due = :due, expires_at = :ttl",
                    ConditionExpression="begins_with(st, :from)",
                    ExpressionAttributeValues={
                        ":to": {"S": state_key(target.value, group.mail_id, self.s.state_shards)},
                        ":from": {"S": group.state.value},
                        ":due": {"N": str(_ms(now))},
                        ":ttl": {"N": str(int(now.timestamp()) + self.s.done_ttl_seconds)},
                    },
                )
            except ClientError as e:
                if error_code(e) == "ConditionalCheckFailedException":
                    return Transition(group, False, False, False)
                raise
        group = replace(group, state=target)
        if target == GroupState.DONE:
            finished, cleaned = self._after_group_done(group.mail_id, group.key)
            return Transition(group, False, finished, cleaned)
        return Transition(group, False, False, False)

    # ------------------------------------------------------------------ cleanup
    def cleanup(self, mail_id: str, *, _items: list[dict[str, Any]] | None = None) -> bool:
        """Remove a finished mail: its content object and its items (a keyed mail's item
        becomes a tombstone).

        `_items`: the finisher's strongly consistent read after its own write. Groups of
        one mail that finish at once may each read them all done and each clean the mail
        (issue 40: 88 item deletes for 40 items in the bench's 3-domain run). A finisher
        therefore first takes the mail item away under a condition (deleted, or made a
        tombstone, only if it is still there and not one): the one whose write succeeds
        removes the rest, the others stop there (one failed conditional write each
        instead of a repeat of every delete). If the cleaner dies after that write, its
        own group is still `done` in the index: the sweeper's `find_pending_cleanup`
        finds it and calls this without `_items`, which removes whatever is left."""
        items = self._query_mail(mail_id) if _items is None else _items
        groups = [self._group_from_item(it) for it in items if it["sk"].startswith("G#")]
        if any(g.state != GroupState.DONE for g in groups):
            return False
        mail_item = next((it for it in items if it["sk"] == "M"), None)
        rest = items
        if _items is not None:
            # a finisher's read without the mail item: a cleaner has taken it (a mail of
            # several groups, or a keyed one, always has one) and removes the rest; if it
            # died, the groups left `done` are the sweeper's (no `_items` there)
            if mail_item is None:
                if len(groups) > 1 or mail_id.startswith("K"):
                    return True  # another finisher of this mail is cleaning it
                # a mail of one group stored without a mail item (solo): this finisher is
                # its only cleaner (a DSN's release reaches here through `settle`)
            elif not self._take_mail_item(mail_id, mail_item):
                return True  # another finisher of this mail is cleaning it
            else:
                rest = [it for it in items if it is not mail_item]
        key = next((it.get("content_key") for it in items if it.get("content_key")), None)
        if not is_inline(key):  # inline content is deleted (or tombstoned) with the mail item
            # no item names the key (an orphan): both places it may be (deletes are free)
            keys = (
                [object_key(str(key))]
                if key
                else [self.content_key(mail_id), self._legacy_content_key(mail_id)]
            )
            for k in keys:
                with translate("s3:DeleteObject"):
                    self.c.s3.delete_object(Bucket=self.s.bucket, Key=k)
        if rest:
            requests: list[dict[str, Any]] = []
            for it in rest:
                if it["sk"] == "M" and mail_id.startswith("K"):
                    if it.get("tomb"):
                        continue
                    requests.append({"PutRequest": {"Item": _to_ddb(self._tombstone(it))}})
                else:
                    requests.append(
                        {"DeleteRequest": {"Key": {"pk": {"S": it["pk"]}, "sk": {"S": it["sk"]}}}}
                    )
            if requests:
                self._batch_write(requests)
        return True

    def _take_mail_item(self, mail_id: str, mail_item: dict[str, Any]) -> bool:
        """The mail item deleted (a keyed mail's: made a tombstone) if it is still there
        and not a tombstone; False when another cleaner got there first."""
        cond = "attribute_exists(pk) AND attribute_not_exists(tomb)"
        if mail_item.get("tomb"):
            return False
        op = "dynamodb:PutItem" if mail_id.startswith("K") else "dynamodb:DeleteItem"
        with translate(op):
            try:
                if mail_id.startswith("K"):
                    self.c.dynamodb.put_item(
                        TableName=self.s.table,
                        Item=_to_ddb(self._tombstone(mail_item)),
                        ConditionExpression=cond,
                    )
                else:
                    self.c.dynamodb.delete_item(
                        TableName=self.s.table,
                        Key={"pk": {"S": mail_item["pk"]}, "sk": {"S": "M"}},
                        ConditionExpression=cond,
                    )
            except ClientError as e:
                if error_code(e) == "ConditionalCheckFailedException":
                    return False
                raise
        return True

    def _tombstone(self, mail_item: dict[str, Any]) -> dict[str, Any]:
        """What a keyed mail leaves behind: enough to answer a late retry, then TTL."""
        now = self.clock()
        return {
            "pk": mail_item["pk"],
            "sk": "M",
            "tomb": True,
            "sha256": mail_item.get("sha256"),
            "env_sha": mail_item.get("env_sha"),
            "groups": mail_item.get("groups", []),
            "arrival": mail_item.get("arrival"),
            "expires_at": int(now.timestamp()) + self.s.idempotency_ttl_seconds,
        }

    def content_exists(self, mail_id: str) -> bool:
        item = self._mail_item(mail_id) or self._solo_of(mail_id)
        if item is not None and is_content_item(item.get("content_key")):
            return self._content_item_body(item) is not None
        if item is not None and is_inline(item.get("content_key")):
            return _BODY in item
        named = object_key(str(item.get("content_key") or "")) if item is not None else ""
        keys = [named] if named else [self.content_key(mail_id), self._legacy_content_key(mail_id)]
        for k in keys:
            with translate("s3:HeadObject"):
                try:
                    self.c.s3.head_object(Bucket=self.s.bucket, Key=k)
                    return True
                except ClientError as e:
                    if error_code(e) not in ("404", "NoSuchKey", "NotFound"):
                        raise
        return False

    def _content_item_body(self, group_item: dict[str, Any]) -> bytes | None:
        """A content-item solo's content for the operator's and the bounce path's reads:
        None once its group is finished (delivered content is not served while TTL has
        yet to remove it) or the item is gone."""
        if "st" not in group_item:  # a finished solo item leaves the state index
            return None
        return read_inline(self.c.dynamodb, self.s.table, str(group_item["content_key"]))

    def _solo_of(self, mail_id: str) -> dict[str, Any] | None:
        """A mail without a mail item: its solo group item, if it is one (one Query)."""
        return next(
            (it for it in self._query_mail(mail_id) if is_solo(it.get("content_key"))), None
        )

    def read_content(self, mail_id: str) -> BinaryIO:
        """The content, wherever it is: the mail item (small mails) or S3.

        One consistent GetItem of the mail item first (the bounce path and `show` read
        rarely; the item says where the content is), then S3 if it is not inline.
        """
        item = self._mail_item(mail_id) or self._solo_of(mail_id)
        key = str(item.get("content_key") or "") if item is not None else ""
        if is_inline(key):
            data = (
                self._content_item_body(item)
                if item is not None and is_content_item(key)
                else inline_body(item)
            )
            if data is None:
                raise NotFound(mail_id)
            return io.BytesIO(data)
        with translate("s3:GetObject"):
            try:
                obj = self.c.s3.get_object(
                    Bucket=self.s.bucket, Key=object_key(key) or self.content_key(mail_id)
                )
            except ClientError as e:
                if error_code(e) in ("NoSuchKey", "404"):
                    raise NotFound(mail_id) from e
                raise
        body: BinaryIO = ContentStream(obj["Body"])  # type: ignore[assignment]
        return body
