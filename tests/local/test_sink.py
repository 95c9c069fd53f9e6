"""The local SMTP sink: files what it accepts, refuses as its rules say."""

from __future__ import annotations

import json
import smtplib
from pathlib import Path

import pytest
from mailqueue_local.sink import SinkEvent, SinkRules, SmtpSink


def test_accepted_mail_is_filed_with_its_envelope(tmp_path: Path) -> None:
    events: list[SinkEvent] = []
    body = b"Subject: hi\r\n\r\n.leading dot\r\nbody\r\n"
    with SmtpSink(tmp_path, on_event=events.append) as sink:
        with smtplib.SMTP(sink.host, sink.port, timeout=10) as c:
            c.ehlo("client.test")
            c.sendmail("a@example.org", ["b@example.net", "c@example.net"], body)
            c.sendmail("", ["a@example.org"], b"Subject: dsn\r\n\r\nx\r\n")
    emls = sorted(tmp_path.glob("*.eml"))
    assert len(emls) == 2  # one file per transaction
    assert emls[0].read_bytes() == body  # exactly as sent, dots un-stuffed
    meta = json.loads(emls[0].with_suffix(".json").read_text())
    assert meta["mail_from"] == "a@example.org"
    assert meta["rcpt_tos"] == ["b@example.net", "c@example.net"]
    assert meta["client"]["helo"] == "client.test" and meta["size"] == len(body)
    assert json.loads(emls[1].with_suffix(".json").read_text())["mail_from"] == ""
    assert [e.kind for e in events] == ["accepted", "accepted"]
    assert events[1].mail_from == "" and events[1].path == emls[1]
    assert not list(tmp_path.glob(".*.tmp"))


def test_rules_tempfail_then_accept_and_reject(tmp_path: Path) -> None:
    rules = SinkRules(tempfail={"tempfail.demo": 2}, reject=frozenset({"nosuch.demo"}))
    with SmtpSink(tmp_path, rules=rules) as sink:
        replies = []
        for _ in range(3):
            with smtplib.SMTP(sink.host, sink.port, timeout=10) as c:
                c.ehlo("client.test")
                c.mail("a@example.org")
                replies.append(c.rcpt("x@tempfail.demo")[0])
                c.rset()
        assert replies == [451, 451, 250]
        with smtplib.SMTP(sink.host, sink.port, timeout=10) as c:
            with pytest.raises(smtplib.SMTPRecipientsRefused) as e:
                c.sendmail("a@example.org", ["y@nosuch.demo"], b"Subject: x\r\n\r\nx\r\n")
            assert e.value.recipients["y@nosuch.demo"][0] == 550
            # other domains are not affected, and a new address at tempfail starts over
            c.mail("a@example.org")
            assert c.rcpt("z@tempfail.demo")[0] == 451
            assert c.rcpt("ok@example.net")[0] == 250
    assert list(tmp_path.glob("*.eml")) == []
