"""Accepted ⇒ on the wire as RFC 5321 allows, and refused ⇒ refused by the ingress.

Generated mailboxes (every ABNF production, tests/test_address.py) go through the real
SMTP client to an aiosmtpd peer on 127.0.0.1, as sender and as recipient; the argument
the peer received is compared, as octets, with the grammar's wire form and parsed back
by the grammar. The converse goes through the real ingress handler on moto.
"""

from __future__ import annotations

import io
import uuid

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from mailqueue.core.address import AddressError, parse, parse_path
from mailqueue.outbound.smtp import SmtpClient
from mailqueue.services.ingress.service import http_status

from tests.ingress.conftest import make_ingress
from tests.smtp.conftest import hop_to
from tests.support import events as ev
from tests.support.aws import AwsEnv
from tests.support.smtp_peers import smtp_sink
from tests.test_address import ATEXT, mailboxes

BODY = b"Subject: wire\r\n\r\nhello\r\n"
PLAIN = "plain@example.net"
FIXTURE_OK = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow]


def _received(arg: str, verb: str) -> tuple[bytes, str]:
    """The path octets as received, and the parameters after it."""
    assert arg.upper().startswith(verb)
    box, rest = parse_path(arg[len(verb) :])
    assert box is not None
    path = arg[len(verb) : len(arg) - len(rest)].rstrip(" ")
    return path.encode(), rest


def test_every_accepted_address_goes_on_the_wire_byte_exactly(client: SmtpClient) -> None:
    sent: list[str] = []
    with smtp_sink() as peer:
        hop = hop_to(peer)

        @settings(max_examples=150, suppress_health_check=FIXTURE_OK)
        @given(addr=mailboxes())
        @example(addr='"a<b>c"@example.org')  # finding 3, whatever the generator draws
        @example(addr='"<>"@example.org')
        def check(addr: str) -> None:
            try:
                box = parse(addr)
            except AddressError:
                return  # refused: the converse test below covers these
            seen = len(peer.commands)
            out = client.deliver(
                [hop], addr, [("r0", addr), ("r1", PLAIN)], io.BytesIO(BODY), len(BODY)
            )
            assert {r.status for r in out.results.values()} == {"2.0.0"}, (addr, out.results)
            new = peer.commands[seen:]
            mail = [a for _, v, a in new if v == "MAIL"]
            rcpt = [a for _, v, a in new if v == "RCPT"]
            assert len(mail) == 1 and len(rcpt) == 2
            wire = f"<{box.wire}>".encode()
            path, params = _received(mail[0], "FROM:")
            assert path == wire
            assert ("SMTPUTF8" in params.split()) == box.smtputf8
            path, _ = _received(rcpt[0], "TO:")
            assert path == wire
            # what the peer got is a mailbox of the grammar, the same one, unchanged
            again = parse(box.wire)
            assert (again.key, again.wire) == (box.key, box.wire)
            assert peer.messages[-1].content == BODY
            sent.append(addr)

        check()
    quoted = [a for a in sent if a.startswith('"')]
    assert len(sent) >= 100 and len(quoted) >= 20, (len(sent), len(quoted))
    assert any(parse(a).wire.startswith('"') and "<" in a for a in quoted)  # finding 3


def test_equivalent_recipients_get_one_rcpt_to(client: SmtpClient) -> None:
    """The client merges too (mail queued before enqueue merged), each rid answered."""
    with smtp_sink() as peer:
        out = client.deliver(
            [hop_to(peer)],
            "s@example.org",
            [("r0", "a@Example.net"), ("r1", '"a"@example.NET'), ("r2", "A@example.net")],
            io.BytesIO(BODY),
        )
        assert {k: v.status for k, v in out.results.items()} == {
            "r0": "2.0.0", "r1": "2.0.0", "r2": "2.0.0"
        }
        assert [a.split(" ")[0] for _, v, a in peer.commands if v == "RCPT"] == [
            "TO:<a@Example.net>", "TO:<A@example.net>"
        ]


# ------------------------------------------------------------------ the converse

_BAD_ALPHABET = list(ATEXT + '".@[]\\<>(),:; ') + ["ä", "\u3002"]


@st.composite
def near_misses(draw: st.DrawFn) -> str:
    """A mailbox with one character inserted or replaced, or free text: mostly refused."""
    if draw(st.booleans()):
        return draw(st.text(st.sampled_from(_BAD_ALPHABET), min_size=1, max_size=20))
    addr = draw(mailboxes())
    at = draw(st.integers(0, len(addr)))
    ch = draw(st.sampled_from(_BAD_ALPHABET))
    cut = draw(st.integers(0, 1))
    return addr[:at] + ch + addr[at + cut :]


def test_the_ingress_refuses_what_the_grammar_refuses_and_takes_what_it_accepts(
    aws: AwsEnv,
) -> None:
    ingress = make_ingress(aws)
    refused = accepted = 0

    @settings(max_examples=80, suppress_health_check=FIXTURE_OK)
    @given(addr=near_misses(), as_sender=st.booleans())
    def check(addr: str, as_sender: bool) -> None:
        nonlocal refused, accepted
        field = "sender" if as_sender else "recipients[0].address"
        fields = {"sender": addr} if as_sender else {"recipients": [addr]}
        event = ev.http_send(key=uuid.uuid4().hex, smtputf8=True, **fields)
        try:
            parse(addr)
        except AddressError as e:
            before = ingress.trace()
            status, body, _ = ingress.http(event)
            assert (status, body["error"], body["field"]) == (
                http_status(e.code), e.code, field
            ), addr
            assert 400 <= status < 500
            assert ingress.trace().new_since(before) == (set(), set(), 0)
            refused += 1
            return
        if as_sender:
            return  # whether a sender domain is allowed is policy, not grammar
        status, body, _ = ingress.http(event)
        assert status == 202, (addr, body)
        assert body["recipients"][0]["address"] == addr
        accepted += 1

    check()
    assert refused >= 20 and accepted >= 5, (refused, accepted)
