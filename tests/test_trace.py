"""The Received: field (RFC 5321 §4.4) and the hop count, alone and through the real ingress."""

from __future__ import annotations

import email
import email.policy
import io
import json
import re
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Any

import pytest
from mailqueue.core.config import ConfigError
from mailqueue.core.model import mail_id_for_key
from mailqueue.core.trace import (
    TRACE_RESERVE,
    count_received,
    peek_header,
    principal_tag,
    received_field,
    top_received_by,
)
from mailqueue.services.delivery import DeliverySettings
from mailqueue.services.ingress import IngressService, IngressSettings

from tests.ingress.conftest import Ingress, make_ingress
from tests.support import events as ev
from tests.support import factories as f
from tests.support.aws import AwsEnv

# RFC 5321 §4.4 Stamp, for the clauses we write (after unfolding):
#   From-domain By-domain Opt-info [CFWS] ";" FWS date-time
_LDH = r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)"
_DOMAIN = rf"{_LDH}(?:\.{_LDH})*"
_LITERAL = r"\[(?:\d{1,3}(?:\.\d{1,3}){3}|IPv6:[0-9A-Fa-f:.]+)\]"
_COMMENT = r"\((?:[\x21-\x27\x2a-\x5b\x5d-\x7e]| )*\)"
_ATOM = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+"
STAMP = re.compile(
    rf"^from (?P<from>{_DOMAIN})(?: \((?P<tcp>{_LITERAL})\))?(?: (?P<fc>{_COMMENT}))?"
    rf" by (?P<by>{_DOMAIN})(?: (?P<bc>{_COMMENT}))?"
    rf"(?: id (?P<id>{_ATOM}))?(?: for <(?P<for>[^<>\s]+@[^<>\s]+)>)?"
    r"; (?P<date>(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d{2} "
    r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) \d{4} \d{2}:\d{2}:\d{2} [+-]\d{4})$"
)
WHEN = datetime(2026, 11, 21, 6, 7, 8, 999_000, tzinfo=UTC)


def _stamp(field: bytes) -> re.Match[str]:
    """The field parsed back by the email package, then matched against the grammar."""
    msg = email.message_from_bytes(field + b"\r\nbody\r\n", policy=email.policy.compat32)
    values = msg.get_all("Received")
    assert values is not None and len(values) == 1
    unfolded = re.sub(r"\r?\n[ \t]", " ", values[0])
    m = STAMP.match(unfolded)
    assert m is not None, unfolded
    return m


def _lines(field: bytes) -> list[bytes]:
    assert field.endswith(b"\r\n") and b"\n" not in field[:-2].replace(b"\r\n", b"")
    return field[:-2].split(b"\r\n")


# ------------------------------------------------------------------ the field alone


def test_the_field_follows_the_stamp_grammar_and_folds_at_78() -> None:
    long_host = ".".join(["a" * 30, "b" * 30, "example"])  # 69: folds, fits one line
    field = received_field(
        by=long_host,
        date=WHEN,
        from_domain="http-api",
        tcp_info="[IPv6:2001:db8::1]",
        from_comment="principal arn:aws:iam::123456789012:role/a-rather-long-role-name",
        by_comment="mailqueue HTTPS API",
        queue_id="K0123456789ABCDEFGHJKMNPQRS",
        recipients=["bob@example.net"],
    )
    m = _stamp(field)
    assert m["from"] == "http-api" and m["tcp"] == "[IPv6:2001:db8::1]"
    assert m["by"] == long_host and m["id"] == "K0123456789ABCDEFGHJKMNPQRS"
    assert m["for"] == "bob@example.net"
    assert parsedate_to_datetime(m["date"]) == WHEN.replace(microsecond=0)
    lines = _lines(field)
    assert len(lines) > 1  # it had to fold
    assert all(len(line) <= 78 for line in lines)
    assert all(line[:1] == b" " for line in lines[1:])  # continuation lines start with FWS


def test_for_names_one_recipient_only_and_unsafe_text_is_kept_out() -> None:
    two = received_field(by="mq.test", date=WHEN, from_domain="http-api",
                         recipients=["a@example.net", "b@example.net"])
    assert _stamp(two)["for"] is None  # no disclosure of the other (maybe Bcc) recipients
    utf8 = received_field(by="mq.test", date=WHEN, from_domain="http-api",
                          recipients=["jörg@example.net"])
    assert _stamp(utf8)["for"] is None and utf8.isascii()
    # a comment cannot be closed early or carry a line break
    sneaky = received_field(by="mq.test", date=WHEN, from_domain="http-api",
                            from_comment="x) by evil.example\r\nBcc: (y")
    assert _stamp(sneaky)["by"] == "mq.test" and len(_lines(sneaky)) >= 1
    with pytest.raises(ValueError):
        received_field(by="not a host", date=WHEN, from_domain="http-api")
    with pytest.raises(ValueError):
        received_field(by="mq.test", date=WHEN.replace(tzinfo=None), from_domain="http-api")


