"""DSN builder: every produced report is parsed back with Python's email package."""

from __future__ import annotations

import binascii
import email
import email.policy
import email.utils
import re
from datetime import UTC, datetime, timedelta
from email.message import EmailMessage, Message
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mailqueue.core.dsn import (
    DEFAULT_MAX_RETURNED,
    EXPIRED_STATUS,
    Action,
    Dsn,
    DsnRecipient,
    DsnRequest,
    Returned,
    build_dsn,
    dsn_wanted,
    group_reports,
    kind_of,
    postmaster_copy_wanted,
    utf8_addr_xtext,
    xtext_decode,
)
from mailqueue.core.model import Envelope, Notify, Recipient, Result, Ret
from mailqueue.core.policy import expired, lifetime_text

NOW = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
ARRIVAL = NOW - timedelta(days=5)
LAST = NOW - timedelta(minutes=3)
MID = "<dsn-1@mx.example.com>"
SENDER = "alice@example.org"

ORIGINAL_HEADERS = (
    b"Return-Path: <alice@example.org>\r\n"
    b"From: Alice <alice@example.org>\r\n"
    b"To: Bob <bob@example.net>\r\n"
    b"Subject: Quarterly figures\r\n"
    b"Date: Fri, 26 Apr 2024 12:00:00 +0000\r\n"
    b"Message-ID: <orig-42@example.org>\r\n"
    b"MIME-Version: 1.0\r\n"
    b"Content-Type: text/plain; charset=us-ascii\r\n"
)
ORIGINAL_BODY = b"Hello Bob,\r\n\r\nthe figures are attached.\r\n"
ORIGINAL = ORIGINAL_HEADERS + b"\r\n" + ORIGINAL_BODY


# --- helpers ---------------------------------------------------------------------------


def parse(dsn: Dsn) -> EmailMessage:
    msg = email.message_from_bytes(dsn.content, policy=email.policy.default)
    assert isinstance(msg, EmailMessage)
    assert msg.get_content_type() == "multipart/report"
    assert msg.get_param("report-type") == "delivery-status"
    assert msg.defects == []
    return msg


def parts(msg: EmailMessage) -> list[EmailMessage]:
    return [cast(EmailMessage, p) for p in msg.iter_parts()]


def status_blocks(msg: EmailMessage) -> list[Message]:
    """The delivery-status part as Python sees it: per-message block, then recipients."""
    ds = parts(msg)[1]
    assert ds.get_content_type() == "message/delivery-status"
    blocks = ds.get_payload()
    assert isinstance(blocks, list)
    return cast(list[Message], blocks)


def raw_part(dsn: Dsn, index: int) -> tuple[bytes, bytes]:
    """(headers, body) of body part `index`, as octets on the wire."""
    m = re.search(rb'boundary="([^"]+)"', dsn.content)
    assert m
    delim = b"\r\n--" + m.group(1)
    chunks = dsn.content.split(delim)
    # chunks[0] is header + preamble, the last one is "--\r\n" (close delimiter).
    assert chunks[-1] == b"--\r\n"
    chunk = chunks[1 + index]
    assert chunk.startswith(b"\r\n")
    head, _, body = chunk[2:].partition(b"\r\n\r\n")
    return head, body


def text_of(msg: EmailMessage) -> str:
    text = parts(msg)[0]
    assert text.get_content_type() == "text/plain"
    content = text.get_content()
    assert isinstance(content, str)
    return " ".join(content.split())  # unwrap for phrase checks


def request(*recipients: DsnRecipient, **kw: Any) -> DsnRequest:
    args: dict[str, Any] = {
        "reporting_mta": "mx.example.com",
        "postmaster_domain": "example.com",
        "envelope_sender": SENDER,
        "arrival_date": ARRIVAL,
        "recipients": recipients,
        "content": ORIGINAL,
    }
    args.update(kw)
    return DsnRequest(**args)


def build(req: DsnRequest, **kw: Any) -> Dsn:
    return build_dsn(req, now=NOW, message_id=MID, **kw)


def failed(address: str = "bob@example.net", **kw: Any) -> DsnRecipient:
    args: dict[str, Any] = {
        "address": address,
        "action": Action.FAILED,
        "status": "5.1.1",
        "diagnostic": Result(550, "5.1.1", "5.1.1 User unknown", "mx.example.net"),
        "last_attempt": LAST,
    }
    args.update(kw)
    return DsnRecipient(**args)


def lines_ok(data: bytes) -> bool:
    return all(len(line) <= 998 for line in data.split(b"\r\n"))


# --- one permanent failure ---------------------------------------------------------------


