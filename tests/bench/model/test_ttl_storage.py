"""The table's storage of items left to TTL (issue 40's content items), as the cost model
prices it: from the mail's arrival to `expires_at`, plus DynamoDB's deletion lag, at the
item's size plus its per-item overhead; a content item kept at least the deployed
lifetime and margin, whatever the run's stack used."""

from __future__ import annotations

from typing import Any

from bench.model.assumptions import ASSUMPTIONS
from bench.model.dynamodb import item_size
from bench.model.prices import SECONDS_PER_MONTH
from bench.model.state_table import ttl_storage_gb_months

ARRIVAL = 1_800_000_000  # 2027-01-15T08:00:00Z
DAY = 86400


def _rec(name: str, sk: str, image: dict[str, Any]) -> dict[str, Any]:
    keys = {"pk": {"S": "M#01ABC"}, "sk": {"S": sk}}
    return {"eventName": name, "dynamodb": {"Keys": keys, "NewImage": {**keys, **image}}}


def _group(ttl: int | None) -> dict[str, Any]:
    img: dict[str, Any] = {"arrival": {"S": "2027-01-15T08:00:00.000Z"}}
    if ttl is not None:
        img["expires_at"] = {"N": str(ttl)}
    return img


def test_a_content_item_is_stored_to_its_ttl_and_the_deletion_lag() -> None:
    body = {"body": {"B": b"x" * 900}, "expires_at": {"N": str(ARRIVAL + 7 * DAY)}}
    recs = [_rec("INSERT", "C", body), _rec("INSERT", "G#example.net", _group(None))]
    got = ttl_storage_gb_months(recs)
    size = item_size(recs[0]["dynamodb"]["NewImage"]) + ASSUMPTIONS["item_storage_overhead_bytes"]
    kept = 7 * DAY + ASSUMPTIONS["ttl_delete_lag_days"] * DAY
    assert abs(got - size / 1e9 * kept / SECONDS_PER_MONTH) < 1e-15
    # a run's short lifetime does not shorten what the deployed lifetime keeps
    short = {**body, "expires_at": {"N": str(ARRIVAL + 2 * DAY)}}
    recs2 = [_rec("INSERT", "C", short), recs[1]]
    assert ttl_storage_gb_months(recs2) < got
    floor = ttl_storage_gb_months(recs2, content_keep_s=7 * DAY)
    assert abs(floor - got) < got * 0.01


def test_removed_items_and_items_without_ttl_are_not_stored() -> None:
    recs = [
        _rec("INSERT", "G#example.net", _group(None)),  # queued: gone in seconds, not priced
        _rec("INSERT", "M", {"expires_at": {"N": str(ARRIVAL)}}),
        {
            **_rec("REMOVE", "M", {}),
            "dynamodb": {"Keys": _rec("REMOVE", "M", {})["dynamodb"]["Keys"]},
        },
    ]
    assert ttl_storage_gb_months(recs) == 0.0
    # a finished solo item expires at its result: stored for the deletion lag only
    done = [_rec("INSERT", "G#example.net", _group(ARRIVAL + 5))]
    lag = ASSUMPTIONS["ttl_delete_lag_days"] * DAY
    want = (item_size(done[0]["dynamodb"]["NewImage"]) + 100) / 1e9 * (5 + lag) / SECONDS_PER_MONTH
    assert abs(ttl_storage_gb_months(done) - want) < 1e-15
