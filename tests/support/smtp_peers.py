"""Scriptable SMTP peers on 127.0.0.1 for tests: aiosmtpd servers and raw sockets.

Typical use::

    with smtp_sink() as peer:                       # accepts everything
        ... deliver to ("127.0.0.1", peer.port) ...
        assert peer.messages[0].rcpt_tos == ["a@example.org"]
        assert peer.messages[0].content == b"Subject: x\\r\\n\\r\\nbody\\r\\n"

    with smtp_sink(Behaviour(rcpt_replies={"bad@example.org": "550 5.1.1 no such user"})):
    with smtp_sink(Behaviour(greeting="421 4.3.2 try later")):      # 421 at greeting
    with smtp_sink(Behaviour(drop_during_data=True)):                # connection lost in DATA
    with smtp_sink(Behaviour(final_reply="552 5.2.2 mailbox full")): # after the final dot
    with smtp_sink(Behaviour(starttls=True)):        # STARTTLS, certificate from pki()
    with smtp_sink(Behaviour(smtputf8=False, size_limit=1000)):
    with silent_server() as peer:                    # accepts TCP, never says a word
    port = refused_port()                            # nothing listens there

Each peer runs its own event loop in a daemon thread and binds an ephemeral port; it is
stopped (listening socket and every connection closed) when the ``with`` block ends.
``peer.connections`` counts TCP connections, ``peer.commands`` records every command
as (connection number, VERB, argument), ``peer.messages`` the accepted messages with
their envelope and exact content (CRLF, dots already un-stuffed by the server).
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as _dt
import ipaddress
import socket
import ssl
import tempfile
import threading
import time
import warnings
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from aiosmtpd.smtp import SMTP, AuthResult, Envelope, LoginPassword, Session

__all__ = [
    "Behaviour",
    "Pki",
    "ReceivedMessage",
    "SilentPeer",
    "SmtpPeer",
    "pki",
    "refused_port",
    "silent_server",
    "smtp_sink",
]

LOCALHOST = "127.0.0.1"


# ----------------------------------------------------------------------------- PKI


@dataclass(frozen=True)
class Pki:
    """A throw-away CA and a server certificate for ``mx.test``, ``*.mx.test``,
    ``localhost`` and 127.0.0.1, generated with ``cryptography`` at test time."""

    ca_file: Path
    cert_file: Path
    key_file: Path

    def server_context(self) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(self.cert_file, self.key_file)
        return ctx

    def client_context(self) -> ssl.SSLContext:
        """A verifying client context that trusts only this CA."""
        return ssl.create_default_context(cafile=str(self.ca_file))


@lru_cache(maxsize=1)
def pki() -> Pki:
    """The process-wide test PKI (EC keys: generated in milliseconds)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = _dt.datetime.now(_dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "mailqueue test CA")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _dt.timedelta(hours=1))
        .not_valid_after(now + _dt.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "mx.test")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _dt.timedelta(hours=1))
        .not_valid_after(now + _dt.timedelta(days=2))
        .add_extension(
            x509.SubjectAlternativeName(
                [
                    x509.DNSName("mx.test"),
                    x509.DNSName("*.mx.test"),
                    x509.DNSName("localhost"),
                    x509.IPAddress(ipaddress.ip_address(LOCALHOST)),
                ]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .sign(ca_key, hashes.SHA256())
    )
    # Lives as long as the process: the files must outlast every peer and client.
    directory = Path(tempfile.mkdtemp(prefix="mailqueue-pki-"))
    pem = serialization.Encoding.PEM
    (directory / "ca.pem").write_bytes(ca_cert.public_bytes(pem))
    (directory / "cert.pem").write_bytes(cert.public_bytes(pem))
    (directory / "key.pem").write_bytes(
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return Pki(directory / "ca.pem", directory / "cert.pem", directory / "key.pem")


# ----------------------------------------------------------------------------- behaviour


@dataclass(frozen=True)
class Behaviour:
    """What a peer does. Replies are full SMTP lines such as ``"550 5.1.1 unknown"``.

    greeting: sent instead of the 220 banner, then the connection is closed.
    ehlo_reply: sent instead of the EHLO answer (HELO still works).
    mail_reply: reply to every MAIL FROM instead of accepting it.
    rcpt_replies: address (case-insensitive) -> reply; others are accepted.
    data_reply: reply to the DATA command instead of 354.
    final_reply: reply after the final dot (the message is then not recorded unless 2yz).
    drop_during_data: answer 354, read one line of the body, then close the connection.
    starttls: offer STARTTLS with the ``pki()`` certificate (``tls_context`` to override).
    starttls_reply: reply to STARTTLS instead of starting TLS (e.g. "454 4.7.0 no TLS").
    starttls_broken: answer 220 to STARTTLS, then send garbage instead of a handshake.
    starttls_inject: answer 220 plus an extra reply line in the same packet.
    size_limit: advertised SIZE (None: not advertised, no limit).
    smtputf8 / eight_bit_mime / dsn: advertise (and accept) these extensions.
    auth_users: login -> password; advertises AUTH (``auth_mechanisms``) and requires it.
    auth_require_tls: offer AUTH only after STARTTLS (aiosmtpd's default).
    rate_limit: (N, seconds): a MAIL FROM when N were accepted in the last `seconds`
        gets ``throttle_reply`` (a provider enforcing a rate).
    max_connections: a connection when this many are already open gets ``throttle_reply``
        as its greeting and is closed (a provider enforcing concurrency).
    data_delay: seconds the peer takes before its reply to the final dot (a slow server:
        ``peak_transactions`` then shows how many senders were in DATA at once).
    greeting_delay: seconds before the 220 banner (a greet pause, as Postfix's postscreen
        keeps one; a slow connection: what a shaped send spends before MAIL FROM).
    """

    greeting: str | None = None
    ehlo_reply: str | None = None
    mail_reply: str | None = None
    rcpt_replies: Mapping[str, str] = field(default_factory=dict)
    data_reply: str | None = None
    final_reply: str | None = None
    drop_during_data: bool = False
    starttls: bool = False
    tls_context: ssl.SSLContext | None = None
    starttls_reply: str | None = None
    starttls_broken: bool = False
    starttls_inject: bool = False
    size_limit: int | None = 10 * 1024 * 1024
    smtputf8: bool = True
    eight_bit_mime: bool = True
    dsn: bool = True
    auth_users: Mapping[str, str] | None = None
    auth_mechanisms: tuple[str, ...] = ("PLAIN", "LOGIN")
    auth_require_tls: bool = True
    hostname: str = "mx.test"
    rate_limit: tuple[int, float] | None = None
    max_connections: int | None = None
    data_delay: float = 0.0
    greeting_delay: float = 0.0
    throttle_reply: str = (
        "421 4.7.28 [127.0.0.1] Our system has detected an unusual rate of unsolicited mail "
        "originating from your IP address. To protect our users from spam, mail sent from "
        "your IP address has been temporarily rate limited."
    )


@dataclass(frozen=True)
class ReceivedMessage:
    """One accepted message as the server saw it."""

    connection: int
    mail_from: str
    rcpt_tos: list[str]
    mail_args: str  # the raw MAIL FROM argument, e.g. "FROM:<a@b> SIZE=12 BODY=8BITMIME"
    rcpt_args: dict[str, str]  # address -> raw RCPT TO argument
    content: bytes  # CRLF line ends, leading dots already removed by the server
    tls: bool
    auth_login: str | None
    smtputf8: bool


class _ScriptedSMTP(SMTP):
    """aiosmtpd's SMTP with the behaviour hooks that need the protocol itself."""

    def __init__(self, peer: SmtpPeer, number: int, **kwargs: Any) -> None:
        self._peer = peer
        self._number = number
        self._raw: dict[str, str] = {}
        self._rcpt_args: dict[str, str] = {}
        self._over = False
        super().__init__(_Handler(peer, self), **kwargs)
        self._smtp_methods = {
            name: self._recorded(name, method) for name, method in self._smtp_methods.items()
        }

    def _recorded(
        self, verb: str, method: Callable[[str | None], Awaitable[None]]
    ) -> Callable[[str | None], Awaitable[None]]:
        async def call(arg: str | None) -> None:
            self._raw[verb] = arg or ""
            self._peer._record_command(self._number, verb, arg or "")
            await method(arg)

        return call

    def connection_made(self, transport: Any) -> None:
        with self._peer._lock:
            self._peer._open += 1
            self._peer.peak_connections = max(self._peer.peak_connections, self._peer._open)
            self._over = (
                self._peer.behaviour.max_connections is not None
                and self._peer._open > self._peer.behaviour.max_connections
            )
        super().connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        with self._peer._lock:
            self._peer._open -= 1
        super().connection_lost(exc)

    async def _handle_client(self) -> None:
        if self._over:
            self._peer._throttle()
            await self.push(self._peer.behaviour.throttle_reply)
            assert self.transport is not None
            self.transport.close()
            return
        if self._peer.behaviour.greeting_delay > 0:
            await asyncio.sleep(self._peer.behaviour.greeting_delay)
        greeting = self._peer.behaviour.greeting
        if greeting is not None:
            await self.push(greeting)
            assert self.transport is not None
            self.transport.close()
            return
        await super()._handle_client()

    def _getparams(self, params: Any) -> Any:
        result = super()._getparams(params)
        if result is not None and self._peer.behaviour.dsn:
            for key in ("RET", "ENVID", "NOTIFY", "ORCPT"):
                result.pop(key, None)
        return result

    async def smtp_STARTTLS(self, arg: str) -> None:
        b = self._peer.behaviour
        if b.starttls_reply is not None:
            await self.push(b.starttls_reply)
            return
        if b.starttls_broken:
            await self.push("220 2.0.0 Ready to start TLS")
            self._writer.write(b"this is not a TLS handshake\r\n")
            await self._writer.drain()
            assert self.transport is not None
            self.transport.close()
            return
        if b.starttls_inject:
            await self.push("220 2.0.0 Ready to start TLS\r\n250 injected")
            await asyncio.sleep(0.5)
            assert self.transport is not None
            self.transport.close()
            return
        await super().smtp_STARTTLS(arg)

    async def smtp_DATA(self, arg: str) -> None:
        b = self._peer.behaviour
        assert self.envelope is not None
        if self.envelope.rcpt_tos and b.data_reply is not None:
            await self.push(b.data_reply)
            return
        if self.envelope.rcpt_tos and b.drop_during_data:
            await self.push("354 End data with <CR><LF>.<CR><LF>")
            await self._reader.readuntil(b"\r\n")
            assert self.transport is not None
            self.transport.close()
            return
        await super().smtp_DATA(arg)


class _Handler:
    """aiosmtpd handler hooks implementing Behaviour and recording messages."""

    def __init__(self, peer: SmtpPeer, smtp: _ScriptedSMTP) -> None:
        self.peer = peer
        self.smtp = smtp

    async def handle_EHLO(
        self,
        server: SMTP,
        session: Session,
        envelope: Envelope,
        hostname: str,
        responses: list[str],
    ) -> list[str]:
        b = self.peer.behaviour
        session.host_name = hostname
        if b.ehlo_reply is not None:
            return [b.ehlo_reply]
        keywords = [r[4:] for r in responses[1:]]
        keywords = [k for k in keywords if k.upper() != "HELP"]
        if not b.eight_bit_mime:
            keywords = [k for k in keywords if k.upper() != "8BITMIME"]
        if b.auth_users is None:
            keywords = [k for k in keywords if not k.upper().startswith("AUTH")]
        else:
            keywords = [k for k in keywords if not k.upper().startswith("AUTH")]
            if session.ssl is not None or not b.auth_require_tls:
                keywords.append("AUTH " + " ".join(b.auth_mechanisms))
        if b.dsn:
            keywords.append("DSN")
        keywords.append("ENHANCEDSTATUSCODES")
        lines = [responses[0][4:], *keywords]
        return [f"250-{line}" for line in lines[:-1]] + [f"250 {lines[-1]}"]

    async def handle_MAIL(
        self,
        server: SMTP,
        session: Session,
        envelope: Envelope,
        address: str,
        mail_options: list[str],
    ) -> str:
        b = self.peer.behaviour
        if b.mail_reply is not None:
            return b.mail_reply
        if b.rate_limit is not None and not self.peer._take_rate(*b.rate_limit):
            return b.throttle_reply
        if b.rate_limit is None:
            with self.peer._lock:
                self.peer.accepted_at.append(time.monotonic())
        envelope.mail_from = address
        envelope.mail_options.extend(mail_options)
        self.smtp._rcpt_args = {}
        return "250 2.1.0 Sender OK"

    async def handle_RCPT(
        self,
        server: SMTP,
        session: Session,
        envelope: Envelope,
        address: str,
        rcpt_options: list[str],
    ) -> str:
        replies = {k.lower(): v for k, v in self.peer.behaviour.rcpt_replies.items()}
        reply = replies.get(address.lower())
        if reply is not None:
            return reply
        envelope.rcpt_tos.append(address)
        envelope.rcpt_options.extend(rcpt_options)
        self.smtp._rcpt_args[address] = self.smtp._raw.get("RCPT", "")
        return "250 2.1.5 Recipient OK"

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        b = self.peer.behaviour
        if b.data_delay > 0:
            with self.peer._lock:
                self.peer._in_data += 1
                self.peer.peak_transactions = max(self.peer.peak_transactions, self.peer._in_data)
            try:
                await asyncio.sleep(b.data_delay)
            finally:
                with self.peer._lock:
                    self.peer._in_data -= 1
        if b.final_reply is not None and not b.final_reply.startswith("2"):
            return b.final_reply
        content = envelope.original_content or b""
        self.peer._record_message(
            ReceivedMessage(
                connection=self.smtp._number,
                mail_from=envelope.mail_from or "",
                rcpt_tos=list(envelope.rcpt_tos),
                mail_args=self.smtp._raw.get("MAIL", ""),
                rcpt_args=dict(self.smtp._rcpt_args),
                content=bytes(content),
                tls=session.ssl is not None,
                auth_login=(
                    session.auth_data.login.decode()
                    if isinstance(session.auth_data, LoginPassword)
                    else None
                ),
                smtputf8=bool(envelope.smtp_utf8),
            )
        )
        return b.final_reply or f"250 2.0.0 Ok: queued as M{len(self.peer.messages)}"


class SmtpPeer:
    """A running aiosmtpd server with a Behaviour; use :func:`smtp_sink`."""

    def __init__(self, behaviour: Behaviour | None = None) -> None:
        self.behaviour = behaviour or Behaviour()
        self.host = LOCALHOST
        self.port = 0
        self._lock = threading.Lock()
        self._messages: list[ReceivedMessage] = []
        self._commands: list[tuple[int, str, str]] = []
        self._protocols: list[_ScriptedSMTP] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.AbstractServer | None = None
        self._open = 0
        self.peak_connections = 0  # most connections open at once
        self._in_data = 0
        self.peak_transactions = 0  # most final dots awaiting their reply at once (data_delay)
        self.throttled = 0  # throttle replies sent (rate_limit / max_connections)
        self.throttled_connections = 0  # of which for max_connections
        self.accepted_at: list[float] = []  # monotonic times of the MAIL FROMs accepted

    def _throttle(self) -> None:
        with self._lock:
            self.throttled += 1
            self.throttled_connections += 1

    def _take_rate(self, limit: int, seconds: float) -> bool:
        """Sliding window: at most `limit` MAIL FROMs let through in any `seconds`."""
        now = time.monotonic()
        with self._lock:
            recent = [t for t in self.accepted_at if t > now - seconds]
            if len(recent) >= limit:
                self.throttled += 1
                return False
            self.accepted_at.append(now)
            return True

    # -- observations (thread-safe copies)
    @property
    def messages(self) -> list[ReceivedMessage]:
        with self._lock:
            return list(self._messages)

    @property
    def commands(self) -> list[tuple[int, str, str]]:
        with self._lock:
            return list(self._commands)

    @property
    def connections(self) -> int:
        with self._lock:
            return len(self._protocols)

    def verbs(self, connection: int | None = None) -> list[str]:
        """The command verbs received, optionally on one connection (numbered from 1)."""
        return [v for c, v, _ in self.commands if connection is None or c == connection]

    def _record_command(self, number: int, verb: str, arg: str) -> None:
        with self._lock:
            self._commands.append((number, verb, arg))

    def _record_message(self, message: ReceivedMessage) -> None:
        with self._lock:
            self._messages.append(message)

    # -- lifecycle
    def _factory(self) -> _ScriptedSMTP:
        b = self.behaviour
        with self._lock:
            number = len(self._protocols) + 1
        tls: ssl.SSLContext | None = None
        if b.starttls or b.starttls_reply or b.starttls_broken or b.starttls_inject:
            tls = b.tls_context or pki().server_context()
        kwargs: dict[str, Any] = dict(
            hostname=b.hostname,
            data_size_limit=b.size_limit,
            enable_SMTPUTF8=b.smtputf8,
            decode_data=False,
            tls_context=tls,
            timeout=30,
            loop=self._loop,
        )
        if b.auth_users is not None:
            users = dict(b.auth_users)

            def authenticate(
                server: SMTP, session: Session, envelope: Envelope, mechanism: str, data: Any
            ) -> AuthResult:
                ok = (
                    isinstance(data, LoginPassword)
                    and users.get(data.login.decode()) == data.password.decode()
                )
                return AuthResult(success=ok, handled=False, auth_data=data if ok else None)

            kwargs.update(
                authenticator=authenticate,
                auth_required=True,
                auth_require_tls=b.auth_require_tls,
            )
        with warnings.catch_warnings():  # AUTH without TLS is what some tests want
            warnings.filterwarnings("ignore", "Requiring AUTH while not requiring TLS")
            proto = _ScriptedSMTP(self, number, **kwargs)
        with self._lock:
            self._protocols.append(proto)
        return proto

    def drop_connections(self) -> None:
        """Close every open connection from the server side (as an idle timeout would)."""

        async def drop() -> None:
            for proto in list(self._protocols):
                if proto.transport is not None:
                    proto.transport.close()

        asyncio.run_coroutine_threadsafe(drop(), self._loop).result(5)

    def start(self) -> SmtpPeer:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((LOCALHOST, 0))
        self.port = sock.getsockname()[1]
        self._thread.start()

        async def serve() -> asyncio.AbstractServer:
            return await self._loop.create_server(self._factory, sock=sock)

        self._server = asyncio.run_coroutine_threadsafe(serve(), self._loop).result(10)
        return self

    def stop(self) -> None:
        async def shutdown() -> None:
            if self._server is not None:
                self._server.close()
            for proto in list(self._protocols):
                if proto.transport is not None:
                    proto.transport.close()
            current = asyncio.current_task()
            tasks = [t for t in asyncio.all_tasks() if t is not current]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        if self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(10)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
        self._loop.close()


@contextmanager
def smtp_sink(behaviour: Behaviour | None = None, **overrides: Any) -> Iterator[SmtpPeer]:
    """An aiosmtpd peer on 127.0.0.1; keyword arguments override Behaviour fields."""
    b = dataclasses.replace(behaviour or Behaviour(), **overrides)
    peer = SmtpPeer(b).start()
    try:
        yield peer
    finally:
        peer.stop()


class SilentPeer:
    """Accepts TCP connections and never sends a byte (greeting timeouts)."""

    def __init__(self) -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind((LOCALHOST, 0))
        self._sock.listen(16)
        self._sock.settimeout(0.1)
        self.host = LOCALHOST
        self.port: int = self._sock.getsockname()[1]
        self._accepted: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    @property
    def connections(self) -> int:
        return len(self._accepted)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self._accepted.append(conn)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        for conn in self._accepted:
            conn.close()
        self._sock.close()


@contextmanager
def silent_server() -> Iterator[SilentPeer]:
    peer = SilentPeer()
    try:
        yield peer
    finally:
        peer.stop()


def refused_port() -> int:
    """A loopback port nothing listens on: bound, then closed (connect gets ECONNREFUSED)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOCALHOST, 0))
        port: int = s.getsockname()[1]
    return port