def test_one_permanent_failure_every_field() -> None:
    dsn = build(request(failed()))
    msg = parse(dsn)

    assert msg["From"] == "Mail Delivery System <MAILER-DAEMON@example.com>"
    assert msg["To"].addresses[0].addr_spec == SENDER
    assert msg["Subject"] == "Mail returned to sender: not delivered"
    assert msg["Date"].datetime == NOW
    assert msg["Message-ID"] == MID
    assert msg["Auto-Submitted"] == "auto-replied"
    assert msg["MIME-Version"] == "1.0"
    assert [p.get_content_type() for p in parts(msg)] == [
        "text/plain",
        "message/delivery-status",
        "text/rfc822-headers",  # no RET: headers only
    ]

    per_msg, rcpt = status_blocks(msg)
    assert per_msg["Reporting-MTA"] == "dns; mx.example.com"
    assert per_msg["Original-Envelope-Id"] is None
    assert email.utils.parsedate_to_datetime(per_msg["Arrival-Date"]) == ARRIVAL
    assert rcpt["Original-Recipient"] is None
    assert rcpt["Final-Recipient"] == "rfc822; bob@example.net"
    assert rcpt["Action"] == "failed"
    assert rcpt["Status"] == "5.1.1"
    assert rcpt["Remote-MTA"] == "dns; mx.example.net"
    assert rcpt["Diagnostic-Code"] == "smtp; 550 5.1.1 User unknown"
    assert email.utils.parsedate_to_datetime(rcpt["Last-Attempt-Date"]) == LAST
    assert rcpt["Will-Retry-Until"] is None

    text = text_of(msg)
    assert "<bob@example.net>: delivery failed permanently (5.1.1)" in text
    assert "mx.example.net said: 550 5.1.1 User unknown" in text
    assert "header of your message is attached" in text

    assert raw_part(dsn, 2)[1] == ORIGINAL_HEADERS
    assert dsn.envelope == Envelope(sender="", recipients=(Recipient("r0", SENDER),))
    assert dsn.kind is Notify.FAILURE
    assert dsn.returned is Returned.HEADERS
    assert not dsn.truncated
    assert dsn.message_id == MID


def test_dsn_is_deterministic_and_seven_bit() -> None:
    a = build(request(failed()))
    b = build(request(failed()))
    assert a.content == b.content
    assert a.content.isascii()
    assert b"\n" not in a.content.replace(b"\r\n", b"")  # CRLF only
    assert lines_ok(a.content)


def test_generated_message_id_when_none_injected() -> None:
    dsn = build_dsn(request(failed()), now=NOW)
    assert re.fullmatch(r"<[0-9a-f]{32}@mx\.example\.com>", dsn.message_id)
    assert parse(dsn)["Message-ID"] == dsn.message_id


# --- several recipients, grouping ----------------------------------------------------


def test_three_failed_recipients_of_one_mail_in_one_dsn() -> None:
    reports = [
        failed("a@example.net"),
        DsnRecipient("late@example.net", Action.DELAYED, "4.4.1", will_retry_until=NOW),
        failed("b@example.net", status="5.2.2", diagnostic=Result(552, "5.2.2", "full")),
        DsnRecipient("ok@example.net", Action.DELIVERED, "2.0.0"),
        failed("c@example.net", status="5.7.1", diagnostic=None),
    ]
    groups = group_reports(reports)
    assert [k for k, _ in groups] == [Notify.FAILURE, Notify.DELAY, Notify.SUCCESS]
    kind, fails = groups[0]
    assert [r.address for r in fails] == ["a@example.net", "b@example.net", "c@example.net"]

    dsn = build(request(*fails))
    msg = parse(dsn)
    blocks = status_blocks(msg)
    assert len(blocks) == 1 + 3
    assert [b["Final-Recipient"] for b in blocks[1:]] == [
        "rfc822; a@example.net",
        "rfc822; b@example.net",
        "rfc822; c@example.net",
    ]
    assert [b["Status"] for b in blocks[1:]] == ["5.1.1", "5.2.2", "5.7.1"]
    assert {b["Action"] for b in blocks[1:]} == {"failed"}
    assert blocks[2]["Diagnostic-Code"] == "smtp; 552 full"
    assert blocks[2]["Remote-MTA"] is None  # unknown: left out
    assert blocks[3]["Diagnostic-Code"] is None
    text = text_of(msg)
    for addr in ("a@example.net", "b@example.net", "c@example.net"):
        assert f"<{addr}>" in text
    assert "late@example.net" not in text and "ok@example.net" not in text
    assert dsn.reported == ("a@example.net", "b@example.net", "c@example.net")


def test_group_reports_keeps_latest_report_of_a_recipient() -> None:
    first = failed("a@example.net", status="5.1.1")
    again = failed("a@example.net", status="5.1.2")
    other = failed("b@example.net")
    groups = group_reports([first, other, again])
    assert groups == [(Notify.FAILURE, (again, other))]
    assert group_reports([]) == []


def test_relayed_and_expanded_are_success_kind() -> None:
    assert kind_of("relayed") is Notify.SUCCESS
    assert kind_of(Action.EXPANDED) is Notify.SUCCESS
    assert kind_of("failed") is Notify.FAILURE
    assert kind_of("delayed") is Notify.DELAY


# --- expiry, delay, success ----------------------------------------------------------


