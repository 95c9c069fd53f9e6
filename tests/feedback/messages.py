"""Reports as receivers send them, addressed to a VERP return path (for the tests)."""

from __future__ import annotations


def dsn(to: str, rcpt: str, status: str, diagnostic: str, action: str = "failed") -> bytes:
    """An RFC 3464 report as Postfix writes it."""
    return f"""Return-Path: <>
From: MAILER-DAEMON@mx.receiver.example (Mail Delivery System)
To: {to}
Subject: Undelivered Mail Returned to Sender
Auto-Submitted: auto-replied
MIME-Version: 1.0
Content-Type: multipart/report; report-type=delivery-status; boundary="B1"

--B1
Content-Type: text/plain

I'm sorry to have to inform you that your message could not
be delivered to one or more recipients.

<{rcpt}>: host mx.receiver.example said: {diagnostic} (in reply to RCPT TO command)

--B1
Content-Type: message/delivery-status

Reporting-MTA: dns; mx.receiver.example

Final-Recipient: rfc822; {rcpt}
Original-Recipient: rfc822;{rcpt}
Action: {action}
Status: {status}
Remote-MTA: dns; inbox.receiver.example
Diagnostic-Code: smtp; {diagnostic}

--B1
Content-Type: text/rfc822-headers

Return-Path: <{to}>
From: Alice <alice@example.org>
To: {rcpt}
Subject: hello
Message-ID: <m1@example.org>

--B1--
""".replace("\n", "\r\n").encode()


def arf(to: str, rcpt: str, feedback_type: str = "abuse") -> bytes:
    """An RFC 5965 feedback report (the RFC's own example, re-addressed)."""
    return f"""From: <abusedesk@receiver.example>
Date: Thu, 8 Mar 2005 17:40:36 EDT
Subject: FW: Earn money
To: <{to}>
MIME-Version: 1.0
Content-Type: multipart/report; report-type=feedback-report; boundary="part1_13d.2e68ed54_boundary"

--part1_13d.2e68ed54_boundary
Content-Type: text/plain; charset="US-ASCII"
Content-Transfer-Encoding: 7bit

This is an email abuse report for an email message received from IP
192.0.2.1 on Thu, 8 Mar 2005 14:00:00 EDT.

--part1_13d.2e68ed54_boundary
Content-Type: message/feedback-report

Feedback-Type: {feedback_type}
User-Agent: SomeGenerator/1.0
Version: 1
Original-Mail-From: <{to}>
Original-Rcpt-To: <{rcpt}>
Arrival-Date: Thu, 8 Mar 2005 14:00:00 EDT
Reporting-MTA: dns; mail.receiver.example
Source-IP: 192.0.2.1

--part1_13d.2e68ed54_boundary
Content-Type: message/rfc822
Content-Disposition: inline

From: <alice@example.org>
Received: from mailserver.example.org (mailserver.example.org [192.0.2.1])
        by example.net with ESMTP id M63d4137594e46;
        Thu, 08 Mar 2005 14:00:00 -0400
To: <{rcpt}>
Subject: Earn money
MIME-Version: 1.0
Content-type: text/plain
Message-ID: 8787KJKJ3K4J3K4J3K4J3.mail@example.org
Date: Thu, 02 Sep 2004 12:31:03 -0500

Spam Spam Spam
--part1_13d.2e68ed54_boundary--
""".replace("\n", "\r\n").encode()


def vacation(to: str) -> bytes:
    return f"""From: Bob <bob@x.example>
To: {to}
Subject: Out of office: hello
Auto-Submitted: auto-replied
Precedence: bulk

I am away until Monday; your mail to bob@x.example will be read then.
""".replace("\n", "\r\n").encode()
