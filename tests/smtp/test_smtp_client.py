"""The SMTP client against scripted aiosmtpd peers on 127.0.0.1."""

from __future__ import annotations

import dataclasses
import io
import random
import time
from typing import Any

import pytest
from mailqueue.core.model import Notify, Recipient, Ret
from mailqueue.outbound.routing import Credentials, Hop, TlsPolicy, resolve_next_hops
from mailqueue.outbound.smtp import (
    ConnectionPool,
    DeliveryOutcome,
    Rcpt,
    SmtpClient,
    Timeouts,
    lambda_deadline,
)

from tests.smtp.conftest import TEST_TIMEOUTS, hop_to
from tests.support.dns_peer import dns_server
from tests.support.smtp_peers import Behaviour, pki, refused_port, silent_server, smtp_sink

pytestmark = pytest.mark.timeout(20)

BODY = b"Subject: test\r\n\r\nHello\r\n"
A, B, C = "alice@example.org", "bob@example.org", "carol@example.org"


def send(
    client: SmtpClient,
    hops: list[Hop] | Hop,
    rcpts: list[Any],
    body: bytes = BODY,
    sender: str = "sender@example.com",
    **kw: Any,
) -> DeliveryOutcome:
    hop_list = hops if isinstance(hops, list) else [hops]
    kw.setdefault("size", len(body))
    return client.deliver(hop_list, sender, rcpts, io.BytesIO(body), **kw)


def statuses(out: DeliveryOutcome) -> dict[str, str]:
    return {rid: r.status for rid, r in out.results.items()}


# ------------------------------------------------------------------ accept all


def test_accept_all_round_trips_envelope_and_body(client: SmtpClient) -> None:
    body = (
        b"Subject: dots\n\n.leading dot\n..two dots\nmiddle . dot\n.\nbare cr\rend"
        b"\r\n.\r\n"  # a lone dot line inside the body must not end DATA
    )
    expected = (
        b"Subject: dots\r\n\r\n.leading dot\r\n..two dots\r\nmiddle . dot\r\n.\r\nbare cr\r\nend"
        b"\r\n.\r\n"
    )
    with smtp_sink() as peer:
        out = send(client, hop_to(peer), [("r0", A), ("r1", B)], body)
        assert statuses(out) == {"r0": "2.0.0", "r1": "2.0.0"}
        assert out.results["r0"].code == 250 and out.results["r0"].remote_mta == "mx.test"
        assert out.tls is False and out.remote_mta == "mx.test"
        assert out.relay == f"mx.test[127.0.0.1]:{peer.port}"
        [msg] = peer.messages
        assert msg.mail_from == "sender@example.com" and msg.rcpt_tos == [A, B]
        assert msg.content == expected
        assert f"SIZE={len(body)}" in msg.mail_args
        assert "BODY=8BITMIME" not in msg.mail_args  # 7-bit body
        assert peer.verbs() == ["EHLO", "MAIL", "RCPT", "RCPT", "DATA"]


def test_null_sender_and_model_recipients(client: SmtpClient) -> None:
    with smtp_sink() as peer:
        out = send(client, hop_to(peer), [Recipient("r0", A)], sender="")
        assert statuses(out) == {"r0": "2.0.0"}
        assert peer.commands[1][2].startswith("FROM:<>")


def test_large_body_is_streamed_and_stuffed(client: SmtpClient) -> None:
    line = b".x" + b"y" * 70 + b"\n"
    body = line * 40_000  # ~2.9 MB, every line needs a dot doubled
    with smtp_sink() as peer:
        out = send(client, hop_to(peer), [("r0", A)], body, size=len(body) + 40_000)
        assert statuses(out) == {"r0": "2.0.0"}
        assert peer.messages[0].content == body.replace(b"\n", b"\r\n")


# ------------------------------------------------------------------ per-recipient replies


def test_one_recipient_rejected_permanently(client: SmtpClient) -> None:
    with smtp_sink(rcpt_replies={B: "550 5.1.1 <bob@example.org>: no such user"}) as peer:
        out = send(client, hop_to(peer), [("r0", A), ("r1", B), ("r2", C)])
        assert statuses(out) == {"r0": "2.0.0", "r1": "5.1.1", "r2": "2.0.0"}
        assert out.results["r1"].permanent and out.results["r1"].code == 550
        assert "no such user" in out.results["r1"].text
        assert peer.messages[0].rcpt_tos == [A, C]  # the DATA applied to the accepted ones


