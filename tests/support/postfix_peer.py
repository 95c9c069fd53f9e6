"""Postfix from Debian as a strict SMTP peer on 127.0.0.1 (`make test` installs the package).

A private Postfix instance: its own main.cf/master.cf, queue, mailboxes and log in a
temporary directory, one smtpd on a free loopback port, STARTTLS with the tests' PKI, and
Postfix's strict settings switched on (RFC 821 envelopes, HELO checks, bare-LF refusal,
unlisted recipients refused with 550 5.1.1). Accepted mail is delivered by Postfix's own
`virtual` agent into Maildirs, so a test reads what a real MTA stored, Received: line
included. Started and stopped by the master's PID; nothing listens beyond loopback.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.support.smtp_peers import pki

POSTFIX = Path("/usr/sbin/postfix")
REQUIRE_ENV = "MAILQUEUE_REQUIRE_POSTFIX"

MASTER_CF = """\
127.0.0.1:{port} inet n - n - - smtpd
pickup    unix  n - n 60 1 pickup
cleanup   unix  n - n -  0 cleanup
qmgr      unix  n - n 300 1 qmgr
tlsmgr    unix  - - n 1000? 1 tlsmgr
rewrite   unix  - - n -  - trivial-rewrite
bounce    unix  - - n -  0 bounce
defer     unix  - - n -  0 bounce
trace     unix  - - n -  0 bounce
verify    unix  - - n -  1 verify
flush     unix  n - n 1000? 0 flush
proxymap  unix  - - n -  - proxymap
smtp      unix  - - n -  - smtp
relay     unix  - - n -  - smtp
showq     unix  n - n -  - showq
error     unix  - - n -  - error
retry     unix  - - n -  - error
discard   unix  - - n -  - discard
local     unix  - n n -  - local
virtual   unix  - n n -  - virtual
anvil     unix  - - n -  1 anvil
scache    unix  - - n -  1 scache
postlog   unix-dgram n - n - 1 postlogd
"""


def available() -> str | None:
    """None when a private Postfix can run here, else why not."""
    if not POSTFIX.exists():
        return "Postfix is not installed (make test installs Debian's postfix package)"
    if os.geteuid() != 0:
        return "a private Postfix instance needs root (its daemons drop to the postfix user)"
    try:
        pwd.getpwnam("postfix")
    except KeyError:
        return "no postfix user"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class PostfixPeer:
    """One running instance. `mailboxes` maps a local part of `domain` to its Maildir."""

    base: Path
    port: int
    domain: str
    mailboxes: tuple[str, ...]

    @property
    def config(self) -> Path:
        return self.base / "etc"

    @property
    def log(self) -> str:
        path = self.base / "maillog"
        return path.read_text(errors="replace") if path.exists() else ""

    def delivered(self, local_part: str) -> list[bytes]:
        new = self.base / "vmail" / local_part / "new"
        if not new.is_dir():
            return []
        return [p.read_bytes() for p in sorted(new.iterdir())]

    def wait_delivered(self, counts: dict[str, int], timeout: float = 30.0) -> None:
        """Until Postfix's virtual agent has filed `counts[local_part]` messages each."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(len(self.delivered(lp)) >= n for lp, n in counts.items()):
                return
            time.sleep(0.1)
        got = {lp: len(self.delivered(lp)) for lp in counts}
        raise AssertionError(f"Postfix filed {got}, expected {counts}; log:\n{self.log[-3000:]}")

    def master_pid(self) -> int | None:
        pid_file = self.base / "queue" / "pid" / "master.pid"
        try:
            return int(pid_file.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None


def _main_cf(
    base: Path,
    port: int,
    domain: str,
    mailboxes: tuple[str, ...],
    extra: Mapping[str, str] | None = None,
) -> str:
    uid = pwd.getpwnam("postfix").pw_uid
    gid = pwd.getpwnam("postfix").pw_gid
    pk = pki()
    boxes = ", ".join(f"{lp}@{domain}={lp}/" for lp in mailboxes)
    return f"""\
compatibility_level = 3.6
queue_directory = {base}/queue
data_directory = {base}/data
mail_owner = postfix
setgid_group = postdrop
syslog_name = postfix-mqtest-{port}
maillog_file_prefixes = {base}
maillog_file = {base}/maillog
myhostname = mx.postfix.test
mydomain = postfix.test
myorigin = $myhostname
mydestination =
inet_interfaces = 127.0.0.1
inet_protocols = ipv4
mynetworks = 127.0.0.0/8
relay_domains =
local_recipient_maps =
local_header_rewrite_clients =
virtual_mailbox_domains = {domain}
virtual_mailbox_base = {base}/vmail
virtual_mailbox_maps = inline:{{ {boxes} }}
virtual_minimum_uid = 1
virtual_uid_maps = static:{uid}
virtual_gid_maps = static:{gid}
smtputf8_enable = yes
strict_rfc821_envelopes = yes
smtpd_helo_required = yes
smtpd_forbid_bare_newline = yes
smtpd_reject_unlisted_recipient = yes
smtpd_helo_restrictions = reject_invalid_helo_hostname
smtpd_sender_restrictions = reject_non_fqdn_sender
smtpd_recipient_restrictions = reject_non_fqdn_recipient, reject_unauth_destination
smtpd_tls_security_level = may
smtpd_tls_cert_file = {base}/tls/cert.pem
smtpd_tls_key_file = {base}/tls/key.pem
smtpd_tls_CAfile = {pk.ca_file}
smtpd_tls_received_header = yes
smtpd_tls_loglevel = 1
smtp_tls_security_level = none
biff = no
""" + "".join(f"{k} = {v}\n" for k, v in (extra or {}).items())


@contextmanager
def postfix_peer(
    domain: str = "example.net",
    mailboxes: tuple[str, ...] = ("bob",),
    settings: Mapping[str, str] | None = None,
) -> Iterator[PostfixPeer]:
    """A private Postfix accepting mail for `mailboxes` at `domain` on a loopback port;
    `settings`: more main.cf parameters (e.g. anvil's client limits)."""
    why = available()
    if why is not None:
        raise RuntimeError(why)
    base = Path(tempfile.mkdtemp(prefix="mq-postfix-"))
    base.chmod(0o755)  # the postfix user must traverse to its queue and the Maildirs
    port = _free_port()
    peer = PostfixPeer(base, port, domain, mailboxes)
    try:
        (base / "etc").mkdir()
        (base / "tls").mkdir()
        pk = pki()
        shutil.copyfile(pk.cert_file, base / "tls" / "cert.pem")
        shutil.copyfile(pk.key_file, base / "tls" / "key.pem")
        (base / "tls" / "key.pem").chmod(0o600)
        for d in ("queue", "data", "vmail"):
            (base / d).mkdir()
        postfix_uid = pwd.getpwnam("postfix").pw_uid
        postfix_gid = pwd.getpwnam("postfix").pw_gid
        for d in ("data", "vmail"):
            os.chown(base / d, postfix_uid, postfix_gid)
        (base / "etc" / "main.cf").write_text(_main_cf(base, port, domain, mailboxes, settings))
        start(base, port, peer)
        yield peer
    finally:
        _stop(peer)
        shutil.rmtree(base, ignore_errors=True)


def start(base: Path, port: int, peer: PostfixPeer) -> None:
    """Start the private instance whose main.cf is written under `base`/etc: its
    master.cf listens on `port`; returns once it does."""
    (base / "etc" / "master.cf").write_text(MASTER_CF.format(port=port))
    env = {**os.environ, "MAIL_CONFIG": str(base / "etc")}
    run = subprocess.run(
        [str(POSTFIX), "-c", str(base / "etc"), "start"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if run.returncode != 0:
        raise RuntimeError(f"postfix start failed: {run.stdout}{run.stderr}\n{peer.log}")
    _wait_listening(port, peer)


def _wait_listening(port: int, peer: PostfixPeer, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                if s.recv(512).startswith(b"220"):
                    return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"Postfix did not greet on 127.0.0.1:{port}; log:\n{peer.log[-3000:]}")


def _stop(peer: PostfixPeer) -> None:
    """`postfix stop`, then the master by its PID if it is still there."""
    pid = peer.master_pid()
    if pid is None:
        return
    subprocess.run(
        [str(POSTFIX), "-c", str(peer.config), "stop"],
        env={**os.environ, "MAIL_CONFIG": str(peer.config)},
        capture_output=True,
        timeout=30,
        check=False,
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)
