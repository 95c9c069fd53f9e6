"""Issue 43, items 1–5: the SMTP doors as clients outside the project's tests found them.

STARTTLS on the receiving listener; service for new clients under a connection flood
(a per-address cap, Postfix's stress mode); the TLS 1.2 suites Mozilla's intermediate
profile allows and no others; the EHLO reply in one write; AUTH without aiosmtpd's
deprecation warning. Real sockets against the real server on the moto stack.
"""

from __future__ import annotations

import asyncio
import logging
import smtplib
import socket
import ssl
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from mailqueue.services.smtpd import server as smtpd_server
from mailqueue.services.smtpd.tls import INTERMEDIATE_TLS12, INTERMEDIATE_TLS13

from tests.smtpd.conftest import ALICE, MESSAGE, Door
from tests.smtpd.test_smtplib import queued_id, submit


def _greeting(sock: socket.socket) -> bytes:
    data = b""
    while not data.endswith(b"\r\n"):
        chunk = sock.recv(512)
        if not chunk:
            break
        data += chunk
    return data


def _connect(port: int, source: str) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(source, 0))


# ---------------------------------------------------------------- item 1
def _trace(content: bytes) -> bytes:
    """Our Received field, unfolded."""
    first = content.split(b"\r\n\r\n")[0].replace(b"\r\n ", b" ").split(b"\r\n")[0]
    assert first.startswith(b"Received: "), first
    return first


def test_receiving_listener_offers_starttls_and_takes_mail_over_it(door: Door) -> None:
    c = smtplib.SMTP("127.0.0.1", door.receive_port, timeout=10)
    code, text = c.ehlo("mx.sender.example")
    assert code == 250 and b"STARTTLS" in text.upper() and b"AUTH" not in text.upper()
    c.starttls(context=door.client_context())
    sock = c.sock
    assert isinstance(sock, ssl.SSLSocket) and sock.version() in ("TLSv1.2", "TLSv1.3")
    code, text = c.ehlo("mx.sender.example")
    assert b"STARTTLS" not in text.upper()  # offered once, before TLS
    c.mail("someone@sender.example")
    assert c.rcpt("user@example.com")[0] == 250
    code, reply = c.data(MESSAGE)
    assert code == 250
    _, content = door.stored(queued_id(reply))
    assert b"ESMTP TLS)" in _trace(content)  # the trace says it came over TLS
    c.quit()


def test_receiving_listener_does_not_require_tls(door: Door) -> None:
    """Opportunistic, as an MX host: a sender without TLS still delivers (RFC 3207 §4)."""
    c = smtplib.SMTP("127.0.0.1", door.receive_port, timeout=10)
    c.ehlo("mx.sender.example")
    c.mail("someone@sender.example")
    assert c.rcpt("user@example.com")[0] == 250
    code, reply = c.data(MESSAGE)
    assert code == 250
    _, content = door.stored(queued_id(reply))
    trace = _trace(content)
    assert b"ESMTP)" in trace and b"TLS" not in trace
    c.quit()


# ---------------------------------------------------------------- item 2
FLOOD_SOURCES = ("127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5")


def test_a_flood_of_idle_connections_from_four_addresses_leaves_room(
    door_factory: Callable[..., Door],
) -> None:
    """200 idle connections from four addresses (the issue's flood): the per-address cap
    turns most away at once, and a fifth address is greeted and delivers a mail. With
    the old cap (50 of 200) the four took every slot and it got 421 4.7.0."""
    d = door_factory(idle_timeout=300.0)  # the production idle timeout: nothing expires
    held: list[socket.socket] = []
    refused = 0
    try:
        for i in range(200):
            s = _connect(d.port, FLOOD_SOURCES[i % 4])
            held.append(s)
        for s in held:
            banner = _greeting(s)
            if banner.startswith(b"421 4.7.0"):
                refused += 1
            else:
                assert banner.startswith(b"220 "), banner
        cap = d.server.settings.max_connections_per_ip
        assert refused == 200 - 4 * cap, (refused, cap)
        assert d.server.gate.total == 4 * cap < d.server.settings.max_connections
        # the fifth address: greeted, and a mail goes through
        c = smtplib.SMTP("127.0.0.1", d.port, timeout=10, source_address=("127.0.0.6", 0))
        c.ehlo("client.example")
        c.starttls(context=d.client_context())
        c.ehlo("client.example")
        c.login(*ALICE)
        c.mail("a@example.org")
        c.rcpt("b@example.net")
        code, reply = c.data(MESSAGE)
        assert code == 250
        d.stored(queued_id(reply))
        c.quit()
    finally:
        for s in held:
            s.close()


