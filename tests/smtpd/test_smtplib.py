"""Python's smtplib against the front door: STARTTLS, AUTH, the API's refusals as SMTP
replies, DSN parameters carried into the queue, 250 only for a stored mail."""

from __future__ import annotations

import base64
import smtplib
import socket
import ssl
import time
from collections.abc import Callable

import pytest
from mailqueue.core.errors import TransientStorageError
from mailqueue.outbound.suppression import Entry

from tests.smtpd.conftest import ALICE, ALICE_ARN, BOB, MESSAGE, Door


def submit(door: Door, user: tuple[str, str] = ALICE) -> smtplib.SMTP:
    c = smtplib.SMTP("127.0.0.1", door.port, timeout=10)
    c.ehlo("client.example")
    c.starttls(context=door.client_context())
    c.ehlo("client.example")
    c.login(*user)
    return c


def queued_id(reply: bytes) -> str:
    text = reply.decode()
    assert text.startswith("2.0.0 Ok: queued as "), text
    return text.rsplit(" ", 1)[1]


def test_ehlo_offers_the_extensions_and_auth_only_after_tls(door: Door) -> None:
    c = smtplib.SMTP("127.0.0.1", door.port, timeout=10)
    code, text = c.ehlo("client.example")
    assert code == 250
    before = text.decode().upper().splitlines()
    for ext in ("PIPELINING", "8BITMIME", "SMTPUTF8", "ENHANCEDSTATUSCODES", "DSN", "STARTTLS"):
        assert ext in before, before
    assert f"SIZE {door.ingress.settings.max_size}" in before
    assert not any(line.startswith("AUTH") for line in before)
    # AUTH and MAIL before TLS are refused
    assert c.docmd("AUTH", "PLAIN " + base64.b64encode(b"\0alice\0x").decode())[0] == 530
    assert c.docmd("MAIL", "FROM:<a@example.org>")[0] == 530
    c.starttls(context=door.client_context())
    code, text = c.ehlo("client.example")
    after = text.decode().upper().splitlines()
    assert "AUTH LOGIN PLAIN" in after and "STARTTLS" not in after
    assert c.docmd("MAIL", "FROM:<a@example.org>")[0] == 530  # not authenticated yet
    c.quit()


def test_a_submission_is_stored_byte_exact_behind_our_received_field(door: Door) -> None:
    c = submit(door)
    c.mail("a@example.org", ["RET=HDRS", "ENVID=env+2Bid-1"])
    params = ["NOTIFY=SUCCESS,FAILURE", "ORCPT=rfc822;orig+2Bx@example.net"]
    assert c.rcpt("b@example.net", params)[0] == 250
    assert c.rcpt("c@example.com")[0] == 250
    code, reply = c.data(MESSAGE)
    assert code == 250
    mail_id = queued_id(reply)
    c.quit()
    items, content = door.stored(mail_id)
    assert content.startswith(b"Received: from smtp-submission")
    # after the trace field, the client's octets (smtplib stuffed ".dot", we unstuffed)
    assert content[content.index(b"From: a@example.org") :] == MESSAGE
    mail = items["mail"]
    assert mail["sender"] == "a@example.org"
    assert mail.get("ret") == "HDRS" and mail.get("envid") == "env+id-1"
    rcpts = {r.address: r for g in items["groups"] for r in g.recipients}
    assert set(rcpts) == {"b@example.net", "c@example.com"}
    assert [n.value for n in rcpts["b@example.net"].notify] == ["SUCCESS", "FAILURE"]
    assert rcpts["b@example.net"].orcpt == "rfc822;orig+x@example.net"
    # the principal's tags, as on the API
    tags = dict(mail.get("tags") or {})
    assert tags.get("mailqueue:priority") == "transactional"
    assert str(tags.get("mailqueue:principal", "")).startswith("sha256:")


def test_auth_login_and_implicit_tls(door: Door) -> None:
    ctx = door.client_context()
    c = smtplib.SMTP_SSL("127.0.0.1", door.tls_port, timeout=10, context=ctx)
    c.ehlo("client.example")
    c.user, c.password = BOB
    code, _ = c.auth("LOGIN", c.auth_login, initial_response_ok=False)
    assert code == 235
    c.mail("x@example.net")
    c.rcpt("y@example.com")
    code, reply = c.data(MESSAGE)
    assert code == 250
    door.stored(queued_id(reply))
    c.quit()


