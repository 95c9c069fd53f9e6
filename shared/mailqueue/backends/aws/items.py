"""The state table's item codec: keys, typed values, inline and solo content, the pieces
of a transition's request that the backend and the capacity check both build."""

from __future__ import annotations

import base64
import hashlib
import json
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from boto3.dynamodb.types import TypeDeserializer, TypeSerializer

from mailqueue.backends.aws.clients import (
    translate,
)
from mailqueue.core.errors import (
    Conflict,
    InvalidInput,
)
from mailqueue.core.model import (
    Attempt,
    Envelope,
    GroupState,
    MailRef,
    Recipient,
    RecipientState,
)
from mailqueue.core.transitions import envelope_digest

GSI_STATE = "by_state"
# The index's partition key `st` is write-sharded: "<state>#<shard>", the shard a hash of
# the mail id (`state_key`), so no state is one hot key value (issue 25: one key value is
# one partition, 1,000 write units a second). Conditions test the state with
# `begins_with(st, :<state>)` (no state name is a prefix of another), which also matches
# an item written unsharded before the change; readers query every shard and that
# unsharded value (`state_keys`).
# A claim leaves the index alone (issue 25): the lease is in non-key attributes (`lease_ms`,
# epoch ms, and `lease_token`), so claiming writes the table item only, no index entry (a
# keys-only index is written only when `st` or `due` change). A group is `inflight` while
# it holds a lease token; `st` keeps `queued#<shard>` and `due` the time it became due.
# Items claimed before the change carry `st = inflight#<shard>` with `due` = the lease's
# end and `lease_until` (ISO); every condition below also accepts that form.
_LEASE_SET = (
    "SET lease_ms = :lease_ms, lease_token = :tok, started_at = :now, "
    "claims = if_not_exists(claims, :zero) + :one"
)
#: no live lease on the item (needs :now_ms)
LEASE_FREE = "(attribute_not_exists(lease_ms) OR lease_ms < :now_ms)"
#: what a release removes: the lease, in either form
LEASE_ATTRS = ("lease_token", "lease_ms", "lease_until")
# Delivery claims only: a group claimed this many times with nothing recorded in between
# (every transition resets `claims`) is held for an operator instead of being tried again.
# A write that keeps failing after SMTP succeeded must not turn the queue into a mail bomb.
_UNRECORDED_OK = "(attribute_not_exists(claims) OR claims < :max_claims)"
MAX_VISIBILITY = 12 * 3600  # SQS ChangeMessageVisibility limit
MAX_DELAY = 900  # SQS DelaySeconds limit
_BATCH_RETRIES = 8
_DSN_RACE_RETRIES = 4  # a transition retried when the bounce path cleared a flag meanwhile

_ser = TypeSerializer()
_deser = TypeDeserializer()

# ---- content in the mail item (issue 18) ------------------------------------------------
# A small mail's content, zlib-compressed, is an attribute of its mail item (`M#<id>`/`M`),
# written in the same request as its groups and deleted with them: no S3 PUT, GET or
# DELETE. The mail item is never rewritten between enqueue and cleanup (only replaced by
# a keyed mail's tombstone, which drops the content), so the content costs its bytes once
# on the put and once on the delete. Groups point at it with this content key.
INLINE_PREFIX = "ddb:"
_BODY = "body"  # the M item's attribute: zlib(content), DynamoDB binary


def is_inline(content_key: str | None) -> bool:
    """Whether a content key names content kept in the mail item, not an S3 object."""
    return bool(content_key) and str(content_key).startswith(INLINE_PREFIX)


def inline_key(mail_id: str) -> str:
    return f"{INLINE_PREFIX}M#{mail_id}"