def test_lifetime_expiry_is_failed_with_4_4_7() -> None:
    rcpt = Recipient(
        rid="r0",
        address="bob@example.net",
        orcpt="rfc822;bob@example.net",
        last_attempt_at=LAST,
        last_result=Result(451, "4.4.1", "4.4.1 Connection timed out", "mx.example.net"),
    )
    report = DsnRecipient.for_expiry(rcpt)
    assert (report.action, report.status) == (Action.FAILED, EXPIRED_STATUS)
    dsn = build(request(report))
    msg = parse(dsn)
    assert msg["Subject"] == "Mail returned to sender: not delivered"
    block = status_blocks(msg)[1]
    assert block["Action"] == "failed"
    assert block["Status"] == "4.4.7"
    assert block["Diagnostic-Code"] == "smtp; 451 4.4.1 Connection timed out"
    assert block["Original-Recipient"] == "rfc822; bob@example.net"
    assert block["Will-Retry-Until"] is None
    text = text_of(msg)
    assert "expired (4.4.7)" in text
    assert "Last error: 451 4.4.1 Connection timed out" in text


def test_expiry_is_the_queues_own_verdict_in_postfix_words() -> None:
    """Issue 28, item 9: the expiry result the sweeper/delivery record is ours
    (``x-mailqueue;``), worded like Postfix's, the last server reply kept in the text."""
    last = Result(451, "4.4.1", "4.4.1 Connection timed out", "mx.example.net")
    verdict = expired(last, timedelta(days=5))
    assert (verdict.code, verdict.status, verdict.remote_mta) == (0, "4.4.7", "mx.example.net")
    rcpt = Recipient(
        rid="r0", address="bob@example.net", last_attempt_at=LAST, last_result=verdict
    )
    block = status_blocks(parse(build(request(DsnRecipient.for_expiry(rcpt)))))[1]
    assert block["Diagnostic-Code"] == (
        "x-mailqueue; message expired after 5 days; last error: 451 4.4.1 Connection timed out"
    )
    assert expired(None, timedelta(days=5)).text == "message expired after 5 days"


@pytest.mark.parametrize(
    ("lifetime", "text"),
    [
        (timedelta(days=5), "5 days"),
        (timedelta(days=1), "1 day"),
        (timedelta(hours=36), "36 hours"),
        (timedelta(minutes=90), "90 minutes"),
        (timedelta(seconds=45), "45 seconds"),
        (timedelta(days=5, seconds=1), "432001 seconds"),
    ],
)
def test_lifetime_reads_like_postfix(lifetime: timedelta, text: str) -> None:
    assert lifetime_text(lifetime) == text


def test_the_subject_is_no_other_mtas() -> None:
    """Bounce parsers pick an MTA's reader by Subject (Sisimai: Postfix's is an exact
    match on "Undelivered Mail Returned to Sender"); ours must match none of them."""
    others = re.compile(
        r"Undelivered Mail Returned to Sender|Delivery Status Notification|Mail delivery "
        r"failed|Returned mail: |Undeliverable|Delivery report|NOTICE: mail delivery status|"
        r"WARNING: delayed mail|Delivery failure|failed delivery|see transcript|\AWarning: "
    )
    report = DsnRecipient.for_expiry(
        Recipient(rid="r0", address="bob@example.net", last_attempt_at=LAST,
                  last_result=Result(0, "4.4.7", "message expired after 5 days"))
    )
    subject = parse(build(request(report)))["Subject"]
    assert subject and not others.search(subject)


def test_delay_warning() -> None:
    until = ARRIVAL + timedelta(days=5, hours=1)
    rcpt = Recipient(
        rid="r1",
        address="bob@example.net",
        last_attempt_at=LAST,
        last_result=Result(421, "4.7.0", "4.7.0 Try again later", "mx.example.net"),
    )
    report = DsnRecipient.from_recipient(rcpt, "delayed", will_retry_until=until)
    dsn = build(request(report, ret=Ret.FULL))
    msg = parse(dsn)
    assert msg["Subject"] == "Mail not yet delivered: still being retried"
    block = status_blocks(msg)[1]
    assert block["Action"] == "delayed"
    assert block["Status"] == "4.7.0"
    assert email.utils.parsedate_to_datetime(block["Will-Retry-Until"]) == until
    assert email.utils.parsedate_to_datetime(block["Last-Attempt-Date"]) == LAST
    # RET=FULL is for "failed" DSNs only (RFC 3461 §4.3): a warning returns headers.
    assert parts(msg)[2].get_content_type() == "text/rfc822-headers"
    assert dsn.returned is Returned.HEADERS and not dsn.truncated
    text = text_of(msg)
    assert "not delivered yet (4.7.0)" in text
    assert "do not need to send the message again" in text
    assert dsn.kind is Notify.DELAY


