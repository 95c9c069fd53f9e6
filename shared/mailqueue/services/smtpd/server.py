"""`mailqueue smtpd`: an ESMTP front door on aiosmtpd that feeds the ingress service.

Each listener speaks for one kind of client:

- ``submission`` (587): STARTTLS first, then AUTH PLAIN or LOGIN against the credentials
  store; the user's principal is the API's caller, so the sender policy, priority and
  tags of that principal apply unchanged;
- ``submissions`` (465, optional): the same over implicit TLS;
- ``receive`` (25, optional): no AUTH; STARTTLS offered, never required (opportunistic,
  as MX hosts do: RFC 3207 §4 says a publicly referenced server must not require it), with
  the submission listeners' TLS context; only recipients in the receiving domains, as SES
  receipt takes them, and on the bounce domains (the return path policy's): those are
  receivers' reports (late bounces, complaints), handed to the feedback service as SES
  receipt hands them (`SmtpDoor.submit`), never queued. A transaction is one
  kind or the other: the first RCPT decides, the other kind gets 452 4.5.3 and the
  client sends it in a transaction of its own (RFC 3463's X.5.3: the remaining
  recipients on a subsequent attempt), so nothing is lost, no report is queued as mail,
  and the 250 after DATA speaks for one durable outcome only.

Every decision is the ingress service's SMTP door (`services/ingress/doors/smtp.py`:
`check_sender`, `check_recipient`, `submit`), which hands the mail to the pipeline every
door shares: one validation, one sender policy, one suppression check, one event
vocabulary. 250 after DATA means what the API's 202 means:
content, state and trigger are durable (for a report: its events and suppression
entries are written). The service's calls block (AWS requests): they run on a thread
pool, never on the event loop.

One piece (~900 lines): almost all of it is `FrontDoor`, one aiosmtpd session whose
command handlers share its transaction and limits, and the small server that runs it;
what stands apart (DATA reading, replies, credentials, settings) is in modules beside it.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import functools
import hashlib
import logging
import re
import ssl
import threading
import time
from base64 import b64decode
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from aiosmtpd.smtp import SMTP, AuthResult, LoginPassword, TLSSetupException
from aiosmtpd.smtp import Envelope as AioEnvelope
from aiosmtpd.smtp import Session as AioSession

from mailqueue.core.dsn import xtext_decode
from mailqueue.core.errors import InvalidInput
from mailqueue.core.model import Envelope, Notify, Recipient, Ret
from mailqueue.core.validate import check_text
from mailqueue.services.ingress.doors.smtp import SmtpSubmission
from mailqueue.services.ingress.service import IngressService
from mailqueue.services.smtpd.credentials import CredentialStore, authenticate
from mailqueue.services.smtpd.data import DataReader
from mailqueue.services.smtpd.replies import STORAGE_DOWN, reply_for
from mailqueue.services.smtpd.settings import SmtpdSettings

log = logging.getLogger(__name__)
T = TypeVar("T")

# Postfix's line_length_limit: longer command lines are refused (500 5.5.2)
MAX_COMMAND = 2048
_ENHANCED = re.compile(r"^\d{3}[ -]\d\.\d{1,3}\.\d{1,3}( |$)")
# the enhanced code given to aiosmtpd's own replies that have none
_DEFAULT_ENHANCED = {
    "221": "2.0.0",
    "235": "2.7.0",
    "250": "2.0.0",
    "421": "4.7.0",
    "451": "4.3.0",
    "454": "4.7.0",
    "500": "5.5.2",
    "501": "5.5.4",
    "502": "5.5.1",
    "503": "5.5.1",
    "504": "5.5.4",
    "530": "5.7.0",
    "535": "5.7.8",
    "538": "5.7.11",
    "552": "5.3.4",
    "554": "5.5.0",
    "555": "5.5.4",
}
_NO_ENHANCED = ("220", "334", "354")  # greeting, AUTH challenges, DATA go-ahead
_MAIL_PARAMS = frozenset({"SIZE", "BODY", "SMTPUTF8", "RET", "ENVID", "AUTH"})
_RCPT_PARAMS = frozenset({"NOTIFY", "ORCPT"})
_XTEXT = re.compile(r"^(?:[\x21-\x2a\x2c-\x3c\x3e-\x7e]|\+[0-9A-F]{2})*$")


class Refused(Exception):
    """A command's parameters are refused: the reply to give."""

    def __init__(self, reply: str) -> None:
        super().__init__(reply)
        self.reply = reply


