"""The packaged backoff rules on a real MTA's rate refusals (issue 25 item 6), and a site
shaped at that MTA's limit on a loaded machine (issue 40).

A private Postfix (Debian's) with anvil's client limits on, loopback not exempt
(`smtpd_client_event_limit_exceptions` empty: by default $mynetworks is): its own
replies, not our transcription of them, must match a packaged rule that slows the site
down, so the queue stops hitting the limit instead of retrying into it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from mailqueue.core.model import Result
from mailqueue.outbound.shaping import LATE_TOLERANCE, BackoffRules, load_rules

from tests.shaping.test_waits_once import _SerialReceive
from tests.support import factories as f
from tests.support.postfix_peer import REQUIRE_ENV, PostfixPeer, available, postfix_peer
from tests.support.rigs import DeliveryRig, RigFactory, relay_to

_why = available()
if _why is not None and os.environ.get(REQUIRE_ENV) == "1":
    raise RuntimeError(f"{REQUIRE_ENV}=1 but {_why}")
pytestmark = pytest.mark.skipif(_why is not None, reason=_why or "")

SITE = "mx:127.0.0.1"
ANVIL = {"anvil_rate_time_unit": "60s", "smtpd_client_event_limit_exceptions": ""}
BOXES = ("bob", "carol", "dave", "erin", "frank")


def _peer(**limits: str) -> Iterator[PostfixPeer]:
    with postfix_peer(mailboxes=BOXES, settings={**ANVIL, **limits}) as p:
        yield p


@pytest.fixture()
def message_rate() -> Iterator[PostfixPeer]:
    yield from _peer(smtpd_client_message_rate_limit="2")


@pytest.fixture()
def recipient_rate() -> Iterator[PostfixPeer]:
    yield from _peer(smtpd_client_recipient_rate_limit="2")


@pytest.fixture()
def connection_count() -> Iterator[PostfixPeer]:
    # Each session held a second (Postfix's `sleep` restriction, at RCPT TO): on a slow
    # machine the lanes' claims through moto can stagger them by more than a transaction
    # to a local Postfix takes, and then no two connections were ever open at once.
    yield from _peer(
        smtpd_client_connection_count_limit="1", smtpd_client_restrictions="sleep 1, permit"
    )


def _rig(rig: RigFactory, peer: PostfixPeer, **settings: object) -> DeliveryRig:
    # the packaged shaping and backoff rules (empty settings), the relay's site
    return rig(routes=relay_to(peer.port), shaping=True, **settings)


def _last(r: DeliveryRig, mail_id: str) -> Result:
    [g] = r.storage().get_mail(mail_id)[1]
    [rcpt] = g.recipients
    assert rcpt.state.value == "queued" and rcpt.last_result is not None
    return rcpt.last_result


def _without(prefix: str) -> BackoffRules:
    """The packaged rules less the new ones: what matched before they were added."""
    rules = load_rules()[1]
    return BackoffRules(tuple(x for x in rules.rules if not x.id.startswith(prefix)))


def test_too_much_mail_from_suspends_and_slows_the_site(
    rig: RigFactory, message_rate: PostfixPeer
) -> None:
    r = _rig(rig, message_rate, batch_concurrency=1)
    st = r.storage()
    ids = [st.enqueue(f.envelope(f"{b}@example.net"), f.content()).mail_id for b in BOXES[:3]]
    r.poll()
    message_rate.wait_delivered({"bob": 1, "carol": 1})
    refused = _last(r, ids[2])
    assert (refused.code, refused.status) == (450, "4.7.1")
    assert refused.text.endswith("Error: too much mail from 127.0.0.1")
    assert _without("postfix-").match(SITE, refused) is None  # no packaged rule had it
    assert r.service.shaper is not None
    state = r.service.shaper.store.load(SITE)
    assert state.suspended_by == "postfix-too-much-mail"
    assert state.suspended_until > time.time() + 50 and state.scale == 0.5
    # the next mail is not tried while the site is suspended: no second refusal
    later = st.enqueue(f.envelope("dave@example.net"), f.content()).mail_id
    r.poll()
    [g] = st.get_mail(later)[1]
    assert g.recipients[0].attempts == 0 and g.recipients[0].state.value == "queued"
    assert message_rate.log.count("Message delivery request rate limit exceeded") == 1


def test_too_many_recipients_from_suspends_the_site(
    rig: RigFactory, recipient_rate: PostfixPeer
) -> None:
    r = _rig(rig, recipient_rate)
    st = r.storage()
    q = st.enqueue(f.envelope(*(f"{b}@example.net" for b in BOXES[:3])), f.content())
    r.poll()
    recipient_rate.wait_delivered({"bob": 1, "carol": 1})
    [g] = st.get_mail(q.mail_id)[1]
    [later] = [x for x in g.recipients if x.state.value == "queued"]
    assert later.last_result is not None
    assert (later.last_result.code, later.last_result.status) == (450, "4.7.1")
    assert later.last_result.text.endswith("Error: too many recipients from 127.0.0.1")
    assert _without("postfix-").match(SITE, later.last_result) is None
    assert r.service.shaper is not None
    assert r.service.shaper.store.load(SITE).suspended_by == "postfix-too-many-recipients-from"


def test_too_many_connections_from_at_once_slows_the_site(
    rig: RigFactory, connection_count: PostfixPeer
) -> None:
    """Five groups of one batch at once (the delivery lanes) against a Postfix that
    takes one connection per client: the others are greeted with its 421."""
    r = _rig(rig, connection_count)
    st = r.storage()
    ids = [st.enqueue(f.envelope(f"{b}@example.net"), f.content()).mail_id for b in BOXES]
    r.poll()
    refused = []
    for mail_id in ids:
        [g] = st.get_mail(mail_id)[1]
        res = g.recipients[0].last_result
        if g.recipients[0].state.value == "queued" and res is not None:
            refused.append(res)
    assert refused, connection_count.log[-2000:]
    assert any(
        x.code == 421 and x.text.endswith("Error: too many connections from 127.0.0.1")
        for x in refused
    ), refused
    assert "Connection concurrency limit exceeded" in connection_count.log
    assert r.service.shaper is not None
    state = r.service.shaper.store.load(SITE)
    # each refused record's reply halves the rates (every 421 is one halving)
    assert state.suspended_by == "postfix-too-many-connections-from"
    assert state.scale <= max(0.05, 0.5 ** len(refused)) + 1e-9


# A site shaped at Postfix's own limit, on a loaded machine (issue 40): one MAIL FROM a
# second (burst 1) against anvil's 6 a 5 s unit. GCRA's slots put at most 5 in any 5 s
# (half-open, as anvil counts from a unit's first event), so the one of margin is what a
# send may be late by, one interval: what the limiter's tolerance allows (Shaper.late_by)
# plus the jitter of connecting. A group that came back later and sent anyway (the grace
# was 10 s) bunched with the on-time sends after it: a 450 at load 36 in 320 mails.
LOADED_RULES = {
    "version": 1,
    "default": {"max_connections": 2, "rates": [{"messages": 1, "per": "1s", "burst": 1}]},
}
LOADED_MAILS = 30


@pytest.fixture()
def anvil_at_the_limit() -> Iterator[PostfixPeer]:
    yield from _peer(anvil_rate_time_unit="5s", smtpd_client_message_rate_limit="6")


@contextmanager
def cpu_burners(n: int = 2) -> Iterator[list[subprocess.Popen[bytes]]]:
    """`n` busy loops beside the test (the machine loaded), stopped by their PIDs."""
    procs = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], stdin=subprocess.DEVNULL)
        for _ in range(n)
    ]
    try:
        yield procs
    finally:
        for p in procs:
            os.kill(p.pid, signal.SIGKILL)
            p.wait(timeout=10)


def _delivered(peer: PostfixPeer) -> int:
    return sum(len(peer.delivered(b)) for b in BOXES)


def test_a_loaded_machine_sends_no_booked_group_late_into_anvil(
    rig: RigFactory, anvil_at_the_limit: PostfixPeer
) -> None:
    """Three delivery invocations at once (their own containers and caches), 30 mails
    queued at once to a site of 1/s and 2 connections, the packaged backoff rules, two
    CPU burners beside them: every mail is delivered and Postfix refuses none for its
    rate (a refusal would suspend the site and retry the mail: the log says which)."""
    peer = anvil_at_the_limit
    settings: dict[str, object] = dict(
        shaping_rules=json.dumps(LOADED_RULES), shaping_late_tolerance_seconds=LATE_TOLERANCE
    )
    rigs = [_rig(rig, peer, **settings) for _ in range(3)]
    receive = threading.Lock()
    for r in rigs:
        r.poller.sqs = _SerialReceive(r.poller.sqs, receive)  # type: ignore[attr-defined]
    st = rigs[0].storage()
    for i in range(LOADED_MAILS):
        st.enqueue(f.envelope(f"{BOXES[i % len(BOXES)]}@example.net"), f.content())
    errors: list[BaseException] = []
    stop = time.monotonic() + LOADED_MAILS * 1.0 + 90

    def poll(r: DeliveryRig) -> None:
        try:
            while time.monotonic() < stop and _delivered(peer) < LOADED_MAILS:
                if not r.poll().received:
                    time.sleep(0.05)
        except BaseException as e:  # noqa: BLE001 - re-raised in the test's thread
            errors.append(e)

    with cpu_burners() as burners:
        assert all(b.poll() is None for b in burners)  # running beside the test
        load = os.getloadavg()[0]
        threads = [threading.Thread(target=poll, args=(r,)) for r in rigs]
        for t in threads:
            t.start()
        for t in threads:
            t.join(LOADED_MAILS + 120)
    if errors:
        raise errors[0]
    refusals = peer.log.count("Message delivery request rate limit exceeded")
    requests = sum(r.service.shaper.store.requests for r in rigs if r.service.shaper)
    print(
        f"\n[anvil, loaded] load {load:.1f}: {_delivered(peer)}/{LOADED_MAILS} delivered, "
        f"{refusals} rate refusals, {requests / LOADED_MAILS:.2f} limiter requests a mail"
    )
    assert refusals == 0, peer.log[-3000:]
    assert _delivered(peer) == LOADED_MAILS
