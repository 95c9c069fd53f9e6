"""Accepted ⇒ deliverable, end to end: the real ingress handler on moto, the real delivery
function, an aiosmtpd peer on 127.0.0.1 that records the exact command arguments.

Issue 14, findings 3 and 4: quoted local parts with ``<``/``>`` were accepted by the
ingress and refused by the SMTP client; duplicate recipients gave duplicate RCPT TO.
"""

from __future__ import annotations

from typing import Any

from tests.ingress.conftest import deliver_all, make_ingress
from tests.support import events as ev
from tests.support.aws import AwsEnv
from tests.support.rigs import RigFactory, relay_to
from tests.support.smtp_peers import SmtpPeer, smtp_sink


def _submit(r: Any, **fields: Any) -> dict[str, Any]:
    ingress = make_ingress(r.aws)
    status, body, _ = ingress.http(ev.http_send(key=None, **fields))
    assert status == 202, body
    return body


def _finished_without_bounce(r: Any, mail_id: str) -> None:
    """Every recipient delivered: the mail was cleaned up, and nothing bounced."""
    assert not r.aws.storage().content_exists(mail_id)
    assert r.bounce_messages() == []


def _args(peer: SmtpPeer, verb: str) -> list[str]:
    return [arg for _, v, arg in peer.commands if v == verb]


def test_a_quoted_recipient_with_angle_brackets_is_delivered_byte_exactly(
    rig: RigFactory,
) -> None:
    rcpt = '"a<b>c"@example.net'
    with smtp_sink() as peer:
        r = rig(routes=relay_to(peer.port))
        body = _submit(r, recipients=[rcpt, "plain@example.net"])
        assert r.poll().failed == 0
        assert [m.rcpt_tos for m in peer.messages] == [[rcpt, "plain@example.net"]]
        rcpt_args = _args(peer, "RCPT")
    assert rcpt_args[0].startswith(f"TO:<{rcpt}>")
    _finished_without_bounce(r, body["mail_id"])


def test_a_quoted_sender_with_angle_brackets_is_delivered(rig: RigFactory) -> None:
    sender = '"ops>team<"@shop.example.org'
    with smtp_sink() as peer:
        r = rig(routes=relay_to(peer.port))
        body = _submit(r, sender=sender, recipients=["x@example.net"])
        assert r.poll().failed == 0
        assert [m.mail_from for m in peer.messages] == [sender]
        mail_args = _args(peer, "MAIL")
    assert mail_args[0].startswith(f"FROM:<{sender}>")
    _finished_without_bounce(r, body["mail_id"])


def test_a_needlessly_quoted_local_part_goes_out_with_minimum_quoting(rig: RigFactory) -> None:
    """RFC 5321 §4.1.2: the sending system SHOULD transmit the minimum quoting possible."""
    with smtp_sink() as peer:
        r = rig(routes=relay_to(peer.port))
        _submit(r, recipients=['"john.smith"@example.net', '"a\\"b"@example.net'])
        assert r.poll().failed == 0
        rcpt_args = _args(peer, "RCPT")
    assert [a.split(" ")[0] for a in rcpt_args] == [
        "TO:<john.smith@example.net>",
        'TO:<"a\\"b"@example.net>',
    ]


def test_duplicate_recipients_get_one_rcpt_to_and_keep_the_first_dsn_parameters(
    rig: RigFactory,
) -> None:
    first = {"address": "Sam@Example.NET", "notify": ["SUCCESS"], "orcpt": "rfc822;sam@a.example"}
    again = {"address": '"Sam"@example.net', "notify": ["NEVER"], "orcpt": "rfc822;x@b.example"}
    other_case = "sam@example.net"  # the local part is case-sensitive: another mailbox
    with smtp_sink() as peer:
        r = rig(routes=relay_to(peer.port))
        body = _submit(r, recipients=[first, again, "Sam@example.NET", other_case])
        # every submitted recipient is answered, duplicates with the first one's id
        assert body["recipients"] == [
            {"id": "r0", "address": "Sam@Example.NET"},
            {"id": "r0", "address": '"Sam"@example.net'},
            {"id": "r0", "address": "Sam@example.NET"},
            {"id": "r1", "address": other_case},
        ]
        g = r.group(body["mail_id"], "example.net")
        assert [(x.rid, x.address, x.orcpt) for x in g.recipients] == [
            ("r0", "Sam@Example.NET", "rfc822;sam@a.example"),
            ("r1", other_case, None),
        ]
        assert r.poll().failed == 0
        rcpt_args = _args(peer, "RCPT")
        assert [m.rcpt_tos for m in peer.messages] == [["Sam@Example.NET", other_case]]
    assert len(rcpt_args) == 2
    assert "NOTIFY=SUCCESS" in rcpt_args[0] and "ORCPT=rfc822;sam@a.example" in rcpt_args[0]


def test_a_retry_of_a_submission_with_duplicates_gets_the_first_answer(aws: AwsEnv) -> None:
    ingress = make_ingress(aws)
    event = ev.http_send(key="dups-1", recipients=["a@example.net", "A@EXAMPLE.net", "b@x.example"])
    s1, first, _ = ingress.http(event)
    s2, second, headers = ingress.http(
        ev.http_send(key="dups-1", recipients=["a@example.net", "A@EXAMPLE.net", "b@x.example"])
    )
    assert (s1, s2) == (202, 202), (first, second)
    assert second == first and headers.get("Idempotent-Replayed") == "true"
    assert [x["id"] for x in first["recipients"]] == ["r0", "r1", "r2"]  # A@ is another mailbox
    s3, dup, _ = ingress.http(
        ev.http_send(key="dups-2", recipients=["a@example.net", "a@EXAMPLE.net", "b@x.example"])
    )
    s4, dup_again, _ = ingress.http(
        ev.http_send(key="dups-2", recipients=["a@example.net", "a@EXAMPLE.net", "b@x.example"])
    )
    assert (s3, s4) == (202, 202) and dup_again == dup
    assert [x["id"] for x in dup["recipients"]] == ["r0", "r0", "r1"]
    # after delivery and cleanup, the tombstone's answer gives the same ids
    deliver_all(aws, dup["mail_id"])
    s5, late, headers = ingress.http(
        ev.http_send(key="dups-2", recipients=["a@example.net", "a@EXAMPLE.net", "b@x.example"])
    )
    assert (s5, late) == (202, dup) and headers.get("Idempotent-Replayed") == "true"
