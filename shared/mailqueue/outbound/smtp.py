"""SMTP client: one mail transaction per destination group, over a connection cache.

One piece (~1,100 lines): a mail transaction is one state machine (connect, greeting,
EHLO, STARTTLS, AUTH, MAIL, RCPT, DATA, the hop order and the per-phase deadlines), and
each phase's failure decides what the next phase may do; the connection cache and the
reply mapping are its only collaborators and live here too.

Built on :mod:`smtplib` (EHLO parsing, command framing) with the socket I/O replaced so
every read and write is bounded by a per-phase timeout *and* the invocation's deadline.
Behaviour follows Postfix's SMTP client where RFCs leave a choice:

* hops are tried in order (MX preference order from :mod:`mailqueue.outbound.routing`); the next
  hop is tried after a connection failure, a non-2xx greeting (5xx greetings count as
  temporary, ``smtp_skip_5xx_greeting``), a failed handshake (EHLO, STARTTLS, AUTH) or
  temporary recipient failures, but only while no content has been sent (the body is a
  stream that cannot be rewound); at most ``max_sessions`` handshaken sessions are used
  per delivery (``smtp_mx_session_limit = 2``);
* TLS: ``opportunistic`` tries STARTTLS when offered and, if the handshake fails, reconnects
  once in plaintext (Postfix ``may``), except when the hop has credentials; ``required``
  (Postfix ``encrypt``) and ``required-verify`` (``secure``) fail with 4.7.4 when STARTTLS is
  not offered or refused and 4.7.5 when the handshake or verification fails (RFC 3207
  §4.1 leaves the reaction to the client; these are Postfix's statuses); after STARTTLS,
  EHLO is repeated and all earlier knowledge discarded (RFC 3207 §4.2), and any data the
  server sent after its 220 is treated as an injection attempt;
* AUTH (PLAIN, else LOGIN, RFC 4954) only on hops with credentials, only over TLS unless
  the route allows plaintext; a rejection is temporary (``smtp_sasl_auth_soft_bounce``);
* SIZE (RFC 1870): a message larger than the advertised limit is not sent, 5.3.4;
  8BITMIME (RFC 6152): ``BODY=8BITMIME`` when offered and the body has (or may have) 8-bit
  bytes; no MIME downgrade is done when it is not offered (the body is sent as is);
  SMTPUTF8 (RFC 6531): needed but not offered is permanent 5.6.7; DSN (RFC 3461): RET,
  ENVID, NOTIFY and ORCPT are passed on when offered (``DeliveryOutcome.dsn`` says so,
  otherwise the queue owes the sender "relayed" notifications itself);
* the body is read in chunks, line ends normalised to CRLF (bare CR and LF too, which also
  defeats SMTP smuggling) and leading dots doubled (RFC 5321 §4.5.2), never held whole;
* per-phase timeouts are Postfix's (``smtp_*_timeout``) scaled down for Lambda.
* addresses are checked with the ingress's own grammar (:mod:`mailqueue.core.address`), so
  nothing the ingress accepted is refused here (5.1.7 / 5.1.3 only for what it would
  refuse), and sent in its RFC 5321 wire form (minimum quoting, ``"a<b"@x`` intact);
  equivalent recipients in one transaction get one RCPT TO and share its result.

Message bodies are never logged; addresses only at DEBUG.
"""

from __future__ import annotations

import base64
import logging
import math
import re
import smtplib
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, Protocol

from mailqueue.core import address as mailbox
from mailqueue.core.model import Notify, Recipient, Result, Ret
from mailqueue.core.policy import classify, connect_failure, conversation_failure, local_result
from mailqueue.outbound.routing import CredentialsProvider, Hop, TlsPolicy

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer

__all__ = [
    "ByteSource",
    "ConnectionPool",
    "DeliveryOutcome",
    "DotStuffer",
    "Rcpt",
    "SmtpClient",
    "Timeouts",
    "TlsContextFactory",
    "default_tls_context",
    "lambda_deadline",
    "xtext",
]

log = logging.getLogger(__name__)

_CHUNK = 64 * 1024
_MAX_LINE = 8192  # smtplib's _MAXLINE
_MAX_REPLY_LINES = 1000
_HIGH_BIT = re.compile(rb"[\x80-\xff]")


class ByteSource(Protocol):
    """What the body must offer: ``read(n)`` returning bytes, b"" at the end."""

    def read(self, size: int = ..., /) -> bytes: ...


@dataclass(frozen=True, slots=True)
class Timeouts:
    """Seconds per phase, each further bounded by the caller's deadline.

    Postfix defaults in brackets; RFC 5321 §4.5.3.2 suggests minutes, but a Lambda has
    at most 15 and a stuck peer should not eat them: connect (30 s), greeting and EHLO
    (``smtp_helo_timeout`` 300 s), STARTTLS (300 s), MAIL (300 s), RCPT (300 s), DATA
    (``smtp_data_init_timeout`` 120 s), each body write (``smtp_data_xfer_timeout``
    180 s), the final dot (``smtp_data_done_timeout`` 600 s; kept longest because the
    server may be scanning content), RSET (20 s), QUIT.
    """

    connect: float = 10.0
    greeting: float = 60.0
    ehlo: float = 60.0
    starttls: float = 30.0
    auth: float = 30.0
    mail: float = 60.0
    rcpt: float = 60.0
    data_init: float = 60.0
    data_block: float = 60.0
    data_done: float = 180.0
    rset: float = 10.0
    quit: float = 2.0

    def __post_init__(self) -> None:
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            if not (isinstance(value, int | float) and value > 0 and math.isfinite(value)):
                raise ValueError(f"timeout {name} must be a positive number of seconds")