def test_one_recipient_deferred(client: SmtpClient) -> None:
    with smtp_sink(rcpt_replies={A: "450 4.2.0 greylisted, come back later"}) as peer:
        out = send(client, hop_to(peer), [("r0", A), ("r1", B)])
        r0 = out.results["r0"]
        assert (r0.code, r0.status, r0.permanent, r0.success) == (450, "4.2.0", False, False)
        assert out.results["r1"].success
        assert peer.messages[0].rcpt_tos == [B]


def test_no_data_when_no_recipient_accepted(client: SmtpClient) -> None:
    replies = {A: "550 5.1.1 unknown", B: "551 5.1.6 moved"}
    with smtp_sink(rcpt_replies=replies) as peer:
        out = send(client, hop_to(peer), [("r0", A), ("r1", B)])
        assert statuses(out) == {"r0": "5.1.1", "r1": "5.1.6"}
        assert "DATA" not in peer.verbs() and peer.messages == []


def test_mail_from_rejected(client: SmtpClient) -> None:
    with smtp_sink(mail_reply="553 5.7.1 sender rejected") as peer:
        out = send(client, hop_to(peer), [("r0", A), ("r1", B)])
        assert statuses(out) == {"r0": "5.7.1", "r1": "5.7.1"}
        assert "RCPT" not in peer.verbs()


def test_final_552_applies_to_accepted_recipients(client: SmtpClient) -> None:
    behaviour = Behaviour(
        final_reply="552 5.2.2 mailbox full", rcpt_replies={C: "550 5.1.1 unknown"}
    )
    with smtp_sink(behaviour) as peer:
        out = send(client, hop_to(peer), [("r0", A), ("r1", B), ("r2", C)])
        assert statuses(out) == {"r0": "5.2.2", "r1": "5.2.2", "r2": "5.1.1"}
        assert out.results["r0"].code == 552 and out.results["r0"].permanent
        assert peer.messages == []


def test_552_to_the_data_command(client: SmtpClient) -> None:
    with smtp_sink(data_reply="552 5.3.4 too much mail data") as peer:
        out = send(client, hop_to(peer), [("r0", A)])
        assert statuses(out) == {"r0": "5.3.4"} and out.results["r0"].code == 552
        assert peer.messages == []


def test_local_address_checks(client: SmtpClient) -> None:
    with smtp_sink() as peer:
        out = send(
            client,
            hop_to(peer),
            [("r0", "evil@example.org>\r\nRSET"), ("r1", B), ("r2", "no-domain@")],
        )
        assert statuses(out) == {"r0": "5.1.3", "r1": "2.0.0", "r2": "5.1.3"}
        assert peer.messages[0].rcpt_tos == [B]
        out = send(client, hop_to(peer), [("r0", A)], sender="a\nb@example.com")
        assert statuses(out) == {"r0": "5.1.7"}
        assert peer.connections == 1  # the bad sender never reached the server


def test_duplicate_recipient_ids_are_a_caller_bug(client: SmtpClient) -> None:
    with pytest.raises(ValueError):
        client.deliver([Hop("h", "127.0.0.1")], "", [("r0", A), ("r0", B)], io.BytesIO(b""))
    with pytest.raises(ValueError):
        client.deliver([], "", [("r0", A)], io.BytesIO(b""))


# ------------------------------------------------------------------ greeting, hops


def test_421_at_greeting(client: SmtpClient) -> None:
    with smtp_sink(greeting="421 4.3.2 mx.test busy, try later") as peer:
        out = send(client, hop_to(peer), [("r0", A)])
        r = out.results["r0"]
        assert (r.code, r.status, r.permanent) == (421, "4.3.2", False)
        assert "busy" in r.text and r.remote_mta == "mx.test"
        assert peer.verbs() == []


def test_5xx_greeting_is_treated_as_temporary(client: SmtpClient) -> None:
    with smtp_sink(greeting="554 5.7.1 no service for you") as peer:
        out = send(client, hop_to(peer), [("r0", A)])
        assert (out.results["r0"].code, out.results["r0"].status) == (554, "4.7.1")


