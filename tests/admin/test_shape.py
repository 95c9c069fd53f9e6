"""qshape: domain × age buckets from the index."""

from __future__ import annotations

from datetime import timedelta

import pytest
from mailqueue.core.errors import InvalidInput
from mailqueue.core.model import utcnow
from mailqueue.services.admin import Action, OpContext, parse_filter
from mailqueue.services.admin.shape import bucket_edges, bucket_of, render_shape

from tests.admin.conftest import ACTOR, Admin


def test_buckets_double_like_qshape() -> None:
    edges = bucket_edges(5, 10)
    assert edges == (5, 10, 20, 40, 80, 160, 320, 640, 1280)
    assert [bucket_of(m, edges) for m in (0, 4.9, 5, 12, 39, 1279, 1280, 99999)] == [
        0,
        0,
        1,
        2,
        3,
        8,
        9,
        9,
    ]
    with pytest.raises(InvalidInput):
        bucket_edges(0, 10)
    with pytest.raises(InvalidInput):
        bucket_edges(5, 1)


def test_shape_counts_pending_recipients_by_domain_and_age(admin: Admin) -> None:
    now = utcnow()
    admin.enqueue("a@one.example", "b@one.example", "c@two.example")  # 0-5 min
    admin.enqueue("d@one.example", arrival=now - timedelta(minutes=7))  # 5-10
    admin.enqueue("e@two.example", arrival=now - timedelta(minutes=30))  # 20-40
    old = admin.enqueue("f@two.example", arrival=now - timedelta(days=2))  # 1280+
    admin.service.act(old.mail_id, Action.HOLD, OpContext(actor=ACTOR))  # held counts too
    gone = admin.enqueue("g@three.example")
    admin.service.act(gone.mail_id, Action.DELETE, OpContext(actor=ACTOR))  # final: not
    shape = admin.service.shape(parse_filter({})).to_json()
    assert shape["labels"] == ["5", "10", "20", "40", "80", "160", "320", "640", "1280", "1280+"]
    assert shape["total"] == {
        "domain": "TOTAL",
        "total": 6,
        "counts": [3, 1, 0, 1, 0, 0, 0, 0, 0, 1],
    }
    rows = {r["domain"]: r for r in shape["rows"]}
    assert set(rows) == {"one.example", "two.example"}
    assert rows["one.example"]["counts"][:2] == [2, 1]
    assert rows["two.example"]["counts"] == [1, 0, 0, 1, 0, 0, 0, 0, 0, 1]
    held_only = admin.service.shape(parse_filter({"state": "held"})).to_json()
    assert held_only["total"]["total"] == 1
    senders = admin.service.shape(parse_filter({}), by="sender", buckets=3).to_json()
    assert senders["labels"] == ["5", "10", "10+"]
    assert senders["rows"] == [{"domain": "example.org", "total": 6, "counts": [3, 1, 2]}]
    text = render_shape(shape)
    lines = text.splitlines()
    assert lines[0].split() == [
        "T",
        "5",
        "10",
        "20",
        "40",
        "80",
        "160",
        "320",
        "640",
        "1280",
        "1280+",
    ]
    assert lines[1].split()[:3] == ["TOTAL", "6", "3"]
