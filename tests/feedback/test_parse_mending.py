"""The classes of error fixed once Dada Mail's and MailBounceDetector's corpus moved to the
tuning side (issue 42, fourth round; docs/feedback.md), and Sympa's once its one held-out
measurement was made, each by a report of its own, not by a corpus file: a header block
with broken folding, a notice naming the failed message only by its summary, receivers
that answer a dead address at end of DATA, a help desk named on the line above; and two
of them through the real ingress handler on moto (SES receipt -> Bounce event ->
suppression), each failing without its fix."""

from __future__ import annotations

import email

from mailqueue.core.verp import encode
from mailqueue.services.feedback.headers import mend_folding
from mailqueue.services.feedback.parse import parse

from tests.events.test_ses_schema import errors
from tests.feedback.test_feedback_flow import (
    BOUNCES,
    RING,
    feedback_ingress,
    finished_mail,
    receive,
    suppressed,
)
from tests.support.aws import AwsEnv

EXIM_BODY = b"""This message was created automatically by mail delivery software.

A message that you sent could not be delivered to one or more of
its recipients. The following addresses failed:

<gone@receiver.example.org>

SMTP error from remote server after RCPT command:
host mx1.receiver.example.org[192.0.2.8]:
550 Requested action not taken: mailbox unavailable
"""


def _broken_header() -> bytes:
    return (
        b"Return-Path: <>\n"
        b"Received-SPF: pass (mx: domain of bounce.relay.example.net designates\n"
        b"192.0.2.1 as permitted sender) client-ip=192.0.2.1;\n"
        b"envelope-from=postmaster@bounce.relay.example.net;\n"
        b"helo=bounce.relay.example.net;\n"
        b"Received: from bounce.relay.example.net\n"
        b"by mx.sender.example.com with ESMTP id 0MKorw for list@sender.example.com;\n"
        b"Thu, 07 May 2009 11:03:07 -0400\n"
        b"From: Mail Delivery System <mailer-daemon@relay.example.net>\n"
        b"To: list@sender.example.com\n"
        b"Subject: Mail delivery failed: returning message to sender\n"
        b"Envelope-To: list@sender.example.com\n"
        b"\n" + EXIM_BODY
    )


def test_a_header_with_broken_folding_is_read_as_a_header() -> None:
    raw = _broken_header()
    # what a MIME parser makes of it unmended: the header ends at `envelope-from=`
    assert email.message_from_bytes(raw).get("Subject") is None
    mended = mend_folding(raw)
    msg = email.message_from_bytes(mended)
    assert msg["Subject"].startswith("Mail delivery failed")
    assert "envelope-from=postmaster@bounce.relay.example.net" in msg["Received-SPF"]
    assert mended.endswith(EXIM_BODY)
    rep = parse(raw)
    assert rep.kind == "bounce"
    assert [(f.address, f.hard) for f in rep.failures] == [("gone@receiver.example.org", True)]


def test_mending_leaves_a_sound_header_and_a_body_without_a_blank_line_alone() -> None:
    sound = b"From: a@b.example\nReceived: from x\n\tby y\nSubject: s\n\nbody\nline\n"
    assert mend_folding(sound) is sound
    # no field follows the stray line: it is the body's start, not a continuation
    no_blank = b"From: a@b.example\nSubject: s\nThis is the body.\n\nMore body.\n"
    assert mend_folding(no_blank) is no_blank
    # not a header at all
    prose = b"hello\nworld: 1\n\nx\n"
    assert mend_folding(prose) is prose
    crlf = b"From: a@b.example\r\nX-Long: one\r\ntwo\r\nSubject: s\r\n\r\nbody\r\n"
    assert email.message_from_bytes(mend_folding(crlf))["Subject"] == "s"


def _notice(text: str, extra: str = "") -> bytes:
    return (
        "From: MAILER-DAEMON@mx.receiver.example.org\n"
        "To: bounces@sender.example.com\n"
        "Subject: Failure Notice\n"
        "Content-Type: text/plain\n\n" + text + extra
    ).encode()


SUMMARY = """I'm afraid I wasn't able to deliver the following message.
This is a permanent error; I've given up. Sorry it didn't work out.

Subject: Your order
To: someone@receiver.example.org

--- Below this line is a copy of the message.

From: shop@sender.example.com
To: someone@receiver.example.org
Subject: Your order
"""