def test_sender_policy_per_principal_is_550_5_7_1(door: Door) -> None:
    c = submit(door, BOB)  # bob may send as example.net only
    code, text = c.mail("a@example.org")
    assert (code, text[:5]) == (550, b"5.7.1")
    assert c.mail("a@example.net")[0] == 250
    c.quit()
    assert door.mail_ids() == []
    # one Reject event, the API's vocabulary
    reasons = [e.discriminator for e in door.ingress.events.of_type("Reject")]
    assert reasons == ["sender_not_allowed"]


def test_bad_addresses_and_parameters(door: Door) -> None:
    c = submit(door)
    assert c.docmd("MAIL", "FROM:<not an address>")[0] == 501
    assert c.docmd("MAIL", "FROM:<a@example.org> FOO=1")[0] == 555
    assert c.docmd("MAIL", "FROM:<a@example.org> RET=MAYBE")[0] == 501
    assert c.docmd("MAIL", "FROM:<a@example.org> SIZE=999999999999")[:2] == (
        552,
        b"5.3.4 Message size exceeds fixed limit",
    )
    assert c.docmd("MAIL", "FROM:<a@example.org>")[0] == 250
    code, text = c.docmd("RCPT", "TO:<bad@@example.net>")
    assert (code, text[:5]) == (501, b"5.1.3")
    assert c.docmd("RCPT", "TO:<b@example.net> NOTIFY=NEVER,SUCCESS")[0] == 501
    assert c.docmd("DATA")[0] == 503  # no recipient accepted
    c.quit()
    assert door.mail_ids() == []


def test_suppressed_recipient_is_refused_per_rcpt(door: Door) -> None:
    store = door.ingress.service.suppression
    assert store is not None
    now = time.time()
    store.put_many([Entry("gone@example.net", "bounce", now, now + 3600, status="5.1.1")])
    c = submit(door)
    c.mail("a@example.org")
    code, text = c.rcpt("gone@example.net")
    assert (code, text[:5]) == (550, b"5.1.1")
    assert c.rcpt("ok@example.net")[0] == 250
    code, reply = c.data(MESSAGE)
    assert code == 250
    items, _ = door.stored(queued_id(reply))
    assert [r.address for g in items["groups"] for r in g.recipients] == ["ok@example.net"]
    c.quit()


def test_wrong_password_is_535_then_421_and_never_logged(
    door: Door, caplog: pytest.LogCaptureFixture
) -> None:
    c = smtplib.SMTP("127.0.0.1", door.port, timeout=10)
    c.ehlo("x")
    c.starttls(context=door.client_context())
    c.ehlo("x")
    secret = "Sup3r-secret-guess"
    c.user, c.password = "alice", secret
    for _ in range(2):  # one AUTH PLAIN each (login() would try LOGIN too)
        with pytest.raises(smtplib.SMTPAuthenticationError) as e:
            c.auth("PLAIN", c.auth_plain)
        assert e.value.smtp_code == 535
    c.putcmd("AUTH", "PLAIN " + base64.b64encode(f"\0alice\0{secret}".encode()).decode())
    assert c.getreply()[0] == 421  # the third failure closes the session
    logs = caplog.text
    assert secret not in logs
    assert base64.b64encode(f"\0alice\0{secret}".encode()).decode() not in logs
    assert door.server.gate.counters["auth_failed"] == 3


def test_storage_down_is_451_4_3_0_and_nothing_is_half_written(
    door: Door, monkeypatch: pytest.MonkeyPatch
) -> None:
    def down(*a: object, **k: object) -> None:
        raise TransientStorageError("DynamoDB is unavailable")

    c = submit(door)
    c.mail("a@example.org")
    c.rcpt("b@example.net")
    monkeypatch.setattr(door.ingress.service.storage, "enqueue", down)
    code, text = c.data(MESSAGE)
    assert (code, text[:5]) == (451, b"4.3.0")
    monkeypatch.undo()
    assert door.mail_ids() == []
    # the client tries again on the same session: stored
    c.mail("a@example.org")
    c.rcpt("b@example.net")
    assert c.data(MESSAGE)[0] == 250
    c.quit()


