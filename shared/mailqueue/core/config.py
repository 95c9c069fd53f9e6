"""Typed settings, validated at start. Explicit arguments beat environment variables.

Nothing here reads the environment at import time: `from_env` is called by a handler's
factory, once per container, and tests pass values explicitly.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, TypeVar

from mailqueue.core.errors import MailqueueError

T = TypeVar("T")


class ConfigError(MailqueueError):
    """A setting is missing or invalid: the function refuses to start."""


def _coerce(value: str, typ: Any) -> Any:
    if typ in (int, "int"):
        return int(value)
    if typ in (float, "float"):
        return float(value)
    if typ in (bool, "bool"):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return value


def settings_from_env(
    cls: type[T],
    prefix: str = "MQ_",
    env: Mapping[str, str] | None = None,
    **explicit: Any,
) -> T:
    """Build a settings dataclass: explicit kwargs first, then `<prefix><FIELD>` variables."""
    source = os.environ if env is None else env
    kwargs: dict[str, Any] = {}
    for f in fields(cls):  # type: ignore[arg-type]
        if f.name in explicit and explicit[f.name] is not None:
            kwargs[f.name] = explicit[f.name]
            continue
        raw = source.get(prefix + f.name.upper())
        if raw is not None and raw != "":
            try:
                kwargs[f.name] = _coerce(
                    raw, f.type if not isinstance(f.type, str) else f.type.split(" ")[0]
                )
            except ValueError as e:
                raise ConfigError(f"{prefix}{f.name.upper()}: {e}") from e
    try:
        return cls(**kwargs)
    except TypeError as e:
        raise ConfigError(f"{cls.__name__}: {e}") from e


@dataclass(frozen=True, slots=True)
class StorageSettings:
    table: str
    bucket: str
    delivery_queue_url: str
    bounce_queue_url: str
    region: str | None = None
    endpoint_url: str | None = None  # moto / local stack only
    content_prefix: str = "content/"
    max_size: int = 40 * 1024 * 1024
    max_recipients: int = 1000
    group_recipient_limit: int = 50  # recipients per SMTP transaction, as Postfix's default
    lease_seconds: int = 360
    done_ttl_seconds: int = 7 * 86400  # DynamoDB TTL backstop on finished items
    history_limit: int = 10
    idempotency_scope: str = "default"
    idempotency_ttl_seconds: int = 7 * 86400  # how long a key outlives its mail (tombstone)
    max_delay_seconds: int = 900  # SQS DelaySeconds cap; a shorter cap only adds re-arms
    max_unrecorded_claims: int = 5  # claims with no result recorded before a group is held
    # Content whose zlib form is at most this many bytes is stored in the mail item
    # (DynamoDB, 3 AZs before the write returns) instead of S3: up to 4 KB its put and
    # delete (2 WRU per KB at $0.625/M) cost less than one S3 PUT ($5/M) and GETs
    # (docs/benchmarks.md, "Content in the mail item"). 0: always S3.
    inline_content_max_bytes: int = 4096
    # A one-group mail (most mail) without an idempotency key whose content is inline and
    # whose whole group item, content included, is at most this many bytes at enqueue is
    # stored as that one item ("solo"): no mail item to put and delete, no read for the
    # content (the claim returns it), and a finished solo group leaves the state index at
    # once (TTL backstop). The index projects keys only, so its writes cost one unit
    # whatever the size; on the table a solo item of k units costs 3k (put, claim,
    # result; TTL deletes free) and 4 index units, two items 2k + 4 and 6: solo is cheaper
    # while k <= 4, and the claim adds ~110 bytes that must stay within the same units:
    # 4 KB - 128 (docs/benchmarks.md, "Solo mails"; tests/test_solo.py derives it).
    # 0: always a mail item.
    solo_item_max_bytes: int = 4 * 1024 - 128
    # A finished solo mail's item (its content already dropped by the result) is left to
    # DynamoDB's TTL, which deletes it for free within days, instead of a DeleteItem (one
    # write unit). True: delete it at once.
    solo_delete: bool = False
    # A one-group mail whose solo item would take more than `content_item_above_bytes`
    # (one write unit, less what a claim adds) keeps its content in an item of its own
    # (`M#<id>`/`C`, backends/aws/items.py) when that item is at most this many bytes: its
    # group item then costs one unit a write. On the table a solo item of k units costs 3k
    # (put, claim, result) and 2k more a retry; a content item of c units and a group item
    # of one cost c + 3 and 2 a retry, and one consistent read a claim (a read unit, a
    # fifth of a write's price): cheaper from k = 2. Up to 5 units (c at $0.625/M each,
    # deleted free by TTL) it also costs less than S3's PUT and GET ($5.40/M) for content
    # past `inline_content_max_bytes`. The content is kept until `max_queue_lifetime_seconds`
    # + `content_item_margin_seconds` after the mail is due (a DSN needs it until then),
    # `content_expiration_days` from a hold (as S3's backstop expiry); after delivery it is
    # readable by no call of the queue (the group item says done), and TTL removes it.
    # 0: off (S3 past the solo item's limit, as before).
    content_item_max_bytes: int = 5 * 1024
    content_item_above_bytes: int = 1024 - 128
    content_item_margin_seconds: int = 2 * 86400
    # True: a delivered mail's content item is deleted at its result (c write units)
    # instead of left to TTL
    content_item_delete: bool = False
    # the delivery, bounce and sweeper functions' lifetime (MQ_MAX_QUEUE_LIFETIME_SECONDS,
    # the same variable): how long a content item must outlive its mail's due time
    max_queue_lifetime_seconds: int = 5 * 86400
    # template ContentExpirationDays: S3's backstop expiry of content objects, and how long
    # a content item is kept from a hold
    content_expiration_days: int = 30
    # the bulk delivery path (template: BulkDeliveryQueue); "" = bulk mail shares the
    # delivery queue (one path, as before priorities)
    bulk_delivery_queue_url: str = ""
    # egress pools (outbound/pools.py): {"pool": "queue URL"} for each pool with a
    # delivery queue (and function) of its own; a mail's triggers go to its pool's
    # queue, a pool not named here (the default one) uses the priority's queue
    pool_queue_urls: str = ""
    # Shards of the state index's partition key (`st` = "<state>#<shard>", the shard a
    # hash of the mail id): one key value is one partition (1,000 write units a second),
    # so each state's writes are spread over this many. 64 keeps each under half of that
    # at 10,000 mails/s (README, "Data model"); readers query every shard. Raise it on a
    # live table, never lower it (items in the shards above are no longer read).
    state_shards: int = 64
    # Readers also query the unsharded `st` values items written before sharding hold
    # (docs/deploy.md, "Upgrading"): one more Query per state read. False once no such
    # item is left (a week after the upgrade: finished items expire by then).
    state_unsharded_reads: bool = True
    # A queued group's index entry (`due`, the sort key) may lag its schedule (`next_at`)
    # by up to this many seconds: a reschedule or a shaping re-arm to a time within it of
    # the entry's `due` leaves the index alone (a changed sort key is a delete and a put:
    # 2 index write units, $1.25 per million on demand), and readers apply the group's own
    # `next_at`. The cost: each sweep reads such an entry back (one read unit) while it
    # lags, at most slack / 300 s times. 0: the entry always follows `next_at`.
    index_due_slack_seconds: int = 900

    def __post_init__(self) -> None:
        for name in ("table", "bucket", "delivery_queue_url", "bounce_queue_url"):
            if not getattr(self, name):
                raise ConfigError(f"{name} is required")
        if not 1 <= self.group_recipient_limit <= 200:
            raise ConfigError("group_recipient_limit must be within 1..200")
        if self.max_unrecorded_claims < 2:
            raise ConfigError("max_unrecorded_claims must be at least 2")
        if self.lease_seconds < 10:
            raise ConfigError("lease_seconds must be at least 10")
        if self.max_size <= 0 or self.max_recipients <= 0:
            raise ConfigError("max_size and max_recipients must be positive")
        if not 0 <= self.inline_content_max_bytes <= 65536:
            raise ConfigError("inline_content_max_bytes must be within 0..65536")
        if not 0 <= self.solo_item_max_bytes <= 65536:
            raise ConfigError("solo_item_max_bytes must be within 0..65536")
        if not 0 <= self.content_item_max_bytes <= 65536:
            raise ConfigError("content_item_max_bytes must be within 0..65536")
        if not 0 <= self.content_item_above_bytes <= 65536:
            raise ConfigError("content_item_above_bytes must be within 0..65536")
        if self.content_item_margin_seconds < 3600:
            raise ConfigError("content_item_margin_seconds must be at least 3600")
        if self.max_queue_lifetime_seconds <= 0:
            raise ConfigError("max_queue_lifetime_seconds must be positive")
        if self.content_expiration_days < 2:
            raise ConfigError("content_expiration_days must be at least 2")
        if not 0 <= self.index_due_slack_seconds <= 12 * 3600:
            raise ConfigError("index_due_slack_seconds must be within 0..43200")
        if not 1 <= self.state_shards <= 100:
            raise ConfigError("state_shards must be within 1..100")
        if not self.content_prefix.endswith("/"):
            raise ConfigError("content_prefix must end with '/'")
        if self.bulk_delivery_queue_url and self.bulk_delivery_queue_url in (
            self.delivery_queue_url,
            self.bounce_queue_url,
        ):
            raise ConfigError("bulk_delivery_queue_url must be a queue of its own")
        pool_urls = self.pool_queues()
        shared = set(pool_urls.values()) & {
            self.delivery_queue_url,
            self.bulk_delivery_queue_url,
            self.bounce_queue_url,
        }
        if shared or len(set(pool_urls.values())) != len(pool_urls):
            raise ConfigError("pool_queue_urls: each pool's delivery queue must be its own")

    def pool_queues(self) -> dict[str, str]:
        """`pool_queue_urls` parsed: pool name -> queue URL."""
        if not self.pool_queue_urls.strip():
            return {}
        try:
            doc = json.loads(self.pool_queue_urls)
        except ValueError as e:
            raise ConfigError(f"pool_queue_urls: not JSON: {e}") from e
        if not isinstance(doc, dict) or not all(
            isinstance(k, str) and isinstance(v, str) and v for k, v in doc.items()
        ):
            raise ConfigError('pool_queue_urls: an object {"pool": "queue URL"}')
        return dict(doc)

    def queue_url(self, priority: str, pool: str = "") -> str:
        """The delivery queue of a pool with its own, else of a priority
        (`mailqueue.core.model.Priority`)."""
        if pool:
            url = self.pool_queues().get(pool)
            if url:
                return url
        if priority == "bulk" and self.bulk_delivery_queue_url:
            return self.bulk_delivery_queue_url
        return self.delivery_queue_url

    def pool_for_source(self, source_arn: str | None) -> str | None:
        """The egress pool whose own delivery queue an SQS record came from (None: one of
        the priority queues, served by the default pool's delivery)."""
        if not source_arn:
            return None
        name = source_arn.rsplit(":", 1)[-1]
        for pool, url in self.pool_queues().items():
            if url.rstrip("/").rsplit("/", 1)[-1] == name:
                return pool
        return None

    def queue_for_source(self, source_arn: str | None) -> str | None:
        """The delivery queue an SQS record came from (its eventSourceARN names the queue;
        the URL ends with the same name), so its receipt handle is used on that queue."""
        if not source_arn:
            return None
        name = source_arn.rsplit(":", 1)[-1]
        for url in (
            self.delivery_queue_url,
            self.bulk_delivery_queue_url,
            *self.pool_queues().values(),
        ):
            if url and url.rstrip("/").rsplit("/", 1)[-1] == name:
                return url
        return None