def test_a_notice_naming_the_message_by_its_summary_names_its_recipient() -> None:
    rep = parse(_notice(SUMMARY))
    assert [f.address for f in rep.failures] == ["someone@receiver.example.org"]
    verizon = (
        "Message could not be delivered to mobile.\nError: No valid recipients for this MM\n"
        "\n\nOriginal Message:\nFrom: a <shop@sender.example.com>\n"
        "To: 0000000000@sms.receiver.example.org\nSubject: test\n"
    )
    rep = parse(_notice(verizon))
    assert [(f.address, f.hard) for f in rep.failures] == [
        ("0000000000@sms.receiver.example.org", True)
    ]


def test_the_summary_is_a_last_resort_and_never_the_returned_copy() -> None:
    # two addresses in the summary: which one failed is not said
    two = SUMMARY.replace(
        "To: someone@receiver.example.org\n\n---",
        "To: someone@receiver.example.org, other@receiver.example.org\n\n---",
    )
    assert parse(_notice(two)).failures == ()
    # the summary's recipient is the sender (the bounce's own To): no recipient
    own = SUMMARY.replace(
        "To: someone@receiver.example.org\n\n---", "To: bounces@sender.example.com\n\n---"
    )
    assert parse(_notice(own)).failures == ()
    # a recipient the notice names wins over the summary
    named = SUMMARY.replace(
        "Subject: Your order\nTo:",
        "<rcpt@receiver.example.org>: no such user\n\nSubject: Your order\nTo:",
        1,
    )
    assert [f.address for f in parse(_notice(named)).failures] == ["rcpt@receiver.example.org"]
    # Sendmail's "Unsent message follows" starts the returned copy: its To is never taken
    sendmail = (
        "   ----- Transcript of session follows -----\n"
        "421 receiver.example.org (smtp)... Deferred: Connection timed out\n\n"
        "   ----- Unsent message follows -----\n"
        "From: shop@sender.example.com\nTo: someone@receiver.example.org\nSubject: s\n\nhi\n"
    )
    rep = parse(_notice(sendmail).replace(b"Failure Notice", b"Returned mail: unsent"))
    assert "someone@receiver.example.org" not in [f.address for f in rep.failures]


def _postfix(reply: str) -> bytes:
    return _notice(
        "This is the mail system at host mx.sender.example.com.\n\n"
        "I'm sorry to have to inform you that your message could not\n"
        "be delivered to one or more recipients.\n\n"
        "<someone@receiver.example.org>: host mx.receiver.example.org[192.0.2.9] said:\n"
        f"    {reply}\n"
    ).replace(b"Failure Notice", b"Undelivered Mail Returned to Sender")


def test_receivers_answering_a_dead_address_at_end_of_data_are_read_hard() -> None:
    hard = [
        # Yahoo, as its Sender Hub error-code page shows it (after DATA)
        "554 delivery error: dd This user doesn't have a yahoo.com account "
        "(someone@receiver.example.org) [0] - mta1.example (in reply to end of DATA command)",
        "554 delivery error: dd Sorry your message to someone@receiver.example.org cannot be "
        "delivered. This account has been disabled or discontinued [#102]. (in reply to end "
        "of DATA command)",
        "552 1 Requested mail action aborted, mailbox not found (in reply to end of DATA command)",
        # mail.ru, its lines folded
        "550 Message was not accepted -- invalid mailbox.  Local mailbox\n"
        "    someone@receiver.example.org is unavailable: user not found (in reply to end of\n"
        "    DATA command)",
        "554 RCPT (someone@receiver.example.org) dosn't exist (in reply to RCPT TO command)",
    ]
    soft = [
        # a disabled mailbox may come back, a full one will empty, a filter is no address
        "554 30 Sorry, your message to someone@receiver.example.org cannot be delivered. "
        "This mailbox is disabled (554.30). (in reply to end of DATA command)",
        "550 Message was not accepted -- invalid mailbox.  Local mailbox "
        "someone@receiver.example.org is unavailable: account is disabled (in reply to end "
        "of DATA command)",
        "550 5.7.1 Message rejected as spam: user unknown to our filter (in reply to end of "
        "DATA command)",
    ]
    for reply in hard:
        rep = parse(_postfix(reply))
        assert [(f.address, f.hard) for f in rep.failures] == [
            ("someone@receiver.example.org", True)
        ], reply
    for reply in soft:
        rep = parse(_postfix(reply))
        assert [(f.address, f.hard) for f in rep.failures] == [
            ("someone@receiver.example.org", False)
        ], reply