class Rcpt(NamedTuple):
    """One recipient of the transaction: a plain tuple works too."""

    rid: str
    address: str
    notify: Sequence[Notify | str] = ()
    orcpt: str | None = None


@dataclass(frozen=True, slots=True)
class DeliveryOutcome:
    """Per-recipient results and what the deciding session looked like."""

    results: dict[str, Result]
    tls: bool = False
    remote_mta: str | None = None  # host name of the server that answered last
    relay: str | None = None  # Postfix-style host[address]:port, for logs
    tls_info: str | None = None  # e.g. "TLSv1.3 TLS_AES_256_GCM_SHA384"
    dsn: bool = False  # DSN parameters were passed on to the server
    reused: bool = False  # the session came from the connection pool
    hop_failures: tuple[Result, ...] = ()  # site-level failures of hops tried on the way
    # the send's shaping slot passed before MAIL FROM (``deliver(late=...)``): nothing was
    # sent, no result is an attempt; the caller books a fresh slot
    missed_slot: bool = False


TlsContextFactory = Callable[[TlsPolicy, str | None], ssl.SSLContext]
"""(policy, ca_file) -> SSLContext; called once per distinct pair and cached."""


def default_tls_context(policy: TlsPolicy, ca_file: str | None) -> ssl.SSLContext:
    """Verifying context for ``required-verify`` (CA file or system store), else none.

    Opportunistic and ``required`` TLS do not verify (RFC 7435 opportunistic security:
    an unauthenticated encrypted channel beats plaintext); TLS 1.2 is the floor.
    """
    if policy is TlsPolicy.REQUIRED_VERIFY:
        ctx = ssl.create_default_context(cafile=ca_file)
    else:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    return ctx


class CachedTlsContexts:
    """A TLS context factory that builds each (policy, CA file) context once and keeps
    it: for a container's lifetime when its owner is (DeliveryService). A verifying
    context loads the whole CA store, ~22 ms of CPU here for the system bundle (a
    relay's ``required-verify``, an MTA-STS ``enforce`` MX), which a client per
    invocation paid again at every invocation. A context is not changed after it is
    made, and OpenSSL's contexts are shared safely by connections and threads; a
    failure (an unreadable CA file) is not kept, so the next attempt tries again."""

    def __init__(self, factory: TlsContextFactory | None = None) -> None:
        self.factory = factory or default_tls_context
        self.built = 0  # contexts made (what the cache saves is visible to tests)
        self._contexts: dict[tuple[TlsPolicy, str | None], ssl.SSLContext] = {}
        self._lock = threading.Lock()

    def __call__(self, policy: TlsPolicy, ca_file: str | None) -> ssl.SSLContext:
        key = (policy, ca_file)
        with self._lock:
            ctx = self._contexts.get(key)
            if ctx is None:
                ctx = self._contexts[key] = self.factory(policy, ca_file)
                self.built += 1
        return ctx


def lambda_deadline(context: Any, reserve: float = 10.0) -> Callable[[], float]:
    """Seconds left in a Lambda invocation minus ``reserve`` for recording results."""

    def left() -> float:
        return float(context.get_remaining_time_in_millis()) / 1000.0 - reserve

    return left


def xtext(value: str) -> str:
    """RFC 3461 §4 xtext: "+" hex for "+", "=", controls, space and non-ASCII octets."""
    out = []
    for byte in value.encode("utf-8"):
        if 33 <= byte <= 126 and byte not in (0x2B, 0x3D):
            out.append(chr(byte))
        else:
            out.append(f"+{byte:02X}")
    return "".join(out)


def _utf8_addr_xtext(value: str) -> str:
    """RFC 6533 §3 utf-8-addr-xtext: ``\\x{HEX}`` for non-ASCII, "+", "=", "\\" and controls."""
    out = []
    for ch in value:
        cp = ord(ch)
        if 33 <= cp <= 126 and ch not in "+=\\":
            out.append(ch)
        else:
            out.append(f"\\x{{{cp:X}}}")
    return "".join(out)


def _orcpt_param(orcpt: str) -> str:
    """ORCPT=addr-type;xtext, "rfc822;" assumed when the type is missing."""
    addr_type, sep, addr = orcpt.partition(";")
    if not sep:
        addr_type, addr = "rfc822", orcpt
    addr_type = addr_type.strip() or "rfc822"
    if addr.isascii():
        return f"ORCPT={addr_type};{xtext(addr)}"
    return f"ORCPT=utf-8;{_utf8_addr_xtext(addr)}"


def _notify_param(notify: Sequence[Notify | str]) -> str | None:
    """NOTIFY=NEVER alone, or SUCCESS,FAILURE,DELAY in canonical order; None: default."""
    kinds = {Notify(str(n).upper()) for n in notify}
    if not kinds:
        return None
    if Notify.NEVER in kinds:
        return "NOTIFY=NEVER"
    order = (Notify.SUCCESS, Notify.FAILURE, Notify.DELAY)
    return "NOTIFY=" + ",".join(k.value for k in order if k in kinds)


def _mailbox(address: str) -> mailbox.Mailbox | None:
    """The ingress's own grammar (:mod:`mailqueue.core.address`): the client refuses exactly
    what the ingress refuses, and sends the RFC 5321 wire form of what it accepts (which
    also keeps CR/LF and stray brackets off the command line)."""
    try:
        return mailbox.parse(address)
    except mailbox.AddressError:
        return None


