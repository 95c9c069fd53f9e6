"""A late bounce's SES fields come from the receiver's DSN as sent (issue 42): through the
real ingress handler on moto, a DSN for a finished mail becomes a Bounce whose
diagnosticCode is the DSN's Diagnostic-Code (the code once), whose reportingMTA is the
DSN's Reporting-MTA (`dns; host`, as SES writes it) and whose remoteMtaIp is the
Remote-MTA's IP; a delay warning, in DSN form or not, is counted and makes no event."""

from __future__ import annotations

from mailqueue.core.verp import encode
from mailqueue.services.feedback.parse import ip_of, parse

from tests.events.test_ses_schema import errors
from tests.feedback.messages import dsn
from tests.feedback.test_feedback_flow import (
    BOUNCES,
    RING,
    feedback_ingress,
    finished_mail,
    receive,
    suppressed,
)
from tests.support.aws import AwsEnv


def _with_remote(raw: bytes, remote: str) -> bytes:
    return raw.replace(b"Remote-MTA: dns; inbox.receiver.example", f"Remote-MTA: {remote}".encode())


def test_the_bounce_fields_are_the_dsns(aws: AwsEnv) -> None:
    ing = feedback_ingress(aws)
    mail_id = finished_mail(aws, "gone@x.example")
    to = encode(RING, mail_id, "0", BOUNCES)
    raw = _with_remote(
        dsn(to, "gone@x.example", "5.1.1", "550 5.1.1 <gone@x.example>: user unknown"),
        "dns; 192.0.2.25",
    )
    receive(ing, to, raw, "late-dsn-1")
    (doc,) = [e.to_json() for e in ing.events.of_type("Bounce")]
    assert errors(doc) == []
    b = doc["bounce"]
    (rec,) = b["bouncedRecipients"]
    assert rec["diagnosticCode"] == "smtp; 550 5.1.1 <gone@x.example>: user unknown"
    assert b["reportingMTA"] == "dns; mx.receiver.example"  # the DSN's, not our hostname
    assert b["remoteMtaIp"] == "192.0.2.25"
    assert suppressed(aws, "gone@x.example") is not None


def test_a_remote_mta_named_by_host_gives_no_ip(aws: AwsEnv) -> None:
    ing = feedback_ingress(aws)
    mail_id = finished_mail(aws, "gone2@x.example")
    to = encode(RING, mail_id, "0", BOUNCES)
    receive(ing, to, dsn(to, "gone2@x.example", "5.1.1", "550 5.1.1 unknown"), "late-dsn-2")
    (doc,) = [e.to_json() for e in ing.events.of_type("Bounce")]
    assert errors(doc) == [] and "remoteMtaIp" not in doc["bounce"]
    assert doc["bounce"]["bouncedRecipients"][0]["diagnosticCode"] == "smtp; 550 5.1.1 unknown"


def test_a_prose_bounce_does_not_repeat_the_code(aws: AwsEnv) -> None:
    """qmail's form: no DSN fields; the reply is written once, the reporting MTA is ours."""
    ing = feedback_ingress(aws)
    mail_id = finished_mail(aws, "nobody@x.example")
    to = encode(RING, mail_id, "0", BOUNCES)
    raw = (
        f"From: MAILER-DAEMON@mx.x.example\r\nTo: {to}\r\nSubject: failure notice\r\n\r\n"
        "Hi. This is the qmail-send program at mx.x.example.\r\n"
        "I'm afraid I wasn't able to deliver your message to the following addresses.\r\n"
        "This is a permanent error; I've given up. Sorry it didn't work out.\r\n\r\n"
        "<nobody@x.example>:\r\n"
        "192.0.2.9 does not like recipient.\r\n"
        "Remote host said: 550 5.1.1 <nobody@x.example>: Recipient address rejected: "
        "User unknown\r\n"
    ).encode()
    receive(ing, to, raw, "late-prose-1")
    (doc,) = [e.to_json() for e in ing.events.of_type("Bounce")]
    assert errors(doc) == []
    diag = doc["bounce"]["bouncedRecipients"][0]["diagnosticCode"]
    assert diag.startswith("smtp; 550 5.1.1 ") and "550 550" not in diag, diag
    assert doc["bounce"]["reportingMTA"] == f"dns; {ing.settings.hostname}"


