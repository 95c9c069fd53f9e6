"""Receivers' reports on the SMTP front door's receiving listener: mail to the bounce
domain goes to the feedback service, the call SES receipt makes (real smtpd on 127.0.0.1,
smtplib, the real ingress and feedback services on moto's S3 and DynamoDB), and becomes
the same SES-shaped events and suppression entries as in tests/feedback/test_feedback_flow.
"""

from __future__ import annotations

import smtplib
from collections.abc import Callable
from typing import Any

import pytest
from mailqueue.core.errors import TransientStorageError
from mailqueue.core.verp import encode

from tests.events.test_ses_schema import errors
from tests.feedback.messages import arf, dsn, vacation
from tests.feedback.test_feedback_flow import (
    BOUNCES,
    RING,
    check_late_hard_bounce,
    finished_mail,
    suppressed,
)
from tests.feedback.test_verp import ring_json
from tests.smtpd.conftest import MESSAGE, Door
from tests.smtpd.test_smtplib import queued_id, submit

FEEDBACK = {
    "return_path_policy": f'{{"example.org": "{BOUNCES}"}}',
    "return_path_keys": ring_json(),
}
RECEIVED = (250, b"2.0.0 Ok: report received")


@pytest.fixture()
def fdoor(door_factory: Callable[..., Door]) -> Door:
    """The front door with the return path policy on (bounce domain BOUNCES)."""
    return door_factory(FEEDBACK)


def mx(door: Door) -> smtplib.SMTP:
    c = smtplib.SMTP("127.0.0.1", door.receive_port, timeout=10)
    c.ehlo("mx.receiver.example")
    return c


def report(door: Door, to: str, raw: bytes) -> tuple[int, bytes]:
    """A receiver's MTA sends `raw` to `to` from the null sender, as DSNs come."""
    c = mx(door)
    assert c.mail("")[0] == 250
    assert c.rcpt(to)[0] == 250
    got = c.data(raw)
    c.quit()
    return got


def docs(door: Door, kind: str) -> list[dict[str, Any]]:
    return [e.to_json() for e in door.ingress.events.of_type(kind)]


def test_a_late_hard_bounce_is_a_bounce_event_and_a_suppression(fdoor: Door) -> None:
    aws = fdoor.ingress.aws
    mail_id = finished_mail(aws, "gone@x.example")
    to = encode(RING, mail_id, "0", BOUNCES)
    raw = dsn(to, "gone@x.example", "5.1.1", "550 5.1.1 <gone@x.example>: user unknown")
    assert report(fdoor, to, raw) == RECEIVED
    assert outcomes(fdoor) == {"feedback_bounce_hard": 1}
    (doc,) = docs(fdoor, "Bounce")
    check_late_hard_bounce(aws, doc, mail_id)  # as the SES receipt path's test checks it
    assert doc["mailqueue"]["feedback"]["report"].startswith("smtp-")
    # a report, not mail: nothing queued (the finished mail's own item is all), no Reject
    assert fdoor.mail_ids() == [mail_id] and docs(fdoor, "Reject") == []
    # the sending MTA sends the same report again: the same event id (de-duplicated)
    assert report(fdoor, to, raw) == RECEIVED
    first, again = fdoor.ingress.events.of_type("Bounce")
    assert first.event_id == again.event_id


def test_an_arf_complaint_is_a_complaint_event(fdoor: Door) -> None:
    aws = fdoor.ingress.aws
    mail_id = finished_mail(aws, "annoyed@x.example")
    to = encode(RING, mail_id, "0", BOUNCES)
    c = mx(fdoor)
    c.mail("abusedesk@receiver.example")  # ARF reports come from a mailbox, not <>
    assert c.rcpt(to)[0] == 250
    assert c.data(arf(to, "annoyed@x.example")) == RECEIVED
    c.quit()
    (doc,) = docs(fdoor, "Complaint")
    assert errors(doc) == []
    cp = doc["complaint"]
    assert cp["complainedRecipients"] == [{"emailAddress": "annoyed@x.example"}]
    assert (cp["complaintFeedbackType"], cp["userAgent"]) == ("abuse", "SomeGenerator/1.0")
    assert doc["mail"]["messageId"] == mail_id
    entry = suppressed(aws, "annoyed@x.example")
    assert entry is not None and entry.reason == "complaint: abuse"
    assert docs(fdoor, "Bounce") == [] and fdoor.mail_ids() == [mail_id]


def outcomes(door: Door) -> dict[str, int]:
    """What the reports came to, as the server counts them (the feedback service's)."""
    return {k: n for k, n in door.server.gate.counters.items() if k.startswith("feedback_")}


def test_an_auto_reply_is_taken_and_ignored(fdoor: Door) -> None:
    aws = fdoor.ingress.aws
    mail_id = finished_mail(aws, "bob@x.example")
    to = encode(RING, mail_id, "0", BOUNCES)
    c = mx(fdoor)
    c.mail("bob@x.example")
    assert c.rcpt(to)[0] == 250
    assert c.data(vacation(to)) == RECEIVED
    c.quit()
    assert outcomes(fdoor) == {"feedback_autoreply": 1}
    assert fdoor.ingress.events.events == [] and fdoor.mail_ids() == [mail_id]
    assert suppressed(aws, "bob@x.example") is None


