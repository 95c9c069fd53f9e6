"""The filesystem backend's own crash windows and its cross-process claim."""

from __future__ import annotations

import multiprocessing
from datetime import timedelta
from pathlib import Path

from mailqueue.backends.fs import FsStorage
from mailqueue.backends.inprocess import InProcess, bodies
from mailqueue.core.model import Claim, MailRef, Result, utcnow

from tests.support import factories as f
from tests.support.faults import InjectedCrash

OK = Result(250, "2.0.0", "ok")


def _claim(root: str, mail_id: str, group: str, out: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    st = FsStorage(root)
    got = st.send_start(MailRef(mail_id, group), utcnow(), lease_seconds=60)
    out.put(isinstance(got, Claim))


def test_only_one_process_wins_a_claim(tmp_path: Path) -> None:
    st = FsStorage(tmp_path)
    q = st.enqueue(f.envelope(), f.content())
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    procs = [
        ctx.Process(target=_claim, args=(str(tmp_path), q.mail_id, q.groups[0], out))
        for _ in range(6)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
    wins = [out.get(timeout=5) for _ in procs]
    assert wins.count(True) == 1


def test_an_enqueue_cut_before_its_commit_point_is_invisible_then_an_orphan(
    tmp_path: Path,
) -> None:
    st = FsStorage(tmp_path)
    q = st.enqueue(f.envelope(), f.content())
    (tmp_path / "data" / q.mail_id / "mail.json").unlink()  # as if we died just before it
    assert st.list_queue().items == ()
    later = utcnow() + timedelta(hours=37)
    pending = list(st.find_pending_cleanup(later))
    assert [(p.mail_id, p.reason) for p in pending] == [(q.mail_id, "orphan")]
    assert st.cleanup(q.mail_id) and not (tmp_path / "data" / q.mail_id).exists()


def test_a_cleanup_cut_short_is_found_and_finished(tmp_path: Path) -> None:
    class DiesBeforeCleanup(FsStorage):
        """Crash injection: the process dies right after the last state write."""

        def cleanup(self, mail_id: str) -> bool:
            raise InjectedCrash("died before cleanup")

    dying = DiesBeforeCleanup(tmp_path)
    q = dying.enqueue(f.envelope("a@x.example", "b@y.example"), f.content())
    for i, g in enumerate(q.groups):
        c = dying.send_start(MailRef(q.mail_id, g), utcnow(), lease_seconds=60)
        assert isinstance(c, Claim)
        try:
            dying.send_done(c, [c.group.recipients[0].rid], OK)
        except InjectedCrash:
            assert i == len(q.groups) - 1  # only the last finisher cleans
    st = FsStorage(tmp_path)
    assert st.content_exists(q.mail_id)
    assert list(st.find_pending_cleanup(utcnow())) == []  # within the grace
    pending = list(st.find_pending_cleanup(utcnow() + timedelta(minutes=10)))
    assert [(p.mail_id, p.reason) for p in pending] == [(q.mail_id, "finished")]
    assert st.cleanup(q.mail_id) and not st.content_exists(q.mail_id)
    assert list(st.find_pending_cleanup(utcnow() + timedelta(minutes=10))) == []


# ------------------------------------------------------------------ with the in-process ports


def _ported(root: Path) -> tuple[FsStorage, InProcess]:
    ip = InProcess.new(visibility_timeout=60)
    return FsStorage(root, triggers=ip.triggers, bounces=ip.bounces), ip


def test_orphans_are_content_without_a_commit_point_older_than_asked(tmp_path: Path) -> None:
    st, _ = _ported(tmp_path)
    kept = st.enqueue(f.envelope(), f.content())
    q = st.enqueue(f.envelope(), f.content())
    (tmp_path / "data" / q.mail_id / "mail.json").unlink()  # died just before committing
    assert list(st.find_orphans(utcnow() - timedelta(hours=1))) == []  # too young
    found = list(st.find_orphans(utcnow() + timedelta(seconds=1)))
    assert [(p.mail_id, p.reason) for p in found] == [(q.mail_id, "orphan")]
    assert kept.mail_id not in {p.mail_id for p in found}


def test_a_postponed_claim_rearms_its_receipt_or_posts_a_new_trigger(tmp_path: Path) -> None:
    st, ip = _ported(tmp_path)
    q = st.enqueue(f.envelope("a@x.example"), f.content())
    (got,) = ip.delivery.receive(1)
    ref = MailRef(q.mail_id, "x.example")
    c = st.send_start(ref, utcnow(), lease_seconds=60, receipt_handle=got.receipt_handle)
    assert isinstance(c, Claim)
    g = st.postpone(c, 120)
    assert g.state.value == "queued" and g.next_attempt_at > utcnow() + timedelta(seconds=100)
    assert (ip.delivery.rearms, ip.delivery.sent) == (1, 1)  # the same message, re-armed
    assert ip.delivery.visible() == 0 and ip.delivery.invisible() == 1
    # a claim whose receipt has lapsed: a fresh trigger, never a group without one
    ip.delivery.make_visible()
    c2 = st.send_start(ref, utcnow() + timedelta(seconds=121), lease_seconds=60)
    assert isinstance(c2, Claim)
    c2.receipt_handle = "lapsed"
    st.postpone(c2, 5)
    assert ip.delivery.sent == 2


def test_dsn_sent_clears_only_the_kind_asked_once_and_cleans_the_finished_mail(
    tmp_path: Path,
) -> None:
    st, ip = _ported(tmp_path)
    q = st.enqueue(f.envelope("a@x.example"), f.content())
    ref = MailRef(q.mail_id, "x.example")
    c = st.send_start(ref, utcnow(), lease_seconds=60)
    assert isinstance(c, Claim)
    st.drop(c, {"r0": Result(550, "5.1.1", "no such user")})
    assert [b["mail_id"] for b in bodies(ip.bounce)] == [q.mail_id]  # handed to the bounce path
    assert st.get_group(ref).state.value == "dsn"
    assert st.dsn_sent(ref, ["r0"], "delayed") is None  # not that kind: nothing changes
    assert st.content_exists(q.mail_id)
    t = st.dsn_sent(ref, ["r0"], "failed")
    assert t is not None and t.group.state.value == "done" and t.cleaned
    assert not st.content_exists(q.mail_id)
    assert st.dsn_sent(ref, ["r0"], "failed") is None  # a repeat is a no-op
