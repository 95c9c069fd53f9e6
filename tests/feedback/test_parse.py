"""The report parser on a few of Sisimai's messages and on hand-made reports: what each
kind of report yields (the whole corpus is compared with Sisimai in test_sisimai.py)."""

from __future__ import annotations

from pathlib import Path

from mailqueue.services.feedback.parse import is_hard, parse
from mailqueue.services.feedback.service import bounce_class

from tests.feedback.messages import arf, dsn, vacation

CORPUS = Path(__file__).parents[1] / "data" / "sisimai" / "messages"


def corpus(name: str) -> bytes:
    return (CORPUS / f"{name}.eml").read_bytes()


def test_arf_fields() -> None:
    r = parse(corpus("arf-01"))
    assert r.kind == "complaint" and r.complaint is not None
    c = r.complaint
    assert (c.feedback_type, c.user_agent) == ("abuse", "SMP-FBL")
    assert c.arrival_date.startswith("Thu, 29 Apr 2009") and c.recipients == (
        "redacted@example.net",
    )
    mine = parse(arf("b1-x@b.example", "u@x.example", "fraud")).complaint
    assert mine is not None and (mine.feedback_type, mine.recipients) == ("fraud", ("u@x.example",))


def test_auto_replies_are_recognised() -> None:
    assert parse(corpus("rfc3834-01")).kind == "autoreply"
    assert parse(vacation("b1-x@b.example")).kind == "autoreply"


def test_rfc3464_and_prose_bounces() -> None:
    (f,) = parse(dsn("r@b.example", "u@x.example", "5.1.1", "550 5.1.1 no such user")).failures
    assert (f.address, f.status, f.hard, f.action, f.reply_code) == (
        "u@x.example",
        "5.1.1",
        True,
        "failed",
        550,
    )
    assert f.remote_mta == "inbox.receiver.example"
    (d,) = parse(dsn("r@b.example", "u@x.example", "4.2.2", "452 4.2.2 full", "delayed")).failures
    assert d.action == "delayed" and not d.hard
    (q,) = parse(corpus("lhost-qmail-01")).failures  # qmail: prose only
    assert (q.address, q.hard) == ("kijitora@example.ne.jp", True)
    (e,) = parse(corpus("lhost-exim-01")).failures  # Exim: X-Failed-Recipients, a block
    assert (e.address, e.status, e.hard) == ("kijitora@example.ed.jp", "5.7.0", False)
    (s,) = parse(corpus("lhost-amazonses-09")).failures  # SES's JSON notification
    assert (s.address, s.hard) == ("bounce@simulator.amazonses.com", True)


def test_hard_means_a_dead_address() -> None:
    assert is_hard("5.1.1", "550 5.1.1 <a@b.example>... User unknown")
    assert is_hard("", "550 <a@b.example>: Recipient address rejected: User unknown", "RCPT")
    assert not is_hard("5.1.1", "550 5.1.1 user unknown or mailbox full")
    assert not is_hard("4.1.1", "450 4.1.1 User unknown in virtual alias table")
    assert not is_hard("", "550 User unknown", "DATA")  # a content filter speaking
    assert not is_hard("5.7.1", "554 5.7.1 blocked using zen.spamhaus.org")
    assert is_hard("5.4.4", "Host or domain name not found")


def test_late_bounce_classes_are_ses_pairs() -> None:
    (full,) = parse(dsn("r@b.example", "u@x.example", "5.2.2", "552 5.2.2 mailbox full")).failures
    assert bounce_class(full) == ("Transient", "MailboxFull")
    (gone,) = parse(dsn("r@b.example", "u@x.example", "5.1.1", "550 5.1.1 unknown")).failures
    assert bounce_class(gone) == ("Permanent", "NoEmail")
