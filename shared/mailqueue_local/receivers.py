"""What receivers send back, for `make demo`: a late bounce (an RFC 3464 report as Postfix
writes it) and a complaint (an RFC 5965 ARF report as a mailbox provider's feedback loop
writes it), each addressed to the VERP return path a delivered mail carried, and sent to
the stack's receiving listener (the port-25 role) over SMTP, as a receiver's MTA would.

Only the demo uses these; the feedback tests keep their own fixtures (tests/feedback)."""

from __future__ import annotations

import smtplib
from datetime import UTC, datetime
from email.utils import format_datetime


def late_bounce(to: str, rcpt: str, status: str = "5.1.1") -> bytes:
    """A report of a mail the receiver first accepted, then could not deliver."""
    diag = f"550 {status} <{rcpt}>: Recipient address rejected: User unknown in local table"
    return f"""Return-Path: <>
From: MAILER-DAEMON@mx.receiver.demo (Mail Delivery System)
To: {to}
Date: {format_datetime(datetime.now(UTC))}
Subject: Undelivered Mail Returned to Sender
Auto-Submitted: auto-replied
MIME-Version: 1.0
Content-Type: multipart/report; report-type=delivery-status; boundary="DSN1"

--DSN1
Content-Type: text/plain

I'm sorry to have to inform you that your message could not
be delivered to one or more recipients.

<{rcpt}>: host inbox.receiver.demo said: {diag} (in reply to RCPT TO command)

--DSN1
Content-Type: message/delivery-status

Reporting-MTA: dns; mx.receiver.demo

Final-Recipient: rfc822; {rcpt}
Original-Recipient: rfc822;{rcpt}
Action: failed
Status: {status}
Remote-MTA: dns; inbox.receiver.demo
Diagnostic-Code: smtp; {diag}

--DSN1
Content-Type: text/rfc822-headers

Return-Path: <{to}>
From: Demo <demo@example.org>
To: {rcpt}
Subject: mailqueue demo

--DSN1--
""".replace("\n", "\r\n").encode()


def complaint(to: str, rcpt: str, source_ip: str = "192.0.2.1") -> bytes:
    """A feedback-loop report: the recipient pressed "this is spam"."""
    now = format_datetime(datetime.now(UTC))
    return f"""From: <fbl@receiver.demo>
Date: {now}
Subject: FW: mailqueue demo
To: <{to}>
MIME-Version: 1.0
Content-Type: multipart/report; report-type=feedback-report; boundary="ARF1"

--ARF1
Content-Type: text/plain; charset="US-ASCII"

This is an email abuse report for an email message received from IP
{source_ip} on {now}.

--ARF1
Content-Type: message/feedback-report

Feedback-Type: abuse
User-Agent: DemoFBL/1.0
Version: 1
Original-Mail-From: <{to}>
Original-Rcpt-To: <{rcpt}>
Arrival-Date: {now}
Reporting-MTA: dns; fbl.receiver.demo
Source-IP: {source_ip}

--ARF1
Content-Type: message/rfc822
Content-Disposition: inline

From: Demo <demo@example.org>
To: {rcpt}
Subject: mailqueue demo
Date: {now}

This is the complained-of mail.

--ARF1--
""".replace("\n", "\r\n").encode()


def send(host: str, port: int, to: str, raw: bytes, mail_from: str = "") -> str:
    """Deliver a report to the receiving listener; its reply to DATA ("250 …")."""
    with smtplib.SMTP(host, port, timeout=30) as c:
        c.ehlo("mx.receiver.demo")
        c.mail(mail_from)
        code, msg = c.rcpt(to)
        if code != 250:
            raise smtplib.SMTPRecipientsRefused({to: (code, msg)})
        code, msg = c.data(raw)
        return f"{code} {msg.decode(errors='replace')}"