# ---- solo mails (issue 18, third round) -------------------------------------------------
# A one-group mail with small inline content is one item: its group item carries the
# mail's fields and the content. Its content key names that item: "ddb:M#<id>|G#<group>";
# the item itself stores only SOLO_MARK (every byte counts, see _SOLO_DROPS).
_SOLO_SEP = "|"
SOLO_MARK = f"{INLINE_PREFIX}{_SOLO_SEP}"  # = eventlog.SOLO_MARK
_MAIL_FIELDS = (
    "pk", "sender", "arrival", "content_key", "size", "ret", "envid", "smtputf8", "tags",
)  # fmt: skip
# What a solo item leaves out of the mail item's fields: the envelope digest serves keyed
# retries only, and the rest is derived (`_mail_view`). Every byte counts: the item must
# stay within one write unit through its claim.
_SOLO_DROPS = ("sk", "env_sha", "sha256", "groups", "rcpt_count")


def solo_key(mail_id: str, group: str) -> str:
    return f"{INLINE_PREFIX}M#{mail_id}{_SOLO_SEP}G#{group}"


# A one-group mail whose content is in S3 is a solo mail too (issue 25): the group item
# carries the mail's fields (and its header section, `hdrs`, when it fits the item's
# write unit), no mail item is written, and the content key is the object's key behind
# this mark: "|content/3f/<id>". The item lives as an inline solo does (out of the state
# index at its result, then expired by TTL); the object is deleted right after that
# result, and if that delete is cut short, the orphan finder removes it later.
S3_SOLO_MARK = _SOLO_SEP


def is_s3_solo(content_key: str | None) -> bool:
    """Whether a content key names a solo mail's content in S3 ("|<object key>")."""
    return bool(content_key) and str(content_key).startswith(S3_SOLO_MARK)


def object_key(content_key: str) -> str:
    """The S3 object key a (non-inline) content key names: an S3 solo's mark removed."""
    return content_key[len(S3_SOLO_MARK) :] if is_s3_solo(content_key) else content_key


def is_solo(content_key: str | None) -> bool:
    """Whether a content key is a solo mail's (one item: inline content, or in S3)."""
    return is_s3_solo(content_key) or (is_inline(content_key) and _SOLO_SEP in str(content_key))


# A one-group mail whose solo item would take more than one write unit keeps its content
# in an item of its own (issue 40): "M#<id>"/"C", written before its group item, read by
# one consistent GetItem at the claim, never rewritten, and deleted by DynamoDB's TTL
# (free) once the mail can no longer need it: a group item of one unit instead of one of
# two to four, and every write of the group (claim, result, each retry's reschedule and
# claim) billed one unit. Its content key names that item: "ddb:M#<id>|C". The group item
# carries the mail's fields and header section (`hdrs`), as an S3 solo's does.
CONTENT_SK = "C"


def content_item_key(mail_id: str) -> str:
    return f"{INLINE_PREFIX}M#{mail_id}{_SOLO_SEP}{CONTENT_SK}"


def is_content_item(content_key: str | None) -> bool:
    """Whether a content key names a solo mail's content item ("ddb:M#<id>|C")."""
    return is_inline(content_key) and str(content_key).endswith(_SOLO_SEP + CONTENT_SK)


def content_elsewhere(content_key: str | None) -> bool:
    """A solo mail whose content is not in its group item: in S3 or in a content item."""
    return is_s3_solo(content_key) or is_content_item(content_key)


def _content_key_of(item: dict[str, Any]) -> str | None:
    """A group item's content key, a solo item's mark expanded to name the item."""
    key = item.get("content_key")
    if key == SOLO_MARK:
        return solo_key(str(item["pk"])[2:], str(item["sk"])[2:])
    return str(key) if key else None


def _mail_view(item: dict[str, Any]) -> dict[str, Any]:
    """A solo group item seen as the mail item it stands for (no content, no state)."""
    body = inline_body(item)
    key = item.get("content_key")
    return {
        **{k: item[k] for k in _MAIL_FIELDS if k in item},
        "sk": "M",
        "content_key": key
        if content_elsewhere(key)
        else solo_key(str(item["pk"])[2:], str(item["sk"])[2:]),
        "sha256": hashlib.sha256(body).hexdigest() if body is not None else None,
        "groups": [str(item["sk"])[2:]],
        "rcpt_count": len(item.get("rcpts") or {}),
    }