def test_next_hop_after_421_greeting(client: SmtpClient) -> None:
    with smtp_sink(greeting="421 4.3.2 busy") as busy, smtp_sink() as good:
        out = send(client, [hop_to(busy, "mx1.test"), hop_to(good, "mx2.test")], [("r0", A)])
        assert statuses(out) == {"r0": "2.0.0"}
        assert out.remote_mta == "mx2.test" and out.results["r0"].remote_mta == "mx2.test"
        assert [f.code for f in out.hop_failures] == [421]
        assert len(good.messages) == 1


def test_connection_refused_then_next_hop(client: SmtpClient) -> None:
    refused = Hop("mx1.test", "127.0.0.1", refused_port())
    out = send(client, [refused], [("r0", A)])
    r = out.results["r0"]
    assert (r.code, r.status) == (0, "4.4.1") and "refused" in r.text.lower()
    with smtp_sink() as good:
        out = send(client, [refused, hop_to(good, "mx2.test")], [("r0", A)])
        assert statuses(out) == {"r0": "2.0.0"} and out.hop_failures[0].status == "4.4.1"


def test_first_mx_refusing_second_accepting_via_dns(client: SmtpClient) -> None:
    zone = {
        "example.org": {"MX": ["10 mx1.example.org.", "20 mx2.example.org."]},
        "mx1.example.org": {"A": ["127.0.0.1"]},
        "mx2.example.org": {"A": ["127.0.0.1"]},
    }
    with dns_server(zone) as dns, smtp_sink() as good:
        hops = resolve_next_hops("example.org", None, dns.resolver(), rng=random.Random(3))
        assert [h.host for h in hops] == ["mx1.example.org", "mx2.example.org"]
        # Both names live on 127.0.0.1, so give each MX its own port: mx1 refuses.
        ports = {"mx1.example.org": refused_port(), "mx2.example.org": good.port}
        hops = [dataclasses.replace(h, port=ports[h.host]) for h in hops]
        out = send(client, hops, [("r0", A), ("r1", B)])
        assert statuses(out) == {"r0": "2.0.0", "r1": "2.0.0"}
        assert out.remote_mta == "mx2.example.org"
        assert [f.status for f in out.hop_failures] == ["4.4.1"]
        assert good.messages[0].rcpt_tos == [A, B]


def test_temporary_recipient_failures_try_the_next_hop(client: SmtpClient) -> None:
    first = Behaviour(rcpt_replies={A: "450 4.2.0 greylisted", B: "550 5.1.1 unknown"})
    with smtp_sink(first) as mx1, smtp_sink() as mx2:
        out = send(
            client, [hop_to(mx1, "mx1.test"), hop_to(mx2, "mx2.test")], [("r0", A), ("r1", B)]
        )
        # nothing was accepted at mx1, so its 450 recipient may go to mx2; the 550 is final
        assert statuses(out) == {"r0": "2.0.0", "r1": "5.1.1"}
        assert out.results["r1"].remote_mta == "mx1.test"
        assert mx2.messages[0].rcpt_tos == [A]


def test_no_next_hop_once_content_was_sent(client: SmtpClient) -> None:
    first = Behaviour(rcpt_replies={A: "450 4.2.0 greylisted"})
    with smtp_sink(first) as mx1, smtp_sink() as mx2:
        out = send(
            client, [hop_to(mx1, "mx1.test"), hop_to(mx2, "mx2.test")], [("r0", A), ("r1", B)]
        )
        assert statuses(out) == {"r0": "4.2.0", "r1": "2.0.0"}
        assert mx2.connections == 0


def test_session_limit(client: SmtpClient) -> None:
    tempfail = Behaviour(rcpt_replies={A: "451 4.3.0 try later"})
    with smtp_sink(tempfail) as p1, smtp_sink(tempfail) as p2, smtp_sink() as p3:
        out = send(client, [hop_to(p1), hop_to(p2), hop_to(p3)], [("r0", A)])
        assert statuses(out) == {"r0": "4.3.0"}  # Postfix smtp_mx_session_limit = 2
        assert (p1.connections, p2.connections, p3.connections) == (1, 1, 0)


# ------------------------------------------------------------------ broken conversations


def test_connection_dropped_during_data(client: SmtpClient) -> None:
    with smtp_sink(drop_during_data=True) as peer:
        out = send(client, hop_to(peer), [("r0", A), ("r1", B)], BODY * 2000)
        for r in out.results.values():
            assert (r.code, r.status, r.permanent) == (0, "4.4.2", False)
            assert r.text.startswith("lost connection with mx.test")
        assert peer.messages == []


