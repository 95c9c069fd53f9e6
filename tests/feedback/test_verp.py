"""The VERP return path: its form, its MAC, key rotation, and what delivery sends."""

from __future__ import annotations

import base64
import json
import re
from dataclasses import replace

import pytest
from mailqueue.core.config import ConfigError
from mailqueue.core.model import PRINCIPAL_TAG, mail_id_for_key, new_mail_id
from mailqueue.core.trace import principal_tag
from mailqueue.core.verp import (
    ForgedReturnPath,
    KeyRing,
    ReturnPathPolicy,
    decode,
    encode,
    mail_from,
    rid_part,
)
from mailqueue.outbound.returnpath import KeysUnavailable, ReturnPaths

from tests.support import factories as f
from tests.support.rigs import BACKENDS, RigFactory, relay_to
from tests.support.smtp_peers import smtp_sink


def ring_json(current: str = "1", **keys: bytes) -> str:
    keys = keys or {"1": b"k" * 32}
    return json.dumps(
        {"current": current, "keys": {v: base64.b64encode(k).decode() for v, k in keys.items()}}
    )


RING = KeyRing.parse(ring_json())
POLICY = ReturnPathPolicy.parse('{"example.org": "bounces.example.org", "*": ""}')


def test_round_trip_survives_lower_and_upper_case() -> None:
    for mail_id in (new_mail_id(), mail_id_for_key("scope", "key")):
        addr = encode(RING, mail_id, rid_part(["r3"]), "bounces.example.org")
        local, _, domain = addr.partition("@")
        assert addr == addr.lower() and len(local) <= 64 and domain == "bounces.example.org"
        for form in (addr, addr.upper(), f"<{addr}>"):
            d = decode(RING, form)
            assert d is not None and (d.mail_id, d.rid, d.version) == (mail_id, "r3", "1")


def test_a_group_of_several_names_no_recipient() -> None:
    addr = encode(RING, new_mail_id(), rid_part(["r0", "r1"]), "bounces.example.org")
    d = decode(RING, addr)
    assert d is not None and d.rid is None


def test_a_changed_field_or_another_key_is_a_forgery() -> None:
    mail_id = new_mail_id()
    addr = encode(RING, mail_id, "0", "bounces.example.org")
    local, _, domain = addr.partition("@")
    tampered = [
        local.replace("-0-", "-1-") + "@" + domain,  # another recipient
        local[:-1] + ("a" if local[-1] != "a" else "b") + "@" + domain,  # the MAC
        local + "@other.example.org",  # another bounce domain
        "b9" + local[2:] + "@" + domain,  # a key version we do not have
    ]
    for t in tampered:
        with pytest.raises(ForgedReturnPath):
            decode(RING, t)
    other = KeyRing.parse(ring_json(**{"1": b"x" * 32}))
    with pytest.raises(ForgedReturnPath):
        decode(other, addr)
    assert decode(RING, "someone@bounces.example.org") is None  # not our form at all


def test_rotation_keeps_old_reports_verifiable() -> None:
    old = KeyRing.parse(ring_json("1", **{"1": b"a" * 32}))
    rotated = KeyRing.parse(ring_json("2", **{"1": b"a" * 32, "2": b"b" * 32}))
    before = encode(old, new_mail_id(), "0", "bounces.example.org")
    after = encode(rotated, new_mail_id(), "0", "bounces.example.org")
    assert after.startswith("b2-") and before.startswith("b1-")
    assert decode(rotated, before) is not None and decode(rotated, after) is not None
    retired = KeyRing.parse(ring_json("2", **{"2": b"b" * 32}))
    with pytest.raises(ForgedReturnPath):
        decode(retired, before)


def test_policy_is_data_per_sender_domain_and_the_null_sender_stays_null() -> None:
    mid = new_mail_id()
    assert mail_from(POLICY, RING, "alice@example.org", mid, ["r0"]).endswith(
        "@bounces.example.org"
    )
    assert mail_from(POLICY, RING, "bob@other.example", mid, ["r0"]) == "bob@other.example"
    assert mail_from(POLICY, RING, "", mid, ["r0"]) == ""
    off = ReturnPathPolicy.parse("")
    assert mail_from(off, RING, "alice@example.org", mid, ["r0"]) == "alice@example.org"
    star = ReturnPathPolicy.parse('{"*": "b.example.net", "example.org": ""}')
    assert mail_from(star, RING, "alice@example.org", mid, ["r0"]) == "alice@example.org"
    assert mail_from(star, RING, "x@y.example", mid, ["r0"]).endswith("@b.example.net")