def test_stress_mode_frees_idle_slots_in_seconds(door_factory: Callable[..., Door]) -> None:
    """Slots run low (8 of 10 sessions): every session's timeout drops from the idle
    timeout (60 s here) to the stress timeout, the idle ones open before included; their
    slots come back and a new client is served. Without stress mode they would hold the
    slots for the whole minute."""
    d = door_factory(
        max_connections=10,
        max_connections_per_ip=10,
        idle_timeout=60.0,
        stress_timeout=0.5,
        stress_threshold=0.8,
    )
    idle = [_connect(d.port, "127.0.0.2") for _ in range(7)]
    try:
        for s in idle:
            assert _greeting(s).startswith(b"220 ")
        assert not d.server.gate.stressed
        time.sleep(0.7)  # idle longer than the stress timeout, well within the idle one
        eighth = _connect(d.port, "127.0.0.3")
        assert _greeting(eighth).startswith(b"220 ")  # the eighth session: stress on
        start = time.monotonic()
        for s in idle:  # already idle past the stress timeout: closed at once
            s.settimeout(5)
            assert _greeting(s).startswith(b"421 4.4.2"), "idle session not timed out"
        assert time.monotonic() - start < 5
        assert d.server.gate.counters["stress"] == 1
        # the eighth, idle too, goes within the stress timeout
        eighth.settimeout(5)
        assert _greeting(eighth).startswith(b"421 4.4.2")
        eighth.close()
        deadline = time.monotonic() + 5
        while d.server.gate.total and time.monotonic() < deadline:
            time.sleep(0.05)
        assert d.server.gate.total == 0 and not d.server.gate.stressed
        c = submit(d)  # and a client is served as usual
        c.mail("a@example.org")
        c.rcpt("b@example.net")
        assert c.data(MESSAGE)[0] == 250
        c.quit()
    finally:
        for s in idle:
            s.close()


def test_stress_mode_never_cuts_a_mail_being_stored(
    door_factory: Callable[..., Door], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The timeout counts the client's silence, not our work: a store slower than the
    stress timeout still ends in 250 and one stored mail (cut at 421 instead, the client
    would retry a mail the queue may already hold)."""
    d = door_factory(max_connections=10, stress_threshold=0.1, stress_timeout=1.0)
    storage = d.ingress.service.storage
    enqueue = storage.enqueue

    def slow(*a: Any, **k: Any) -> Any:
        time.sleep(2.5)
        return enqueue(*a, **k)

    c = submit(d)
    assert d.server.gate.stressed  # one session of ten is the threshold here
    c.mail("a@example.org")
    c.rcpt("b@example.net")
    monkeypatch.setattr(storage, "enqueue", slow)
    code, reply = c.data(MESSAGE)
    assert code == 250, (code, reply)
    monkeypatch.undo()
    assert d.mail_ids() == [queued_id(reply)]
    c.quit()


# ---------------------------------------------------------------- item 3
def _tls12_suites() -> list[str]:
    """Every TLS 1.2 suite this OpenSSL can offer (with forward secrecy or not)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.set_ciphers("ALL:@SECLEVEL=0")
    return sorted({c["name"] for c in ctx.get_ciphers() if c["protocol"] == "TLSv1.2"})


def _handshake(door: Door, version: ssl.TLSVersion, cipher: str | None) -> str | None:
    """The suite the server agreed to over STARTTLS, offered alone; None: refused."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with warnings.catch_warnings():  # TLSv1_1 is deprecated: it is the refused one here
        warnings.simplefilter("ignore", DeprecationWarning)
        ctx.minimum_version = ctx.maximum_version = version
    if cipher is not None:
        ctx.set_ciphers(f"{cipher}:@SECLEVEL=0")
    c = smtplib.SMTP("127.0.0.1", door.port, timeout=10)
    try:
        c.ehlo("probe.example")
        try:
            c.starttls(context=ctx)
        except (ssl.SSLError, smtplib.SMTPServerDisconnected, ConnectionError):
            return None
        sock = c.sock
        assert isinstance(sock, ssl.SSLSocket)
        got = sock.cipher()
        assert got is not None
        return got[0]
    finally:
        c.close()


def test_tls_suites_are_mozillas_intermediate_profile(door: Door) -> None:
    """One handshake per TLS 1.2 suite, the client restricted to it: the server accepts
    exactly the profile's suites its ECDSA certificate can use (the DHE ones need an RSA
    certificate and DH parameters; the ECDHE-RSA ones an RSA key), and none of the CBC
    suites Python's default context took (ECDHE-ECDSA-AES256-SHA384, -AES128-SHA256)."""
    offered = _tls12_suites()
    assert "ECDHE-ECDSA-AES128-SHA256" in offered and "ECDHE-ECDSA-AES256-SHA384" in offered
    accepted = [s for s in offered if _handshake(door, ssl.TLSVersion.TLSv1_2, s) == s]
    assert set(accepted) <= set(INTERMEDIATE_TLS12), accepted
    assert sorted(accepted) == sorted(
        [
            "ECDHE-ECDSA-AES128-GCM-SHA256",
            "ECDHE-ECDSA-AES256-GCM-SHA384",
            "ECDHE-ECDSA-CHACHA20-POLY1305",
        ]
    ), accepted
    # TLS 1.3: the profile's three suites (OpenSSL's, which the client cannot narrow here)
    tls13 = _handshake(door, ssl.TLSVersion.TLSv1_3, None)
    assert tls13 in INTERMEDIATE_TLS13
    # older protocols are refused
    assert _handshake(door, ssl.TLSVersion.TLSv1_1, "DEFAULT") is None