def test_never_answering_server_fails_within_the_deadline(client: SmtpClient) -> None:
    with silent_server() as peer:
        start = time.monotonic()
        end = start + 1.0
        out = send(client, hop_to(peer), [("r0", A)], deadline=lambda: end - time.monotonic())
        elapsed = time.monotonic() - start
        r = out.results["r0"]
        assert (r.code, r.status) == (0, "4.4.2")
        assert "timed out while receiving the initial server greeting" in r.text
        assert 0.9 <= elapsed < 2.0  # the greeting timeout (5 s) is cut by the deadline
        assert peer.connections == 1


def test_deadline_stops_trying_further_hops(client: SmtpClient) -> None:
    with silent_server() as silent, smtp_sink() as good:
        end = time.monotonic() + 0.8
        out = send(
            client,
            [hop_to(silent), hop_to(good)],
            [("r0", A)],
            deadline=lambda: end - time.monotonic(),
        )
        assert out.results["r0"].status == "4.4.1"
        assert "deadline reached" in out.results["r0"].text
        assert good.connections == 0


def test_phase_timeout_then_next_hop() -> None:
    quick = dataclasses.replace(TEST_TIMEOUTS, greeting=0.5)
    client = SmtpClient("client.mailqueue.test", timeouts=quick)
    with silent_server() as silent, smtp_sink() as good:
        start = time.monotonic()
        out = send(client, [hop_to(silent), hop_to(good)], [("r0", A)])
        assert statuses(out) == {"r0": "2.0.0"}
        assert out.hop_failures[0].status == "4.4.2"
        assert time.monotonic() - start < 3


def test_exhausted_deadline_before_start() -> None:
    client = SmtpClient("client.mailqueue.test")
    out = send(
        client, Hop("mx.test", "127.0.0.1", refused_port()), [("r0", A)], deadline=lambda: 0.0
    )
    assert out.results["r0"].status == "4.4.1"


class _FailingBody(io.RawIOBase):
    def __init__(self) -> None:
        self.calls = 0

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        self.calls += 1
        if self.calls == 1:
            return b"Subject: half\r\n\r\nfirst part\r\n"
        raise OSError("S3 read timeout")


def test_content_read_error_aborts_without_final_dot(client: SmtpClient) -> None:
    with smtp_sink() as peer:
        out = client.deliver(
            [hop_to(peer)], "s@example.com", [("r0", A)], _FailingBody(), body_8bit=False
        )
        assert out.results["r0"].status == "4.3.0" and "OSError" in out.results["r0"].text
        time.sleep(0.1)
        assert peer.messages == []


# ------------------------------------------------------------------ TLS


def test_opportunistic_starttls_with_self_signed_certificate(client: SmtpClient) -> None:
    with smtp_sink(starttls=True) as peer:
        out = send(client, hop_to(peer), [("r0", A)])
        assert statuses(out) == {"r0": "2.0.0"}
        assert out.tls and out.tls_info is not None and out.tls_info.startswith("TLSv1.")
        assert peer.messages[0].tls
        assert peer.verbs() == ["EHLO", "STARTTLS", "EHLO", "MAIL", "RCPT", "DATA"]


def test_opportunistic_tls_failure_reconnects_in_plaintext(client: SmtpClient) -> None:
    with smtp_sink(starttls_broken=True) as peer:
        out = send(client, hop_to(peer), [("r0", A)])
        assert statuses(out) == {"r0": "2.0.0"}
        assert out.tls is False and peer.messages[0].tls is False
        assert peer.connections == 2
        assert peer.verbs(1) == ["EHLO", "STARTTLS"]
        assert "STARTTLS" not in peer.verbs(2)


def test_opportunistic_tls_refused_continues_on_same_session(client: SmtpClient) -> None:
    with smtp_sink(starttls_reply="454 4.7.0 TLS not available now") as peer:
        out = send(client, hop_to(peer), [("r0", A)])
        assert statuses(out) == {"r0": "2.0.0"} and out.tls is False
        assert peer.connections == 1


def test_tls_none_never_starts_tls(client: SmtpClient) -> None:
    with smtp_sink(starttls=True) as peer:
        out = send(client, hop_to(peer, tls=TlsPolicy.NONE), [("r0", A)])
        assert statuses(out) == {"r0": "2.0.0"} and out.tls is False
        assert "STARTTLS" not in peer.verbs()