def test_success_notice() -> None:
    rcpt = Recipient(
        rid="r0",
        address="bob@example.net",
        notify=(Notify.SUCCESS,),
        last_attempt_at=LAST,
        last_result=Result(250, "2.0.0", "2.0.0 Ok: queued as 4VB", "mx.example.net"),
    )
    assert dsn_wanted(SENDER, rcpt.notify, "delivered", delay_by_config=False)
    report = DsnRecipient.from_recipient(rcpt, Action.DELIVERED)
    dsn = build(request(report, ret=Ret.FULL))
    msg = parse(dsn)
    assert msg["Subject"] == "Mail delivered: success report"
    block = status_blocks(msg)[1]
    assert block["Action"] == "delivered"
    assert block["Status"] == "2.0.0"
    assert block["Remote-MTA"] == "dns; mx.example.net"
    assert block["Diagnostic-Code"] == "smtp; 250 2.0.0 Ok: queued as 4VB"
    assert parts(msg)[2].get_content_type() == "text/rfc822-headers"
    assert "<bob@example.net>: delivered (2.0.0)." in text_of(msg)
    assert dsn.kind is Notify.SUCCESS


def test_relayed_notice() -> None:
    dsn = build(request(DsnRecipient("bob@example.net", Action.RELAYED, "2.0.0")))
    msg = parse(dsn)
    assert status_blocks(msg)[1]["Action"] == "relayed"
    assert msg["Subject"] == "Mail delivered: success report"


# --- policy --------------------------------------------------------------------------


@pytest.mark.parametrize("action", list(Action))
@pytest.mark.parametrize(
    "notify", [(), (Notify.FAILURE,), (Notify.SUCCESS, Notify.FAILURE, Notify.DELAY)]
)
def test_null_sender_original_never_gets_a_dsn(action: Action, notify: tuple[Notify]) -> None:
    assert dsn_wanted("", notify, action, delay_by_config=True) is False


def test_build_refuses_null_sender_original() -> None:
    with pytest.raises(ValueError, match="null sender"):
        build(request(failed(), envelope_sender=""))


@pytest.mark.parametrize("action", list(Action))
def test_notify_never_suppresses(action: Action) -> None:
    assert dsn_wanted(SENDER, (Notify.NEVER,), action, delay_by_config=True) is False
    assert dsn_wanted(SENDER, ("NEVER",), action, delay_by_config=True) is False


@pytest.mark.parametrize(
    ("notify", "delay_cfg", "expected"),
    [
        # default NOTIFY: failures only, delays when configured, never success
        ((), False, {"failed"}),
        ((), True, {"failed", "delayed"}),
        ((Notify.FAILURE,), True, {"failed"}),
        ((Notify.DELAY,), False, {"delayed"}),
        ((Notify.SUCCESS,), False, {"delivered", "relayed", "expanded"}),
        (
            (Notify.SUCCESS, Notify.FAILURE, Notify.DELAY),
            False,
            {"failed", "delayed", "delivered", "relayed", "expanded"},
        ),
    ],
)
def test_notify_matrix(notify: tuple[Notify, ...], delay_cfg: bool, expected: set[str]) -> None:
    got = {a.value for a in Action if dsn_wanted(SENDER, notify, a, delay_cfg)}
    assert got == expected


def test_postmaster_copy_policy() -> None:
    pm = "postmaster@example.com"
    # a bounced DSN (null sender): one copy to postmaster
    assert postmaster_copy_wanted("", ["alice@example.org"], "failed", pm)
    # the copy to postmaster bounced in turn: stop, never a second level
    assert not postmaster_copy_wanted("", ["Postmaster@Example.com"], "failed", pm)
    # ordinary bounces only when configured
    assert not postmaster_copy_wanted(SENDER, ["bob@example.net"], "failed", pm)
    assert postmaster_copy_wanted(SENDER, ["bob@example.net"], "failed", pm, all_bounces=True)
    # only failures, only with a postmaster configured
    assert not postmaster_copy_wanted("", ["bob@example.net"], "delayed", pm)
    assert not postmaster_copy_wanted("", ["bob@example.net"], "failed", None)


def test_postmaster_copy_returns_headers_only() -> None:
    req = request(failed(), envelope_sender="", ret=Ret.FULL)
    dsn = build(req, to="postmaster@example.com")
    msg = parse(dsn)
    assert msg["To"].addresses[0].addr_spec == "postmaster@example.com"
    assert dsn.envelope.sender == ""
    assert [r.address for r in dsn.envelope.recipients] == ["postmaster@example.com"]
    assert parts(msg)[2].get_content_type() == "text/rfc822-headers"
    assert raw_part(dsn, 2)[1] == ORIGINAL_HEADERS
    assert ORIGINAL_BODY not in dsn.content
    assert "copy of a delivery report for the postmaster" in text_of(msg)


# --- returned content ----------------------------------------------------------------


def test_ret_full_small_original_is_message_rfc822() -> None:
    dsn = build(request(failed(), ret=Ret.FULL))
    msg = parse(dsn)
    third = parts(msg)[2]
    assert third.get_content_type() == "message/rfc822"
    inner = third.get_content()
    assert isinstance(inner, EmailMessage)
    assert inner["Message-ID"] == "<orig-42@example.org>"
    assert inner["Subject"] == "Quarterly figures"
    assert inner.get_content() == ORIGINAL_BODY.decode()
    assert raw_part(dsn, 2)[1] == ORIGINAL  # byte for byte
    assert dsn.returned is Returned.FULL and not dsn.truncated
    assert "Your message is attached." in text_of(msg)


