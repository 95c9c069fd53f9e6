"""The unsubscribe token (HMAC, rotation, age) and the suppression list's scopes, which
must keep the list's old behaviour for unscoped entries."""

from __future__ import annotations

import base64
import json

import pytest
from mailqueue.backends.inprocess import MemorySuppressionStore
from mailqueue.core.config import ConfigError
from mailqueue.core.events import ListEmitter
from mailqueue.core.model import PRIORITY_TAG
from mailqueue.outbound import unsubscribe as unsub
from mailqueue.outbound.suppression import Entry, scoped_key, suppressed
from mailqueue.services.unsubscribe import (
    UnsubscribeService,
    UnsubscribeSettings,
    one_click_body,
)

K1 = base64.b64encode(b"k" * 32).decode()
K2 = base64.b64encode(b"q" * 32).decode()
U = unsub.Unsubscription("m1", "Reader@Example.NET", "sender_domain", "shop.example", 20000, "k1")


def keys(current: str = "k1", **more: str) -> unsub.UnsubscribeKeys:
    return unsub.UnsubscribeKeys.parse(json.dumps({"k1": K1, **more}), current)


def test_token_round_trip_and_tamper() -> None:
    t = unsub.make_token(keys(), U)
    got = unsub.verify_token(keys(), t, today=20001, max_age_days=180)
    assert (got.mail_id, got.recipient, got.scope, got.target) == (
        "m1",
        "Reader@Example.NET",
        "sender_domain",
        "shop.example",
    )
    kid, payload, mac = t.split(".")
    other = unsub.make_token(keys(), unsub.Unsubscription("m1", "x@y.z", "list", "l", 20000, "k1"))
    forged = f"{kid}.{other.split('.')[1]}.{mac}"  # someone else's payload, our MAC
    for bad in (forged, t[:-1] + ("A" if t[-1] != "A" else "B"), "x.y", t + ".z", ""):
        with pytest.raises(unsub.InvalidToken) as e:
            unsub.verify_token(keys(), bad, today=20001, max_age_days=180)
        assert e.value.code == "invalid_token"


def test_rotation_and_expiry() -> None:
    old = unsub.make_token(keys(), U)
    rotated = keys("k2", k2=K2)  # new links with k2, k1 still listed: old links work
    assert unsub.verify_token(rotated, old, today=20001, max_age_days=180).kid == "k1"
    assert unsub.make_token(rotated, U).startswith("k2.")
    retired = unsub.UnsubscribeKeys.parse(json.dumps({"k2": K2}), "k2")
    with pytest.raises(unsub.InvalidToken):
        unsub.verify_token(retired, old, today=20001, max_age_days=180)
    with pytest.raises(unsub.InvalidToken) as e:
        unsub.verify_token(keys(), old, today=20000 + 181, max_age_days=180)
    assert e.value.code == "expired_token"


@pytest.mark.parametrize(
    ("keys_json", "kid"),
    [
        ("{", "k1"),
        ('{"k1": "short"}', "k1"),
        (json.dumps({"k1": K1}), "k9"),
        ('{"b a d": "x"}', ""),
    ],
)
def test_bad_keys_refused_at_start(keys_json: str, kid: str) -> None:
    with pytest.raises(ConfigError):
        unsub.UnsubscribeKeys.parse(keys_json, kid)


def test_which_mail_gets_the_fields() -> None:
    assert unsub.wanted(((PRIORITY_TAG, "bulk"),))
    assert not unsub.wanted(((PRIORITY_TAG, "transactional"),))
    assert unsub.wanted(((PRIORITY_TAG, "transactional"), (unsub.REQUEST_TAG, "one-click")))
    assert not unsub.wanted(((PRIORITY_TAG, "bulk"), (unsub.REQUEST_TAG, "off")))
    assert unsub.scope_of((("list-id", "weekly"),), "a@shop.example") == ("list", "weekly")
    assert unsub.scope_of((), "a@Shop.Example") == ("sender_domain", "shop.example")


def test_scoped_entries_hold_only_their_sender_and_unscoped_ones_everyone() -> None:
    store = MemorySuppressionStore()
    scope = unsub.suppression_scope("sender_domain", "shop.example")
    store.put_many([Entry(scoped_key("reader@example.net", scope), "unsubscribed", 0, 2e9)])
    store.put_many([Entry("gone@example.net", "5.1.1", 0, 2e9)])
    bulk = unsub.opt_out_scopes(((PRIORITY_TAG, "bulk"),), "news@shop.example")
    other = unsub.opt_out_scopes(((PRIORITY_TAG, "bulk"),), "news@bank.example")
    receipt = unsub.opt_out_scopes(((PRIORITY_TAG, "transactional"),), "news@shop.example")
    rcpts = ["Reader@example.net", "gone@example.net"]
    assert set(suppressed(store, rcpts, 10, bulk)) == {"reader@example.net", "gone@example.net"}
    assert set(suppressed(store, rcpts, 10, other)) == {"gone@example.net"}
    assert set(suppressed(store, rcpts, 10, receipt)) == {"gone@example.net"}
    assert set(suppressed(store, rcpts, 10)) == {"gone@example.net"}  # the old call
    e = suppressed(store, rcpts, 10, bulk)["reader@example.net"]
    assert e.to_json()["address"] == "reader@example.net" and e.to_json()["scope"] == scope


def test_post_is_idempotent_and_get_changes_nothing() -> None:
    s = UnsubscribeSettings(list_unsubscribe_keys=json.dumps({"k1": K1}), list_unsubscribe_kid="k1")
    store, events = MemorySuppressionStore(), ListEmitter()
    svc = UnsubscribeService(s, store, events, clock=lambda: 20001 * 86400.0)
    t = unsub.make_token(keys(), U)
    assert svc.handle("GET", t, source_ip="192.0.2.1").status == 200
    assert store.page(None, 10)[0] == [] and events.events == []
    body = b"List-Unsubscribe=One-Click"
    for ip in ("192.0.2.1", "192.0.2.2"):
        page = svc.handle(
            "POST", t, source_ip=ip, body=body, content_type="application/x-www-form-urlencoded"
        )
        assert page.status == 200
    assert [e.mailbox for e in store.page(None, 10)[0]] == ["reader@example.net"]
    assert [e.event_type for e in events.events] == ["Subscription"]  # once


def test_one_click_body_forms() -> None:
    assert one_click_body(b"List-Unsubscribe=One-Click", "application/x-www-form-urlencoded")
    multipart = (
        b'--b\r\nContent-Disposition: form-data; name="List-Unsubscribe"\r\n\r\nOne-Click\r\n--b--'
    )
    assert one_click_body(multipart, "multipart/form-data; boundary=b")
    assert not one_click_body(b"", "application/x-www-form-urlencoded")
    assert not one_click_body(b"List-Unsubscribe=Yes", "application/x-www-form-urlencoded")


def test_keys_from_the_generated_secret() -> None:
    # what the template's GenerateSecretString makes: 44 alphanumerics under "k1"
    generated = json.dumps({"current": "k1", "k1": "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zAb7dEf0hIj3k"})
    k = unsub.keys_from_secret(generated)
    assert k.current == "k1" and len(k.keys["k1"]) == 33
    token = unsub.make_token(k, U)
    assert unsub.verify_token(k, token, today=20000, max_age_days=1).recipient == U.recipient
    for bad in ("[]", '{"k1": "x"}', "nope"):
        with pytest.raises(ConfigError):
            unsub.keys_from_secret(bad)