@dataclass
class Gate:
    """What the listeners of one server share: connections per client address, the stress
    mode, and AUTH failures per client address. Touched only from the event loop's thread.

    Stress mode is Postfix's (STRESS_README, "Automatic stress-adaptive behavior"; its
    default ``smtpd_timeout = ${stress?{10}:{300}}s``): once the sessions reach
    `stress_threshold` of `max_connections`, every session's timeout is `stress_timeout`
    (10 s) instead of `idle_timeout` (300 s), the sessions open at that moment included,
    so idle clients give their slots back in seconds and new clients get in. It ends when
    the sessions fall below the threshold again."""

    settings: SmtpdSettings
    clock: Callable[[], float] = time.monotonic
    active: collections.Counter[str] = field(default_factory=collections.Counter)
    failures: dict[str, collections.deque[float]] = field(default_factory=dict)
    counters: collections.Counter[str] = field(default_factory=collections.Counter)
    sessions: set[FrontDoor] = field(default_factory=set)
    stressed: bool = False

    @property
    def total(self) -> int:
        return sum(self.active.values())

    @property
    def timeout(self) -> float:
        s = self.settings
        return min(s.stress_timeout, s.idle_timeout) if self.stressed else s.idle_timeout

    def enter(self, ip: str, session: FrontDoor) -> bool:
        s = self.settings
        if self.total >= s.max_connections or self.active[ip] >= s.max_connections_per_ip:
            self.counters["connection_refused"] += 1
            return False
        self.active[ip] += 1
        self.sessions.add(session)
        if not self.stressed and self.total >= s.stress_threshold * s.max_connections:
            self.stressed = True
            self.counters["stress"] += 1
            log.warning("stress mode on", extra={"sessions": self.total, "timeout": self.timeout})
            for other in self.sessions:
                other.shorten_timeout()
        return True

    def leave(self, ip: str, session: FrontDoor) -> None:
        self.active[ip] -= 1
        if self.active[ip] <= 0:
            del self.active[ip]
        self.sessions.discard(session)
        s = self.settings
        if self.stressed and self.total < s.stress_threshold * s.max_connections:
            self.stressed = False
            log.info("stress mode off", extra={"sessions": self.total})

    def _recent(self, ip: str) -> collections.deque[float]:
        q = self.failures.setdefault(ip, collections.deque())
        horizon = self.clock() - self.settings.auth_failure_window
        while q and q[0] < horizon:
            q.popleft()
        if not q:
            self.failures.pop(ip, None)
        return q

    def auth_blocked(self, ip: str) -> bool:
        return len(self._recent(ip)) >= self.settings.max_auth_failures_per_ip

    def auth_failed(self, ip: str) -> None:
        self._recent(ip)
        self.failures.setdefault(ip, collections.deque()).append(self.clock())
        self.counters["auth_failed"] += 1


@dataclass
class Door:
    """One server's collaborators, shared by its sessions."""

    settings: SmtpdSettings
    service: IngressService
    credentials: CredentialStore | None
    hostname: str
    max_size: int
    executor: concurrent.futures.Executor
    gate: Gate

    async def call(self, fn: Callable[..., T], *args: Any, **kw: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.executor, functools.partial(fn, *args, **kw))


@dataclass
class Transaction:
    sender: str
    smtputf8: bool = False
    ret: Ret | None = None
    envid: str | None = None
    recipients: list[Recipient] = field(default_factory=list)
    reports: bool = False  # the recipients are on a bounce domain (receiving listener)


def _split_path(arg: str) -> tuple[str, str] | None:
    """``<path> params`` → (mailbox, params); a source route is dropped; None: bad syntax.
    Without angle brackets the first word is taken, as Postfix does by default."""
    arg = arg.strip()
    if not arg.startswith("<"):
        word, _, rest = arg.partition(" ")
        return (word, rest) if word else None
    quoted = False
    for i, c in enumerate(arg):
        if c == '"' and (i == 0 or arg[i - 1] != "\\"):
            quoted = not quoted
        elif c == ">" and not quoted:
            path, rest = arg[1:i], arg[i + 1 :]
            if rest and not rest.startswith(" "):
                return None
            if path.startswith("@"):  # RFC 5321 §4.1.2 source route: ignored
                _, colon, path = path.partition(":")
                if not colon:
                    return None
            return path, rest.strip()
    return None