def test_a_forged_verp_is_taken_and_dropped(fdoor: Door) -> None:
    """As SES receipt treats it: the sender hears the same 250 as for a real report
    (nothing to learn about the MAC), nothing is written, the forgery is counted."""
    aws = fdoor.ingress.aws
    mail_id = finished_mail(aws, "victim@x.example")
    forged = encode(RING, mail_id, "0", BOUNCES).replace("-0-", "-1-")
    raw = dsn(forged, "victim@x.example", "5.1.1", "550 5.1.1 user unknown")
    assert report(fdoor, forged, raw) == RECEIVED
    assert outcomes(fdoor) == {"feedback_forged": 1}
    assert fdoor.ingress.events.events == [] and fdoor.mail_ids() == [mail_id]
    assert suppressed(aws, "victim@x.example") is None


def test_a_storage_failure_is_451_and_the_retry_writes_it(
    fdoor: Door, monkeypatch: pytest.MonkeyPatch
) -> None:
    """250 only once the events and the suppression entry are written: a failure of
    either is 451 4.3.0; the client's retry writes both, the event under the same id."""
    aws = fdoor.ingress.aws
    fb = fdoor.ingress.service.feedback
    assert fb is not None and fb.suppression is not None
    mail_id = finished_mail(aws, "gone@x.example")
    to = encode(RING, mail_id, "0", BOUNCES)
    raw = dsn(to, "gone@x.example", "5.1.1", "550 5.1.1 user unknown")

    def down(*a: object, **k: object) -> None:
        raise TransientStorageError("DynamoDB is unavailable")

    monkeypatch.setattr(fdoor.ingress.events, "emit", down)
    code, text = report(fdoor, to, raw)
    assert (code, text[:5]) == (451, b"4.3.0")
    monkeypatch.undo()
    assert fdoor.ingress.events.events == [] and suppressed(aws, "gone@x.example") is None
    monkeypatch.setattr(fb.suppression, "put_many", down)
    code, text = report(fdoor, to, raw)
    assert (code, text[:5]) == (451, b"4.3.0")
    monkeypatch.undo()
    assert suppressed(aws, "gone@x.example") is None
    assert report(fdoor, to, raw) == RECEIVED
    entry = suppressed(aws, "gone@x.example")
    assert entry is not None and entry.source == mail_id
    ids = {e.event_id for e in fdoor.ingress.events.of_type("Bounce")}
    assert len(ids) == 1 and len(fdoor.ingress.events.of_type("Bounce")) == 2
    assert fdoor.mail_ids() == [mail_id]


def test_reports_and_mail_do_not_share_a_transaction(fdoor: Door) -> None:
    """The first RCPT decides the kind; the other gets 452 4.5.3 (send it in another
    transaction), and what was taken is handled as its kind."""
    aws = fdoor.ingress.aws
    mail_id = finished_mail(aws, "gone@x.example")
    to = encode(RING, mail_id, "0", BOUNCES)
    c = mx(fdoor)
    c.mail("")
    assert c.rcpt(to)[0] == 250
    code, text = c.rcpt("user@example.com")
    assert (code, text[:5]) == (452, b"4.5.3")
    assert c.data(dsn(to, "gone@x.example", "5.1.1", "550 5.1.1 user unknown")) == RECEIVED
    c.mail("someone@sender.example")
    assert c.rcpt("user@example.com")[0] == 250
    code, text = c.rcpt(to)
    assert (code, text[:5]) == (452, b"4.5.3")
    code, reply = c.data(MESSAGE)
    assert code == 250
    c.quit()
    items, _ = fdoor.stored(queued_id(reply))
    assert [r.address for g in items["groups"] for r in g.recipients] == ["user@example.com"]
    assert len(docs(fdoor, "Bounce")) == 1 and docs(fdoor, "Reject") == []


def test_the_submission_listener_takes_bounce_domain_mail_as_mail(
    fdoor: Door, door_factory: Callable[..., Door]
) -> None:
    """The bounce domain is the receiving listener's: on submission an address there is
    an ordinary recipient (queued under the sender policy, as before), and without the
    policy the receiving listener refuses it as a relay."""
    aws = fdoor.ingress.aws
    mail_id = finished_mail(aws, "gone@x.example")
    to = encode(RING, mail_id, "0", BOUNCES)
    raw = dsn(to, "gone@x.example", "5.1.1", "550 5.1.1 user unknown")
    assert report(fdoor, to, raw) == RECEIVED  # the receiving listener: a report
    assert len(docs(fdoor, "Bounce")) == 1
    c = submit(fdoor)
    c.mail("a@example.org")
    assert c.rcpt(to)[0] == 250
    code, reply = c.data(raw)
    assert code == 250
    c.quit()
    items, content = fdoor.stored(queued_id(reply))
    assert [r.address for g in items["groups"] for r in g.recipients] == [to]
    assert content.endswith(raw)
    assert len(docs(fdoor, "Bounce")) == 1  # no second report
    off = door_factory()
    c = mx(off)
    c.mail("")
    code, text = c.rcpt(to)
    assert (code, text[:5]) == (554, b"5.7.1")
    c.quit()
