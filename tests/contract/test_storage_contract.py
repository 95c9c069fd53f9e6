"""The storage protocol's contract, written once, run against every backend.

Only the `Storage` protocol is used here (plus the backend's `inspect` helpers through the
`backend` fixture), so a new backend is tested by adding it to the fixture's params.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path

import pytest
from mailqueue.backends.aws.items import is_s3_solo
from mailqueue.backends.fs import FsStorage
from mailqueue.core.errors import Conflict, InvalidInput, LeaseLost
from mailqueue.core.model import (
    Claim,
    GroupState,
    MailRef,
    Notify,
    RecipientState,
    Result,
    utcnow,
)
from mailqueue.core.storage import ClaimRefused, Storage

from tests.support import factories as f
from tests.support.aws import AwsEnv

OK = Result(250, "2.0.0", "Ok: queued", "mx.example.net")
TEMP = Result(451, "4.3.0", "try again later", "mx.example.net")
PERM = Result(550, "5.1.1", "user unknown", "mx.example.net")


@dataclass
class Backend:
    storage: Storage
    name: str
    variant: str = ""

    def content_exists(self, mail_id: str) -> bool:
        return bool(self.storage.content_exists(mail_id))  # type: ignore[attr-defined]

    def all_groups(self, mail_id: str) -> list[object]:
        _, groups = self.storage.get_mail(mail_id)  # type: ignore[attr-defined]
        return list(groups)


@pytest.fixture(params=["aws", "aws-citem", "aws-item", "aws-s3", "fs"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if request.param == "aws":  # the defaults: a small one-group mail is one item (solo)
        aws: AwsEnv = request.getfixturevalue("aws")
        yield Backend(aws.storage(), "aws", "aws")
    elif request.param == "aws-citem":  # every one-group mail's content in a content item
        aws = request.getfixturevalue("aws")
        yield Backend(aws.storage(content_item_above_bytes=0), "aws", "aws-citem")
    elif request.param == "aws-item":  # small mails' content in a mail item of their own
        aws = request.getfixturevalue("aws")
        yield Backend(aws.storage(solo_item_max_bytes=0), "aws", "aws-item")
    elif request.param == "aws-s3":  # every content in S3
        aws = request.getfixturevalue("aws")
        yield Backend(aws.storage(inline_content_max_bytes=0), "aws", "aws-s3")
    else:
        yield Backend(FsStorage(tmp_path / "queue"), "fs")  # type: ignore[arg-type]


def claim(b: Backend, mail_id: str, group: str, **kw: object) -> Claim:
    c = b.storage.send_start(MailRef(mail_id, group), kw.pop("now", utcnow()), lease_seconds=60)  # type: ignore[arg-type]
    assert isinstance(c, Claim), c
    return c


def test_enqueue_then_list_queue_shows_each_group_due(backend: Backend) -> None:
    q = backend.storage.enqueue(
        f.envelope("a@x.example", "b@x.example", "c@y.example"), f.content()
    )
    assert sorted(q.groups) == ["x.example", "y.example"]
    assert [rid for rid, _ in q.recipients] == ["r0", "r1", "r2"]
    page = backend.storage.list_queue(due_before=utcnow() + timedelta(seconds=1))
    mine = {g.key: g for g in page.items if g.mail_id == q.mail_id}
    assert set(mine) == {"x.example", "y.example"}
    assert [r.address for r in mine["x.example"].recipients] == ["a@x.example", "b@x.example"]
    assert all(g.state == GroupState.QUEUED and g.attempts == 0 for g in mine.values())


def test_list_queue_paginates_with_a_cursor(backend: Backend) -> None:
    ids = {backend.storage.enqueue(f.envelope(), f.content()).mail_id for _ in range(5)}
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        page = backend.storage.list_queue(limit=2, cursor=cursor)
        pages += 1
        seen += [g.mail_id for g in page.items]
        cursor = page.cursor
        if not cursor:
            break
    assert set(seen) == ids and len(seen) == 5
    assert pages >= 3


def test_second_claim_of_the_same_group_is_refused(backend: Backend) -> None:
    q = backend.storage.enqueue(f.envelope(), f.content())
    first = claim(backend, q.mail_id, q.groups[0])
    second = backend.storage.send_start(MailRef(q.mail_id, q.groups[0]), utcnow(), lease_seconds=60)
    assert isinstance(second, ClaimRefused) and second.reason == "claimed"
    assert first.group.state == GroupState.INFLIGHT


def test_claim_of_a_missing_group_says_gone(backend: Backend) -> None:
    r = backend.storage.send_start(MailRef("nope", "x.example"), utcnow(), lease_seconds=60)
    assert isinstance(r, ClaimRefused) and r.reason == "gone"


def test_read_inflight_streams_the_stored_content(backend: Backend) -> None:
    body = f.content(20_000)
    q = backend.storage.enqueue(f.envelope(), body)
    c = claim(backend, q.mail_id, q.groups[0])
    mail = backend.storage.read_inflight(c)
    assert mail.content.read() == body and mail.size == len(body)
    assert mail.group.sender == "alice@example.org"


def test_send_cancel_returns_the_group_unchanged(backend: Backend) -> None:
    q = backend.storage.enqueue(f.envelope("a@x.example", "b@x.example"), f.content())
    before = backend.storage.list_queue().items[0]
    c = claim(backend, q.mail_id, "x.example")
    g = backend.storage.send_cancel(c)
    assert g.state == GroupState.QUEUED
    after = backend.storage.list_queue().items[0]
    assert after.recipients == before.recipients
    assert after.attempts == 0
    again = claim(backend, q.mail_id, "x.example")  # immediately claimable again
    assert again.group.attempts == 0


def test_reschedule_moves_next_attempt_and_counts_the_attempt(backend: Backend) -> None:
    q = backend.storage.enqueue(f.envelope(), f.content())
    c = claim(backend, q.mail_id, q.groups[0])
    later = utcnow() + timedelta(minutes=5)
    t = backend.storage.reschedule(c, {"r0": TEMP}, later)
    assert t.released and t.group.state == GroupState.QUEUED
    refused = backend.storage.send_start(
        MailRef(q.mail_id, q.groups[0]), utcnow(), lease_seconds=60
    )
    assert isinstance(refused, ClaimRefused) and refused.reason == "not_due"
    assert refused.next_attempt_at is not None
    assert abs((refused.next_attempt_at - later).total_seconds()) < 1
    g = backend.storage.list_queue().items[0]
    assert g.recipients[0].attempts == 1 and g.recipients[0].last_result == TEMP
    assert g.history[-1].number == 1
    c2 = claim(backend, q.mail_id, q.groups[0], now=later + timedelta(seconds=1))
    assert c2.attempt_number == 2


def test_send_done_of_the_last_recipient_cleans_up_only_then(backend: Backend) -> None:
    q = backend.storage.enqueue(f.envelope("a@x.example", "b@y.example"), f.content())
    cx = claim(backend, q.mail_id, "x.example")
    tx = backend.storage.send_done(cx, ["r0"], OK)
    assert tx.released and not tx.mail_finished
    assert backend.content_exists(q.mail_id)
    assert backend.storage.cleanup(q.mail_id) is False  # y.example still queued
    assert backend.content_exists(q.mail_id)
    cy = claim(backend, q.mail_id, "y.example")
    ty = backend.storage.send_done(cy, ["r1"], OK)
    assert ty.mail_finished and ty.cleaned
    assert not backend.content_exists(q.mail_id)
    assert backend.storage.cleanup(q.mail_id) is True  # idempotent


def test_lease_is_checked_on_every_transition(backend: Backend) -> None:
    q = backend.storage.enqueue(f.envelope(), f.content())
    old = claim(backend, q.mail_id, q.groups[0])
    # the holder stalls past its lease; another attempt takes over
    late = utcnow() + timedelta(seconds=61)
    new = claim(backend, q.mail_id, q.groups[0], now=late)
    with pytest.raises(LeaseLost):
        backend.storage.send_done(old, ["r0"], OK)
    t = backend.storage.send_done(new, ["r0"], OK)
    assert t.mail_finished
    with pytest.raises(LeaseLost):  # a repeat after release
        backend.storage.send_done(new, ["r0"], OK)


def test_find_inflight_returns_only_expired_leases(backend: Backend) -> None:
    q1 = backend.storage.enqueue(f.envelope(), f.content())
    q2 = backend.storage.enqueue(f.envelope(), f.content())
    now = utcnow()
    backend.storage.send_start(MailRef(q1.mail_id, q1.groups[0]), now, lease_seconds=10)
    backend.storage.send_start(MailRef(q2.mail_id, q2.groups[0]), now, lease_seconds=3600)
    assert backend.storage.find_inflight(now).items == ()
    expired = backend.storage.find_inflight(now + timedelta(seconds=11)).items
    assert [g.mail_id for g in expired] == [q1.mail_id]


def test_partial_results_in_one_group(backend: Backend) -> None:
    q = backend.storage.enqueue(
        f.envelope("a@x.example", "b@x.example", "c@x.example"), f.content()
    )
    c = claim(backend, q.mail_id, "x.example")
    t1 = backend.storage.send_done(c, ["r0"], OK)
    assert not t1.released
    t2 = backend.storage.drop(c, {"r1": PERM})
    assert not t2.released
    later = utcnow() + timedelta(minutes=5)
    t3 = backend.storage.reschedule(c, {"r2": TEMP}, later)
    assert t3.released and t3.group.state == GroupState.QUEUED
    g = backend.storage.list_queue().items[0]
    states = {r.rid: r.state for r in g.recipients}
    assert states == {
        "r0": RecipientState.DELIVERED,
        "r1": RecipientState.BOUNCED,
        "r2": RecipientState.QUEUED,
    }
    assert [r.rid for r in g.pending()] == ["r2"]


def test_drop_marks_bounced_and_a_dsn_due(backend: Backend) -> None:
    q = backend.storage.enqueue(f.envelope(), f.content())
    c = claim(backend, q.mail_id, q.groups[0])
    t = backend.storage.drop(c, {"r0": PERM})
    assert t.released and t.group.state == GroupState.DSN and not t.mail_finished
    assert backend.content_exists(q.mail_id)  # the DSN still needs it
    assert t.group.recipients[0].dsn_pending == "failed"


@pytest.mark.parametrize(("sender", "notify"), [("", ()), ("alice@example.org", (Notify.NEVER,))])
def test_drop_without_dsn_finishes_the_mail(
    backend: Backend, sender: str, notify: tuple[Notify, ...]
) -> None:
    q = backend.storage.enqueue(f.envelope(sender=sender, notify=notify), f.content())
    c = claim(backend, q.mail_id, q.groups[0])
    t = backend.storage.drop(c, {"r0": PERM})
    assert t.group.state == GroupState.DONE and t.mail_finished and t.cleaned
    assert not backend.content_exists(q.mail_id)


def test_enqueue_retried_with_the_same_key_stores_nothing_twice(backend: Backend) -> None:
    env = f.envelope("a@x.example", "b@y.example")
    body = f.content()
    first = backend.storage.enqueue(env, body, idempotency_key="k-1")
    second = backend.storage.enqueue(env, body, idempotency_key="k-1")
    assert second.mail_id == first.mail_id and second.duplicate and not first.duplicate
    groups = backend.storage.list_queue().items
    assert sorted((g.mail_id, g.key) for g in groups) == [
        (first.mail_id, "x.example"),
        (first.mail_id, "y.example"),
    ]
    with pytest.raises(Conflict):
        backend.storage.enqueue(env, f.content(subject="other"), idempotency_key="k-1")


def test_enqueue_retry_after_progress_does_not_reset_state(backend: Backend) -> None:
    env = f.envelope()
    body = f.content()
    q = backend.storage.enqueue(env, body, idempotency_key="k-2")
    c = claim(backend, q.mail_id, q.groups[0])
    backend.storage.reschedule(c, {"r0": TEMP}, utcnow() + timedelta(minutes=5))
    again = backend.storage.enqueue(env, body, idempotency_key="k-2")
    assert again.duplicate
    g = backend.storage.list_queue().items[0]
    assert g.recipients[0].attempts == 1  # not overwritten by the retry


@pytest.mark.parametrize(
    ("addresses", "sender", "code"),
    [
        ((), "alice@example.org", "no_recipients"),
        (("not-an-address",), "alice@example.org", "invalid_address"),
        (("a\r\nRCPT TO:<evil@x.example>@x.example",), "alice@example.org", "forbidden_character"),
        (("bob@x.example",), "ali\x00ce@example.org", "forbidden_character"),
        ((("a" * 65) + "@x.example",), "alice@example.org", "address_too_long"),
        (("bob@" + ("d" * 63 + ".") * 4 + "example",), "alice@example.org", "address_too_long"),
        (("bøb@x.example",), "alice@example.org", "smtputf8_required"),
    ],
)
def test_bad_envelopes_are_refused_before_anything_is_written(
    backend: Backend, addresses: tuple[str, ...], sender: str, code: str
) -> None:
    from mailqueue.core.model import Envelope, Recipient

    env = Envelope(sender=sender, recipients=tuple(Recipient(rid="", address=a) for a in addresses))
    with pytest.raises(InvalidInput) as err:
        backend.storage.enqueue(env, f.content())
    assert err.value.code == code
    assert backend.storage.list_queue().items == ()


@pytest.mark.parametrize(
    ("change", "code"),
    [
        ({"notify": "NEVER,FAILURE"}, "invalid_notify"),
        ({"orcpt": "rfc822;" + "o" * 600}, "orcpt_too_long"),
        ({"orcpt": "rfc822;bob@x.example\r\nX: y"}, "forbidden_character"),
        ({"envid": "e" * 101}, "envid_too_long"),
    ],
)
def test_bad_dsn_parameters_are_refused_by_every_backend(
    backend: Backend, change: dict[str, str], code: str
) -> None:
    """The RFC 3461 parameters are checked by the shared rules (mailqueue.core.transitions), so
    a backend cannot accept what another refuses."""
    from mailqueue.core.model import Envelope, Notify, Recipient

    notify = tuple(Notify(n) for n in change.get("notify", "FAILURE").split(","))
    rcpt = Recipient(rid="", address="bob@x.example", notify=notify, orcpt=change.get("orcpt"))
    env = Envelope(sender="alice@example.org", recipients=(rcpt,), envid=change.get("envid"))
    with pytest.raises(InvalidInput) as err:
        backend.storage.enqueue(env, f.content())
    assert err.value.code == code
    assert backend.storage.list_queue().items == ()


def test_oversized_content_is_refused(backend: Backend, tmp_path: Path) -> None:
    if backend.name == "aws":
        small = backend.storage.__class__(  # type: ignore[call-arg]
            replace(backend.storage.s, max_size=2048),
            backend.storage.c,  # type: ignore[attr-defined]
        )
    else:
        small = FsStorage(tmp_path / "small", max_size=2048)  # type: ignore[assignment]
    with pytest.raises(InvalidInput) as err:
        small.enqueue(f.envelope(), f.content(4096))
    assert err.value.code == "too_large"
    assert small.list_queue().items == ()


@pytest.mark.parametrize("content", ["small", "incompressible"])
def test_find_pending_cleanup_finds_a_finished_mail_whose_cleanup_was_cut_short(
    backend: Backend, request: pytest.FixtureRequest, content: str
) -> None:
    from tests.support.faults import InjectedCrash, short_circuit

    if backend.name != "aws":
        pytest.skip("the crash is injected at the botocore layer")
    aws: AwsEnv = request.getfixturevalue("aws")

    body = f.content() if content == "small" else f.incompressible()
    q = backend.storage.enqueue(f.envelope(), body)
    c = claim(backend, q.mail_id, q.groups[0])

    def die(params: dict[str, object]) -> None:
        raise InjectedCrash("died before cleanup")

    if backend.variant in ("aws", "aws-citem") and content == "small":
        # a solo mail: its result drops the content (or leaves its content item to its
        # TTL) and expires the item, out of the state index; its cleanup is DynamoDB's TTL
        # (no request to cut short)
        backend.storage.send_done(c, ["r0"], OK)
        citem = aws.clients.dynamodb.get_item(
            TableName=aws.resources.table,
            Key={"pk": {"S": f"M#{q.mail_id}"}, "sk": {"S": "C"}},
            ConsistentRead=True,
        ).get("Item")
        if backend.variant == "aws-citem":  # kept for its TTL, served by no read
            assert citem is not None and int(citem["expires_at"]["N"]) > utcnow().timestamp()
        else:
            assert citem is None
        assert not backend.content_exists(q.mail_id)
        item = aws.clients.dynamodb.get_item(
            TableName=aws.resources.table,
            Key={"pk": {"S": f"M#{q.mail_id}"}, "sk": {"S": f"G#{q.groups[0]}"}},
            ConsistentRead=True,
        )["Item"]
        assert "st" not in item and "due" not in item and "body" not in item
        assert int(item["expires_at"]["N"]) <= utcnow().timestamp()
        assert list(backend.storage.find_pending_cleanup(utcnow() + timedelta(minutes=10))) == []
        return
    # the cleanup's first request: the S3 delete, or (content in the mail item) the
    # BatchWriteItem that deletes the items
    with (
        short_circuit(aws.clients.s3, "DeleteObject", die),
        short_circuit(aws.clients.dynamodb, "BatchWriteItem", die),
        pytest.raises(InjectedCrash),
    ):
        backend.storage.send_done(c, ["r0"], OK)
    assert backend.content_exists(q.mail_id)
    item = aws.clients.dynamodb.get_item(
        TableName=aws.resources.table,
        Key={"pk": {"S": f"M#{q.mail_id}"}, "sk": {"S": f"G#{q.groups[0]}"}},
        ConsistentRead=True,
    )["Item"]
    if is_s3_solo(item["content_key"]["S"]):
        # an S3 solo mail (one item, content in S3): out of the index at its result, so
        # the object its cut-short delete left is the orphan finder's, once the item has
        # expired (TTL) and the orphan grace (36 h) has passed
        assert "st" not in item and int(item["expires_at"]["N"]) <= utcnow().timestamp()
        soon = list(backend.storage.find_pending_cleanup(utcnow() + timedelta(minutes=10)))
        assert soon == []
        later = list(backend.storage.find_pending_cleanup(utcnow() + timedelta(hours=37)))
        assert [(p.mail_id, p.reason) for p in later] == [(q.mail_id, "orphan")]
        assert backend.storage.cleanup(q.mail_id) is True
        assert not backend.content_exists(q.mail_id)
        return
    pending = list(backend.storage.find_pending_cleanup(utcnow() + timedelta(minutes=10)))
    assert [p.mail_id for p in pending if p.reason == "finished"] == [q.mail_id]
    assert backend.storage.cleanup(q.mail_id) is True
    assert not backend.content_exists(q.mail_id)
    assert list(backend.storage.find_pending_cleanup(utcnow() + timedelta(minutes=10))) == []


def test_the_same_key_with_other_recipients_is_a_conflict(backend: Backend) -> None:
    body = f.content()
    backend.storage.enqueue(f.envelope("a@x.example"), body, idempotency_key="k-3")
    with pytest.raises(Conflict):
        backend.storage.enqueue(f.envelope("b@x.example"), body, idempotency_key="k-3")


def test_a_late_retry_after_cleanup_is_answered_not_requeued(backend: Backend) -> None:
    env = f.envelope()
    body = f.content()
    q = backend.storage.enqueue(env, body, idempotency_key="k-4")
    c = claim(backend, q.mail_id, q.groups[0])
    assert backend.storage.send_done(c, ["r0"], OK).cleaned
    again = backend.storage.enqueue(env, body, idempotency_key="k-4")
    assert again.duplicate and again.mail_id == q.mail_id
    assert backend.storage.list_queue().items == ()
    assert not backend.content_exists(q.mail_id)


# ---------------------------------------------------------------- the largest group
MAX_GROUP = 50  # StorageSettings.group_recipient_limit's default, the largest allowed here
WIDE = "\U0001d11e"  # 4 UTF-8 octets: the worst case for an octet budget


def _max_reply(code: int, status: str, i: int) -> Result:
    """A reply as long as the queue stores one (512 octets of text), distinct per rcpt."""
    return Result(code, status, f"{i:03d} " + WIDE * 200, "m" * 255)


def _max_envelope() -> object:
    from mailqueue.core.model import Envelope, Recipient

    return Envelope(
        sender="alice@example.org",
        recipients=tuple(
            Recipient(
                rid="",
                address=f"{i:03d}" + "u" * 61 + "@big.example",
                notify=(Notify.SUCCESS, Notify.FAILURE, Notify.DELAY),
                orcpt="rfc822;" + "o" * 490,
            )
            for i in range(MAX_GROUP)
        ),
    )


def test_a_maximum_group_with_maximum_replies_is_recorded_once_per_attempt(
    backend: Backend,
) -> None:
    """50 recipients of one domain, every reply 512 octets: each write is accepted (the
    AWS backend runs under the limit guard), every recipient recorded, one attempt each."""
    q = backend.storage.enqueue(_max_envelope(), f.content())  # type: ignore[arg-type]
    assert q.groups == ("big.example",)
    c = claim(backend, q.mail_id, "big.example")
    rids = [r.rid for r in c.group.recipients]
    assert len(rids) == MAX_GROUP
    ok, perm, temp = rids[:20], rids[20:35], rids[35:]
    for i, rid in enumerate(ok):  # every delivered recipient with its own reply
        backend.storage.send_done(c, [rid], _max_reply(250, "2.0.0", i))
    backend.storage.drop(c, {rid: _max_reply(550, "5.1.1", i) for i, rid in enumerate(perm)})
    later = utcnow() + timedelta(minutes=5)
    t = backend.storage.reschedule(
        c, {rid: _max_reply(451, "4.7.500", i) for i, rid in enumerate(temp)}, later
    )
    assert t.released and t.group.state == GroupState.QUEUED
    (g,) = backend.all_groups(q.mail_id)
    by = {r.rid: r for r in g.recipients}  # type: ignore[attr-defined]
    assert {rid for rid in ok if by[rid].state == RecipientState.DELIVERED} == set(ok)
    assert {rid for rid in perm if by[rid].state == RecipientState.BOUNCED} == set(perm)
    assert {rid for rid in temp if by[rid].state == RecipientState.QUEUED} == set(temp)
    assert all(by[rid].attempts == 1 for rid in rids)
    assert by[ok[7]].last_result == _max_reply(250, "2.0.0", 7)
    assert 508 <= len(by[temp[3]].last_result.text.encode()) <= 512  # type: ignore[union-attr]
    # one SMTP transaction is one attempt, whatever its per-recipient outcomes
    assert [a.number for a in g.history] == [1]  # type: ignore[attr-defined]
    assert g.history[0].result.status == "4.7.500"  # type: ignore[attr-defined]
    # the next attempt is number 2, and delivers the rest in one write
    c2 = claim(backend, q.mail_id, "big.example", now=later + timedelta(seconds=1))
    assert c2.attempt_number == 2
    assert sorted(r.rid for r in c2.group.pending()) == sorted(temp)
    t2 = backend.storage.send_done(c2, temp, _max_reply(250, "2.0.0", 99))
    assert t2.released and t2.group.state == GroupState.DSN  # SUCCESS/FAILURE notices due
    assert [a.number for a in t2.group.history] == [1, 2]
    assert sum(r.attempts for r in t2.group.recipients) == MAX_GROUP + len(temp)


def test_an_oversized_reply_is_stored_bounded(backend: Backend) -> None:
    """A reply longer than an SMTP reply line (a 1,000-line multi-line reply, say) is cut to
    512 octets on a character boundary before it is stored."""
    q = backend.storage.enqueue(f.envelope(), f.content())
    c = claim(backend, q.mail_id, q.groups[0])
    t = backend.storage.reschedule(
        c, {"r0": Result(451, "4.3.0", WIDE * 5000, "x" * 1000)}, utcnow() + timedelta(minutes=5)
    )
    r = t.group.recipients[0]
    assert r.last_result is not None
    assert len(r.last_result.text.encode()) <= 512 and r.last_result.text.endswith("...")
    assert len((r.last_result.remote_mta or "").encode()) <= 255
    (g,) = backend.all_groups(q.mail_id)
    assert g.recipients[0].last_result == r.last_result  # type: ignore[attr-defined]


def test_postpone_keeps_a_shaping_reservation_until_the_next_postpone(backend: Backend) -> None:
    """Traffic shaping books a slot for a postponed group (issue 25 item 6): the next
    claim carries it; a postpone without one (a suspension) clears it."""
    q = backend.storage.enqueue(f.envelope("a@x.example"), f.content())
    c = claim(backend, q.mail_id, "x.example")
    assert c.group.reservation is None
    g = backend.storage.postpone(c, 0, reservation="1700000000.250|0|mx:site")
    assert g.reservation == "1700000000.250|0|mx:site"
    later = utcnow() + timedelta(seconds=2)
    c2 = claim(backend, q.mail_id, "x.example", now=later)
    assert c2.group.reservation == "1700000000.250|0|mx:site"
    backend.storage.postpone(c2, 0)
    c3 = claim(backend, q.mail_id, "x.example", now=later + timedelta(seconds=2))
    assert c3.group.reservation is None
