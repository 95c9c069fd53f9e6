"""Does the state-write design hold a group of N recipients within DynamoDB's limits?

Built from the requests the backend really makes, with worst-case values: every
recipient at the longest address, ORCPT and reply text the queue accepts or stores, all
NOTIFY keywords, a pending DSN flag that the write must guard, a full attempt history and
an operator stamp. `AwsStorage` runs `check_group_limit` at startup, so a deployment
cannot configure a group size whose results it could not record (the failure mode of
issue 14: SMTP succeeded, the write was refused, the group was sent again every lease).
README "Data model" quotes what `worst_case` reports for the default settings.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from mailqueue.backends.aws.limits import ServiceLimitExceeded, check_request, item_size
from mailqueue.core.config import ConfigError, StorageSettings
from mailqueue.core.model import (
    REMOTE_MTA_MAX,
    RESULT_TEXT_MAX,
    Attempt,
    Claim,
    Group,
    GroupState,
    Notify,
    Recipient,
    RecipientState,
    Result,
    Ret,
)
from mailqueue.core.transitions import ENVID_MAX, ORCPT_MAX
from mailqueue.core.validate import MAX_DOMAIN

if TYPE_CHECKING:
    from mailqueue.backends.aws.items import _TransitionPlan


class AwsStorage(Protocol):
    """What the check needs of the storage (`backend.AwsStorage` is it): its settings and
    the transition request it really builds. A protocol, so this module and the backend
    (which runs the check at start) do not import each other."""

    s: StorageSettings

    def _transition_request(
        self,
        claim: Claim,
        by_rid: dict[str, Recipient],
        changed: dict[str, Recipient],
        *,
        next_attempt_at: datetime | None,
        attempt: Attempt | None,
        op: dict[str, Any] | None,
    ) -> _TransitionPlan: ...


_T0 = datetime(2026, 1, 1, tzinfo=UTC)
_WIDE = "\U0001d11e"  # a 4-octet UTF-8 character: the worst case for an octet budget


@dataclass(frozen=True)
class Capacity:
    """The worst-case figures of one group size (what README's data model quotes)."""

    recipients: int
    update_expression: int  # characters
    condition_expression: int  # characters
    operators: int  # SET/REMOVE actions in the update
    item_bytes: int  # DynamoDB item size after the write
    wru: int  # write request units of that write (1 per KB of the larger image)
    dsn_sent_expression: int  # the bounce path's REMOVE of N dsn flags
    ok: bool
    violation: str | None = None


# the longest traffic-shaping site (shaping.ShapingRules.site_of) and backoff mark
_WORST_SITE = "mx:" + "h" * 120
_WORST_SHAPING = "r" * 63 + ":suspend+slowdown+reclassify"


def _address(i: int) -> str:
    """A distinct address of MAX_PATH - 2 octets (the path without its brackets)."""
    local = f"{i:05d}" + "x" * 59  # 64 octets, RFC 5321's local-part limit
    domain = ("d" * 62 + ".") * 3  # 189 octets, with the local part and "@": 254
    return f"{local}@{domain[:-1]}x"


def _result(now: datetime) -> Result:
    return Result(
        code=451,
        status="4.7.500",
        text=_WIDE * (RESULT_TEXT_MAX // 4),
        remote_mta="m" * REMOTE_MTA_MAX,
    )


def worst_group(n: int, *, history: int, now: datetime = _T0) -> Group:
    res = _result(now)
    rcpts = tuple(
        Recipient(
            rid=f"r{9999 - i}",
            address=_address(i),
            notify=(Notify.SUCCESS, Notify.FAILURE, Notify.DELAY),
            orcpt="utf-8;" + _WIDE * (ORCPT_MAX - 6),
            state=RecipientState.INFLIGHT,
            attempts=9999,
            first_attempt_at=now,
            last_attempt_at=now,
            last_result=res,
            dsn_pending="delivered",
            delay_warned=True,
            final_at=now,
        )
        for i in range(n)
    )
    attempts = tuple(
        Attempt(
            9990 + k,
            now,
            now,
            now + timedelta(seconds=1),
            res,
            tls=True,
            site=_WORST_SITE,
            shaping=_WORST_SHAPING,
        )
        for k in range(history)
    )
    return Group(
        mail_id="K" + "Z" * 25,
        key="d" * MAX_DOMAIN + "#99",
        sender=_address(10_000),
        recipients=rcpts,
        state=GroupState.INFLIGHT,
        next_attempt_at=now,
        arrival=now,
        content_key="content/" + "K" + "Z" * 25,
        size=40 * 1024 * 1024,
        ret=Ret.HDRS,
        envid=_WIDE * ENVID_MAX,
        smtputf8=True,
        lease_until=now + timedelta(seconds=360),
        lease_token="f" * 16,
        history=attempts,
        groups_in_mail=99,
    )


def _stored_item(storage: AwsStorage, group: Group) -> dict[str, Any]:
    """The group item as it stands after the worst transition (typed attribute values)."""
    from mailqueue.backends.aws.items import _gsk, _ms, _pk, _resting, _to_ddb
    from mailqueue.core.transitions import TAG_MAX, TAGS_MAX

    plain = {
        "pk": _pk(group.mail_id),
        "sk": _gsk(group.key),
        "sender": group.sender,
        "arrival": "2026-01-01T00:00:00.000Z",
        "content_key": group.content_key,
        "size": group.size,
        "ret": group.ret.value if group.ret else None,
        "envid": group.envid,
        # the most tags a submission may carry, each name and value at SES's 256 characters
        "tags": {
            **{f"{i:03d}".ljust(TAG_MAX, "t"): "v" * TAG_MAX for i in range(TAGS_MAX)},
            "mailqueue:principal": "p" * TAG_MAX,
            "mailqueue:priority": "transactional",  # the longer of the two values
        },
        "smtputf8": True,
        "dom": group.key.split("#")[0],
        "ng": group.groups_in_mail,
        "st": "inflight#99",  # the sharded state key (items.state_key)
        "due": _ms(group.next_attempt_at),
        "next_at": "2026-01-01T00:00:00.000Z",
        "lease_token": group.lease_token,
        "lease_until": "2026-01-01T00:00:00.000Z",  # an item claimed before lease_ms
        "lease_ms": 1_900_000_000_000,
        "started_at": "2026-01-01T00:00:00.000Z",
        "expires_at": 1_900_000_000,
        "rcpts": {
            r.rid: {k: v for k, v in _resting(r).to_json().items() if v is not None}
            for r in group.recipients
        },
        "history": [{k: v for k, v in a.to_json().items() if v is not None} for a in group.history],
        "op": {"action": "retried", "actor": "a" * 2048, "job": "J" * 26, "at": "x" * 24},
    }
    return _to_ddb(plain)


def worst_case(storage: AwsStorage, n: int) -> Capacity:
    """Build the largest requests a group of `n` recipients leads to and check them."""
    from mailqueue.backends.aws.items import _transition_dsn_request

    group = worst_group(n, history=storage.s.history_limit)
    claim = Claim(group=group, token=group.lease_token or "", started_at=_T0)
    # Every recipient changes in one write (a transaction with one result for all), keeps
    # its pending DSN flag (a guard each), with an attempt, an operator stamp and release.
    res = _result(_T0)
    changed = {
        r.rid: r.with_(state=RecipientState.DELIVERED, last_result=res) for r in group.recipients
    }
    plan = storage._transition_request(
        claim,
        {r.rid: r for r in group.recipients},
        changed,
        next_attempt_at=_T0,
        attempt=Attempt(
            claim.attempt_number,
            _T0,
            _T0,
            _T0,
            res,
            tls=True,
            site=_WORST_SITE,
            shaping=_WORST_SHAPING,
        ),
        op={"action": "retried", "actor": "a" * 2048, "job": "J" * 26},
    )
    req = plan.request
    item = _stored_item(storage, replace(group, history=plan.history))
    dsn_req = _transition_dsn_request(
        storage.s.table, group.ref, [r.rid for r in group.recipients], "delivered"
    )
    size = item_size(item)
    ops = sum(part.count(",") + 1 for part in req["UpdateExpression"].split(" REMOVE "))
    figures = {
        "recipients": n,
        "update_expression": len(req["UpdateExpression"].encode()),
        "condition_expression": len(req["ConditionExpression"].encode()),
        "operators": ops,
        "item_bytes": size,
        "wru": -(-size // 1024),
        "dsn_sent_expression": len(dsn_req["UpdateExpression"].encode())
        + len(dsn_req["ConditionExpression"].encode()),
    }
    try:
        check_request("dynamodb", "UpdateItem", req)
        check_request("dynamodb", "UpdateItem", dsn_req)
        check_request("dynamodb", "PutItem", {"TableName": storage.s.table, "Item": item})
    except ServiceLimitExceeded as e:
        return Capacity(**figures, ok=False, violation=f"{e.rule}: {e}")
    return Capacity(**figures, ok=True)


def max_group_size(storage: AwsStorage, upper: int = 1000) -> int:
    """The largest group size whose worst case fits (binary search over `worst_case`)."""
    lo, hi = 0, upper
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if worst_case(storage, mid).ok:
            lo = mid
        else:
            hi = mid - 1
    return lo


def check_group_limit(storage: AwsStorage) -> Capacity:
    """Refuse (ConfigError) a group size whose worst-case write DynamoDB would refuse."""
    cap = worst_case(storage, storage.s.group_recipient_limit)
    if not cap.ok:
        raise ConfigError(
            f"group_recipient_limit={storage.s.group_recipient_limit} cannot be recorded "
            f"within DynamoDB's limits ({cap.violation}); "
            f"the largest that fits is {max_group_size(storage)}"
        )
    return cap


__all__ = ["Capacity", "check_group_limit", "max_group_size", "worst_case", "worst_group"]