def test_bad_settings_fail_at_start() -> None:
    for bad in ("[1]", '{"example.org": "not a domain"}', '{"-x": "b.example.org"}', "nope"):
        with pytest.raises(ConfigError):
            ReturnPathPolicy.parse(bad)
    with pytest.raises(ConfigError):
        KeyRing.parse(ring_json("1", **{"1": b"short"}))
    with pytest.raises(ConfigError):
        KeyRing.parse(ring_json("2"))
    with pytest.raises(ConfigError):
        ReturnPaths(POLICY, "")  # a policy without keys
    with pytest.raises(ConfigError):
        ReturnPaths(POLICY, "secretsmanager:mailqueue/verp")  # no secret source given


def test_keys_from_a_file_and_unreadable_keys(tmp_path) -> None:  # type: ignore[no-untyped-def]
    p = tmp_path / "ring.json"
    p.write_text(ring_json())
    paths = ReturnPaths(POLICY, f"file:{p}")
    assert paths.mail_from("alice@example.org", new_mail_id(), ["r0"]).startswith("b1-")
    p.unlink()
    with pytest.raises(KeysUnavailable):
        paths.mail_from("alice@example.org", new_mail_id(), ["r0"])
    # a sender the policy does not cover never needs the keys
    assert paths.mail_from("bob@other.example", "X", ["r0"]) == "bob@other.example"


@pytest.mark.parametrize("rig", BACKENDS, indirect=True)
def test_delivery_sends_the_verp_and_leaves_from_alone(rig: RigFactory) -> None:
    with smtp_sink() as peer:
        r = rig(
            routes=relay_to(peer.port),
            return_path_policy='{"example.org": "bounces.example.org"}',
            return_path_keys=ring_json(),
        )
        one = r.storage().enqueue(f.envelope("a@x.example"), f.content())
        two = r.storage().enqueue(f.envelope("b@y.example", "c@y.example"), f.content())
        other = r.storage().enqueue(
            f.envelope("d@x.example", sender="bob@other.example"), f.content()
        )
        null = r.storage().enqueue(f.envelope("e@x.example", sender=""), f.content())
        r.poll()
        by_rcpt = {tuple(sorted(m.rcpt_tos)): m for m in peer.messages}
    d1 = decode(RING, by_rcpt[("a@x.example",)].mail_from)
    assert d1 is not None and (d1.mail_id, d1.rid) == (one.mail_id, "r0")
    d2 = decode(RING, by_rcpt[("b@y.example", "c@y.example")].mail_from)
    assert d2 is not None and (d2.mail_id, d2.rid) == (two.mail_id, None)
    assert by_rcpt[("d@x.example",)].mail_from == "bob@other.example"
    assert by_rcpt[("e@x.example",)].mail_from in ("", "<>")  # the null sender stays null
    assert b"From: " in by_rcpt[("a@x.example",)].content  # headers as submitted
    assert by_rcpt[("a@x.example",)].content.replace(b"\r\n", b"\n") == f.content().replace(
        b"\r\n", b"\n"
    )
    assert other.mail_id and null.mail_id


@pytest.mark.parametrize("rig", BACKENDS, indirect=True)
def test_unreadable_keys_defer_the_mail(rig: RigFactory, tmp_path) -> None:  # type: ignore[no-untyped-def]
    with smtp_sink() as peer:
        r = rig(
            routes=relay_to(peer.port),
            return_path_policy='{"example.org": "bounces.example.org"}',
            return_path_keys=f"file:{tmp_path / 'missing.json'}",
        )
        q = r.storage().enqueue(f.envelope("a@x.example"), f.content())
        r.poll()
        assert peer.messages == []
    assert r.states(q.mail_id) == {"a@x.example": "queued"}


# ------------------------------------------------------------------ per principal
NEWS = "arn:aws:sts::123456789012:assumed-role/newsletter/app-1"
RECEIPTS = "arn:aws:iam::123456789012:role/receipts"
BY_PRINCIPAL = ReturnPathPolicy.parse(
    json.dumps(
        {
            "example.org": "bounces.example.org",
            "*": "bounces.example.net",
            "arn:aws:sts::123456789012:assumed-role/newsletter/*": "bounces.news.example",
            RECEIPTS: "",
            "arn:aws:sts::123456789012:assumed-role/*": "bounces.roles.example",
            "arn:aws:sts::123456789012:assumed-role/newsletter/app-1": "bounces.app1.example",
            principal_tag(RECEIPTS + "-private"): "bounces.private.example",
        }
    )
)