@pytest.mark.parametrize(
    ("behaviour", "status", "text"),
    [
        (Behaviour(), "4.7.4", "TLS is required, but was not offered by host mx.test"),
        (
            Behaviour(starttls_reply="454 4.7.0 TLS not available"),
            "4.7.4",
            "refused to start TLS: 454",
        ),
        (Behaviour(starttls_broken=True), "4.7.5", "Cannot start TLS: handshake failure"),
        (Behaviour(starttls_inject=True), "4.7.5", "injection"),
    ],
)
def test_required_tls_failures_are_temporary(
    client: SmtpClient, behaviour: Behaviour, status: str, text: str
) -> None:
    with smtp_sink(behaviour) as peer:
        out = send(client, hop_to(peer, tls=TlsPolicy.REQUIRED), [("r0", A)])
        r = out.results["r0"]
        assert r.status == status and not r.permanent and text in r.text
        assert peer.messages == [] and "MAIL" not in peer.verbs()
        assert peer.connections == 1  # never a plaintext retry when TLS is required


def test_required_tls_does_not_verify(client: SmtpClient) -> None:
    with smtp_sink(starttls=True) as peer:
        out = send(client, hop_to(peer, host="whatever.example", tls="required"), [("r0", A)])
        assert statuses(out) == {"r0": "2.0.0"} and out.tls


def test_required_verify_with_ca_file(client: SmtpClient) -> None:
    with smtp_sink(starttls=True) as peer:
        hop = hop_to(peer, tls=TlsPolicy.REQUIRED_VERIFY, ca_file=str(pki().ca_file))
        out = send(client, hop, [("r0", A)])
        assert statuses(out) == {"r0": "2.0.0"} and out.tls


@pytest.mark.parametrize(
    ("host", "ca_file"),
    [
        ("mx.test", None),  # system store does not know the test CA
        ("wrong.example", "CA"),  # trusted chain, wrong name
    ],
)
def test_required_verify_failures(client: SmtpClient, host: str, ca_file: str | None) -> None:
    with smtp_sink(starttls=True) as peer:
        hop = hop_to(
            peer,
            host=host,
            tls=TlsPolicy.REQUIRED_VERIFY,
            ca_file=str(pki().ca_file) if ca_file else None,
        )
        out = send(client, hop, [("r0", A)])
        r = out.results["r0"]
        assert r.status == "4.7.5" and "certificate not verified" in r.text
        assert peer.messages == []


def test_custom_tls_context_factory() -> None:
    calls: list[tuple[TlsPolicy, str | None]] = []

    def factory(policy: TlsPolicy, ca_file: str | None) -> Any:
        calls.append((policy, ca_file))
        return pki().client_context()

    client = SmtpClient("client.mailqueue.test", factory, TEST_TIMEOUTS)
    with smtp_sink(starttls=True) as peer:
        hop = hop_to(peer, tls=TlsPolicy.REQUIRED_VERIFY)
        assert statuses(send(client, hop, [("r0", A)])) == {"r0": "2.0.0"}
        assert statuses(send(client, hop, [("r0", A)])) == {"r0": "2.0.0"}
        assert calls == [(TlsPolicy.REQUIRED_VERIFY, None)]  # cached per (policy, ca_file)


# ------------------------------------------------------------------ extensions


def test_message_bigger_than_advertised_size(client: SmtpClient) -> None:
    with smtp_sink(size_limit=1000) as peer:
        out = send(client, hop_to(peer), [("r0", A), ("r1", B)], b"x" * 100, size=1001)
        r = out.results["r0"]
        assert (r.status, r.permanent) == ("5.3.4", True) and "1001" in r.text
        assert "MAIL" not in peer.verbs()
        out = send(client, hop_to(peer), [("r0", A)], b"x" * 100, size=1000)
        assert statuses(out) == {"r0": "2.0.0"}
        assert "SIZE=1000" in peer.messages[0].mail_args


def test_size_not_sent_when_unknown(client: SmtpClient) -> None:
    with smtp_sink() as peer:
        out = send(client, hop_to(peer), [("r0", A)], size=None)
        assert statuses(out) == {"r0": "2.0.0"} and "SIZE=" not in peer.messages[0].mail_args


