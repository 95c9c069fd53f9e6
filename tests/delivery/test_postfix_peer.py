"""Delivery to Postfix from Debian, a strict real MTA, through the real delivery handler.

Our own aiosmtpd peers only know what we told them SMTP is. Postfix (3.7, Debian's
package; `make test` installs it) is run as a private instance on 127.0.0.1 with its
strict settings on: RFC 821 envelopes, HELO required and checked, bare LF refused
(`smtpd_forbid_bare_newline`), unlisted recipients refused with 550 5.1.1. What Postfix's
own delivery agent files in its Maildirs is what these tests read.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator

import pytest
from mailqueue.core.model import Envelope, Recipient

from tests.delivery.test_dkim_delivery import CASES, dkim_rig, keyring  # noqa: F401 (fixture)
from tests.support import factories as f
from tests.support.dkim_keys import Keyring, dnsfunc_for, verify_all
from tests.support.dns_peer import dns_server
from tests.support.postfix_peer import REQUIRE_ENV, PostfixPeer, available, postfix_peer
from tests.support.rigs import RigFactory, relay_to
from tests.support.smtp_peers import pki

_why = available()
if _why is not None and os.environ.get(REQUIRE_ENV) == "1":
    raise RuntimeError(f"{REQUIRE_ENV}=1 but {_why}")
pytestmark = pytest.mark.skipif(_why is not None, reason=_why or "")


@pytest.fixture()
def postfix() -> Iterator[PostfixPeer]:
    with postfix_peer(mailboxes=("bob", *(f"user{i}" for i in range(50)))) as p:
        yield p


def verified_relay(peer: PostfixPeer) -> dict[str, object]:
    """STARTTLS required and the certificate checked against the tests' CA."""
    return relay_to(peer.port, tls="required-verify", ca_file=str(pki().ca_file))


def stored_message(filed: bytes) -> bytes:
    """The message as sent: what Postfix filed without the trace fields it put on top
    (Return-Path, X-Original-To, Delivered-To and its Received: with continuation lines)."""
    lines = filed.split(b"\n")
    i = 0
    added = (b"Return-Path:", b"X-Original-To:", b"Delivered-To:", b"Received:")
    while i < len(lines) and lines[i].startswith(added):
        i += 1
        while i < len(lines) and lines[i][:1] in (b" ", b"\t"):
            i += 1
    return b"\n".join(lines[i:])


def test_verified_starttls_and_the_message_arrives_byte_for_byte(
    rig: RigFactory, postfix: PostfixPeer
) -> None:
    r = rig(routes=verified_relay(postfix))
    content = f.content(6000, subject="through postfix")
    q = r.aws.storage().enqueue(f.envelope("bob@example.net"), content)
    assert r.poll().failed == 0
    postfix.wait_delivered({"bob": 1})
    [filed] = postfix.delivered("bob")
    head = filed.split(b"\n\n", 1)[0].decode()
    assert "Return-Path: <alice@example.org>" in head
    received = re.search(r"Received: from ([^\n]|\n[ \t])*", head)
    assert received is not None
    assert "with ESMTPS" in received.group(0) and "TLSv1.3" in received.group(0)
    assert "from mq.test (localhost [127.0.0.1])" in received.group(0)  # our EHLO name
    # Maildir stores LF line ends; otherwise the message is exactly what we queued
    assert stored_message(filed) == content.replace(b"\r\n", b"\n")
    assert not r.aws.storage().content_exists(q.mail_id)  # delivered, then cleaned up
    assert "status=sent" in postfix.log


def test_unknown_user_gets_postfixs_550_5_1_1_and_only_that_recipient_bounces(
    rig: RigFactory, postfix: PostfixPeer
) -> None:
    r = rig(routes=verified_relay(postfix))
    q = r.aws.storage().enqueue(f.envelope("bob@example.net", "nobody@example.net"), f.content())
    assert r.poll().failed == 0
    postfix.wait_delivered({"bob": 1})
    assert r.states(q.mail_id) == {"bob@example.net": "delivered", "nobody@example.net": "bounced"}
    [g] = r.aws.storage().get_mail(q.mail_id)[1]
    nobody = next(x for x in g.recipients if x.address == "nobody@example.net")
    assert nobody.last_result is not None
    assert (nobody.last_result.code, nobody.last_result.status) == (550, "5.1.1")
    assert "User unknown in virtual mailbox table" in nobody.last_result.text
    [handoff] = r.bounce_messages()  # the DSN path got the group
    assert handoff["mail_id"] == q.mail_id


def test_fifty_recipients_go_in_one_transaction(rig: RigFactory, postfix: PostfixPeer) -> None:
    r = rig(routes=verified_relay(postfix))
    rcpts = [f"user{i}@example.net" for i in range(50)]
    q = r.aws.storage().enqueue(f.envelope(*rcpts), f.content(2000))
    assert r.poll().failed == 0
    postfix.wait_delivered({f"user{i}": 1 for i in range(50)})
    assert not r.aws.storage().content_exists(q.mail_id)  # all 50 delivered: cleaned up
    log = postfix.log
    # smtpd's per-session summary; the fixture's readiness probe is a session without mail
    sessions = [s for s in re.findall(r"disconnect from \S+ (.*)", log) if "mail=" in s]
    assert len(sessions) == 1 and "mail=1 rcpt=50 data=1" in sessions[0], sessions
    assert "nrcpt=50 " in log  # one queue file, 50 recipients: one MAIL FROM ... DATA


@pytest.mark.parametrize("case", sorted(CASES))
def test_strict_peer_takes_every_content_shape_and_dkim_still_verifies(
    case: str,
    rig: RigFactory,
    postfix: PostfixPeer,
    keyring: Keyring,  # noqa: F811 (the fixture imported above)
) -> None:
    """Bare LF, bare CR, no final newline, leading dots, 8-bit UTF-8: our client turns
    each into what a strict Postfix accepts, and the DKIM signatures made at delivery
    verify on what Postfix filed (its trace fields on top are not signed)."""
    content, utf8 = CASES[case]
    r = dkim_rig(rig, keyring, postfix, routes=verified_relay(postfix))
    env = Envelope(
        sender="alice@example.org",
        recipients=(Recipient(rid="", address="bob@example.net"),),
        smtputf8=utf8,
    )
    r.aws.storage().enqueue(env, content)
    assert r.poll().failed == 0
    postfix.wait_delivered({"bob": 1})
    [filed] = postfix.delivered("bob")
    assert "bare <LF>" not in postfix.log
    as_wire = filed.replace(b"\n", b"\r\n")
    with dns_server(keyring.zone()) as dns:
        assert verify_all(as_wire, dnsfunc_for(dns)) == [True, True]