def test_ret_full_large_original_falls_back_to_headers() -> None:
    body = b"".join(b"line %06d of a large attachment\r\n" % i for i in range(10_000))
    big = ORIGINAL_HEADERS + b"\r\n" + body
    assert len(big) > DEFAULT_MAX_RETURNED
    dsn = build(request(failed(), ret=Ret.FULL, content=big))
    msg = parse(dsn)
    assert parts(msg)[2].get_content_type() == "text/rfc822-headers"
    assert raw_part(dsn, 2)[1] == ORIGINAL_HEADERS
    assert b"large attachment" not in dsn.content
    assert dsn.returned is Returned.HEADERS and dsn.truncated
    text = text_of(msg)
    assert f"too large to return in full ({len(big)} octets; the limit is" in text
    assert "only its header is attached" in text


def test_max_returned_size_is_configurable() -> None:
    dsn = build(request(failed(), ret=Ret.FULL, max_returned_size=len(ORIGINAL) - 1))
    assert dsn.returned is Returned.HEADERS and dsn.truncated
    dsn = build(request(failed(), ret=Ret.FULL, max_returned_size=len(ORIGINAL)))
    assert dsn.returned is Returned.FULL


def test_oversized_header_section_is_cut_at_a_field_boundary() -> None:
    filler = b"".join(b"X-Filler-%03d: %s\r\n" % (i, b"x" * 60) for i in range(40))
    content = ORIGINAL_HEADERS + filler + b"\r\n" + ORIGINAL_BODY
    dsn = build(request(failed(), content=content, max_returned_size=1000))
    _, body = raw_part(dsn, 2)
    assert len(body) <= 1000
    assert body.startswith(ORIGINAL_HEADERS)
    assert body.endswith(b"\r\n")
    assert re.fullmatch(rb"(?:[\x21-\x39\x3b-\x7e]+: [^\r\n]*\r\n)+", body)
    assert dsn.truncated
    assert "header was shortened" in text_of(parse(dsn))


def test_content_gone_means_two_parts_and_a_note() -> None:
    dsn = build(request(failed(), content=None, ret=Ret.FULL))
    msg = parse(dsn)
    assert [p.get_content_type() for p in parts(msg)] == [
        "text/plain",
        "message/delivery-status",
    ]
    assert msg["In-Reply-To"] is None
    assert "no longer available" in text_of(msg)
    assert dsn.returned is Returned.NONE


def test_lf_only_original_is_returned_with_crlf() -> None:
    content = ORIGINAL.replace(b"\r\n", b"\n")
    dsn = build(request(failed(), content=content, ret=Ret.FULL))
    assert raw_part(dsn, 2)[1] == ORIGINAL
    assert b"\n" not in dsn.content.replace(b"\r\n", b"")


# --- non-ASCII originals -------------------------------------------------------------


def test_encoded_word_headers_are_returned_verbatim() -> None:
    headers = (
        b"From: =?UTF-8?Q?J=C3=BCrgen_M=C3=BCller?= <juergen@example.org>\r\n"
        b"To: bob@example.net\r\n"
        b"Subject: =?UTF-8?B?w4RyZ2VyIMO8YmVyIMOEbmRlcnVuZ2Vu?=\r\n"
        b"Message-ID: <ew-1@example.org>\r\n"
    )
    content = headers + b"\r\n" + b"Hallo\r\n"
    dsn = build(request(failed(), content=content))
    msg = parse(dsn)
    third = parts(msg)[2]
    assert third.get_content_type() == "text/rfc822-headers"
    assert third["Content-Transfer-Encoding"] is None  # plain 7bit
    assert raw_part(dsn, 2)[1] == headers  # the encoded words, untouched
    decoded = email.message_from_bytes(raw_part(dsn, 2)[1], policy=email.policy.default)
    assert decoded["Subject"] == "Ärger über Änderungen"
    assert decoded["From"].addresses[0].display_name == "Jürgen Müller"
    assert dsn.content.isascii()


UTF8_HEADERS = (
    "From: Jürgen <jürgen@bücher.example>\r\n"
    "To: 用户 <用户@例子.广告>\r\n"
    "Subject: Grüße aus Köln ✓\r\n"
    "Message-ID: <utf8-1@bücher.example>\r\n"
    "MIME-Version: 1.0\r\n"
    "Content-Type: text/plain; charset=utf-8\r\n"
    "Content-Transfer-Encoding: 8bit\r\n"
).encode()
UTF8_ORIGINAL = UTF8_HEADERS + b"\r\n" + "Schöne Grüße\r\n".encode()