def _params(text: str, allowed: frozenset[str]) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for word in text.split():
        key, eq, value = word.partition("=")
        key = key.upper()
        if not key.isalnum() or (eq and not value):
            raise Refused("501 5.5.4 Syntax error in parameters")
        if key not in allowed:
            raise Refused(f"555 5.5.4 Unsupported parameter {key[:32]}")
        if key in out:
            raise Refused(f"501 5.5.4 Duplicate parameter {key}")
        out[key] = value if eq else None
    return out


def _xtext(value: str | None, what: str, limit: int) -> str:
    if value is None or not value.isascii() or not _XTEXT.match(value):
        raise Refused(f"501 5.5.4 Bad {what} (xtext)")
    decoded = xtext_decode(value)
    if len(decoded) > limit or not all(0x20 <= ord(c) < 0x7F for c in decoded):
        raise Refused(f"501 5.5.4 Bad {what}")
    return decoded


class _Session(AioSession):
    """aiosmtpd's session without its deprecated `login_data` property: aiosmtpd 1.4.6's
    own smtp_AUTH still assigns it after every successful AUTH, and the property logs
    "Session.login_data is deprecated" at WARNING each time. Who authenticated is
    `auth_data` (and our `FrontDoor.principal`)."""

    login_data: Any = None


class FrontDoor(SMTP):
    """One SMTP session. aiosmtpd's protocol engine (TLS, AUTH exchanges, the command
    loop); MAIL, RCPT, DATA and EHLO are ours, as are the limits."""

    # the reader's limit: the longest command line we take (DATA lines are bounded by
    # DataReader), so an overlong line is an overrun, never an unbounded buffer
    line_length_limit = MAX_COMMAND
    command_size_limit = MAX_COMMAND

    def __init__(self, door: Door, kind: str, tls_context: ssl.SSLContext | None) -> None:
        s = door.settings
        submission = kind != "receive"
        super().__init__(
            _Hooks(),
            data_size_limit=door.max_size,
            enable_SMTPUTF8=True,
            decode_data=False,
            hostname=door.hostname,
            ident="mailqueue ESMTP",
            # STARTTLS: required on submission, offered on receive (opportunistic)
            tls_context=tls_context if kind in ("submission", "receive") else None,
            require_starttls=kind == "submission",
            timeout=s.idle_timeout,
            auth_required=submission,
            auth_require_tls=submission,
            auth_exclude_mechanism=[] if submission else None,
            authenticator=self._no_authenticator,
        )
        if not submission:
            self._auth_methods.clear()  # the receiving listener offers no AUTH
        if kind == "submissions":
            # the whole session is TLS already (aiosmtpd looks for a STARTTLS layer); set
            # here, not passed, since aiosmtpd warns on every session given False
            self._auth_require_tls = False
        self.command_size_limits = collections.defaultdict(lambda: MAX_COMMAND)
        self.door = door
        self.kind = kind
        self.implicit_tls = kind == "submissions"
        self.principal: str | None = None
        self.tx: Transaction | None = None
        self.auth_failures = 0
        self._ip = ""
        self._admitted = False
        self._last_input = time.monotonic()
        self._busy = False  # in a service call: the timeout is stopped
        self._tokens = float(s.command_burst)
        self._last = time.monotonic()
        for name, method in list(self._smtp_methods.items()):
            self._smtp_methods[name] = self._rate_limited(name, method)

    # ------------------------------------------------------------------ connection
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if self.transport is None and not self._admitted:  # a new connection, not STARTTLS
            peer = transport.get_extra_info("peername")
            self._ip = str(peer[0]) if isinstance(peer, tuple) and peer else "?"
            if not self.door.gate.enter(self._ip, self):
                log.warning("connection refused: too many connections", extra={"ip": self._ip})
                assert isinstance(transport, asyncio.WriteTransport)
                try:
                    transport.write(
                        f"421 4.7.0 {self.hostname} Error: too many connections\r\n".encode()
                    )
                finally:
                    transport.close()
                return
            self._admitted = True
        super().connection_made(transport)

    def connection_lost(self, error: Exception | None) -> None:
        if not self._admitted:
            return  # refused at connect: no session was started
        self.door.gate.leave(self._ip, self)
        self._admitted = False
        super().connection_lost(error)

    def _create_session(self) -> AioSession:
        return _Session(self.loop)

    def _reset_timeout(self, duration: float | None = None) -> None:
        """Every line read restarts the timer: the idle timeout, or stress mode's."""
        self._last_input = time.monotonic()
        super()._reset_timeout(duration or self.door.gate.timeout)

    async def _service(self, fn: Callable[..., T], *args: Any, **kw: Any) -> T:
        """A call to the ingress service (or the credentials check) off the event loop.
        The timeout counts the client's silence only (as Postfix's smtpd_timeout bounds
        its waits for the client): it is stopped while we work, restarted after, so a
        slow store under stress mode's 10 s never cuts a session whose mail is being
        written (the client would retry a mail we may have stored)."""
        if self._timeout_handle is not None:
            self._timeout_handle.cancel()
        self._busy = True
        try:
            return await self.door.call(fn, *args, **kw)
        finally:
            self._busy = False
            if self.transport is not None and not self.transport.is_closing():
                self._reset_timeout()

    def shorten_timeout(self) -> None:
        """Stress mode began: this session's timer runs to `stress_timeout` after its
        last input (at once for a session idle that long already)."""
        if self._timeout_handle is None or self.transport is None or self._busy:
            return  # (a session in a service call gets the short timeout after it)
        left = self._last_input + self.door.gate.timeout - time.monotonic()
        self._timeout_handle.cancel()
        self._timeout_handle = self.loop.call_later(max(0.0, left), self._timeout_cb)

    def _timeout_cb(self) -> None:
        if isinstance(self.transport, asyncio.WriteTransport):
            try:
                self.transport.write(
                    f"421 4.4.2 {self.hostname} Error: timeout exceeded\r\n".encode()
                )
            except Exception:  # noqa: BLE001  the transport is closing; the close below runs
                log.debug("could not write the timeout reply")
        super()._timeout_cb()  # type: ignore[no-untyped-call]

    def _set_post_data_state(self) -> None:
        super()._set_post_data_state()  # type: ignore[no-untyped-call]
        self.tx = None

    @property
    def tls(self) -> bool:
        return self.implicit_tls or self._tls_protocol is not None

    async def push(self, status: Any) -> None:
        """Every reply with an enhanced status code (RFC 2034), as Postfix gives them."""
        if isinstance(status, str) and len(status) >= 4 and not _ENHANCED.match(status):
            code = status[:3]
            enhanced = _DEFAULT_ENHANCED.get(code)
            if code not in _NO_ENHANCED and enhanced and status[3] in " -":
                status = f"{code}{status[3]}{enhanced} {status[4:]}"
        await super().push(status)

    async def _close(self, reply: str) -> None:
        await self.push(reply)
        if self.transport is not None:
            self.transport.close()

    def _rate_limited(
        self, name: str, method: Callable[[str | None], Awaitable[None]]
    ) -> Callable[[str | None], Awaitable[None]]:
        s = self.door.settings

        async def limited(arg: str | None) -> None:
            now = time.monotonic()
            self._tokens = min(s.command_burst, self._tokens + (now - self._last) * s.command_rate)
            self._last = now
            if self._tokens < 1:
                self.door.gate.counters["rate_limited"] += 1
                log.warning("command rate exceeded", extra={"ip": self._ip, "command": name})
                await self._close(f"421 4.7.0 {self.hostname} Error: too many commands")
                return
            self._tokens -= 1
            await method(arg)

        return limited

    # ------------------------------------------------------------------ EHLO
    async def smtp_EHLO(self, hostname: str) -> None:
        if not hostname:
            await self.push("501 Syntax: EHLO hostname")
            return
        self._set_rset_state()  # type: ignore[no-untyped-call]
        assert self.session is not None
        self.session.extended_smtp = True
        self.session.host_name = hostname
        lines = [
            self.hostname,
            "PIPELINING",
            f"SIZE {self.door.max_size}",
            "8BITMIME",
            "SMTPUTF8",
            "ENHANCEDSTATUSCODES",
            "DSN",
        ]
        if self.tls_context is not None and not self.tls:
            lines.append("STARTTLS")
        if self._auth_methods and (self.tls or not self._auth_require_tls):
            lines.append("AUTH " + " ".join(sorted(self._auth_methods)))
        # the whole reply in one write, so one TCP segment (as Postfix sends it): a client
        # that reads one segment and parses it (sslscan's STARTTLS probe) sees every line
        last = len(lines) - 1
        await super().push(
            "\r\n".join(f"250{'-' if i < last else ' '}{x}" for i, x in enumerate(lines))
        )

    async def smtp_STARTTLS(self, arg: str) -> None:
        """A failed handshake is the client's problem: logged at INFO, the connection
        closed (aiosmtpd would log it as a session exception)."""
        try:
            await super().smtp_STARTTLS(arg)
            if self._tls_protocol is not None and (self.session is None or not self.session.ssl):
                # the client went away during the handshake: the TLS layer ended the
                # handshake without an error and without making the session its protocol
                raise TLSSetupException("connection closed during the TLS handshake")
        except TLSSetupException as e:
            self.door.gate.counters["tls_failed"] += 1
            log.info("TLS handshake failed", extra={"ip": self._ip, "cause": repr(e.__cause__)})
            for t in (self._original_transport, self.transport):
                if t is not None:
                    t.close()
            # the TLS layer never made the session its app protocol: nobody else will
            # tell us the connection is gone (the session task, the connection count)
            self.connection_lost(e)

    # ------------------------------------------------------------------ AUTH
    def _no_authenticator(self, *args: Any) -> AuthResult:
        raise AssertionError("auth_PLAIN / auth_LOGIN are overridden")

    async def smtp_AUTH(self, arg: str) -> None:
        if self._auth_methods and self.door.gate.auth_blocked(self._ip):
            self.door.gate.counters["auth_blocked"] += 1
            log.warning("AUTH refused: too many failures", extra={"ip": self._ip})
            await self.push("454 4.7.0 Temporary authentication failure, try again later")
            return
        await super().smtp_AUTH(arg)

    async def _verify(self, mechanism: str, login: bytes, password: bytes) -> AuthResult:
        """Check off the event loop; a failure is delayed, counted, logged without the
        password (and the user name only as a digest); too many close the session."""
        store = self.door.credentials
        principal = None
        if store is not None:
            principal = await self._service(authenticate, store, login, password)
        user = hashlib.sha256(login).hexdigest()[:12]
        if principal is not None:
            self.principal = principal
            log.info("authenticated", extra={"mechanism": mechanism, "user_digest": user})
            return AuthResult(success=True, auth_data=LoginPassword(login, b""))
        self.auth_failures += 1
        self.door.gate.auth_failed(self._ip)
        log.warning(
            "authentication failed",
            extra={"mechanism": mechanism, "user_digest": user, "ip": self._ip},
        )
        await asyncio.sleep(self.door.settings.auth_failure_delay)
        if self.auth_failures >= self.door.settings.max_auth_failures:
            await self._close(f"421 4.7.0 {self.hostname} Error: too many AUTH failures")
            return AuthResult(success=False, handled=True)
        return AuthResult(success=False, handled=False)

    async def auth_PLAIN(self, _: Any, args: list[str]) -> AuthResult:
        if len(args) == 1:
            blob = await self.challenge_auth("")
            if not isinstance(blob, bytes):
                return AuthResult(success=False, handled=True)
        else:
            try:
                blob = b64decode(args[1].encode(), validate=True)
            except ValueError:
                await self.push("501 5.5.2 Can't decode base64")
                return AuthResult(success=False, handled=True)
        parts = blob.split(b"\x00")
        if len(parts) != 3:
            await self.push("501 5.5.2 Can't split auth value")
            return AuthResult(success=False, handled=True)
        return await self._verify("PLAIN", parts[1], parts[2])

    async def auth_LOGIN(self, _: Any, args: list[str]) -> AuthResult:
        if len(args) == 1:
            login = await self.challenge_auth(self.AuthLoginUsernameChallenge)
            if not isinstance(login, bytes):
                return AuthResult(success=False, handled=True)
        else:
            try:
                login = b64decode(args[1].encode(), validate=True)
            except ValueError:
                await self.push("501 5.5.2 Can't decode base64")
                return AuthResult(success=False, handled=True)
        password = await self.challenge_auth(self.AuthLoginPasswordChallenge)
        if not isinstance(password, bytes):
            return AuthResult(success=False, handled=True)
        return await self._verify("LOGIN", login, password)

    # ------------------------------------------------------------------ MAIL
    async def smtp_MAIL(self, arg: str | None) -> None:
        if await self.check_helo_needed():
            return
        if await self.check_auth_needed("MAIL"):
            return
        if self.tx is not None:
            await self.push("503 5.5.1 Error: nested MAIL command")
            return
        try:
            tx = self._parse_mail(arg)
        except Refused as e:
            await self.push(e.reply)
            return
        try:
            await self._service(
                self.door.service.smtp.check_sender,
                tx.sender,
                principal=self.principal,
                smtputf8=tx.smtputf8,
            )
        except InvalidInput as e:
            await self.push(reply_for(e.code, sender=True))
            return
        except Exception:
            log.exception("MAIL check failed")
            await self.push(STORAGE_DOWN)
            return
        self.tx = tx
        await self.push("250 2.1.0 Ok")

    def _parse_mail(self, arg: str | None) -> Transaction:
        arg = self._strip_command_keyword("FROM:", arg or "")
        split = _split_path(arg) if arg is not None else None
        if split is None:
            raise Refused("501 5.5.4 Syntax: MAIL FROM:<address>")
        address, rest = split
        assert self.session is not None
        if rest and not self.session.extended_smtp:
            raise Refused("501 5.5.4 Syntax: MAIL FROM:<address> (parameters need EHLO)")
        params = _params(rest, _MAIL_PARAMS)
        size = params.get("SIZE")
        if "SIZE" in params:
            if size is None or not size.isdigit() or len(size) > 20:
                raise Refused("501 5.5.4 Bad SIZE")
            if int(size) > self.door.max_size:
                raise Refused("552 5.3.4 Message size exceeds fixed limit")
        if "BODY" in params and (params["BODY"] or "").upper() not in ("7BIT", "8BITMIME"):
            raise Refused("501 5.5.4 BODY is 7BIT or 8BITMIME")
        if "SMTPUTF8" in params and params["SMTPUTF8"] is not None:
            raise Refused("501 5.5.4 SMTPUTF8 takes no value")
        tx = Transaction(sender=self._text(address, sender=True), smtputf8="SMTPUTF8" in params)
        if "RET" in params:
            try:
                tx.ret = Ret((params["RET"] or "").upper())
            except ValueError:
                raise Refused("501 5.5.4 RET is FULL or HDRS") from None
        if "ENVID" in params:
            tx.envid = _xtext(params["ENVID"], "ENVID", 100)
        return tx

    def _text(self, address: str, *, sender: bool) -> str:
        """A path's mailbox as text: UTF-8 (no stray octets), no controls."""
        try:
            address.encode("utf-8")
            check_text(address, None)
        except (UnicodeEncodeError, InvalidInput):
            raise Refused(reply_for("invalid_address", sender=sender)) from None
        if len(address.encode("utf-8", "surrogateescape")) > 512:
            raise Refused(reply_for("address_too_long", sender=sender))
        return address

    # ------------------------------------------------------------------ RCPT
    async def smtp_RCPT(self, arg: str | None) -> None:
        if await self.check_helo_needed():
            return
        if await self.check_auth_needed("RCPT"):
            return
        tx = self.tx
        if tx is None:
            await self.push("503 5.5.1 Error: need MAIL command")
            return
        if len(tx.recipients) >= self.door.settings.max_recipients:
            await self.push("452 4.5.3 Error: too many recipients")
            return
        try:
            rcpt = self._parse_rcpt(arg)
        except Refused as e:
            await self.push(e.reply)
            return
        try:
            report = await self._service(
                self.door.service.smtp.check_recipient,
                rcpt.address,
                sender=tx.sender,
                principal=self.principal,
                smtputf8=tx.smtputf8,
                index=len(tx.recipients),
            )
        except InvalidInput as e:
            await self.push(reply_for(e.code))
            return
        except Exception:
            log.exception("RCPT check failed")
            await self.push(STORAGE_DOWN)
            return
        if tx.recipients and bool(report) != tx.reports:
            self.door.gate.counters["report_mixed"] += 1
            await self.push(reply_for("report_mixed"))
            return
        tx.reports = bool(report)
        tx.recipients.append(rcpt)
        await self.push("250 2.1.5 Ok")

    def _parse_rcpt(self, arg: str | None) -> Recipient:
        arg = self._strip_command_keyword("TO:", arg or "")
        split = _split_path(arg) if arg is not None else None
        if split is None or not split[0]:
            raise Refused("501 5.5.4 Syntax: RCPT TO:<address>")
        address, rest = split
        assert self.session is not None
        if rest and not self.session.extended_smtp:
            raise Refused("501 5.5.4 Syntax: RCPT TO:<address> (parameters need EHLO)")
        params = _params(rest, _RCPT_PARAMS)
        notify: tuple[Notify, ...] = ()
        if "NOTIFY" in params:
            words = (params["NOTIFY"] or "").upper().split(",")
            try:
                kinds = tuple(dict.fromkeys(Notify(w) for w in words))
            except ValueError:
                raise Refused("501 5.5.4 Bad NOTIFY") from None
            if Notify.NEVER in kinds and len(kinds) > 1:
                raise Refused("501 5.5.4 NOTIFY=NEVER stands alone")
            notify = kinds
        orcpt = None
        if "ORCPT" in params:
            addr_type, semi, value = (params["ORCPT"] or "").partition(";")
            if not semi or not addr_type or not addr_type.replace("-", "").isalnum():
                raise Refused("501 5.5.4 Bad ORCPT")
            if addr_type.lower() == "utf-8":
                orcpt = f"{addr_type};{value}"  # utf-8-addr-xtext, kept as given
                if not value.isascii() or not value or len(orcpt) > 500:
                    raise Refused("501 5.5.4 Bad ORCPT")
            else:
                orcpt = f"{addr_type};{_xtext(value, 'ORCPT', 500)}"
        return Recipient(
            rid="", address=self._text(address, sender=False), notify=notify, orcpt=orcpt
        )

    # ------------------------------------------------------------------ DATA
    async def smtp_DATA(self, arg: str | None) -> None:
        if await self.check_helo_needed():
            return
        if await self.check_auth_needed("DATA"):
            return
        tx = self.tx
        if tx is None or not tx.recipients:
            await self.push("503 5.5.1 Error: need RCPT command")
            return
        if arg:
            await self.push("501 5.5.4 Syntax: DATA")
            return
        await self.push("354 End data with <CR><LF>.<CR><LF>")
        reader = DataReader(self.door.max_size, self.door.settings.bare_newline)
        last_reset = time.monotonic()
        while True:
            try:
                line = await self._reader.readuntil(b"\n")
                done = reader.feed(line)
            except asyncio.LimitOverrunError as e:
                done = reader.feed(await self._reader.read(e.consumed), overrun=True)
            except asyncio.IncompleteReadError:
                # the client went away mid-DATA: nothing was stored, nothing is
                log.info("connection lost during DATA", extra={"ip": self._ip})
                self._set_post_data_state()
                if self.transport is not None:
                    self.transport.close()
                return
            if done:
                break
            if reader.problem == "bare_lf":  # reject mode: refuse and close, as Postfix
                self._set_post_data_state()
                await self._close(reply_for("bare_lf"))
                return
            now = time.monotonic()
            if now - last_reset > 1.0:  # the idle timer counts silence, not DATA's length
                self._reset_timeout()
                last_reset = now
        if reader.smuggling:
            log.info("non-standard end-of-data sequence kept as content", extra={"ip": self._ip})
        if reader.problem is not None:
            self._set_post_data_state()
            await self.push(reply_for(reader.problem))
            return
        mail = SmtpSubmission(
            envelope=Envelope(
                sender=tx.sender,
                recipients=tuple(tx.recipients),
                ret=tx.ret,
                envid=tx.envid,
                smtputf8=tx.smtputf8,
            ),
            content=reader.content(),
            principal=self.principal,
            client_ip=self._ip,
            helo=(self.session.host_name or "") if self.session else "",
            tls=self.tls,
        )
        self._set_post_data_state()
        await self.push(await self._submit(mail))

    async def _submit(self, mail: SmtpSubmission) -> str:
        """250 only when the service answered 202 (durable); a refusal its reply; any
        failure 451, so the client keeps the mail and tries again."""
        try:
            answer = await self._service(self.door.service.smtp.submit, mail)
        except Exception as e:  # noqa: BLE001  storage down or unforeseen: never a 250
            log.warning("submission not stored", extra={"cause": type(e).__name__})
            self.door.gate.counters["unavailable"] += 1
            return STORAGE_DOWN
        if answer.status == 202 and "report_id" in answer.body:
            # the same words whatever the report came to (a forged one included); what it
            # came to is counted as the ingress function's Feedback_<outcome> metrics are
            self.door.gate.counters["reports"] += 1
            for outcome, n in answer.body.get("feedback", {}).items():
                self.door.gate.counters[f"feedback_{outcome}"] += n
            return "250 2.0.0 Ok: report received"
        if answer.status == 202:
            self.door.gate.counters["accepted"] += 1
            return f"250 2.0.0 Ok: queued as {answer.body.get('mail_id', '')}"
        self.door.gate.counters["refused"] += 1
        if answer.status >= 500:
            return STORAGE_DOWN
        return reply_for(answer.error or "")

    async def smtp_BDAT(self, arg: str | None) -> None:
        """CHUNKING is not offered (aiosmtpd has no BDAT engine); RFC 3030 clients send
        BDAT only when it is."""
        await self.push("502 5.5.1 Error: command not implemented")


