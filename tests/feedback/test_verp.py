"""The VERP return path: its form, its MAC, key rotation, and what delivery sends."""

from __future__ import annotations

import base64
import json

import pytest
from mailqueue.core.config import ConfigError
from mailqueue.core.model import mail_id_for_key, new_mail_id
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
