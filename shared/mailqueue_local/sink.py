"""The local next hop: an SMTP server on 127.0.0.1 that files every mail it accepts.

Each accepted SMTP transaction becomes one ``<stamp>-<n>.eml`` file (the message exactly
as received, CRLF line ends, dots un-stuffed) and a ``<stamp>-<n>.json`` sidecar with the
envelope (MAIL FROM, RCPT TOs and their parameters, the client's address and HELO name).
One file per transaction rather than per recipient: that is what the queue handed over,
so a mail to three recipients at one domain is one file listing three recipients. The
sidecar is written first and the ``.eml`` renamed into place last, so a visible ``.eml``
always has its envelope beside it.

Scripted refusals for demos and tests (`SinkRules`), by recipient domain:

* ``tempfail``: domain → N: the first N RCPTs of each address get ``451 4.3.0``, then it
  is accepted (a temporarily failing destination that recovers);
* ``reject``: domains whose recipients get ``550 5.1.1`` (a permanent failure: a DSN goes
  back to the sender).

The default rules (`SinkRules.demo()`) apply them to ``tempfail.demo`` (2 refusals) and
``nosuch.demo``; ``.demo`` is not a delegated top-level domain, so nothing real is hit.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import socket
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aiosmtpd.smtp import SMTP, Envelope, Session

log = logging.getLogger(__name__)

LOCALHOST = "127.0.0.1"


@dataclass(frozen=True)
class SinkRules:
    tempfail: Mapping[str, int] = field(default_factory=dict)
    reject: frozenset[str] = frozenset()

    @classmethod
    def demo(cls, tempfail_attempts: int = 2) -> SinkRules:
        return cls(tempfail={"tempfail.demo": tempfail_attempts}, reject=frozenset({"nosuch.demo"}))


@dataclass(frozen=True)
class SinkEvent:
    """What the sink did, for observers (the demo prints these)."""

    kind: str  # "accepted" | "refused"
    mail_from: str
    recipients: tuple[str, ...]
    reply: str
    path: Path | None = None
    at: datetime = field(default_factory=lambda: datetime.now(UTC))


class _Rules:
    """The stateful side of SinkRules: how often each address has been refused."""

    def __init__(self, rules: SinkRules) -> None:
        self.rules = rules
        self.tempfail = {d.lower(): n for d, n in rules.tempfail.items()}
        self.reject = {d.lower() for d in rules.reject}
        self.refusals: dict[str, int] = {}

    def rcpt_reply(self, address: str) -> str | None:
        domain = address.rpartition("@")[2].lower()
        if domain in self.reject:
            return "550 5.1.1 No such user here (sink rule)"
        limit = self.tempfail.get(domain)
        if limit is not None:
            key = address.lower()
            seen = self.refusals.get(key, 0)
            if seen < limit:
                self.refusals[key] = seen + 1
                return f"451 4.3.0 Try again later (sink rule: refusal {seen + 1} of {limit})"
        return None


class MailStore:
    """Files accepted transactions under one directory."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.directory.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._seq = 0

    def save(self, envelope: Envelope, session: Session) -> Path:
        content = envelope.original_content or envelope.content or b""
        if isinstance(content, str):
            content = content.encode("utf-8", "surrogateescape")
        now = datetime.now(UTC)
        with self._lock:
            self._seq += 1
            stem = f"{now:%Y%m%dT%H%M%S.%fZ}-{os.getpid()}-{self._seq:06d}"
        peer = session.peer if isinstance(session.peer, tuple) else (str(session.peer), 0)
        sidecar = {
            "mail_from": null_sender(envelope.mail_from),
            "mail_options": list(envelope.mail_options),
            "rcpt_tos": list(envelope.rcpt_tos),
            "rcpt_options": list(envelope.rcpt_options),
            "received_at": now.isoformat().replace("+00:00", "Z"),
            "client": {"address": peer[0], "port": peer[1], "helo": session.host_name},
            "smtputf8": envelope.smtp_utf8,
            "size": len(content),
            "sha256": hashlib.sha256(content).hexdigest(),
            "file": f"{stem}.eml",
        }
        _write_atomically(self.directory / f"{stem}.json", json.dumps(sidecar, indent=2).encode())
        path = self.directory / f"{stem}.eml"
        _write_atomically(path, content)
        return path


def null_sender(mail_from: str | None) -> str:
    """aiosmtpd reports MAIL FROM:<> as "<>"; the sidecar and events say ""."""
    return "" if mail_from in (None, "", "<>") else str(mail_from)


def _write_atomically(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


class _Handler:
    def __init__(self, sink: SmtpSink) -> None:
        self.sink = sink

    async def handle_RCPT(
        self,
        server: SMTP,
        session: Session,
        envelope: Envelope,
        address: str,
        rcpt_options: list[str],
    ) -> str:
        reply = self.sink.rules.rcpt_reply(address)
        if reply is not None:
            self.sink._emit(
                SinkEvent("refused", null_sender(envelope.mail_from), (address,), reply)
            )
            return reply
        envelope.rcpt_tos.append(address)
        envelope.rcpt_options.extend(rcpt_options)
        return "250 2.1.5 OK"

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        path = self.sink.store.save(envelope, session)
        reply = f"250 2.0.0 OK: filed as {path.stem}"
        self.sink.accepted += 1
        self.sink._emit(
            SinkEvent(
                "accepted", null_sender(envelope.mail_from), tuple(envelope.rcpt_tos), reply, path
            )
        )
        return reply


class SmtpSink:
    """aiosmtpd on 127.0.0.1 in its own event-loop thread; `start()` then `stop()`."""

    def __init__(
        self,
        mail_dir: Path,
        *,
        rules: SinkRules | None = None,
        host: str = LOCALHOST,
        port: int = 0,
        hostname: str = "sink.localhost",
        size_limit: int = 64 * 1024 * 1024,
        on_event: Callable[[SinkEvent], None] | None = None,
    ) -> None:
        self.store = MailStore(mail_dir)
        self.rules = _Rules(rules or SinkRules())
        self.host = host
        self.port = port
        self.hostname = hostname
        self.size_limit = size_limit
        self.on_event = on_event
        self.accepted = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="smtp-sink", daemon=True
        )
        self._server: asyncio.AbstractServer | None = None
        self._protocols: list[SMTP] = []

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def _emit(self, event: SinkEvent) -> None:
        if event.kind == "refused":
            log.debug("sink refused %s: %s", event.recipients, event.reply)
        if self.on_event is not None:
            self.on_event(event)

    def _factory(self) -> SMTP:
        proto = SMTP(
            _Handler(self),
            hostname=self.hostname,
            ident="mailqueue local sink",
            data_size_limit=self.size_limit,
            enable_SMTPUTF8=True,
            decode_data=False,
            timeout=60,
            loop=self._loop,
        )
        self._protocols = [p for p in self._protocols if p.transport is not None]
        self._protocols.append(proto)
        return proto

    def start(self) -> SmtpSink:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.host, self.port))
        except OSError:
            sock.close()
            raise
        self.port = sock.getsockname()[1]
        self._thread.start()

        async def serve() -> asyncio.AbstractServer:
            return await self._loop.create_server(self._factory, sock=sock)

        self._server = asyncio.run_coroutine_threadsafe(serve(), self._loop).result(10)
        return self

    def stop(self) -> None:
        """Close the listener and every connection, then end the loop thread."""

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

    def __enter__(self) -> SmtpSink:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