# ---------------------------------------------------------------- item 4
@pytest.fixture()
def writes(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[bytes]]:
    """Each write the server's sessions make on their transports (on the event loop's
    thread; read after the reply arrived)."""
    seen: list[bytes] = []
    original = smtpd_server.FrontDoor.connection_made

    def made(self: smtpd_server.FrontDoor, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.WriteTransport)
        write = transport.write

        def recording(data: Any) -> None:
            seen.append(bytes(data))
            write(data)

        transport.write = recording  # type: ignore[method-assign]
        original(self, transport)

    monkeypatch.setattr(smtpd_server.FrontDoor, "connection_made", made)
    yield seen


def test_ehlo_reply_is_one_write(door: Door, writes: list[bytes]) -> None:
    s = _connect(door.port, "127.0.0.1")
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    assert _greeting(s).startswith(b"220 ")
    before = len(writes)
    s.sendall(b"EHLO probe.example\r\n")
    reply = b""
    while b"\r\n250 " not in reply:
        chunk = s.recv(4096)
        assert chunk, reply
        reply += chunk
    while not reply.endswith(b"\r\n"):
        reply += s.recv(4096)
    s.sendall(b"QUIT\r\n")
    s.close()
    ehlo = writes[before : before + 1]
    assert ehlo == [reply], writes[before:]
    lines = reply.decode().split("\r\n")[:-1]
    assert len(lines) >= 8 and all(x.startswith("250-") for x in lines[:-1])
    assert lines[-1].startswith("250 ")


# ---------------------------------------------------------------- item 5
def test_auth_raises_no_deprecation_warning(door: Door) -> None:
    """aiosmtpd 1.4.6 logs "Session.login_data is deprecated" (logger mail.log, WARNING)
    after every successful AUTH, and warns "Requiring AUTH while not requiring TLS" on
    every session of the implicit-TLS listener; none of it, nor any Python warning, here."""
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Keep(level=logging.WARNING)
    aiosmtpd_log = logging.getLogger("mail.log")
    aiosmtpd_log.addHandler(handler)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # every thread's warnings (the filters are global)
            for mechanism, implicit in (("PLAIN", False), ("LOGIN", False), ("PLAIN", True)):
                c: smtplib.SMTP
                if implicit:  # 465: aiosmtpd warned on every session there too
                    ctx = door.client_context()
                    c = smtplib.SMTP_SSL("127.0.0.1", door.tls_port, timeout=10, context=ctx)
                    c.ehlo("client.example")
                else:
                    c = smtplib.SMTP("127.0.0.1", door.port, timeout=10)
                    c.ehlo("client.example")
                    c.starttls(context=door.client_context())
                    c.ehlo("client.example")
                c.user, c.password = ALICE
                auth = c.auth_plain if mechanism == "PLAIN" else c.auth_login
                assert c.auth(mechanism, auth, initial_response_ok=False)[0] == 235
                c.mail("a@example.org")
                c.rcpt("b@example.net")
                assert c.data(MESSAGE)[0] == 250
                c.quit()
    finally:
        aiosmtpd_log.removeHandler(handler)
    assert [r.getMessage() for r in records] == []