QMAIL = """Hi. This is the qmail-send program at mx.receiver.example.org.
I'm afraid I wasn't able to deliver your message to the following addresses.
This is a permanent error; I've given up. Sorry it didn't work out.
For further assistance, contact support@receiver.example.org

<someone@receiver.example.org>:
Sorry, no mailbox here by that name. (#5.1.1)

--- Below this line is a copy of the message.
"""


def test_a_help_desk_sentence_above_the_recipient_does_not_hide_it() -> None:
    """Sympa's error6 (read after its held-out measurement): the help desk named at the end
    of one line, the recipient on its own line below a blank one."""
    for text in (QMAIL, QMAIL.replace("\n", "\r\n")):
        rep = parse(_notice(text))
        assert [(f.address, f.hard) for f in rep.failures] == [
            ("someone@receiver.example.org", True)
        ]
    # the help desk itself is never a recipient: on its line, or folded onto the next
    folded = QMAIL.replace(
        "contact support@receiver.example.org\n", "contact\n  support@receiver.example.org\n"
    )
    for text in (QMAIL, folded):
        assert "support@receiver.example.org" not in [
            f.address for f in parse(_notice(text)).failures
        ]


# ------------------------------------------------------------------ through the stack: the
# real ingress handler on moto receives each report by SES for a delivered mail's VERP
# return path; what the parser reads becomes the Bounce event and the suppression entry


def test_yahoos_after_data_dead_address_reaches_suppression_through_the_ingress(
    aws: AwsEnv,
) -> None:
    ing = feedback_ingress(aws)
    mail_id = finished_mail(aws, "gone@x.example")
    to = encode(RING, mail_id, "0", BOUNCES)
    raw = (
        f"From: MAILER-DAEMON@mx.x.example\r\nTo: {to}\r\nSubject: failure notice\r\n\r\n"
        "Hi. This is the qmail-send program at mx.x.example.\r\n"
        "I'm afraid I wasn't able to deliver your message to the following addresses.\r\n"
        "This is a permanent error; I've given up. Sorry it didn't work out.\r\n\r\n"
        "<gone@x.example>:\r\n192.0.2.9 failed after I sent the message.\r\n"
        "Remote host said: 554 delivery error: dd This user doesn't have a yahoo.com account "
        "(gone@x.example) [0] - mta1.mail.x.example\r\n"
    ).encode()
    receive(ing, to, raw, "late-yahoo-dd")
    (doc,) = [e.to_json() for e in ing.events.of_type("Bounce")]
    assert errors(doc) == []
    assert doc["bounce"]["bounceType"] == "Permanent"
    assert doc["bounce"]["bouncedRecipients"][0]["emailAddress"] == "gone@x.example"
    entry = suppressed(aws, "gone@x.example")
    assert entry is not None and entry.source == mail_id


def test_a_summary_only_notice_becomes_its_recipients_bounce_through_the_ingress(
    aws: AwsEnv,
) -> None:
    """Verizon's "Original Message: From / To / Subject" names the recipient nowhere else;
    a broken fold in the report's header is mended on the way (its Received-SPF line)."""
    ing = feedback_ingress(aws)
    mail_id = finished_mail(aws, "0000000000@sms.x.example")
    to = encode(RING, mail_id, "0", BOUNCES)
    raw = (
        "Received-SPF: pass (mx: domain of x.example designates 192.0.2.1 as permitted\r\n"
        "sender) client-ip=192.0.2.1;\r\n"
        f"From: postmaster@sms.x.example\r\nTo: {to}\r\nSubject: Undeliverable Message\r\n\r\n"
        "Message could not be delivered to mobile.\r\nError: No valid recipients for this MM\r\n"
        "\r\n\r\nOriginal Message:\r\nFrom: Alice <alice@example.org>\r\n"
        "To: 0000000000@sms.x.example\r\nSubject: your code\r\n"
    ).encode()
    receive(ing, to, raw, "late-summary")
    (doc,) = [e.to_json() for e in ing.events.of_type("Bounce")]
    assert errors(doc) == []
    assert doc["bounce"]["bouncedRecipients"][0]["emailAddress"] == "0000000000@sms.x.example"
    assert suppressed(aws, "0000000000@sms.x.example") is not None
    assert suppressed(aws, "alice@example.org") is None
