"""The packaged backoff rules on a real MTA's rate refusals (issue 25 item 6).

A private Postfix (Debian's) with anvil's client limits on, loopback not exempt
(`smtpd_client_event_limit_exceptions` empty: by default $mynetworks is): its own
replies, not our transcription of them, must match a packaged rule that slows the site
down, so the queue stops hitting the limit instead of retrying into it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest
from mailqueue.core.model import Result
from mailqueue.outbound.shaping import BackoffRules, load_rules

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
    yield from _peer(smtpd_client_connection_count_limit="1",
                     smtpd_client_restrictions="sleep 1, permit")


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