def inline_body(item: dict[str, Any] | None) -> bytes | None:
    """The content held by a mail item (DynamoDB JSON or plain), or None."""
    if not item or _BODY not in item:
        return None
    raw = item[_BODY]
    if isinstance(raw, dict):  # DynamoDB JSON {"B": ...}
        raw = raw.get("B")
    data = getattr(raw, "value", raw)  # boto3's Binary
    if isinstance(data, str):
        data = base64.b64decode(data)
    return zlib.decompress(bytes(data))


def read_inline(dynamodb: Any, table: str, content_key: str) -> bytes | None:
    """The content behind an inline content key (one consistent GetItem), None if gone."""
    pk, _, sk = content_key[len(INLINE_PREFIX) :].partition(_SOLO_SEP)
    with translate("dynamodb:GetItem"):
        got = dynamodb.get_item(
            TableName=table,
            Key={"pk": {"S": pk}, "sk": {"S": sk or "M"}},
            ConsistentRead=True,
            ProjectionExpression="#b",
            ExpressionAttributeNames={"#b": _BODY},
        )
    return inline_body(got.get("Item"))


# ---- end content helpers ------------------------------------------------------------------


def _ms(ts: datetime) -> int:
    return int(ts.timestamp() * 1000)


def _to_ddb(value: dict[str, Any]) -> dict[str, Any]:
    return {k: _ser.serialize(v) for k, v in value.items() if v is not None}


def _from_ddb(item: dict[str, Any]) -> dict[str, Any]:
    return {k: _plain(_deser.deserialize(v)) for k, v in item.items()}


def _plain(v: Any) -> Any:
    """Decimals from DynamoDB back to ints (we never store fractions)."""
    from decimal import Decimal

    if isinstance(v, Decimal):
        return int(v)
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_plain(x) for x in v]
    if isinstance(v, set):
        return {_plain(x) for x in v}
    return v


def _pk(mail_id: str) -> str:
    return f"M#{mail_id}"


def _gsk(group: str) -> str:
    return f"G#{group}"


#: hashed prefixes of the content objects' keys (`content/<2 hex>/<mail_id>`): fixed, since
#: a key computed again (an orphan's cleanup) must find the object
CONTENT_PREFIXES = 256


def content_shard(mail_id: str) -> str:
    """A mail's content prefix under the content folder: "3f" (crc32, stable)."""
    return f"{zlib.crc32(mail_id.encode('utf-8')) % CONTENT_PREFIXES:02x}"


def state_shard(mail_id: str, shards: int) -> int:
    """A mail's shard of the state index: stable across processes (crc32, not hash())."""
    return zlib.crc32(mail_id.encode("utf-8")) % max(1, shards)


def state_key(state: str, mail_id: str, shards: int) -> str:
    """The `st` value of a group in `state`: "queued#07"."""
    return f"{state}#{state_shard(mail_id, shards):02d}"


def state_keys(state: str, shards: int, *, unsharded: bool = True) -> list[str]:
    """Every `st` value a group in `state` may have: the unsharded value an item written
    before sharding still holds (`unsharded`), then each shard."""
    keys = [f"{state}#{i:02d}" for i in range(max(1, shards))]
    return [state, *keys] if unsharded else keys


def state_of(st: Any) -> str | None:
    """The state in an `st` value (sharded or not)."""
    return str(st).split("#", 1)[0] if st else None


def _enc_cursor(key: dict[str, Any] | None) -> str | None:
    if not key:
        return None
    return base64.urlsafe_b64encode(json.dumps(key, sort_keys=True).encode()).decode()


