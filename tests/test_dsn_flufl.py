"""Our DSNs as a mailing-list manager reads them: GNU Mailman's bounce parser, flufl.bounce.

flufl.bounce runs its detectors in turn and stops at the first that finds an address, so
these tests also prove that no heuristic detector (Postfix, Exim, "simple match" ...)
reads something else out of the text part or the returned original before the RFC 3464
detector does. The DSNs come from the same builder the bounce function uses.
"""

from __future__ import annotations

import email
from datetime import UTC, datetime, timedelta
from email.message import Message

import pytest
from flufl.bounce import all_failures, scan_message
from mailqueue.core.dsn import Action, DsnRecipient, DsnRequest, build_dsn
from mailqueue.core.model import Recipient, Result, Ret

NOW = datetime(2026, 11, 24, 12, 0, 0, tzinfo=UTC)
SENDER = "list-bounces@lists.example.org"

# The original names other addresses in its headers and body: a parser that read the
# returned message instead of the delivery-status part would report them.
ORIGINAL = (
    b"From: List <list@lists.example.org>\r\n"
    b"To: Members <members@lists.example.org>\r\n"
    b"Cc: carol@example.com\r\n"
    b"Subject: [list] weekly digest\r\n"
    b"Message-ID: <digest-7@lists.example.org>\r\n"
    b"\r\n"
    b"Write to dave@example.com if <erin@example.com> bounces.\r\n"
    b"550 5.1.1 <frank@example.com>: Recipient address rejected\r\n"
)


def request(*recipients: DsnRecipient, ret: Ret = Ret.HDRS) -> DsnRequest:
    return DsnRequest(
        reporting_mta="mx.example.com",
        postmaster_domain="example.com",
        envelope_sender=SENDER,
        arrival_date=NOW - timedelta(hours=2),
        recipients=recipients,
        content=ORIGINAL,
        ret=ret,
    )


def parsed(req: DsnRequest) -> Message:
    dsn = build_dsn(req, now=NOW, message_id="<dsn-9@mx.example.com>")
    # flufl.bounce is handed what Mailman hands it: the compat32 parse of the octets.
    return email.message_from_bytes(dsn.content)


def failed(address: str, status: str = "5.1.1", **kw: object) -> DsnRecipient:
    diag = Result(int(status[0]) * 100 + 50, status, f"{status} User unknown", "mx.example.net")
    return DsnRecipient(address, Action.FAILED, status, diagnostic=diag, last_attempt=NOW, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("ret", [Ret.HDRS, Ret.FULL])
def test_failed_recipients_are_permanent_failures(ret: Ret) -> None:
    msg = parsed(request(failed("a@example.net"), failed("b@example.net", "5.2.1"), ret=ret))
    temporary, permanent = all_failures(msg)
    assert permanent == {b"a@example.net", b"b@example.net"}
    assert temporary == set()
    assert scan_message(msg) == {b"a@example.net", b"b@example.net"}


def test_expiry_is_a_permanent_failure() -> None:
    rcpt = Recipient(
        rid="r0",
        address="slow@example.net",
        last_attempt_at=NOW,
        last_result=Result(451, "4.4.1", "4.4.1 Connection timed out", "mx.example.net"),
    )
    temporary, permanent = all_failures(parsed(request(DsnRecipient.for_expiry(rcpt))))
    assert (temporary, permanent) == (set(), {b"slow@example.net"})


def test_delay_warning_is_temporary_only() -> None:
    report = DsnRecipient(
        "late@example.net",
        Action.DELAYED,
        "4.7.0",
        diagnostic=Result(421, "4.7.0", "4.7.0 Try again later", "mx.example.net"),
        last_attempt=NOW,
        will_retry_until=NOW + timedelta(days=4),
    )
    temporary, permanent = all_failures(parsed(request(report)))
    assert (temporary, permanent) == ({b"late@example.net"}, set())


def test_success_notice_is_no_failure() -> None:
    report = DsnRecipient(
        "ok@example.net",
        Action.DELIVERED,
        "2.0.0",
        diagnostic=Result(250, "2.0.0", "2.0.0 Ok", "mx.example.net"),
    )
    assert all_failures(parsed(request(report, ret=Ret.FULL))) == (set(), set())


def test_original_recipient_is_what_the_list_knows() -> None:
    """ORCPT (the address the list sent to) is reported, not the rewritten final one."""
    report = failed("bob+alias@forward.example.net", orcpt="rfc822;bob@example.com")
    _, permanent = all_failures(parsed(request(report)))
    assert permanent == {b"bob@example.com"}


def test_utf8_recipient_next_to_ascii_ones() -> None:
    """flufl.bounce skips addresses it cannot encode as ASCII (its GL#3); the others of
    the same DSN must still come through, and no address is garbled into the set."""
    msg = parsed(request(failed("jürgen@bücher.example"), failed("ascii@example.net")))
    _, permanent = all_failures(msg)
    assert permanent == {b"ascii@example.net"}
