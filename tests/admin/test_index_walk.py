"""Issue 43 item 15: a walk of the by_state index is served whole from one Scan when the
index is small, and by concurrent shard Queries when it is not; both give every group
once, in full pages, with cursors either can resume (the local stack's timing is
bench/browse.py's)."""

from __future__ import annotations

import pytest
from mailqueue.backends.aws.backend import AwsStorage
from mailqueue.core.model import GroupState

from tests.admin.conftest import Admin

DOMAINS = [f"d{i}.example" for i in range(9)]


def _fill(admin: Admin, mails: int) -> set[tuple[str, str]]:
    want: set[tuple[str, str]] = set()
    for i in range(mails):
        rcpts = [f"u{i}@{DOMAINS[(i + j) % len(DOMAINS)]}" for j in range(1 + i % 3)]
        q = admin.enqueue(*rcpts)
        want |= {(q.mail_id, d) for d in {r.partition("@")[2] for r in rcpts}}
    return want


def _walk(st: AwsStorage, limit: int, switch_at: int | None = None) -> list[list[tuple[str, str]]]:
    pages: list[list[tuple[str, str]]] = []
    cursor: str | None = None
    while True:
        if switch_at is not None and len(pages) == switch_at:
            st.index_snapshot_limit = 1 - st.index_snapshot_limit  # the other way from here
        page = st.list_queue(state=GroupState.QUEUED, limit=limit, cursor=cursor)
        pages.append([(g.mail_id, g.key) for g in page.items])
        cursor = page.cursor
        if cursor is None:
            return pages


@pytest.mark.parametrize("limit", [1, 3, 8, 50])
@pytest.mark.parametrize("snapshot", [True, False], ids=["scan", "queries"])
def test_a_walk_gives_every_group_once_in_full_pages(
    aws_admin: Admin, limit: int, snapshot: bool
) -> None:
    admin = aws_admin
    want = _fill(admin, 14)
    st = AwsStorage(admin.aws.settings, admin.aws.clients)
    st.index_snapshot_limit = 500 if snapshot else 0
    pages = _walk(st, limit)
    seen = [k for p in pages for k in p]
    assert len(seen) == len(set(seen)) and set(seen) == want
    # every page but the last is full (a window's extra answers are cut, not lost)
    assert all(len(p) == limit for p in pages[:-1]), [len(p) for p in pages]
    assert len(pages[-1]) <= limit


@pytest.mark.parametrize("switch_at", [1, 2])
def test_a_cursor_of_one_way_resumes_the_other(aws_admin: Admin, switch_at: int) -> None:
    admin = aws_admin
    want = _fill(admin, 10)
    for first in (500, 0):
        st = AwsStorage(admin.aws.settings, admin.aws.clients)
        st.index_snapshot_limit = first
        seen = [k for p in _walk(st, 4, switch_at) for k in p]
        assert len(seen) == len(set(seen)) and set(seen) == want


def test_a_small_index_is_walked_without_a_query(aws_admin: Admin) -> None:
    admin = aws_admin
    _fill(admin, 6)
    admin.aws.counter.reset()
    page = admin.service.browse(admin_filter(), limit=50)
    assert len(page.items) >= 6
    ops = admin.aws.counter.snapshot()
    # one Scan for the page's three walks (queued, inflight, held): one read scope
    assert "dynamodb:Query" not in ops and ops["dynamodb:Scan"] == 1


def admin_filter():  # type: ignore[no-untyped-def]
    from mailqueue.services.admin.filters import parse_filter

    return parse_filter({})


def test_a_read_scope_lasts_one_operator_read(aws_admin: Admin) -> None:
    """Each browse or size reads the index afresh (its scope ends with it): a hold made
    between two sizes shows in the second, and a size outside any scope keeps nothing."""
    from mailqueue.core.storage import read_scope_cache
    from mailqueue.services.admin.service import Action, OpContext

    from tests.admin.conftest import ACTOR

    admin = aws_admin
    q = admin.enqueue("bob@example.net")
    assert admin.service.size().groups == {"queued": 1}
    admin.service.act(q.mail_id, Action.HOLD, OpContext(actor=ACTOR), group="example.net")
    admin.aws.counter.reset()
    assert admin.service.size().groups == {"held": 1}
    assert admin.aws.counter.snapshot()["dynamodb:Scan"] == 1  # read again, once
    page = admin.service.browse(admin_filter(), limit=50)
    assert [(g.mail_id, g.state) for g in page.items] == [(q.mail_id, GroupState.HELD)]
    assert read_scope_cache() is None
