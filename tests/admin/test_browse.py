"""Browse: every filter, pagination with a cursor, sorts, and refused filters."""

from __future__ import annotations

from datetime import timedelta

import pytest
from mailqueue.core.errors import InvalidInput
from mailqueue.core.model import MailRef, Result, utcnow
from mailqueue.core.storage import ClaimRefused
from mailqueue.services.admin import Action, OpContext, parse_filter
from mailqueue.services.admin.service import BrowsePage

from tests.admin.conftest import ACTOR, Admin

CTX = OpContext(actor=ACTOR)


def browse(admin: Admin, **params: str) -> list[tuple[str, str]]:
    """Every (mail_id, group) the filter selects, following cursors."""
    sort = params.pop("sort", "next")
    limit = int(params.pop("limit", "50"))
    flt = parse_filter(params)
    out: list[tuple[str, str]] = []
    cursor = None
    while True:
        page: BrowsePage = admin.service.browse(flt, sort=sort, limit=limit, cursor=cursor)
        assert len(page.items) <= limit
        out.extend((g.mail_id, g.key) for g in page.items)
        cursor = page.cursor
        if cursor is None:
            return out


def test_filters_select_groups(admin: Admin) -> None:
    now = utcnow()
    old = admin.enqueue("bob@example.net", arrival=now - timedelta(hours=3))
    mixed = admin.enqueue("carol@example.net", "dave@example.com", sender="news@lists.example")
    nul = admin.enqueue("erin@example.com", sender="")
    held = admin.enqueue("frank@example.org")
    admin.service.act(held.mail_id, Action.HOLD, CTX)
    # one deferral with a status on carol
    claim = admin.storage.send_start(
        MailRef(mixed.mail_id, "example.net"), utcnow(), lease_seconds=60
    )
    assert not isinstance(claim, ClaimRefused)
    admin.storage.reschedule(
        claim, {"r0": Result(451, "4.7.1", "greylisted")}, now + timedelta(minutes=10)
    )
    all_pending = set(browse(admin))
    assert all_pending == {
        (old.mail_id, "example.net"),
        (mixed.mail_id, "example.net"),
        (mixed.mail_id, "example.com"),
        (nul.mail_id, "example.com"),
        (held.mail_id, "example.org"),
    }
    assert set(browse(admin, state="held")) == {(held.mail_id, "example.org")}
    assert set(browse(admin, state="queued,inflight")) == all_pending - {
        (held.mail_id, "example.org")
    }
    assert set(browse(admin, sender="NEWS@lists.example")) == {
        (mixed.mail_id, "example.net"),
        (mixed.mail_id, "example.com"),
    }
    assert set(browse(admin, sender="<>")) == {(nul.mail_id, "example.com")}
    assert set(browse(admin, recipient="Carol@Example.NET")) == {(mixed.mail_id, "example.net")}
    assert set(browse(admin, domain="example.com")) == {
        (mixed.mail_id, "example.com"),
        (nul.mail_id, "example.com"),
    }
    assert set(browse(admin, age_min="2h")) == {(old.mail_id, "example.net")}
    assert (old.mail_id, "example.net") not in set(browse(admin, age_max="1h"))
    assert set(browse(admin, age_min="1h", age_max="4h")) == {(old.mail_id, "example.net")}
    assert set(browse(admin, attempts_min="1")) == {(mixed.mail_id, "example.net")}
    for status in ("4", "451", "4.7", "4.7.1"):
        assert set(browse(admin, status=status)) == {(mixed.mail_id, "example.net")}, status
    assert browse(admin, status="4.7.2") == []
    assert browse(admin, status="550") == []


def test_pagination_over_several_pages_resumes_exactly(admin: Admin) -> None:
    ids = [admin.enqueue(f"user{i}@example.net").mail_id for i in range(23)]
    for mid in ids[:5]:
        admin.service.act(mid, Action.HOLD, CTX)
    seen = browse(admin, limit="4")
    assert sorted(m for m, _ in seen) == sorted(ids)
    assert len(seen) == len(set(seen)) == 23
    # queued first (by next attempt), then held
    assert {m for m, _ in seen[-5:]} == set(ids[:5])
    # a selective filter over small pages: pages may be short, the cursor still resumes
    flt_seen = browse(admin, limit="3", state="held")
    assert sorted(m for m, _ in flt_seen) == sorted(ids[:5])
    by_arrival = browse(admin, limit="4", sort="arrival")
    assert [m for m, _ in by_arrival] == ids  # ULIDs enqueued in order: arrival order


def test_cursor_is_bound_to_its_filter_and_sort(admin: Admin) -> None:
    for i in range(3):
        admin.enqueue(f"user{i}@example.net")
    page = admin.service.browse(parse_filter({}), limit=1)
    assert page.cursor
    for flt, sort in ((parse_filter({"state": "held"}), "next"), (parse_filter({}), "arrival")):
        with pytest.raises(InvalidInput) as exc:
            admin.service.browse(flt, sort=sort, limit=1, cursor=page.cursor)
        assert exc.value.code == "invalid_cursor"
    with pytest.raises(InvalidInput):
        admin.service.browse(parse_filter({}), limit=1, cursor="garbage!")


def test_arrival_sort_refuses_selections_too_large_to_sort(admin_factory: object) -> None:
    admin = admin_factory(arrival_sort_max=2)  # type: ignore[operator]
    for i in range(3):
        admin.enqueue(f"user{i}@example.net")
    with pytest.raises(InvalidInput) as exc:
        admin.service.browse(parse_filter({}), sort="arrival")
    assert exc.value.code == "too_many_to_sort"
    assert len(admin.service.browse(parse_filter({}), sort="next").items) == 3


@pytest.mark.parametrize(
    ("params", "code", "field"),
    [
        ({"age_min": "2h", "age_max": "1h"}, "contradictory_filter", "age_min"),
        (
            {"recipient": "bob@example.net", "domain": "example.com"},
            "contradictory_filter",
            "domain",
        ),
        ({"status": "2", "state": "queued"}, "contradictory_filter", "status"),
        ({"state": "delivered"}, "invalid_state", "state"),
        ({"state": "frozen"}, "invalid_state", "state"),
        ({"age_min": "ten minutes"}, "invalid_duration", "age_min"),
        ({"attempts_min": "-1"}, "out_of_range", "attempts_min"),
        ({"attempts_min": "x"}, "invalid_number", "attempts_min"),
        ({"status": "4.x"}, "invalid_status", "status"),
        ({"recipient": "bob"}, "invalid_recipient", "recipient"),
        ({"sender": "a\r\nb@example.org"}, "invalid_value", "sender"),
        ({"sendr": "a@example.org"}, "unknown_parameter", "sendr"),
    ],
)
def test_bad_filters_are_refused(params: dict[str, str], code: str, field: str) -> None:
    with pytest.raises(InvalidInput) as exc:
        parse_filter(params)
    assert (exc.value.code, exc.value.field) == (code, field)


def test_success_status_is_fine_on_finished_groups() -> None:
    flt = parse_filter({"status": "2", "state": "dsn,done"})
    assert flt.status == "2"