def test_raw_utf8_headers_come_back_as_global_headers_quoted_printable() -> None:
    dsn = build(request(failed("用户@例子.广告"), content=UTF8_ORIGINAL))
    msg = parse(dsn)
    third = parts(msg)[2]
    assert third.get_content_type() == "message/global-headers"
    assert third["Content-Transfer-Encoding"] == "quoted-printable"
    assert third.get_param("charset") is None  # RFC 6533: MUST NOT carry a charset
    head, body = raw_part(dsn, 2)
    assert binascii.a2b_qp(body) == UTF8_HEADERS  # lossless
    assert lines_ok(body) and all(len(ln) <= 76 for ln in body.split(b"\r\n"))
    # The DSN is 7-bit clean: it can travel back over any hop.
    assert dsn.content.isascii()
    assert dsn.envelope.smtputf8 is False
    # The non-ASCII recipient is written as utf-8-addr-xtext (RFC 6533 §3).
    block = status_blocks(msg)[1]
    assert block["Final-Recipient"] == (
        "utf-8; \\x{7528}\\x{6237}@\\x{4F8B}\\x{5B50}.\\x{5E7F}\\x{544A}"
    )
    # The original's Message-ID is not ASCII: no In-Reply-To rather than a broken one.
    assert msg["In-Reply-To"] is None
    # The human part names the recipient readably, in UTF-8 quoted-printable.
    assert parts(msg)[0].get_content_charset() == "utf-8"
    assert "<用户@例子.广告>: delivery failed permanently" in text_of(msg)


def test_raw_utf8_original_ret_full_is_message_global() -> None:
    dsn = build(request(failed(), content=UTF8_ORIGINAL, ret=Ret.FULL))
    msg = parse(dsn)
    third = parts(msg)[2]
    assert third.get_content_type() == "message/global"
    assert third["Content-Transfer-Encoding"] == "quoted-printable"
    assert binascii.a2b_qp(raw_part(dsn, 2)[1]) == UTF8_ORIGINAL
    inner = email.message_from_bytes(
        binascii.a2b_qp(raw_part(dsn, 2)[1]), policy=email.policy.default
    )
    assert inner["Subject"] == "Grüße aus Köln ✓"
    assert dsn.content.isascii()
    assert dsn.returned is Returned.FULL


def test_eight_bit_body_with_ascii_headers_still_returns_seven_bit() -> None:
    content = ORIGINAL_HEADERS + b"\r\n" + "naïve café\r\n".encode("latin-1")
    dsn = build(request(failed(), content=content, ret=Ret.FULL))
    assert dsn.content.isascii()
    # Latin-1 body: not UTF-8, yet the headers are, so message/global still applies.
    assert parts(parse(dsn))[2].get_content_type() == "message/global"
    assert binascii.a2b_qp(raw_part(dsn, 2)[1]) == content


def test_non_utf8_raw_headers_fall_back_to_qp_rfc822_headers() -> None:
    headers = b"From: a@example.org\r\nSubject: caf\xe9\r\n"
    dsn = build(request(failed(), content=headers + b"\r\nbody\r\n", ret=Ret.FULL))
    msg = parse(dsn)
    third = parts(msg)[2]
    assert third.get_content_type() == "text/rfc822-headers"
    assert third["Content-Transfer-Encoding"] == "quoted-printable"
    assert binascii.a2b_qp(raw_part(dsn, 2)[1]) == headers
    assert dsn.truncated and dsn.returned is Returned.HEADERS
    assert "header is not valid" in text_of(msg)


def test_utf8_original_sender_needs_smtputf8() -> None:
    sender = "jürgen@bücher.example"
    dsn = build(request(failed(), envelope_sender=sender, content=UTF8_ORIGINAL))
    parse(dsn)  # structure; the bytes parser leaves raw UTF-8 headers surrogate-escaped
    as_text = email.message_from_string(dsn.content.decode("utf-8"), policy=email.policy.default)
    assert as_text["To"].addresses[0].addr_spec == sender
    assert dsn.envelope.smtputf8 is True
    assert dsn.envelope.recipients[0].address == sender
    # only the To: line carries 8-bit data; the body parts stay 7-bit
    eight_bit = [ln for ln in dsn.content.split(b"\r\n") if not ln.isascii()]
    assert eight_bit == [f"To: <{sender}>".encode()]


# --- ENVID, ORCPT, threading ---------------------------------------------------------


def test_envid_becomes_original_envelope_id_xtext_decoded() -> None:
    dsn = build(request(failed(), envid="QQ314159+2Bbatch+3D7"))
    assert status_blocks(parse(dsn))[0]["Original-Envelope-Id"] == "QQ314159+batch=7"


def test_envid_from_envelope() -> None:
    env = Envelope(
        sender=SENDER, recipients=(Recipient("r0", "bob@example.net"),), ret=Ret.HDRS, envid="E1"
    )
    req = DsnRequest.for_envelope(
        env,
        [failed()],
        reporting_mta="mx.example.com",
        postmaster_domain="example.com",
        arrival_date=ARRIVAL,
        content=ORIGINAL,
    )
    assert (req.envelope_sender, req.ret, req.envid) == (SENDER, Ret.HDRS, "E1")
    dsn = build(req)
    assert status_blocks(parse(dsn))[0]["Original-Envelope-Id"] == "E1"