def test_8bitmime(client: SmtpClient) -> None:
    body8 = "Subject: caf\u00e9\r\n\r\nna\u00efve\r\n".encode()
    with smtp_sink() as peer:
        send(client, hop_to(peer), [("r0", A)], body8)
        assert "BODY=8BITMIME" in peer.messages[0].mail_args
        assert peer.messages[0].content == body8

        class Stream(io.RawIOBase):  # not seekable, like botocore's StreamingBody
            def __init__(self, data: bytes) -> None:
                self.data = io.BytesIO(data)

            def readable(self) -> bool:
                return True

            def read(self, size: int = -1) -> bytes:
                return self.data.read(size)

        client.deliver([hop_to(peer)], "s@example.com", [("r0", A)], Stream(BODY))
        assert "BODY=8BITMIME" in peer.messages[1].mail_args  # unknown: declared (harmless)
        send(client, hop_to(peer), [("r0", A)], BODY, body_8bit=False)
        assert "BODY=" not in peer.messages[2].mail_args
    with smtp_sink(eight_bit_mime=False) as peer:
        out = send(client, hop_to(peer), [("r0", A)], body8)
        assert statuses(out) == {"r0": "2.0.0"}
        assert "BODY=" not in peer.messages[0].mail_args


def test_smtputf8_needed_but_not_offered(client: SmtpClient) -> None:
    with smtp_sink(smtputf8=False) as peer:
        out = send(client, hop_to(peer), [("r0", "j\u00f6rg@example.org"), ("r1", B)])
        assert statuses(out) == {"r0": "5.6.7", "r1": "5.6.7"}
        assert out.results["r0"].permanent and "MAIL" not in peer.verbs()
        out = send(client, hop_to(peer), [("r0", A)], smtputf8=True)  # UTF-8 headers
        assert statuses(out) == {"r0": "5.6.7"}


def test_smtputf8_offered(client: SmtpClient) -> None:
    with smtp_sink() as peer:
        out = send(
            client,
            hop_to(peer),
            [("r0", "j\u00f6rg@b\u00fccher.example")],
            sender="\u00e9lise@example.com",
        )
        assert statuses(out) == {"r0": "2.0.0"}
        msg = peer.messages[0]
        assert msg.smtputf8 and " SMTPUTF8" in msg.mail_args
        assert msg.rcpt_tos == ["j\u00f6rg@b\u00fccher.example"]
        assert msg.mail_from == "\u00e9lise@example.com"


def test_dsn_parameters_passed_through(client: SmtpClient) -> None:
    rcpts = [
        Rcpt("r0", A, (Notify.SUCCESS, Notify.FAILURE), "rfc822;Alice+tag@example.org"),
        Rcpt("r1", B, ("never",)),
        Rcpt("r2", C, (), "j\u00f6rg@example.org"),
    ]
    with smtp_sink() as peer:
        out = send(client, hop_to(peer), rcpts, ret=Ret.HDRS, envid="q1 2=3")
        assert out.dsn and statuses(out) == {"r0": "2.0.0", "r1": "2.0.0", "r2": "2.0.0"}
        msg = peer.messages[0]
        assert msg.mail_args.endswith(" RET=HDRS ENVID=q1+202+3D3")
        assert msg.rcpt_args[A] == (
            "TO:<alice@example.org> NOTIFY=SUCCESS,FAILURE ORCPT=rfc822;Alice+2Btag@example.org"
        )
        assert msg.rcpt_args[B] == "TO:<bob@example.org> NOTIFY=NEVER"
        assert msg.rcpt_args[C] == "TO:<carol@example.org> ORCPT=utf-8;j\\x{F6}rg@example.org"


def test_dsn_parameters_withheld_when_not_offered(client: SmtpClient) -> None:
    with smtp_sink(dsn=False) as peer:
        out = send(
            client,
            hop_to(peer),
            [Rcpt("r0", A, ("SUCCESS",), "rfc822;" + A)],
            ret="FULL",
            envid="id1",
        )
        assert statuses(out) == {"r0": "2.0.0"} and out.dsn is False
        msg = peer.messages[0]
        assert "RET=" not in msg.mail_args and "ENVID=" not in msg.mail_args
        assert msg.rcpt_args[A] == f"TO:<{A}>"