def test_size_over_the_limit_is_552_5_3_4(door_factory: Callable[..., Door]) -> None:
    d = door_factory({"max_size": 2048})
    c = submit(d)
    c.mail("a@example.org")
    c.rcpt("b@example.net")
    code, text = c.data(MESSAGE + (b"x" * 70 + b"\r\n") * 40)
    assert (code, text[:5]) == (552, b"5.3.4")
    c.quit()
    assert d.mail_ids() == []


def test_receiving_listener_takes_only_the_receiving_domains(door: Door) -> None:
    c = smtplib.SMTP("127.0.0.1", door.receive_port, timeout=10)
    code, text = c.ehlo("mx.sender.example")
    assert b"AUTH" not in text and b"STARTTLS" in text  # offered, not required (test_doors)
    c.mail("someone@sender.example")
    code, text = c.rcpt("user@elsewhere.example")
    assert (code, text[:5]) == (554, b"5.7.1")  # no open relay
    assert c.rcpt("user@example.com")[0] == 250
    code, reply = c.data(MESSAGE)
    assert code == 250
    items, content = door.stored(queued_id(reply))
    assert b"[127.0.0.1]" in content.split(b"\r\n\r\n")[0]  # a received mail names its client
    c.quit()


def test_too_many_recipients_and_connections(door_factory: Callable[..., Door]) -> None:
    d = door_factory(max_recipients=2, max_connections=2)
    c = submit(d)
    c.mail("a@example.org")
    assert c.rcpt("1@example.net")[0] == 250
    assert c.rcpt("2@example.net")[0] == 250
    assert c.rcpt("3@example.net")[:2] == (452, b"4.5.3 Error: too many recipients")
    other = socket.create_connection(("127.0.0.1", d.port), timeout=5)
    third = socket.create_connection(("127.0.0.1", d.port), timeout=5)
    assert third.recv(200).startswith(b"421 4.7.0")
    third.close()
    other.close()
    c.quit()


def test_idle_session_gets_421_4_4_2(door_factory: Callable[..., Door]) -> None:
    d = door_factory(idle_timeout=0.5)
    s = socket.create_connection(("127.0.0.1", d.port), timeout=5)
    assert s.recv(200).startswith(b"220 ")
    time.sleep(1.0)
    assert s.recv(200).startswith(b"421 4.4.2")
    s.close()


def test_tls_handshake_failure_leaves_the_server_serving(door: Door) -> None:
    s = socket.create_connection(("127.0.0.1", door.port), timeout=5)
    s.recv(200)
    s.sendall(b"EHLO x\r\nSTARTTLS\r\n")
    time.sleep(0.2)
    s.recv(1000)
    s.sendall(b"\x16\x03\x01\x00\x05garbage-not-a-client-hello")
    s.close()
    ctx = ssl.create_default_context()  # does not trust our certificate: handshake fails
    with pytest.raises(ssl.SSLError):
        c = smtplib.SMTP("127.0.0.1", door.port, timeout=10)
        c.ehlo("x")
        c.starttls(context=ctx)
    submit(door).quit()  # still serving


def test_principal_arn_is_the_policy_subject(door: Door) -> None:
    """alice's principal is the one the sender policy names (not the user name)."""
    assert door.server.door.credentials is not None
    rec = door.server.door.credentials.lookup("alice")
    assert rec is not None and rec.principal == ALICE_ARN


def test_smtputf8_address(door: Door) -> None:
    c = submit(door)
    assert c.mail("a@example.org", ["SMTPUTF8", "BODY=8BITMIME"])[0] == 250
    assert c.rcpt("josé@example.net")[0] == 250
    code, reply = c.data(MESSAGE)
    assert code == 250
    items, _ = door.stored(queued_id(reply))
    assert [r.address for g in items["groups"] for r in g.recipients] == ["josé@example.net"]
    # without SMTPUTF8 the same address is refused
    assert c.mail("a@example.org")[0] == 250
    assert c.rcpt("josé@example.net")[0] == 553
    c.quit()