@pytest.mark.parametrize(
    ("orcpt", "expected"),
    [
        ("rfc822;Bob@Example.NET", "rfc822; Bob@Example.NET"),
        ("rfc822;bob+2Blists@example.net", "rfc822; bob+lists@example.net"),
        ("RFC822; bob@example.net", "RFC822; bob@example.net"),
        ("utf-8;\\x{7528}@example.net", "utf-8; \\x{7528}@example.net"),
        ("rfc822;b+C3+B6b@example.net", "utf-8; b\\x{F6}b@example.net"),
    ],
)
def test_orcpt_becomes_original_recipient(orcpt: str, expected: str) -> None:
    dsn = build(request(failed(orcpt=orcpt)))
    block = status_blocks(parse(dsn))[1]
    assert block["Original-Recipient"] == expected
    assert block["Final-Recipient"] == "rfc822; bob@example.net"


def test_orcpt_from_queue_recipient() -> None:
    rcpt = Recipient(
        rid="r0",
        address="bob@example.net",
        orcpt="rfc822;robert@example.net",
        last_result=Result(550, "5.1.1", "User unknown"),
    )
    report = DsnRecipient.from_recipient(rcpt, "failed")
    assert report.status == "5.1.1"
    block = status_blocks(parse(build(request(report))))[1]
    assert block["Original-Recipient"] == "rfc822; robert@example.net"


def test_in_reply_to_and_references_point_at_the_original() -> None:
    msg = parse(build(request(failed())))
    assert msg["In-Reply-To"] == "<orig-42@example.org>"
    assert msg["References"] == "<orig-42@example.org>"


def test_no_threading_headers_without_original_message_id() -> None:
    content = b"From: a@example.org\r\nSubject: x\r\n\r\nbody\r\n"
    msg = parse(build(request(failed(), content=content)))
    assert msg["In-Reply-To"] is None
    assert msg["References"] is None


def test_folded_message_id_of_the_original_is_found() -> None:
    content = b"From: a@example.org\r\nMessage-Id:\r\n <folded-1@example.org>\r\n\r\nbody\r\n"
    msg = parse(build(request(failed(), content=content)))
    assert msg["In-Reply-To"] == "<folded-1@example.org>"


# --- limits and robustness -----------------------------------------------------------


def test_line_lengths_stay_within_998() -> None:
    long_word = "x" * 3000
    words = " ".join(["word"] * 800)
    # a Result keeps at most 512 octets of text (model.RESULT_TEXT_MAX): the control
    # characters come first so that they survive the cut
    diag = Result(550, "5.0.0", f"5.0.0 second line\x00\x1b\r\n{long_word} {words}", "mx.b.net")
    long_header = b"X-Long: " + b"y" * 2000 + b"\r\n"
    content = ORIGINAL_HEADERS + long_header + b"\r\n" + b"z" * 1500 + b"\r\n"
    dsn = build(request(failed(diagnostic=diag), content=content, ret=Ret.FULL))
    assert lines_ok(dsn.content)
    assert dsn.content.isascii()
    msg = parse(dsn)
    block = status_blocks(msg)[1]
    code = block["Diagnostic-Code"].replace(" ", "")
    assert code.startswith("smtp;5505.0.0secondline")
    assert "xxxx" in code and "\x1b" not in code and "\x00" not in code
    # The over-long original line cannot travel as message/rfc822: it is encoded.
    assert parts(msg)[2].get_content_type() == "message/global"
    assert binascii.a2b_qp(raw_part(dsn, 2)[1]) == content


def test_boundary_never_occurs_in_the_content() -> None:
    first = build(request(failed(), ret=Ret.FULL))
    m = re.search(rb'boundary="([^"]+)"', first.content)
    assert m
    hostile = ORIGINAL + b"--" + m.group(1) + b"--\r\n"
    dsn = build(request(failed(), ret=Ret.FULL, content=hostile))
    assert m.group(0) not in dsn.content
    msg = parse(dsn)
    assert len(parts(msg)) == 3
    assert raw_part(dsn, 2)[1] == hostile


def test_local_failure_without_smtp_reply() -> None:
    diag = Result(0, "4.4.1", "connect to mx.example.net: Connection refused")
    dsn = build(request(failed(status="4.4.7", diagnostic=diag)))
    block = status_blocks(parse(dsn))[1]
    assert block["Diagnostic-Code"] == "x-mailqueue; connect to mx.example.net: Connection refused"
    assert block["Remote-MTA"] is None


def test_postfix_style_remote_mta_is_reduced_to_the_host() -> None:
    diag = Result(550, "5.1.1", "no", "mx.example.net[192.0.2.1]:25")
    block = status_blocks(parse(build(request(failed(diagnostic=diag)))))[1]
    assert block["Remote-MTA"] == "dns; mx.example.net"