def test_helo_fallback_when_ehlo_is_refused(client: SmtpClient) -> None:
    with smtp_sink(ehlo_reply="502 5.5.2 EHLO not implemented") as peer:
        out = send(client, hop_to(peer), [Rcpt("r0", A, ("SUCCESS",))], ret="FULL")
        assert statuses(out) == {"r0": "2.0.0"} and out.dsn is False
        assert peer.verbs()[:2] == ["EHLO", "HELO"]
        assert peer.messages[0].mail_args == "FROM:<sender@example.com>"


# ------------------------------------------------------------------ AUTH


USERS = {"relayuser": "s3cret \u00e9"}


def _creds(ref: str) -> Credentials:
    assert ref == "secretsmanager:relay"
    return Credentials("relayuser", "s3cret \u00e9")


def _auth_client(**kw: Any) -> SmtpClient:
    return SmtpClient("client.mailqueue.test", timeouts=TEST_TIMEOUTS, **kw)


@pytest.mark.parametrize("mechanisms", [("PLAIN", "LOGIN"), ("LOGIN",)])
def test_auth_over_tls(mechanisms: tuple[str, ...]) -> None:
    client = _auth_client(credentials=_creds)
    with smtp_sink(starttls=True, auth_users=USERS, auth_mechanisms=mechanisms) as peer:
        hop = hop_to(peer, tls="required", credentials="secretsmanager:relay", relay=True)
        out = send(client, hop, [("r0", A)])
        assert statuses(out) == {"r0": "2.0.0"}
        assert peer.messages[0].auth_login == "relayuser"
        auth = [arg for _, verb, arg in peer.commands if verb == "AUTH"]
        assert auth[0].split()[0] == mechanisms[0]


def test_auth_rejected_is_a_soft_failure() -> None:
    client = _auth_client(credentials=lambda ref: Credentials("relayuser", "wrong"))
    with smtp_sink(starttls=True, auth_users=USERS) as peer:
        hop = hop_to(peer, tls="required", credentials="secretsmanager:relay")
        r = send(client, hop, [("r0", A)]).results["r0"]
        assert (r.code, r.status, r.permanent) == (535, "4.7.8", False)
        assert r.text.startswith("SASL authentication failed")
        assert "wrong" not in r.text and "MAIL" not in peer.verbs()


def test_no_credentials_over_plaintext_unless_allowed() -> None:
    client = _auth_client(credentials=_creds)
    with smtp_sink(auth_users=USERS, auth_require_tls=False) as peer:
        hop = hop_to(peer, credentials="secretsmanager:relay")  # opportunistic, no STARTTLS
        r = send(client, hop, [("r0", A)]).results["r0"]
        assert r.status == "4.7.4" and "AUTH" not in peer.verbs()
        allowed = dataclasses.replace(hop, allow_plaintext_auth=True)
        assert statuses(send(client, allowed, [("r0", A)])) == {"r0": "2.0.0"}
        assert peer.messages[0].auth_login == "relayuser" and not peer.messages[0].tls


def test_credentials_provider_failure_is_temporary() -> None:
    def broken(ref: str) -> Credentials:
        raise RuntimeError("AccessDenied")

    for provider in (broken, None):
        client = _auth_client(credentials=provider)
        with smtp_sink(starttls=True, auth_users=USERS) as peer:
            hop = hop_to(peer, tls="required", credentials="ssm:/relay")
            assert send(client, hop, [("r0", A)]).results["r0"].status == "4.3.5"


def test_opportunistic_tls_with_credentials_never_falls_back_to_plaintext() -> None:
    client = _auth_client(credentials=_creds)
    with smtp_sink(starttls_broken=True, auth_users=USERS) as peer:
        hop = hop_to(peer, credentials="secretsmanager:relay")
        assert send(client, hop, [("r0", A)]).results["r0"].status == "4.7.5"
        assert peer.connections == 1


# ------------------------------------------------------------------ connection pool


def test_connection_reuse_one_connection_for_two_transactions(
    client: SmtpClient, pool: ConnectionPool
) -> None:
    with smtp_sink(starttls=True) as peer:
        first = send(client, hop_to(peer), [("r0", A)], b"one\r\n")
        second = send(client, hop_to(peer), [("r0", B)], b"two\r\n")
        assert statuses(first) == statuses(second) == {"r0": "2.0.0"}
        assert (first.reused, second.reused) == (False, True) and second.tls
        assert peer.connections == 1
        assert [m.content for m in peer.messages] == [b"one\r\n", b"two\r\n"]
        assert peer.verbs() == [
            "EHLO",
            "STARTTLS",
            "EHLO",
            "MAIL",
            "RCPT",
            "DATA",
            "RSET",
            "MAIL",
            "RCPT",
            "DATA",
        ]
        assert len(pool) == 1
        pool.close()
        assert len(pool) == 0
        deadline = time.monotonic() + 2
        while "QUIT" not in peer.verbs() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert peer.verbs()[-1] == "QUIT"