class _Hooks:
    """aiosmtpd wants a handler object; every decision lives in FrontDoor."""


# ---------------------------------------------------------------------- the server
@dataclass
class Listening:
    kind: str
    host: str
    port: int


class SmtpServer:
    """The listeners on one event loop in a thread of their own (`start`/`stop`), or in
    the foreground (`serve_forever`)."""

    def __init__(
        self,
        settings: SmtpdSettings,
        service: IngressService,
        credentials: CredentialStore | None,
        tls_context: ssl.SSLContext | None,
    ) -> None:
        self.settings = settings
        self.tls_context = tls_context
        self.executor = concurrent.futures.ThreadPoolExecutor(
            settings.workers, thread_name_prefix="smtpd-ingress"
        )
        self.gate = Gate(settings)
        self.door = Door(
            settings=settings,
            service=service,
            credentials=credentials,
            hostname=service.s.hostname,
            max_size=service.s.max_size,
            executor=self.executor,
            gate=self.gate,
        )
        self.listening: list[Listening] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._servers: list[asyncio.base_events.Server] = []
        self._ready = threading.Event()
        self._error: BaseException | None = None

    def port_of(self, kind: str) -> int | None:
        return next((x.port for x in self.listening if x.kind == kind), None)

    async def _open(self) -> None:
        s = self.settings
        loop = asyncio.get_running_loop()
        plan = [("submission", s.port, None), ("submissions", s.tls_port, self.tls_context)]
        plan.append(("receive", s.receive_port, None))
        for kind, port, ssl_ctx in plan:
            if port < 0:
                continue
            if kind != "receive" and self.tls_context is None:
                raise ValueError(f"{kind} needs a TLS context")

            def factory(kind: str = kind) -> FrontDoor:
                return FrontDoor(self.door, kind, self.tls_context)

            # the accept queue takes a burst of every session at once (asyncio's 100 would
            # drop SYNs past it, and the clients retry a second later)
            backlog = max(128, s.max_connections)
            server = await loop.create_server(factory, s.host, port, ssl=ssl_ctx, backlog=backlog)
            self._servers.append(server)
            bound = server.sockets[0].getsockname()
            self.listening.append(Listening(kind, str(bound[0]), int(bound[1])))
            log.info("listening", extra={"kind": kind, "host": bound[0], "port": bound[1]})

    def start(self, timeout: float = 10.0) -> SmtpServer:
        quiet_aiosmtpd_logs()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                loop.run_until_complete(self._open())
            except BaseException as e:  # noqa: BLE001  handed to start()'s caller
                self._error = e
                self._ready.set()
                loop.close()
                return
            self._ready.set()
            try:
                loop.run_forever()
            finally:
                loop.run_until_complete(self._close())
                loop.close()

        self._thread = threading.Thread(target=run, name="smtpd", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            raise TimeoutError("smtpd did not start")
        if self._error is not None:
            raise RuntimeError(f"smtpd could not start: {self._error}") from self._error
        return self

    async def _close(self) -> None:
        for server in self._servers:
            server.close()
        for server in self._servers:
            try:
                await asyncio.wait_for(server.wait_closed(), 5)
            except TimeoutError:
                log.warning("smtpd listener did not close within 5 s")
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._servers = []

    def stop(self) -> None:
        """Stop listening, end the sessions, wait for the service calls in flight."""
        loop, thread = self._loop, self._thread
        if loop is not None and thread is not None and thread.is_alive():
            loop.call_soon_threadsafe(loop.stop)
            thread.join(30)
        self.executor.shutdown(wait=True)
        self._thread = None

    def serve_forever(self, stop: threading.Event) -> None:
        """Run until `stop` is set (the CLI's SIGINT/SIGTERM)."""
        self.start()
        try:
            while not stop.wait(0.5):
                pass
        finally:
            self.stop()


def quiet_aiosmtpd_logs() -> None:
    """aiosmtpd logs every command line at INFO (addresses, and AUTH PLAIN's base64
    password): its logger is kept to warnings wherever our server runs."""
    logging.getLogger("mail.log").setLevel(logging.WARNING)


__all__ = ["AioEnvelope", "AioSession", "FrontDoor", "SmtpServer", "quiet_aiosmtpd_logs"]