@pytest.mark.parametrize(
    ("action", "status", "extra"),
    [
        (Action.FAILED, "2.0.0", {}),
        (Action.DELAYED, "5.1.1", {}),
        (Action.DELIVERED, "4.0.0", {}),
        (Action.FAILED, "5.1", {}),
        (Action.FAILED, "6.0.0", {}),
        (Action.FAILED, "5.1.1", {"will_retry_until": NOW}),
        ("bounced", "5.1.1", {}),
    ],
)
def test_inconsistent_reports_are_refused(action: Any, status: str, extra: Any) -> None:
    with pytest.raises(ValueError):
        DsnRecipient("bob@example.net", action, status, **extra)


def test_bad_requests_are_refused() -> None:
    with pytest.raises(ValueError):
        request()
    with pytest.raises(ValueError):
        request(failed(), reporting_mta="mx example com")
    with pytest.raises(ValueError):
        request(failed(), max_returned_size=0)
    with pytest.raises(ValueError):
        DsnRecipient("bob@example.net\r\nBcc: x@y", Action.FAILED, "5.1.1")
    with pytest.raises(ValueError):
        build(request(failed()), to="a@b>\r\nX: y")


def test_action_string_from_dsn_pending_is_accepted() -> None:
    report = DsnRecipient("bob@example.net", cast(Action, "failed"), "5.1.1")
    assert report.action is Action.FAILED


def test_xtext_helpers() -> None:
    assert xtext_decode("a+2Bb+3Dc") == "a+b=c"
    assert xtext_decode("user+tag@x") == "user+tag@x"  # not a hexchar: left alone
    assert xtext_decode("+C3+A9") == "é"
    assert utf8_addr_xtext("ab+c=d\\e") == "ab\\x{2B}c\\x{3D}d\\x{5C}e"
    assert utf8_addr_xtext("é😀@x") == "\\x{E9}\\x{1F600}@x"


# --- property --------------------------------------------------------------------------

_LOCAL = st.text(
    alphabet=st.sampled_from(list("abcdefghijklmnopqrstuvwxyz0123456789.+-_=") + ["ä", "用"]),
    min_size=1,
    max_size=30,
)
_DOMAIN = st.lists(
    st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789", min_size=1, max_size=12),
    min_size=2,
    max_size=4,
).map(".".join)
_ADDRESS = st.builds(lambda lp, d: f"{lp}@{d}", _LOCAL, _DOMAIN)
_CLASS = {
    Action.FAILED: "45",
    Action.DELAYED: "4",
    Action.DELIVERED: "2",
    Action.RELAYED: "2",
    Action.EXPANDED: "2",
}


@st.composite
def _reports(draw: st.DrawFn) -> DsnRecipient:
    action = draw(st.sampled_from(list(Action)))
    cls = draw(st.sampled_from(_CLASS[action]))
    subject, detail = draw(st.integers(0, 999)), draw(st.integers(0, 999))
    status = f"{cls}.{subject}.{detail}"
    diagnostic = draw(
        st.none()
        | st.builds(
            Result,
            code=st.sampled_from([0, 250, 421, 451, 550, 554]),
            status=st.just(status),
            text=st.text(max_size=300),
            remote_mta=st.none() | st.sampled_from(["mx.example.net", "[192.0.2.1]", "bad host"]),
        )
    )
    orcpt = draw(st.none() | _ADDRESS.map(lambda a: f"rfc822;{a}"))
    retry = draw(st.none() | st.just(NOW)) if action is Action.DELAYED else None
    return DsnRecipient(
        address=draw(_ADDRESS),
        action=action,
        status=status,
        orcpt=orcpt,
        diagnostic=diagnostic,
        last_attempt=draw(st.none() | st.just(LAST)),
        will_retry_until=retry,
    )


@settings(max_examples=150, deadline=None)
@given(
    reports=st.lists(_reports(), min_size=1, max_size=12),
    ret=st.sampled_from([None, Ret.FULL, Ret.HDRS]),
    content=st.sampled_from([ORIGINAL, UTF8_ORIGINAL, None]),
)
def test_property_every_dsn_parses_with_one_group_per_recipient(
    reports: list[DsnRecipient], ret: Ret | None, content: bytes | None
) -> None:
    dsn = build(request(*reports, ret=ret, content=content))
    assert lines_ok(dsn.content)
    assert dsn.content.isascii()
    msg = parse(dsn)
    blocks = status_blocks(msg)
    assert blocks[0]["Reporting-MTA"] == "dns; mx.example.com"
    groups = blocks[1:]
    assert len(groups) == len(reports)
    for block, report in zip(groups, reports, strict=True):
        assert block["Action"] == report.action.value
        assert block["Status"] == report.status
        final = block["Final-Recipient"]
        if report.address.isascii():
            assert final == f"rfc822; {report.address}"
        else:
            assert final == f"utf-8; {utf8_addr_xtext(report.address)}"
        assert (block["Will-Retry-Until"] is not None) == (report.will_retry_until is not None)
    assert len(parts(msg)) == (2 if content is None else 3)