def test_the_longest_field_fits_the_reserve_and_998() -> None:
    label = "a" * 63
    host = ".".join([label, label, label, "b" * 61])  # 253 octets
    field = received_field(
        by=host, date=WHEN, from_domain=host, tcp_info="[IPv6:2001:db8:1:2:3:4:5:6]",
        from_comment="principal " + "p" * 300, by_comment="c" * 300,
        queue_id="K" * 64, recipients=["x" * 64 + "@" + host[:190]],
    )
    assert len(field) <= TRACE_RESERVE
    assert max(len(line) for line in _lines(field)) <= 998
    _stamp(field)


def test_hops_are_counted_in_the_header_section_only() -> None:
    head = b"".join(b"Received: from a by b; Sat, 21 Nov 2026 06:00:00 +0000\r\n" for _ in range(3))
    folded = b"received :from c\r\n by d; Sat, 21 Nov 2026 06:00:00 +0000\r\n"
    body = b"\r\nReceived: in the body does not count\r\n"
    mail = head + folded + b"X-Received: no\r\nSubject: s\r\n" + body
    assert count_received(mail) == 4
    assert count_received(mail.replace(b"\r\n", b"\n")) == 4
    # a stream: the header is read once and the whole content is still there to send
    big = mail + b"x" * 100_000
    got, stream = peek_header(io.BytesIO(big))
    assert count_received(got) == 4 and len(got) < len(big)
    assert b"".join(iter(lambda: stream.read(5000), b"")) == big


def test_the_by_of_the_top_field_names_who_handed_the_mail_over() -> None:
    raw = (b"Return-Path: <a@b.example>\r\nReceived: from mail.example.org (mail.example.org"
           b" [192.0.2.1])\r\n by inbound-smtp.eu-west-1.amazonaws.com with SMTP id abc\r\n"
           b" for x@example.com; Sat, 21 Nov 2026 06:00:00 +0000\r\nSubject: s\r\n\r\nbody")
    assert top_received_by(raw) == "inbound-smtp.eu-west-1.amazonaws.com"
    assert top_received_by(b"Subject: s\r\n\r\nReceived: from x by y.example\r\n") is None


# ------------------------------------------------------------------ through the ingress


@pytest.fixture()
def ingress(aws: AwsEnv) -> Ingress:
    return make_ingress(aws)


@pytest.fixture()
def ingress_factory(aws: AwsEnv) -> Any:
    return lambda **changes: make_ingress(aws, **changes)


def _stored(ingress: Ingress, mail_id: str) -> bytes:
    body: bytes = ingress.aws.storage().read_content(mail_id).read()  # item or S3
    return body


def _sent(event: dict[str, Any]) -> bytes:
    import base64

    return base64.b64decode(json.loads(event["body"])["content"])


def _with_clock(ingress: Ingress, clock: Any) -> Ingress:
    s = ingress.service
    svc = IngressService(s.s, s.storage, s.uploads, s.inbound, s.emitter, clock=clock)
    return Ingress(ingress.aws, ingress.settings, svc, ingress.events, ingress.context)


def test_http_submission_is_stored_behind_one_private_received_field(ingress: Ingress) -> None:
    event = ev.http_send(key="trace-1")
    event["requestContext"]["http"]["sourceIp"] = "198.51.100.7"
    status, body, _ = ingress.http(event)
    assert status == 202
    stored, sent = _stored(ingress, body["mail_id"]), _sent(event)
    assert stored.endswith(sent) and count_received(stored) == count_received(sent) + 1
    m = _stamp(stored[: -len(sent)])
    assert m["by"] == ingress.settings.hostname and m["id"] == body["mail_id"]
    assert m["for"] is None  # the sample has two recipients
    principal = ev.principal_of(event)
    assert m["fc"] == f"(principal {principal_tag(principal)})"  # private: a digest only
    assert b"198.51.100.7" not in stored and principal.encode() not in stored


def test_public_trace_shows_the_client_address_and_principal(ingress: Ingress) -> None:
    public = ingress.with_settings(trace_private=False)
    event = ev.http_send(key=None, recipients=[{"address": "one@example.net"}])
    event["requestContext"]["http"]["sourceIp"] = "198.51.100.7"
    status, body, _ = public.http(event)
    assert status == 202
    stored, sent = _stored(public, body["mail_id"]), _sent(event)
    m = _stamp(stored[: -len(sent)])
    assert m["tcp"] == "[198.51.100.7]" and m["fc"] == f"(principal {ev.principal_of(event)})"
    assert m["for"] == "one@example.net"
    assert m["id"] is None  # unkeyed: the id is drawn inside enqueue (see the report)