class DotStuffer:
    """Streams a body as SMTP DATA: CRLF line ends and doubled leading dots.

    State carries across chunks, so a CR at the end of one chunk and LF at the start of
    the next make one line end, and a dot after a line end in the previous chunk is
    still doubled.
    """

    def __init__(self) -> None:
        self._bol = True  # at the beginning of a line
        self._skip_lf = False  # previous chunk ended in CR, already emitted as CRLF

    def feed(self, chunk: bytes) -> bytes:
        if not chunk:
            return b""
        if self._skip_lf:
            self._skip_lf = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
                if not chunk:
                    return b""
        self._skip_lf = chunk[-1:] == b"\r"
        data = re.sub(rb"\r\n|\r|\n", b"\r\n", chunk).replace(b"\r\n.", b"\r\n..")
        if self._bol and data[:1] == b".":
            data = b"." + data
        self._bol = data[-2:] == b"\r\n"
        return data

    def finish(self) -> bytes:
        """The end-of-data marker, with a CRLF first if the body did not end a line."""
        return (b"" if self._bol else b"\r\n") + b".\r\n"


# --------------------------------------------------------------------------- transport


class _PeerError(Exception):
    """The conversation broke: a timeout, a lost connection or a protocol violation."""

    def __init__(self, kind: Literal["timeout", "lost", "protocol"], detail: str = "") -> None:
        super().__init__(kind, detail)
        self.kind = kind
        self.detail = detail


class _Connection(smtplib.SMTP):
    """smtplib with I/O bounded by an absolute per-phase deadline (``bound``)."""

    def __init__(self, local_hostname: str, sock: socket.socket) -> None:
        super().__init__(local_hostname=local_hostname)
        self.sock = sock
        self.command_encoding = "utf-8"  # only reached with SMTPUTF8 or ASCII lines
        self._buf = bytearray()
        self._until = 0.0

    def bound(self, seconds: float) -> None:
        """The next reads and writes must complete within ``seconds`` from now."""
        self._until = time.monotonic() + seconds

    def _left(self) -> float:
        left = self._until - time.monotonic()
        if left <= 0:
            raise _PeerError("timeout")
        return left

    def _socket(self) -> socket.socket:
        if self.sock is None:
            raise _PeerError("lost", "not connected")
        return self.sock

    def send(self, s: ReadableBuffer | str) -> None:
        data = s.encode(self.command_encoding) if isinstance(s, str) else bytes(s)
        sock = self._socket()
        try:
            sock.settimeout(self._left())
            sock.sendall(data)
        except TimeoutError:
            raise _PeerError("timeout") from None
        except OSError as exc:
            raise _PeerError("lost", exc.strerror or str(exc)) from None

    def _readline(self) -> bytes:
        while True:
            end = self._buf.find(b"\n")
            if end >= 0:
                line = bytes(self._buf[: end + 1])
                del self._buf[: end + 1]
                return line
            if len(self._buf) > _MAX_LINE:
                raise _PeerError("protocol", "reply line too long")
            sock = self._socket()
            try:
                sock.settimeout(self._left())
                data = sock.recv(_CHUNK)
            except TimeoutError:
                raise _PeerError("timeout") from None
            except OSError as exc:
                raise _PeerError("lost", exc.strerror or str(exc)) from None
            if not data:
                raise _PeerError("lost")
            self._buf += data

    def getreply(self) -> tuple[int, bytes]:
        """(code, text) like smtplib: continuation lines joined by newlines; -1 if garbled."""
        lines: list[bytes] = []
        while True:
            line = self._readline()
            if len(lines) >= _MAX_REPLY_LINES:
                raise _PeerError("protocol", "reply has too many lines")
            code = line[:3]
            if len(code) != 3 or not code.isdigit() or line[3:4] not in (b" ", b"-", b"\r", b"\n"):
                lines.append(line.strip(b" \t\r\n"))
                return -1, b"\n".join(lines)
            lines.append(line[4:].strip(b" \t\r\n"))
            if line[3:4] != b"-":
                return int(code), b"\n".join(lines)

    def pending(self) -> bool:
        """Whether the server sent more than we have read (must not happen before TLS)."""
        return bool(self._buf)

    def start_tls(self, ctx: ssl.SSLContext, server_hostname: str, seconds: float) -> None:
        sock = self._socket()
        if self.pending():
            raise _PeerError("protocol", "data after the STARTTLS reply (injection attempt?)")
        sock.settimeout(max(seconds, 0.001))
        self.sock = ctx.wrap_socket(sock, server_hostname=server_hostname)

    def close(self) -> None:
        self._buf.clear()
        super().close()


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


@dataclass(eq=False)
class _Session:
    """One connected, handshaken SMTP session."""

    conn: _Connection
    hop: Hop
    features: dict[str, str] = field(default_factory=dict)
    tls: bool = False
    tls_info: str | None = None
    opened_at: float = field(default_factory=time.monotonic)
    idle_since: float = 0.0
    transactions: int = 0
    reused: bool = False
    where: str = "connecting"

    @property
    def size_limit(self) -> int | None:
        value = self.features.get("size", "").strip()
        return int(value) if value.isdigit() and int(value) > 0 else None

    def failure(self, exc: _PeerError) -> Result:
        """Postfix-worded 4.4.2 (4.5.0 for protocol violations) for a broken conversation."""
        name = self.hop.name
        if exc.kind == "timeout":
            text = f"conversation with {name} timed out while {self.where}"
        elif exc.kind == "lost":
            text = f"lost connection with {name} while {self.where}"
            if exc.detail:
                text += f": {exc.detail}"
        else:
            return local_result(
                "4.5.0",
                f"protocol error with {name} while {self.where}: {exc.detail}",
                self.hop.host,
            )
        return conversation_failure(text, self.hop.host)

    def quit(self, seconds: float) -> None:
        """Send QUIT without waiting for the reply (``smtp_skip_quit_response``), close."""
        try:
            self.conn.bound(seconds)
            self.conn.send(b"QUIT\r\n")
        except _PeerError:
            pass
        self.conn.close()

    def close(self) -> None:
        self.conn.close()


