"""A private Postfix as an SMTP *client* of `mailqueue smtpd`: mail given to it on a
loopback port is relayed to ``relayhost`` with ``smtp_tls_security_level = encrypt`` and
SASL (the way a site's Postfix would use the queue as its smarthost). Same lifecycle as
tests.support.postfix_peer: its own config, queue and log in a temporary directory,
stopped by the master's PID."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.support.postfix_peer import (
    PostfixPeer,
    _free_port,
    _stop,
    available,
    start,
)

__all__ = ["available", "postfix_relay"]


def _main_cf(base: Path, relay: str, cafile: str, user: str, password: str) -> str:
    return f"""\
compatibility_level = 3.6
queue_directory = {base}/queue
data_directory = {base}/data
mail_owner = postfix
setgid_group = postdrop
syslog_name = postfix-mqclient
maillog_file_prefixes = {base}
maillog_file = {base}/maillog
myhostname = client.postfix.test
mydomain = postfix.test
mydestination =
inet_interfaces = 127.0.0.1
inet_protocols = ipv4
mynetworks = 127.0.0.0/8
local_header_rewrite_clients =
smtputf8_enable = yes
relayhost = {relay}
smtp_tls_security_level = encrypt
smtp_tls_CAfile = {cafile}
smtp_tls_loglevel = 1
smtp_sasl_auth_enable = yes
smtp_sasl_password_maps = inline:{{ {relay}={user}:{password} }}
smtp_sasl_security_options = noanonymous
smtp_sasl_tls_security_options = noanonymous
biff = no
"""


@contextmanager
def postfix_relay(relay: str, cafile: str, user: str, password: str) -> Iterator[PostfixPeer]:
    """A Postfix taking mail on a loopback port and relaying all of it to `relay`."""
    why = available()
    if why is not None:
        raise RuntimeError(why)
    base = Path(tempfile.mkdtemp(prefix="mq-postfix-client-"))
    base.chmod(0o755)
    port = _free_port()
    peer = PostfixPeer(base, port, "postfix.test", ())
    try:
        for d in ("etc", "queue", "data"):
            (base / d).mkdir()
        shutil.copyfile(cafile, base / "ca.pem")
        os.chown(base / "data", *_postfix_ids())
        (base / "etc" / "main.cf").write_text(
            _main_cf(base, relay, str(base / "ca.pem"), user, password)
        )
        start(base, port, peer)
        yield peer
    finally:
        _stop(peer)
        shutil.rmtree(base, ignore_errors=True)


def _postfix_ids() -> tuple[int, int]:
    import pwd

    p = pwd.getpwnam("postfix")
    return p.pw_uid, p.pw_gid