def test_a_keyed_retry_seconds_later_is_still_the_same_mail(ingress: Ingress) -> None:
    now = [datetime.now(UTC)]
    later = _with_clock(ingress, lambda: now[0])
    s1, first, _ = later.http(ev.http_send(key="trace-retry"))
    stored = _stored(later, first["mail_id"])
    before = later.trace()
    now[0] += timedelta(seconds=37)  # a new Received: date, so other bytes
    s2, second, headers = later.http(ev.http_send(key="trace-retry"))
    assert (s1, s2) == (202, 202) and second == first
    assert headers["Idempotent-Replayed"] == "true"
    assert later.trace().new_since(before)[:2] == (set(), set())  # nothing new stored
    assert _stored(later, first["mail_id"]) == stored  # the first field is kept
    # other content under the same key is still a conflict
    s3, third, _ = later.http(ev.http_send(key="trace-retry", content=ev.b64(f.content(999))))
    assert (s3, third["error"]) == (409, "idempotency_conflict")


def test_the_size_limit_counts_the_clients_octets(ingress_factory: Any) -> None:
    small: Ingress = ingress_factory(max_size=4000)
    exact = f.content(4000)
    status, body, _ = small.http(ev.http_send(key=None, content=ev.b64(exact)))
    assert status == 202  # the Received: field is not charged to the client
    assert len(_stored(small, body["mail_id"])) > 4000
    status, body, _ = small.http(ev.http_send(key=None, content=ev.b64(f.content(4001))))
    assert (status, body["error"]) == (413, "too_large")


def test_a_header_less_body_is_refused_although_we_would_add_a_field(ingress: Ingress) -> None:
    status, body, _ = ingress.http(ev.http_send(key=None, content=ev.b64(b"just text\r\n")))
    assert (status, body["error"]) == (422, "no_header")


def test_ses_receipt_gets_a_field_dated_by_the_receipt(ingress: Ingress) -> None:
    raw = (b"Received: from mail.sender.example.org (mail.sender.example.org [192.0.2.9])\r\n"
           b" by inbound-smtp.us-east-1.amazonaws.com with SMTP id x1\r\n"
           b" for support@example.com; Sat, 21 Nov 2026 06:00:00 +0000\r\n"
           b"From: a@sender.example.org\r\nSubject: s\r\n\r\nhi\r\n")
    event = ev.ses_receipt(recipients=["support@example.com"])
    key = f"{ingress.settings.ses_prefix}{ev.ses_message_id(event)}"
    ingress.aws.clients.s3.put_object(Bucket=ingress.settings.inbound_bucket, Key=key, Body=raw)
    assert ingress(event) == {"disposition": "CONTINUE"}
    mail_id = mail_id_for_key(ingress.settings.storage.idempotency_scope,
                              f"ses\x1f{ev.ses_message_id(event)}")
    stored = _stored(ingress, mail_id)
    assert stored.endswith(raw) and count_received(stored) == 2
    m = _stamp(stored[: -len(raw)])
    assert m["from"] == "inbound-smtp.us-east-1.amazonaws.com" and m["id"] == mail_id
    assert m["for"] == "support@example.com"
    stamp = event["Records"][0]["ses"]["mail"]["timestamp"]
    assert parsedate_to_datetime(m["date"]) == datetime.fromisoformat(
        stamp.replace("Z", "+00:00")
    ).replace(microsecond=0)


# ------------------------------------------------------------------ explicit routes


def test_a_receiving_domain_without_an_explicit_route_is_refused_at_start(aws: AwsEnv) -> None:
    for routes in ("", "{}", json.dumps({"default": "[192.0.2.1]:587"}),
                   json.dumps({"example.com": {"tls": "required"}})):  # MX with TLS: still SES
        with pytest.raises(ConfigError, match="example.com"):
            IngressSettings(storage=aws.settings, receiving_domains=("example.com",),
                            routes=routes)
        with pytest.raises(ConfigError, match="example.com"):
            DeliverySettings(receiving_domains="example.com", routes=routes or "{}")
    ok = json.dumps({"example.com": "[192.0.2.25]:25", ".example.org": "mx.example.org"})
    IngressSettings(storage=aws.settings, receiving_domains=("example.com", "a.example.org"),
                    routes=ok)
    DeliverySettings(receiving_domains="example.com,a.example.org", routes=ok)
    with pytest.raises(ConfigError, match="example.org"):  # ".suffix" is not the domain itself
        DeliverySettings(receiving_domains="example.org", routes=ok)