def test_delay_warnings_are_counted_not_events(aws: AwsEnv) -> None:
    ing = feedback_ingress(aws)
    mail_id = finished_mail(aws, "slow@x.example")
    to = encode(RING, mail_id, "0", BOUNCES)
    as_dsn = dsn(to, "slow@x.example", "4.4.1", "421 4.4.1 try later", "delayed")
    sendmail = (  # Sendmail's warning: no DSN part
        f"From: Mail Delivery Subsystem <MAILER-DAEMON@mx.x.example>\r\nTo: {to}\r\n"
        "Subject: Warning: could not send message for past 4 hours\r\n\r\n"
        "    **********************************************\r\n"
        "    **      THIS IS A WARNING MESSAGE ONLY      **\r\n"
        "    **  YOU DO NOT NEED TO RESEND YOUR MESSAGE  **\r\n"
        "    **********************************************\r\n\r\n"
        "The original message was received at Mon, 1 Jan 2024 10:00:00 GMT\r\n\r\n"
        "   ----- Transcript of session follows -----\r\n"
        "<slow@x.example>... Deferred: Connection timed out with mx.x.example.\r\n"
        "Warning: message still undelivered after 4 hours\r\n"
        "Will keep trying until message is 5 days old\r\n"
    ).encode()
    for i, raw in enumerate((as_dsn, sendmail)):
        assert parse(raw).kind == "delay"
        out = receive(ing, to, raw, f"late-delay-{i}")
        assert out["disposition"] == "STOP_RULE"
    assert ing.events.of_type("Bounce") == []
    assert suppressed(aws, "slow@x.example") is None


def test_remote_mta_ip_forms() -> None:
    assert ip_of("dns; 192.0.2.1") == "192.0.2.1"
    assert ip_of("dns; [192.0.2.1]") == "192.0.2.1"
    assert ip_of("dns; mx.example.net [192.0.2.7]") == "192.0.2.7"
    assert ip_of("dns; [IPv6:2001:db8::1]") == "2001:db8::1"
    assert ip_of("dns; mx.example.net") == ""


def test_an_address_the_queue_cannot_check_is_not_suppressed(aws: AwsEnv) -> None:
    """The mail's record is gone (its TTL passed; here: never written): the VERP verifies,
    the report names one address, a Bounce is written, but nothing says the queue sent to
    that address, so it is not put on the suppression list (counted instead)."""
    ing = feedback_ingress(aws)
    gone_mail = "01jd5x8k3q4r7s9t0v2w4y6z8a"
    to = encode(RING, gone_mail, "x", BOUNCES)
    raw = dsn(to, "someone@x.example", "5.1.1", "550 5.1.1 user unknown")
    out = receive(ing, to, raw, "late-gone-1")
    assert out["disposition"] == "STOP_RULE"
    (doc,) = [e.to_json() for e in ing.events.of_type("Bounce")]
    assert doc["bounce"]["bounceType"] == "Permanent"
    assert suppressed(aws, "someone@x.example") is None


def test_an_address_the_mail_was_not_sent_to_is_not_reported(aws: AwsEnv) -> None:
    """A multi-recipient group (rid x): the report names a recipient of the mail and a
    mailing-list address of the returned message; only the mail's own is a Bounce."""
    ing = feedback_ingress(aws)
    mail_id = finished_mail(aws, "one@x.example", "two@x.example")
    to = encode(RING, mail_id, "x", BOUNCES)
    raw = dsn(to, "two@x.example", "5.1.1", "550 5.1.1 unknown").replace(
        b"Final-Recipient: rfc822; two@x.example",
        b"Final-Recipient: rfc822; list@lists.example\r\nAction: failed\r\nStatus: 5.1.1"
        b"\r\n\r\nFinal-Recipient: rfc822; two@x.example",
    )
    receive(ing, to, raw, "late-multi-1")
    got = [
        e.to_json()["bounce"]["bouncedRecipients"][0]["emailAddress"]
        for e in ing.events.of_type("Bounce")
    ]
    assert got == ["two@x.example"]
    assert suppressed(aws, "list@lists.example") is None
    assert suppressed(aws, "two@x.example") is not None


def test_a_forwarded_recipient_is_known_by_its_original_recipient(aws: AwsEnv) -> None:
    """The receiver forwarded the mail: Final-Recipient is the forwarding target, the
    DSN's Original-Recipient the address the queue sent to; the Bounce and the
    suppression are for the queue's own recipient."""
    ing = feedback_ingress(aws)
    mail_id = finished_mail(aws, "alias@x.example", "other@x.example")
    to = encode(RING, mail_id, "x", BOUNCES)
    raw = dsn(to, "target@y.example", "5.1.1", "550 5.1.1 unknown").replace(
        b"Original-Recipient: rfc822;target@y.example",
        b"Original-Recipient: rfc822;alias@x.example",
    )
    assert parse(raw).failures[0].original_recipient == "alias@x.example"
    receive(ing, to, raw, "late-fwd-1")
    (doc,) = [e.to_json() for e in ing.events.of_type("Bounce")]
    assert doc["bounce"]["bouncedRecipients"][0]["emailAddress"] == "alias@x.example"
    assert suppressed(aws, "alias@x.example") is not None
    assert suppressed(aws, "target@y.example") is None
