"""DynamoDB's rules as the models apply them (bench/model/dynamodb.py): item sizes, units,
index entries."""

from __future__ import annotations

from typing import Any

from bench.model.dynamodb import Index, item_size, units, write_units
from tests.bench.model.synthetic import img


def test_item_sizes_follow_dynamodbs_rules() -> None:
    # names count, strings by UTF-8 length, numbers ~1 byte per 2 significant digits + 1
    assert item_size(img(pk="M#1")) == 2 + 3
    assert item_size(img(n=12345)) == 1 + 4
    assert item_size(img(s="é")) == 1 + 2
    # a map: 3 bytes + per element 1 byte + its name and value
    assert item_size(img(m={"a": "xy"})) == 1 + 3 + 1 + 1 + 2
    assert units(1024, 1024) == 1 and units(1025, 1024) == 2


def test_write_units_on_the_table_and_the_index() -> None:
    ix = (Index("by_state", ("st", "due"), "ALL"),)
    big = "x" * 1500
    queued = img(pk="M#1", sk="G#a", st="queued", due=1, body=big)
    inflight = img(pk="M#1", sk="G#a", st="inflight", due=2, body=big)
    done = img(pk="M#1", sk="G#a", body=big)

    def rec(old: Any, new: Any) -> dict[str, Any]:
        return {"dynamodb": {"OldImage": old, "NewImage": new}}

    assert write_units(rec(None, queued), ix) == {"table": 2, "by_state": 2}
    # an index key change is a delete and a put on the index
    assert write_units(rec(queued, inflight), ix) == {"table": 2, "by_state": 4}
    # leaving the index (st removed): a delete there
    assert write_units(rec(inflight, done), ix) == {"table": 2, "by_state": 2}
    assert write_units(rec(done, None), ix) == {"table": 2}
    assert write_units(rec(done, None), ix, transactional=True) == {"table": 4}
    ttl = {
        "dynamodb": {"OldImage": done},
        "userIdentity": {"principalId": "dynamodb.amazonaws.com"},
    }
    assert write_units(ttl, ix) == {}


def test_a_write_that_changes_nothing_projected_writes_no_index_entry() -> None:
    """A claim (the lease on the item, the keys unchanged): under KEYS_ONLY the entry is
    not written ("If a write to a table does not require a global secondary index update,
    then no write capacity is consumed from the index"); under ALL it is rewritten."""
    big = "x" * 1500
    queued = img(pk="M#1", sk="G#a", st="queued#07", due=1, body=big)
    claimed = img(pk="M#1", sk="G#a", st="queued#07", due=1, body=big, lease_ms=9, lease_token="t")
    moved = img(pk="M#1", sk="G#a", st="queued#07", due=5, body=big)

    def rec(old: Any, new: Any) -> dict[str, Any]:
        return {"dynamodb": {"OldImage": old, "NewImage": new}}

    keys = (Index("by_state", ("st", "due"), "KEYS_ONLY"),)
    assert write_units(rec(queued, claimed), keys) == {"table": 2}
    assert write_units(rec(claimed, moved), keys) == {"table": 2, "by_state": 2}
    whole = (Index("by_state", ("st", "due"), "ALL"),)
    assert write_units(rec(queued, claimed), whole) == {"table": 2, "by_state": 2}
    assert write_units(rec(queued, queued), whole) == {"table": 2}