def test_pool_keys_separate_tls_policies(client: SmtpClient) -> None:
    with smtp_sink(starttls=True) as peer:
        send(client, hop_to(peer), [("r0", A)])
        out = send(client, hop_to(peer, tls=TlsPolicy.NONE), [("r0", A)])
        assert out.tls is False and out.reused is False and peer.connections == 2


def test_reuse_after_a_rejected_transaction(client: SmtpClient) -> None:
    with smtp_sink(rcpt_replies={A: "550 5.1.1 unknown"}) as peer:
        send(client, hop_to(peer), [("r0", A)])
        out = send(client, hop_to(peer), [("r0", B)])
        assert statuses(out) == {"r0": "2.0.0"} and out.reused and peer.connections == 1


def test_dead_pooled_connection_is_detected(client: SmtpClient) -> None:
    with smtp_sink() as peer:
        send(client, hop_to(peer), [("r0", A)])
        peer.drop_connections()
        time.sleep(0.1)
        out = send(client, hop_to(peer), [("r0", B)])
        assert statuses(out) == {"r0": "2.0.0"} and out.reused is False
        assert peer.connections == 2 and len(peer.messages) == 2


def test_pool_expires_idle_sessions() -> None:
    now = [0.0]
    pool = ConnectionPool(max_idle=5, clock=lambda: now[0])
    client = SmtpClient("client.mailqueue.test", timeouts=TEST_TIMEOUTS, pool=pool)
    with smtp_sink() as peer:
        send(client, hop_to(peer), [("r0", A)])
        now[0] = 6.0
        assert send(client, hop_to(peer), [("r0", A)]).reused is False
        assert peer.connections == 2
        pool.close()


def test_without_pool_each_session_quits() -> None:
    client = SmtpClient("client.mailqueue.test", timeouts=TEST_TIMEOUTS)
    with smtp_sink() as peer:
        send(client, hop_to(peer), [("r0", A)])
        send(client, hop_to(peer), [("r0", A)])
        assert peer.connections == 2


# ------------------------------------------------------------------ misc


def test_lambda_deadline_helper() -> None:
    class Ctx:
        def get_remaining_time_in_millis(self) -> int:
            return 30_000

    assert lambda_deadline(Ctx(), reserve=5)() == pytest.approx(25.0)


def test_constructor_validation() -> None:
    with pytest.raises(ValueError):
        SmtpClient("bad host")
    with pytest.raises(ValueError):
        SmtpClient("ok.example", max_sessions=0)
    with pytest.raises(ValueError):
        Timeouts(connect=0)


# ------------------------------------------------------------------ a shaped send's slot


def test_a_slot_missed_before_mail_from_sends_nothing_and_closes_the_session(
    client: SmtpClient,
) -> None:
    """`late` is asked once, after the greeting and EHLO, just before MAIL FROM (issue
    40): True gives the transaction up unsent, tries no other hop, and closes the session
    (QUIT: the caller gives the site's connection slot back, so no idle connection stays
    open beside what the limiter counts)."""
    asked: list[list[str]] = []
    with smtp_sink() as peer, smtp_sink() as other:

        def late() -> bool:
            asked.append(peer.verbs())
            return True

        out = send(client, [hop_to(peer), hop_to(other)], [("r0", A), ("r1", B)], late=late)
        assert out.missed_slot is True
        assert {r.status for r in out.results.values()} == {"4.7.0"}
        assert asked == [["EHLO"]]  # once, on a session that has said EHLO and no more
        assert peer.messages == [] and "MAIL" not in peer.verbs()
        assert other.connections == 0  # no other hop tried
        again = send(client, hop_to(peer), [("r0", A)], late=lambda: False)
        assert statuses(again) == {"r0": "2.0.0"} and again.missed_slot is False
        assert again.reused is False and peer.connections == 2
        assert "QUIT" in peer.verbs() and len(peer.messages) == 1