class ConnectionPool:
    """Idle sessions kept between transactions of one invocation (Postfix's scache).

    Keyed by ``Hop.pool_key``: (host, port, TLS policy, credentials, CA file). A session
    is reused only after a successful RSET, which also detects dead connections; it is
    closed when idle longer than ``max_idle`` seconds, older than ``max_age``
    (``smtp_connection_reuse_time_limit``) or used ``max_transactions`` times. Thread-safe;
    call ``close()`` (or use it as a context manager) at the end of the invocation.
    """

    def __init__(
        self,
        *,
        max_idle: float = 10.0,
        max_age: float = 300.0,
        max_transactions: int = 100,
        quit_timeout: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_idle = max_idle
        self.max_age = max_age
        self.max_transactions = max_transactions
        self.quit_timeout = quit_timeout
        self._clock = clock
        self._idle: dict[tuple[str, int, TlsPolicy, str | None, str | None], list[_Session]] = {}
        self._lock = threading.Lock()
        # per pool key, a lower max_transactions (traffic shaping: messages per connection)
        self.per_key_max: dict[tuple[str, int, TlsPolicy, str | None, str | None], int] = {}

    def __len__(self) -> int:
        with self._lock:
            return sum(len(v) for v in self._idle.values())

    def __enter__(self) -> ConnectionPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _checkout(self, key: tuple[str, int, TlsPolicy, str | None, str | None]) -> _Session | None:
        now = self._clock()
        expired: list[_Session] = []
        found: _Session | None = None
        with self._lock:
            sessions = self._idle.get(key, [])
            while sessions and found is None:
                s = sessions.pop()
                if now - s.idle_since > self.max_idle or now - s.opened_at > self.max_age:
                    expired.append(s)
                else:
                    found = s
        for s in expired:
            s.quit(self.quit_timeout)
        return found

    def _checkin(self, session: _Session) -> None:
        session.transactions += 1
        limit = self.per_key_max.get(session.hop.pool_key, self.max_transactions)
        if session.transactions >= min(limit, self.max_transactions):
            session.quit(self.quit_timeout)
            return
        session.idle_since = self._clock()
        with self._lock:
            self._idle.setdefault(session.hop.pool_key, []).append(session)

    def close(self) -> None:
        """QUIT and close every idle session."""
        with self._lock:
            sessions = [s for v in self._idle.values() for s in v]
            self._idle.clear()
        for s in sessions:
            s.quit(self.quit_timeout)


class _HopFailed(Exception):
    def __init__(self, result: Result) -> None:
        super().__init__(result.text)
        self.result = result


class _PlaintextRetry(Exception):
    """Opportunistic TLS failed mid-handshake: reconnect without STARTTLS."""


class _ContentError(Exception):
    """Reading our own message content failed (not the peer's fault)."""


class _Deadline:
    def __init__(self, remaining: Callable[[], float] | None) -> None:
        self._remaining = remaining

    def left(self) -> float:
        return math.inf if self._remaining is None else float(self._remaining())

    def phase(self, seconds: float) -> float:
        return min(seconds, self.left())


@dataclass
class _Message:
    sender: str  # the reverse-path as sent: "<wire form>" or "<>"
    paths: dict[str, str]  # rid -> forward-path as sent, "<wire form>"
    content: ByteSource
    size: int | None
    ret: Ret | None
    envid: str | None
    smtputf8: bool
    body_8bit: bool | None
    late: Callable[[], bool] | None = None

    def eight_bit(self) -> bool:
        """Whether the body has 8-bit octets; scanned once if seekable, else assumed."""
        if self.body_8bit is None:
            content: Any = self.content
            seekable = getattr(content, "seekable", None)
            if callable(seekable) and seekable():
                found = True  # if the scan fails, the DATA phase reports the read error
                try:
                    start = content.tell()
                    found = False
                    while chunk := content.read(_CHUNK):
                        if _HIGH_BIT.search(chunk):
                            found = True
                            break
                    content.seek(start)
                except (OSError, ValueError, TypeError):
                    found = True
                self.body_8bit = found
            else:
                # Declaring 8BITMIME for 7-bit content is harmless (RFC 6152 §3).
                self.body_8bit = True
        return self.body_8bit


@dataclass
class _Tx:
    results: dict[str, Result]
    data_started: bool
    dsn: bool
    missed_slot: bool = False


def _as_rcpt(r: Rcpt | Recipient | tuple[Any, ...]) -> Rcpt:
    if isinstance(r, Recipient):
        return Rcpt(r.rid, r.address, r.notify, r.orcpt)
    if isinstance(r, Rcpt):
        return r
    return Rcpt(*r)


class SmtpClient:
    """Delivers one transaction to the first hop that takes it; see the module docstring.

    ``hostname`` is what we say in EHLO (should have forward and reverse DNS).
    ``credentials`` resolves a route's ``secretsmanager:``/``ssm:`` reference.
    ``pool`` None: every session is closed after its transaction.
    ``source_address``: the local address every connection binds (an egress pool's,
    outbound/pools.py; the local stack's 127.0.0.x per pool). None: the system's choice
    (on AWS the pool is its subnets' NAT gateways, no bind needed). A hop of the other
    address family is not tried from a wrong address: it fails temporarily.
    """

    def __init__(
        self,
        hostname: str,
        tls_context_factory: TlsContextFactory | None = None,
        timeouts: Timeouts | None = None,
        pool: ConnectionPool | None = None,
        *,
        credentials: CredentialsProvider | None = None,
        max_sessions: int = 2,
        source_address: str | None = None,
    ) -> None:
        if not hostname or not hostname.isascii() or any(c.isspace() for c in hostname):
            raise ValueError(f"invalid EHLO hostname {hostname!r}")
        self.source_address = source_address
        if max_sessions < 1:
            raise ValueError("max_sessions must be >= 1")
        self.hostname = hostname
        self.timeouts = timeouts or Timeouts()
        self.pool = pool
        self.credentials = credentials
        self.max_sessions = max_sessions
        self._factory = tls_context_factory or default_tls_context
        self._contexts: dict[tuple[TlsPolicy, str | None], ssl.SSLContext] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ public API

    def deliver(
        self,
        hops: Sequence[Hop],
        sender: str,
        recipients: Iterable[Rcpt | Recipient | tuple[Any, ...]],
        content: ByteSource,
        size: int | None = None,
        *,
        ret: Ret | str | None = None,
        envid: str | None = None,
        smtputf8: bool = False,
        body_8bit: bool | None = None,
        deadline: Callable[[], float] | None = None,
        late: Callable[[], bool] | None = None,
    ) -> DeliveryOutcome:
        """One SMTP transaction for ``recipients``; a Result for every rid, never raises
        for network or server trouble.

        ``content`` is the message as stored (any line ends), read once in chunks; ``size``
        its size in octets with CRLF line ends (RFC 1870), None if unknown. ``smtputf8``
        says the message needs SMTPUTF8 (non-ASCII addresses force it anyway).
        ``body_8bit`` None: scan a seekable body, assume 8-bit otherwise. ``deadline``
        returns the seconds left (see :func:`lambda_deadline`); None: no deadline.
        ``late``, asked just before MAIL FROM: True gives the transaction up unsent (the
        session is closed with QUIT, no other hop is tried) and the outcome says
        ``missed_slot``: a shaped send whose slot passed while it connected, signed or
        negotiated TLS would bunch with the on-time sends after it (issue 40).
        """
        rcpts = [_as_rcpt(r) for r in recipients]
        if len({r.rid for r in rcpts}) != len(rcpts):
            raise ValueError("recipient ids must be unique")
        for r in rcpts:
            _notify_param(r.notify)  # a bad NOTIFY value is a caller bug: fail before any I/O
        if not hops:
            raise ValueError("no hops to deliver to")
        clock = _Deadline(deadline)
        results: dict[str, Result] = {}

        sender_box = _mailbox(sender) if sender else None
        if sender and sender_box is None:
            bad = local_result("5.1.7", "bad sender address syntax")
            return DeliveryOutcome({r.rid: bad for r in rcpts})
        pending: list[Rcpt] = []
        paths: dict[str, str] = {}
        first_of: dict[str, str] = {}  # equivalence key -> rid of its first recipient
        twins: dict[str, str] = {}  # rid -> rid of an equivalent earlier recipient
        need_utf8 = smtputf8 or (sender_box is not None and sender_box.smtputf8)
        for r in rcpts:
            box = _mailbox(r.address)
            if box is None:
                results[r.rid] = local_result("5.1.3", "bad recipient address syntax")
            elif box.key in first_of:  # one RCPT TO per mailbox; the first's parameters
                twins[r.rid] = first_of[box.key]
            else:
                first_of[box.key] = r.rid
                paths[r.rid] = f"<{box.wire}>"
                need_utf8 = need_utf8 or box.smtputf8
                pending.append(r)
        if not pending:
            return DeliveryOutcome(results)

        msg = _Message(
            sender=f"<{sender_box.wire}>" if sender_box is not None else "<>",
            paths=paths,
            content=content,
            size=size,
            ret=Ret(str(ret).upper()) if ret is not None else None,
            envid=envid,
            smtputf8=need_utf8,
            body_8bit=body_8bit,
            late=late,
        )
        site_failures: list[Result] = []
        sessions = 0
        last: tuple[_Session, _Tx] | None = None
        for hop in hops:
            if sessions >= self.max_sessions:
                break
            if clock.left() <= 0:
                failure = connect_failure(f"deadline reached before trying {hop.name}", hop.host)
                site_failures.append(failure)
                results.update((r.rid, failure) for r in pending)
                break
            try:
                session = self._session(hop, clock)
            except _HopFailed as exc:
                log.info("%s: %s %s", hop.name, exc.result.status, exc.result.text)
                site_failures.append(exc.result)
                results.update((r.rid, exc.result) for r in pending)
                if exc.result.permanent:
                    break
                continue
            sessions += 1
            try:
                tx = self._transaction(session, msg, pending, clock)
            except BaseException:
                session.close()  # mid-transaction state: never back into the pool
                raise
            results.update(tx.results)
            last = (session, tx)
            if tx.missed_slot:
                break
            retry = [r for r in pending if not results[r.rid].permanent]
            retry = [r for r in retry if not results[r.rid].success]
            if tx.data_started or not retry:
                break
            pending = retry  # nothing was sent: temporary failures may try the next hop

        results.update((rid, results[first]) for rid, first in twins.items())
        for rid, res in results.items():
            log.debug("result %s: %s %s %s", rid, res.code, res.status, res.text)
        if last is None:
            return DeliveryOutcome(
                results,
                remote_mta=site_failures[-1].remote_mta if site_failures else None,
                hop_failures=tuple(site_failures),
            )
        session, tx = last
        return DeliveryOutcome(
            results,
            tls=session.tls,
            remote_mta=session.hop.host,
            relay=session.hop.name,
            tls_info=session.tls_info,
            dsn=tx.dsn,
            reused=session.reused,
            hop_failures=tuple(site_failures),
            missed_slot=tx.missed_slot,
        )

    # ------------------------------------------------------------------ sessions

    def _session(self, hop: Hop, clock: _Deadline) -> _Session:
        """A pooled session that passes RSET, or a new one."""
        if self.pool is not None:
            while (pooled := self.pool._checkout(hop.pool_key)) is not None:
                try:
                    pooled.where = "sending RSET"
                    pooled.conn.bound(clock.phase(self.timeouts.rset))
                    code, _ = pooled.conn.docmd("RSET")
                except _PeerError:
                    code = 0
                if code == 250:
                    pooled.reused = True
                    return pooled
                log.info("cached session to %s is gone (RSET: %s)", pooled.hop.name, code)
                pooled.close()
        try:
            return self._open(hop, clock, allow_tls=True)
        except _PlaintextRetry:
            log.info("TLS with %s failed; retrying in plaintext (opportunistic TLS)", hop.name)
            return self._open(hop, clock, allow_tls=False)

    def _open(self, hop: Hop, clock: _Deadline, *, allow_tls: bool) -> _Session:
        if hop.dane is not None and hop.dane.error:  # DANE (dane.py): TLSA lookup failed
            raise _HopFailed(local_result("4.7.5", hop.dane.error, hop.host))
        seconds = clock.phase(self.timeouts.connect)
        if seconds <= 0:
            raise _HopFailed(connect_failure(f"connect to {hop.name}: deadline reached", hop.host))
        source = None
        if self.source_address is not None:
            if (":" in self.source_address) != (":" in hop.address):
                raise _HopFailed(
                    connect_failure(
                        f"connect to {hop.name}: no source address of its family in the pool",
                        hop.host,
                    )
                )
            source = (self.source_address, 0)
        try:
            sock = socket.create_connection(
                (hop.address, hop.port), timeout=seconds, source_address=source
            )
            # commands and the final dot are small writes: without NODELAY, Nagle holds
            # each behind the peer's delayed ACK (~40 ms per transaction)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except TimeoutError:
            raise _HopFailed(
                connect_failure(f"connect to {hop.name}: Connection timed out", hop.host)
            ) from None
        except OSError as exc:
            raise _HopFailed(
                connect_failure(f"connect to {hop.name}: {exc.strerror or exc}", hop.host)
            ) from None
        session = _Session(_Connection(self.hostname, sock), hop)
        try:
            self._handshake(session, clock, allow_tls)
        except _PeerError as exc:
            session.close()
            raise _HopFailed(session.failure(exc)) from None
        except BaseException:
            session.close()
            raise
        return session

    def _handshake(self, session: _Session, clock: _Deadline, allow_tls: bool) -> None:
        hop, conn, t = session.hop, session.conn, self.timeouts
        session.where = "receiving the initial server greeting"
        conn.bound(clock.phase(t.greeting))
        code, raw = conn.getreply()
        if code // 100 != 2:
            res = classify(code, _text(raw), hop.host)
            if res.permanent:  # Postfix smtp_skip_5xx_greeting: another MX may do better
                res = Result(res.code, "4" + res.status[1:], res.text, res.remote_mta)
            raise _HopFailed(res)
        self._ehlo(session, clock)
        if allow_tls and hop.tls != TlsPolicy.NONE:
            self._starttls(session, clock)
        elif hop.tls.mandatory:
            raise _HopFailed(local_result("4.7.4", f"TLS is required with {hop.name}", hop.host))
        if hop.credentials is not None:
            self._auth(session, clock)

    def _ehlo(self, session: _Session, clock: _Deadline) -> None:
        """EHLO, falling back to HELO when EHLO is refused with 5xx (RFC 5321 §3.2)."""
        hop, conn = session.hop, session.conn
        session.where = "performing the EHLO handshake"
        conn.bound(clock.phase(self.timeouts.ehlo))
        code, raw = conn.ehlo(self.hostname)
        if code == 250:
            session.features = dict(conn.esmtp_features)
            return
        if code // 100 == 5 and not session.tls:
            session.where = "performing the HELO handshake"
            conn.bound(clock.phase(self.timeouts.ehlo))
            code, raw = conn.helo(self.hostname)
            if code // 100 == 2:
                session.features = {}
                return
        raise _HopFailed(classify(code, _text(raw), hop.host))

    def _tls_context(self, hop: Hop) -> ssl.SSLContext:
        key = (hop.tls, hop.ca_file)
        with self._lock:
            ctx = self._contexts.get(key)
            if ctx is None:
                ctx = self._contexts[key] = self._factory(hop.tls, hop.ca_file)
        return ctx

    def _starttls(self, session: _Session, clock: _Deadline) -> None:
        hop, conn = session.hop, session.conn
        if "starttls" not in session.features:
            if hop.dane is not None:
                why = f"DANE: TLSA records published, but host {hop.name} offers no STARTTLS"
                raise _HopFailed(local_result("4.7.5", why, hop.host))
            if hop.tls.mandatory:
                raise _HopFailed(
                    local_result(
                        "4.7.4",
                        f"TLS is required, but was not offered by host {hop.name}",
                        hop.host,
                    )
                )
            return
        try:
            ctx = self._tls_context(hop)
        except (OSError, ValueError) as exc:  # e.g. an unreadable ca_file
            log.error("no TLS context for %s: %s", hop.name, exc)
            if hop.tls.mandatory:
                raise _HopFailed(
                    local_result("4.7.5", "TLS is required, but our TLS engine is unavailable")
                ) from None
            return
        session.where = "receiving the STARTTLS response"
        conn.bound(clock.phase(self.timeouts.starttls))
        code, raw = conn.docmd("STARTTLS")
        if code == 421:
            raise _HopFailed(classify(code, _text(raw), hop.host))
        if code // 100 != 2:
            if hop.tls.mandatory:
                raise _HopFailed(
                    local_result(
                        "4.7.4",
                        f"TLS is required, but host {hop.name} refused to start TLS: "
                        f"{code} {_text(raw)}",
                        hop.host,
                    )
                )
            return  # Postfix: continue in plaintext on the same session
        session.where = "performing the TLS handshake"
        try:
            conn.start_tls(ctx, hop.host, clock.phase(self.timeouts.starttls))
        except (OSError, _PeerError) as exc:
            # ssl.SSLError (incl. verification failures) and timeouts are OSErrors.
            if hop.tls == TlsPolicy.OPPORTUNISTIC and hop.credentials is None:
                raise _PlaintextRetry() from None
            if isinstance(exc, ssl.SSLCertVerificationError):
                why = f"Server certificate not verified: {exc.verify_message}"
            else:
                why = f"Cannot start TLS: handshake failure: {_tls_reason(exc)}"
            raise _HopFailed(local_result("4.7.5", f"{why} ({hop.name})", hop.host)) from None
        sock = conn.sock
        if hop.dane is not None:  # RFC 7672: the chain against the host's TLSA records
            from mailqueue.outbound.dane import peer_chain, verify

            failed = verify(hop.dane, peer_chain(sock))
            if failed is not None:
                raise _HopFailed(local_result("4.7.5", f"{failed} ({hop.name})", hop.host))
        if isinstance(sock, ssl.SSLSocket):
            cipher = sock.cipher()
            session.tls_info = f"{sock.version()} {cipher[0] if cipher else ''}".strip()
        session.tls = True
        session.features = {}
        self._ehlo(session, clock)  # RFC 3207 §4.2: forget everything, ask again

    def _auth(self, session: _Session, clock: _Deadline) -> None:
        hop, conn = session.hop, session.conn
        ref = hop.credentials
        assert ref is not None
        if not session.tls and not hop.allow_plaintext_auth:
            raise _HopFailed(
                local_result(
                    "4.7.4", f"refusing to send credentials to {hop.name} without TLS", hop.host
                )
            )
        mechanisms = set(session.features.get("auth", "").upper().split())
        mechanism = "PLAIN" if "PLAIN" in mechanisms else "LOGIN" if "LOGIN" in mechanisms else None
        if mechanism is None:
            raise _HopFailed(
                local_result(
                    "4.7.0",
                    f"host {hop.name} offers no usable AUTH mechanism (PLAIN, LOGIN)",
                    hop.host,
                )
            )
        if self.credentials is None:
            raise _HopFailed(local_result("4.3.5", f"no credentials provider for {ref}"))
        try:
            creds = self.credentials(ref)
        except Exception:
            log.error("credentials %s could not be resolved", ref, exc_info=True)
            raise _HopFailed(local_result("4.3.5", f"credentials {ref} unavailable")) from None

        def b64(value: bytes) -> str:
            return base64.b64encode(value).decode("ascii")

        user, password = creds.username.encode("utf-8"), creds.password.encode("utf-8")
        session.where = "authenticating"
        conn.bound(clock.phase(self.timeouts.auth))
        if mechanism == "PLAIN":
            token = b64(b"\0" + user + b"\0" + password)
            code, raw = conn.docmd("AUTH", f"PLAIN {token}")
            if code == 334:  # server ignored the initial response
                code, raw = conn.docmd(token)
        else:
            code, raw = conn.docmd("AUTH", "LOGIN")
            if code == 334:
                code, raw = conn.docmd(b64(user))
            if code == 334:
                code, raw = conn.docmd(b64(password))
        if code == 235:
            return
        res = classify(code, _text(raw), hop.host)
        raise _HopFailed(  # smtp_sasl_auth_soft_bounce: defer, someone must fix the secret
            Result(
                res.code,
                "4" + res.status[1:],
                f"SASL authentication failed; server {hop.name} said: {code} {res.text}",
                hop.host,
            )
        )

    def _release(self, session: _Session) -> None:
        if self.pool is not None:
            self.pool._checkin(session)
        else:
            session.quit(self.timeouts.quit)

    # ------------------------------------------------------------------ transaction

    def _transaction(
        self, session: _Session, msg: _Message, rcpts: list[Rcpt], clock: _Deadline
    ) -> _Tx:
        hop, conn, t = session.hop, session.conn, self.timeouts
        feats = session.features
        results: dict[str, Result] = {}

        def all_get(res: Result, who: Iterable[Rcpt]) -> None:
            for r in who:
                results[r.rid] = res

        limit = session.size_limit
        if limit is not None and msg.size is not None and msg.size > limit:
            all_get(
                local_result(
                    "5.3.4",
                    f"message size {msg.size} exceeds size limit {limit} of server {hop.name}",
                    hop.host,
                ),
                rcpts,
            )
            self._release(session)
            return _Tx(results, False, False)
        if msg.smtputf8 and "smtputf8" not in feats:
            all_get(
                local_result(
                    "5.6.7",
                    f"SMTPUTF8 is required, but was not offered by host {hop.name}",
                    hop.host,
                ),
                rcpts,
            )
            self._release(session)
            return _Tx(results, False, False)

        dsn = "dsn" in feats
        params: list[str] = []
        if msg.size is not None and "size" in feats:
            params.append(f"SIZE={msg.size}")
        if "8bitmime" in feats and msg.eight_bit():
            params.append("BODY=8BITMIME")
        if msg.smtputf8:
            params.append("SMTPUTF8")
        if dsn and msg.ret is not None:
            params.append(f"RET={msg.ret.value}")
        if dsn and msg.envid:
            params.append(f"ENVID={xtext(msg.envid)}")

        if msg.late is not None and msg.late():
            all_get(local_result("4.7.0", "sending slot missed before MAIL FROM", hop.host), rcpts)
            # closed, not pooled: the caller gives the site's connection slot back with
            # the group, and an idle pooled session would be a connection the limiter
            # no longer counts (Postfix's anvil does)
            session.quit(self.timeouts.quit)
            return _Tx(results, False, False, missed_slot=True)
        try:
            session.where = "sending MAIL FROM"
            conn.bound(clock.phase(t.mail))
            code, raw = conn.docmd(" ".join([f"MAIL FROM:{msg.sender}", *params]))
        except _PeerError as exc:
            session.close()
            all_get(session.failure(exc), rcpts)
            return _Tx(results, False, dsn)
        if code // 100 != 2:
            all_get(classify(code, _text(raw), hop.host), rcpts)
            self._after_failure(session, code)
            return _Tx(results, False, dsn)

        accepted: list[Rcpt] = []
        for i, r in enumerate(rcpts):
            rparams = [f"RCPT TO:{msg.paths[r.rid]}"]
            if dsn:
                notify = _notify_param(r.notify)
                if notify:
                    rparams.append(notify)
                if r.orcpt:
                    rparams.append(_orcpt_param(r.orcpt))
            try:
                session.where = "sending RCPT TO"
                conn.bound(clock.phase(t.rcpt))
                code, raw = conn.docmd(" ".join(rparams))
            except _PeerError as exc:
                session.close()
                all_get(session.failure(exc), [*accepted, *rcpts[i:]])
                return _Tx(results, False, dsn)
            res = classify(code, _text(raw), hop.host)
            log.debug("RCPT %s at %s: %s %s", r.address, hop.name, code, res.status)
            if code // 100 == 2:
                accepted.append(r)
            else:
                results[r.rid] = res
            if code == 421:  # the server is closing the session
                session.close()
                all_get(res, [*accepted, *rcpts[i + 1 :]])
                return _Tx(results, False, dsn)
        if not accepted:
            self._release(session)  # RSET happens when the session is reused
            return _Tx(results, False, dsn)

        try:
            session.where = "sending the DATA command"
            conn.bound(clock.phase(t.data_init))
            code, raw = conn.docmd("DATA")
        except _PeerError as exc:
            session.close()
            all_get(session.failure(exc), accepted)
            return _Tx(results, False, dsn)
        if code != 354:
            res = classify(code, _text(raw), hop.host)
            if res.success:  # a 2yz to DATA is out of protocol
                res = local_result(
                    "4.5.0", f"unexpected DATA reply {code} from {hop.name}", hop.host, code
                )
            all_get(res, accepted)
            self._after_failure(session, code)
            return _Tx(results, False, dsn)

        try:
            session.where = "sending message body"
            self._send_body(conn, msg, clock)
            session.where = "sending end of data -- message may be sent more than once"
            conn.bound(clock.phase(t.data_done))
            code, raw = conn.getreply()
        except _ContentError as exc:
            session.close()  # no final dot: the server discards the partial message
            all_get(local_result("4.3.0", f"cannot read message content: {exc}"), accepted)
            return _Tx(results, True, dsn)
        except _PeerError as exc:
            session.close()
            all_get(session.failure(exc), accepted)
            return _Tx(results, True, dsn)
        res = classify(code, _text(raw), hop.host)
        all_get(res, accepted)
        log.info(
            "%s: %d recipient(s) %d %s, tls=%s",
            hop.name,
            len(accepted),
            code,
            res.status,
            session.tls,
        )
        log.debug("%s: end of data reply: %s", hop.name, res.text)
        if res.success or code // 100 in (4, 5):
            self._after_failure(session, code)
        else:
            session.close()
        return _Tx(results, True, dsn)

    def _after_failure(self, session: _Session, code: int) -> None:
        """Keep a session that merely refused something; drop one that is closing."""
        if code == 421 or code < 0:
            session.close()
        else:
            self._release(session)

    def _send_body(self, conn: _Connection, msg: _Message, clock: _Deadline) -> None:
        stuffer = DotStuffer()
        while True:
            if clock.left() <= 0:
                raise _PeerError("timeout")
            try:
                chunk = msg.content.read(_CHUNK)
            except Exception as exc:
                raise _ContentError(type(exc).__name__) from exc
            if not isinstance(chunk, bytes | bytearray | memoryview):
                raise _ContentError("content is not a binary stream")
            if not chunk:
                break
            out = stuffer.feed(bytes(chunk))
            if out:
                conn.bound(clock.phase(self.timeouts.data_block))
                conn.send(out)
        conn.bound(clock.phase(self.timeouts.data_block))
        conn.send(stuffer.finish())


def _tls_reason(exc: BaseException) -> str:
    if isinstance(exc, _PeerError):
        return exc.detail or exc.kind
    if isinstance(exc, ssl.SSLError) and exc.reason:
        return str(exc.reason)
    if isinstance(exc, TimeoutError):
        return "timed out"
    return str(exc) or type(exc).__name__