def _dec_cursor(cursor: str | None) -> dict[str, Any] | None:
    if not cursor:
        return None
    try:
        value = json.loads(base64.urlsafe_b64decode(cursor.encode()))
    except (ValueError, json.JSONDecodeError) as e:
        raise InvalidInput("invalid_cursor", "cursor is not one this API issued", "cursor") from e
    if not isinstance(value, dict):
        raise InvalidInput("invalid_cursor", "cursor is not one this API issued", "cursor")
    return value


@dataclass(frozen=True)
class _TransitionPlan:
    """One transition's UpdateItem and what the group looks like once it succeeded."""

    request: dict[str, Any]
    guarded: tuple[str, ...]  # rids whose unchanged dsn_pending flag is a condition
    resolved: set[str]
    release: bool
    state: GroupState
    next_at: datetime
    history: tuple[Attempt, ...]
    resting: tuple[Recipient, ...]
    index_due: datetime | None = None  # the by_state entry's `due` after it (queued only)


#: what a claim adds to a group item (`lease_ms`, `lease_token`, `started_at`, `claims`,
#: names and values: 86 bytes measured), with a margin
CLAIM_GROWTH = 96


def _add_headers(mail_item: dict[str, Any], content: bytes, *, reserve: int = 0) -> None:
    """The header section on the mail item (`hdrs`), for the event writer's Send without
    an S3 GET, when the item stays within one write unit (`events.pack_headers`) with
    `reserve` bytes to spare (an S3 solo item: its claim's attributes)."""
    from mailqueue.backends.aws.limits import item_size
    from mailqueue.core.events import MAIL_ITEM_WRITE_UNIT, pack_headers

    room = MAIL_ITEM_WRITE_UNIT - reserve - item_size(mail_item) - len("hdrs")
    packed = pack_headers(content, room) if room > 0 else None
    if packed is not None:
        mail_item["hdrs"] = {"S": packed} if isinstance(packed, str) else {"B": packed}


def _transition_dsn_request(
    table: str, ref: MailRef, rids: Sequence[str], kind: str
) -> dict[str, Any]:
    """`dsn_sent`'s UpdateItem: clear the flag of `rids`, each only if still `kind`."""
    names = {f"#r{i}": rid for i, rid in enumerate(rids)}
    names["#p"] = "dsn_pending"
    return {
        "TableName": table,
        "Key": {"pk": {"S": _pk(ref.mail_id)}, "sk": {"S": _gsk(ref.group)}},
        "UpdateExpression": "REMOVE " + ", ".join(f"rcpts.#r{i}.#p" for i in range(len(rids))),
        "ConditionExpression": " AND ".join(f"rcpts.#r{i}.#p = :kind" for i in range(len(rids))),
        "ExpressionAttributeNames": names,
        "ExpressionAttributeValues": {":kind": {"S": kind}},
        "ReturnValues": "ALL_NEW",
    }


def _check_same(stored: dict[str, Any], sha: str, envelope: Envelope) -> None:
    """A stored mail item under the same idempotency key: the same content and envelope."""
    if stored.get("sha256") != sha:
        raise Conflict("idempotency key reused with different content")
    if stored.get("env_sha", envelope_digest(envelope)) != envelope_digest(envelope):
        raise Conflict("idempotency key reused with a different envelope")


def _resting(r: Recipient) -> Recipient:
    """How a recipient is stored: `inflight` is the group's lease, not a stored state."""
    return r.with_(state=RecipientState.QUEUED) if r.state == RecipientState.INFLIGHT else r


def _bounded_attempt(a: Attempt) -> dict[str, Any]:
    return {k: v for k, v in a.to_json().items() if v is not None}


class _AlreadyStored(Exception):
    pass


class _Refused(Exception):
    def __init__(self, item: dict[str, Any] | None) -> None:
        super().__init__("refused")
        self.item = item


def _rid_order(rid: str) -> tuple[int, str]:
    digits = rid[1:]
    return (int(digits), rid) if digits.isdigit() else (1 << 30, rid)
