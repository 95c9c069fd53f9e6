"""DATA encoding: CRLF normalisation and dot-stuffing across arbitrary chunk boundaries."""

from __future__ import annotations

import io
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mailqueue.outbound.smtp import DotStuffer, SmtpClient, xtext

from tests.smtp.conftest import hop_to
from tests.support.smtp_peers import smtp_sink


def encode(data: bytes, cuts: list[int]) -> bytes:
    stuffer, out, pos = DotStuffer(), [], 0
    for n in cuts:
        out.append(stuffer.feed(data[pos : pos + n]))
        pos += n
    out.append(stuffer.feed(data[pos:]))
    out.append(stuffer.finish())
    return b"".join(out)


def normalise(data: bytes) -> bytes:
    """What the receiver must end up with: CRLF everywhere, a final line end."""
    text = re.sub(rb"\r\n|\r|\n", b"\r\n", data)
    return text if not text or text.endswith(b"\r\n") else text + b"\r\n"


def unstuff(wire: bytes) -> bytes:
    """A strict RFC 5321 §4.5.2 receiver."""
    assert wire.endswith(b".\r\n")
    body = wire[:-3]
    assert body == b"" or body.endswith(b"\r\n")
    lines = body.split(b"\r\n")[:-1] if body else []
    out = []
    for line in lines:
        assert b"\r" not in line and b"\n" not in line  # no bare CR/LF reaches the wire
        assert line != b"."  # no premature end of data
        out.append(line[1:] if line.startswith(b".") else line)
    return b"".join(x + b"\r\n" for x in out)


pieces = st.lists(
    st.sampled_from([b"\r", b"\n", b"\r\n", b".", b"..", b"a", b" ", b"\xff", b"\x00"]),
    max_size=120,
).map(b"".join)


@settings(max_examples=500)
@given(st.one_of(pieces, st.binary(max_size=300)), st.lists(st.integers(0, 7), max_size=40))
def test_round_trip_any_chunking(data: bytes, cuts: list[int]) -> None:
    wire = encode(data, cuts)
    assert unstuff(wire) == normalise(data)
    assert wire == encode(data, [])  # chunking never changes the bytes on the wire


@pytest.mark.parametrize(
    "smuggle",
    [b"\n.\r\n", b"\r\n.\r", b"\r.\r", b"\n.\n", b"\r\n.\n", b"\r\n.\r\nMAIL FROM:<x>\r\n"],
)
def test_smuggling_sequences_never_end_data_early(smuggle: bytes) -> None:
    data = b"Subject: x\r\n\r\nhello" + smuggle + b"more\r\n"
    for cut in range(len(data)):
        wire = encode(data, [cut])
        assert wire.count(b"\r\n.\r\n") == 1 and wire.endswith(b"\r\n.\r\n")


def test_examples() -> None:
    assert encode(b"", []) == b".\r\n"
    assert encode(b".", []) == b"..\r\n.\r\n"
    assert encode(b"a\r", [1]) == b"a\r\n.\r\n"
    assert encode(b"a\r\n.b", [2]) == b"a\r\n..b\r\n.\r\n"
    assert encode(b"x\n.\ny", [1, 1, 1]) == b"x\r\n..\r\ny\r\n.\r\n"


def test_xtext() -> None:
    assert xtext("abc") == "abc"
    assert xtext("a+b=c d") == "a+2Bb+3Dc+20d"
    assert xtext("\u00e9") == "+C3+A9"


def test_wire_bytes_seen_by_a_real_server(client: SmtpClient) -> None:
    data = b"a\n.\n..\r\n.x\rlast"
    with smtp_sink() as peer:
        client.deliver([hop_to(peer)], "s@example.com", [("r0", "r@example.org")], io.BytesIO(data))
        assert peer.messages[0].content == normalise(data)


def test_bad_notify_fails_before_any_io(client: SmtpClient) -> None:
    with smtp_sink() as peer:
        with pytest.raises(ValueError):
            client.deliver(
                [hop_to(peer)], "", [("r0", "r@example.org", ("SOMETIMES",))], io.BytesIO(b"x")
            )
        assert peer.connections == 0