def _domain_of(policy: ReturnPathPolicy, sender: str, principal: str) -> str:
    got = mail_from(policy, RING, sender, new_mail_id(), ["r0"], principal)
    return got.rpartition("@")[2] if got.startswith("b1-") else f"sender:{got}"


def test_principal_wins_over_sender_domain_and_star() -> None:
    p = BY_PRINCIPAL
    # an exact key beats the patterns, wherever it is written
    assert _domain_of(p, "alice@example.org", NEWS) == "bounces.app1.example"
    # then the patterns in the order written (newsletter/* before assumed-role/*)
    other_app = "arn:aws:sts::123456789012:assumed-role/newsletter/app-2"
    assert _domain_of(p, "alice@example.org", other_app) == "bounces.news.example"
    shop = "arn:aws:sts::123456789012:assumed-role/shop/s-1"
    assert _domain_of(p, "x@y.example", shop) == "bounces.roles.example"
    # a principal switched off stays off, even as a sender domain the policy covers
    assert _domain_of(p, "alice@example.org", RECEIPTS) == "sender:alice@example.org"
    # a private trace stores the principal's sha256 name: the policy can name that
    hidden = principal_tag(RECEIPTS + "-private")
    assert _domain_of(p, "alice@example.org", hidden) == "bounces.private.example"
    # no principal entry (or none known: mail queued before tags, SES receipt): the domain
    assert _domain_of(p, "alice@example.org", "arn:aws:iam::999999999999:user/u") == (
        "bounces.example.org"
    )
    assert _domain_of(p, "alice@example.org", "") == "bounces.example.org"
    assert _domain_of(p, "x@y.example", "") == "bounces.example.net"
    # ARNs are case-sensitive, as IAM's: another case is another principal
    assert _domain_of(p, "x@y.example", RECEIPTS.upper()) == "bounces.example.net"
    # the null sender stays null whoever submitted
    assert mail_from(p, RING, "", new_mail_id(), ["r0"], NEWS) == ""
    # ingress reads reports on every bounce domain the policy names, principals' included
    assert {"bounces.app1.example", "bounces.news.example", "bounces.private.example"} <= (
        p.bounce_domains
    )
    only_principal = ReturnPathPolicy.parse(json.dumps({NEWS: "bounces.news.example"}))
    assert only_principal.enabled
    assert _domain_of(only_principal, "a@example.org", "") == "sender:a@example.org"


@pytest.mark.parametrize(
    ("policy", "says"),
    [
        ('{"arn:": "b.example.org"}', "not a principal ARN"),
        ('{"sha256:XYZ": "b.example.org"}', "not a principal ARN"),
        ('{"arn:aws:iam::1:role/a b": "b.example.org"}', "not a principal ARN"),
        (json.dumps({RECEIPTS: "not a domain"}), "not a bounce domain"),
        ('{"role/receipts": "b.example.org"}', "not a sender domain, * or a principal ARN"),
        ('{"example.org": 1}', "sender domain, * or principal ARN"),
    ],
)
def test_bad_principal_entries_fail_at_start_naming_the_entry(policy: str, says: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(says)):
        ReturnPathPolicy.parse(policy)


@pytest.mark.parametrize("rig", BACKENDS, indirect=True)
def test_delivery_picks_the_return_path_by_principal(rig: RigFactory) -> None:
    """The submitting principal travels in the mail's `mailqueue:principal` tag to the
    group delivery reads; the return path follows it, before the sender domain."""
    policy = {"example.org": "bounces.example.org", NEWS: "bounces.news.example", RECEIPTS: ""}
    with smtp_sink() as peer:
        r = rig(
            routes=relay_to(peer.port),
            return_path_policy=json.dumps(policy),
            return_path_keys=ring_json(),
        )

        def by(principal: str, rcpt: str) -> str:
            env = replace(f.envelope(rcpt), tags=((PRINCIPAL_TAG, principal),))
            return r.storage().enqueue(env, f.content()).mail_id

        news = by(NEWS, "a@x.example")
        receipts = by(RECEIPTS, "b@x.example")
        plain = r.storage().enqueue(f.envelope("c@x.example"), f.content()).mail_id
        r.poll()
        sent = {m.rcpt_tos[0]: m.mail_from for m in peer.messages}
    d = decode(RING, sent["a@x.example"])
    assert d is not None and (d.mail_id, d.domain) == (news, "bounces.news.example")
    assert sent["b@x.example"] == "alice@example.org"  # the principal's "" beats the domain
    d = decode(RING, sent["c@x.example"])
    assert d is not None and (d.mail_id, d.domain) == (plain, "bounces.example.org")
    assert receipts
