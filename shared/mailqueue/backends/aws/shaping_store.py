"""Site states for traffic shaping (mailqueue.outbound.shaping.ShapingStore) in the state table.

Item: ``pk = "SITE#<site>"``, ``sk = "S"``: one per site, whatever the number of
workers. Why the state table rather than a table of its own: the delivery role already
reads it with Query and writes it with UpdateItem (no new IAM, no new resource to back
up or pay a minimum for), and like the MTA-STS cache the item never carries `st`/`due`
(so it stays out of the by_state index) and its `sk` does not start with "G#" (so the
stream's event writer skips it). Every write is conditional on `ver` (optimistic concurrency);
a refused write returns the stored item (ReturnValuesOnConditionCheckFailure), so a
conflict costs no extra read. ``expires_at`` (the table's TTL) drops idle sites after a
week; a lost item only forgets old pacing (TATs in the past mean nothing anyway).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from botocore.exceptions import ClientError

from mailqueue.backends.aws.clients import error_code, translate
from mailqueue.outbound.shaping import SiteState, SlotTake

_IDLE_TTL = 7 * 86400


def _key(site: str) -> dict[str, Any]:
    return {"pk": {"S": f"SITE#{site}"}, "sk": {"S": "S"}}


def _n(x: float) -> dict[str, str]:
    return {"N": f"{x:.6f}"}


def _state(item: dict[str, Any] | None) -> SiteState:
    if not item:
        return SiteState()
    try:
        return SiteState(
            tats={k: float(v["N"]) for k, v in item.get("tats", {}).get("M", {}).items()},
            slots={k: float(v["N"]) for k, v in item.get("slots", {}).get("M", {}).items()},
            suspended_until=float(item.get("susp", {}).get("N", "0")),
            suspended_by=item.get("susp_by", {}).get("S", ""),
            scale=float(item.get("scale", {}).get("N", "1")),
            scaled_at=float(item.get("scaled_at", {}).get("N", "0")),
            version=int(item.get("ver", {}).get("N", "0")),
        )
    except (KeyError, ValueError, TypeError):
        return SiteState()  # an item of another shape: start afresh


class DynamoShapingStore:
    """`ShapingStore` on the state table (`dynamodb` is a boto3 DynamoDB client)."""

    def __init__(
        self, dynamodb: Any, table: str, *, clock: Callable[[], float] = time.time
    ) -> None:
        self.ddb = dynamodb
        self.table = table
        self.clock = clock
        self.requests = 0  # every request, refused writes included
        self.writes = 0  # writes that took effect
        # requests per item (a site's shards are items of their own: site_shards)
        self.requests_by_key: Counter[str] = Counter()
        self._lock = threading.Lock()

    def _count(self, site: str) -> None:
        with self._lock:
            self.requests += 1
            self.requests_by_key[site] += 1

    def load(self, site: str) -> SiteState:
        key = _key(site)
        self._count(site)
        with translate("dynamodb:Query"):
            resp = self.ddb.query(
                TableName=self.table,
                KeyConditionExpression="pk = :pk AND sk = :sk",
                ExpressionAttributeValues={":pk": key["pk"], ":sk": key["sk"]},
                ConsistentRead=True,
            )
        items = resp.get("Items") or []
        return _state(items[0] if items else None)

    def save(self, site: str, state: SiteState, expected_version: int) -> SiteState | None:
        values: dict[str, Any] = {
            ":ver": {"N": str(expected_version + 1)},
            ":tats": {"M": {k: _n(v) for k, v in state.tats.items()}},
            ":slots": {"M": {k: _n(v) for k, v in state.slots.items()}},
            ":susp": _n(state.suspended_until),
            ":susp_by": {"S": state.suspended_by},
            ":scale": _n(state.scale),
            ":scaled_at": _n(state.scaled_at),
            ":exp": {"N": str(int(self.clock()) + _IDLE_TTL)},
        }
        if expected_version == 0:
            cond = "attribute_not_exists(ver)"
        else:
            cond = "ver = :old"
            values[":old"] = {"N": str(expected_version)}
        self._count(site)
        with translate("dynamodb:UpdateItem"):
            try:
                self.ddb.update_item(
                    TableName=self.table,
                    Key=_key(site),
                    UpdateExpression=(
                        "SET ver = :ver, tats = :tats, slots = :slots, susp = :susp, "
                        "susp_by = :susp_by, #scale = :scale, scaled_at = :scaled_at, "
                        "expires_at = :exp"
                    ),
                    ConditionExpression=cond,
                    ExpressionAttributeNames={"#scale": "scale"},
                    ExpressionAttributeValues=values,
                    ReturnValuesOnConditionCheckFailure="ALL_OLD",
                )
            except ClientError as e:
                if error_code(e) != "ConditionalCheckFailedException":
                    raise
                return _state(e.response.get("Item"))
        with self._lock:
            self.writes += 1
        return None

    def _atomic(
        self, site: str, update: str, condition: str, names: dict[str, str], values: dict[str, Any]
    ) -> tuple[bool, SiteState]:
        """One UpdateItem that bumps `ver` (so a compare-and-set writer on an older state
        is refused) under `condition` instead of a version check: (True, the item
        written) or (False, the stored item, returned by the refusal: no extra read)."""
        self._count(site)
        with translate("dynamodb:UpdateItem"):
            try:
                resp = self.ddb.update_item(
                    TableName=self.table,
                    Key=_key(site),
                    UpdateExpression=f"{update} SET ver = ver + :one, expires_at = :exp"
                    if update.startswith("REMOVE")
                    else f"{update}, ver = ver + :one, expires_at = :exp",
                    ConditionExpression=condition,
                    ExpressionAttributeNames=names,
                    ExpressionAttributeValues={
                        **values,
                        ":one": {"N": "1"},
                        ":exp": {"N": str(int(self.clock()) + _IDLE_TTL)},
                    },
                    ReturnValues="ALL_NEW",
                    ReturnValuesOnConditionCheckFailure="ALL_OLD",
                )
            except ClientError as e:
                if error_code(e) != "ConditionalCheckFailedException":
                    raise
                return False, _state(e.response.get("Item"))
        with self._lock:
            self.writes += 1
        return True, _state(resp.get("Attributes"))

    @staticmethod
    def _guard(guard: SiteState) -> dict[str, Any]:
        """The values a booking was computed with (`:susp`, `:scale`, `:scaled_at`)."""
        return {
            ":susp": _n(guard.suspended_until),
            ":scale": _n(guard.scale),
            ":scaled_at": _n(guard.scaled_at),
        }

    _GUARDED = "susp = :susp AND #scale = :scale AND scaled_at = :scaled_at"

    @staticmethod
    def _with_slot(
        update: str,
        condition: str,
        names: dict[str, str],
        values: dict[str, Any],
        slot: SlotTake | None,
    ) -> tuple[str, str, dict[str, str], dict[str, Any]]:
        """A booking's write that also takes a connection slot (`take`'s condition)."""
        if slot is None:
            return update, condition, names, values
        return (
            f"{update}, slots.#h = :until",
            f"{condition} AND (attribute_exists(slots.#h) OR size(slots) < :max)",
            {**names, "#h": slot.holder},
            {**values, ":until": _n(slot.until), ":max": {"N": str(slot.max_connections)}},
        )

    def advance(
        self,
        site: str,
        key: str,
        delta: float,
        floor: float,
        guard: SiteState,
        slot: SlotTake | None = None,
    ) -> tuple[bool, SiteState]:
        """`tats.<key> += delta` if it is at least `floor`, under the guard (additions
        commute: no version condition); with `slot`, that slot taken too."""
        return self._atomic(
            site,
            *self._with_slot(
                "SET tats.#k = tats.#k + :d",
                f"tats.#k >= :floor AND {self._GUARDED}",
                {"#k": key, "#scale": "scale"},
                {":d": _n(delta), ":floor": _n(floor), **self._guard(guard)},
                slot,
            ),
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
        """`tats.<key> = value` if it is missing or before `before`, under the guard (an
        idle site's booking: GCRA starts again from now); with `slot`, that slot too."""
        return self._atomic(
            site,
            *self._with_slot(
                "SET tats.#k = :v",
                "attribute_exists(ver) AND (attribute_not_exists(tats.#k) OR tats.#k < :before) "
                f"AND {self._GUARDED}",
                {"#k": key, "#scale": "scale"},
                {":v": _n(value), ":before": _n(before), **self._guard(guard)},
                slot,
            ),
        )

    def take(
        self, site: str, holder: str, until: float, max_connections: int, now: float
    ) -> tuple[bool, SiteState]:
        """`slots.<holder> = until` if the holder has a slot or the map holds fewer than
        `max_connections` (size() counts expired ones too) and the site is not
        suspended."""
        return self._atomic(
            site,
            "SET slots.#h = :until",
            "attribute_exists(ver) AND susp <= :now "
            "AND (attribute_exists(slots.#h) OR size(slots) < :max)",
            {"#h": holder},
            {":until": _n(until), ":now": _n(now), ":max": {"N": str(max_connections)}},
        )

    def give_back(self, site: str, holder: str) -> SiteState | None:
        """REMOVE `slots.<holder>`, if it is there."""
        ok, state = self._atomic(
            site, "REMOVE slots.#h", "attribute_exists(slots.#h)", {"#h": holder}, {}
        )
        return state if ok else None
