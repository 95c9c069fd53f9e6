"""Policy discovery (RFC 8461 §5.1) against the loopback DNS server, a loopback HTTPS
policy server with a test CA, and the DynamoDB cache in moto."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta

import pytest
from mailqueue.backends.aws.mtasts_cache import DynamoPolicyCache
from mailqueue.core.model import Result, utcnow
from mailqueue.outbound.mtasts import CachedPolicy, Mode, MtaSts, Policy
from mailqueue.outbound.routing import EgressGuard, Hop, TlsPolicy, resolve_next_hops

from tests.mtasts.peers import Ca, PolicyServer, Reply, policy_server, policy_text
from tests.support.aws import AwsEnv
from tests.support.dns_peer import DnsPeer, dns_server

HOST = "mta-sts.example.test"


class Clock:
    def __init__(self) -> None:
        self.now = utcnow()

    def __call__(self) -> datetime:
        return self.now


@dataclass
class World:
    dns: DnsPeer
    https: PolicyServer
    cache: DynamoPolicyCache
    clock: Clock
    sts: MtaSts


@pytest.fixture()
def world(aws: AwsEnv, ca: Ca) -> Iterator[World]:
    zone = {
        "_mta-sts.example.test": {"TXT": ["v=STSv1; id=one;"]},
        HOST: {"A": ["127.0.0.1"]},
    }
    with (
        dns_server(zone) as dns,
        policy_server(ca, {HOST: policy_text("enforce", "mx.example.test", max_age=3600)}) as https,
    ):
        cache = DynamoPolicyCache(aws.clients.dynamodb, aws.resources.table)
        clock = Clock()
        sts = MtaSts(
            dns.resolver(), cache, ca_file=str(ca.ca_file), https_port=https.port, clock=clock
        )
        yield World(dns, https, cache, clock, sts)


def test_fetched_once_then_served_from_the_table(world: World) -> None:
    first = world.sts.discover("example.test")
    assert first is not None
    assert (first.policy_id, first.policy.mode, first.policy.mx) == (
        "one",
        Mode.ENFORCE,
        ("mx.example.test",),
    )
    stored = world.cache.get("example.test")
    assert stored == first  # round trip through DynamoDB
    world.clock.now += timedelta(seconds=3599)
    assert world.sts.discover("example.test") == first
    assert world.https.hits == {HOST: 1}


def test_expired_cache_is_refetched(world: World) -> None:
    assert world.sts.discover("example.test") is not None
    world.https.policy(HOST, policy_text("testing", "mx2.example.test", max_age=7200))
    world.clock.now += timedelta(seconds=3601)  # past max_age, same id in DNS
    again = world.sts.discover("example.test")
    assert world.https.hits == {HOST: 2}
    assert again is not None and again.policy.mode is Mode.TESTING
    assert world.cache.get("example.test") == again


def test_policy_id_change_refetches(world: World) -> None:
    assert world.sts.discover("example.test") is not None
    world.https.policy(HOST, policy_text("enforce", "new.example.test"))
    world.dns.set("_mta-sts.example.test", "TXT", ["v=STSv1; id=two"])
    again = world.sts.discover("example.test")
    assert world.https.hits == {HOST: 2}
    assert again is not None and (again.policy_id, again.policy.mx) == (
        "two",
        ("new.example.test",),
    )


def test_failed_fetch_without_cache_is_no_policy(world: World) -> None:
    world.https.replies[HOST] = Reply("not found", status=404)
    assert world.sts.discover("example.test") is None
    hops = [Hop(host="elsewhere.test", address="127.0.0.1")]
    assert world.sts.apply("example.test", hops) == hops  # delivered as without MTA-STS


@pytest.mark.parametrize(
    "reply",
    [
        Reply("", status=301),  # redirects are not followed
        Reply(policy_text("enforce", "mx.example.test"), content_type="text/html"),
        Reply("version: STSv1\nmode: bogus\n"),
        Reply("x" * (64 * 1024 + 1)),
    ],
)
def test_unusable_replies_are_no_policy(world: World, reply: Reply) -> None:
    world.https.replies[HOST] = reply
    assert world.sts.discover("example.test") is None
    assert world.https.hits == {HOST: 1}


def test_untrusted_certificate_is_no_policy(aws: AwsEnv, world: World) -> None:
    other = Ca()  # the server's certificate is from a CA the client does not trust
    with policy_server(other, {HOST: policy_text("enforce", "mx.example.test")}) as https:
        sts = MtaSts(
            world.dns.resolver(),
            world.cache,
            ca_file=str(world.sts.ca_file),
            https_port=https.port,
        )
        assert sts.discover("example.test") is None


def test_failed_fetch_keeps_a_fresh_cached_policy(world: World) -> None:
    first = world.sts.discover("example.test")
    world.dns.set("_mta-sts.example.test", "TXT", ["v=STSv1; id=two"])
    world.https.replies[HOST] = Reply("gone", status=500)
    assert world.sts.discover("example.test") == first
    assert world.https.hits == {HOST: 2}


def test_cached_policy_holds_when_the_txt_record_vanishes(world: World) -> None:
    first = world.sts.discover("example.test")
    world.dns.set("_mta-sts.example.test", "TXT", [])  # e.g. stripped by an attacker
    assert world.sts.discover("example.test") == first
    world.clock.now += timedelta(seconds=3601)
    assert world.sts.discover("example.test") is None  # until it expires
    assert world.https.hits == {HOST: 1}


def test_apply_enforce_filters_and_requires_verified_tls(world: World) -> None:
    hops = [
        Hop(host="mx.example.test", address="127.0.0.1"),
        Hop(host="backup.example.test", address="127.0.0.2"),
    ]
    out = world.sts.apply("example.test", hops)
    assert isinstance(out, list) and [h.host for h in out] == ["mx.example.test"]
    assert out[0].tls is TlsPolicy.REQUIRED_VERIFY and out[0].ca_file == world.sts.ca_file
    assert out[0].mta_sts is not None and "example.test" in out[0].mta_sts


def test_apply_leaves_relays_alone(world: World) -> None:
    relay = [Hop(host="smarthost.test", address="127.0.0.1", relay=True)]
    assert world.sts.apply("example.test", relay) == relay
    assert ("_mta-sts.example.test.", "TXT") not in world.dns.queries


def test_mode_none_withdraws_the_policy(world: World) -> None:
    world.cache.put(
        CachedPolicy("example.test", "zero", Policy(Mode.ENFORCE, ("x.test",), 999), world.clock())
    )
    world.https.policy(HOST, policy_text("none", max_age=3600))
    hops = [Hop(host="elsewhere.test", address="127.0.0.1")]
    assert world.sts.apply("example.test", hops) == hops
    cached = world.cache.get("example.test")
    assert cached is not None and cached.policy.mode is Mode.NONE


def test_the_egress_guard_keeps_the_fetch_off_private_addresses(world: World, ca: Ca) -> None:
    """Direct mode: a policy host at a loopback/private/metadata address is not contacted
    (SSRF inside the VPC), unless the operator's allow-list names it."""
    guard = EgressGuard()
    sts = MtaSts(
        world.dns.resolver(), world.cache, ca_file=str(ca.ca_file),
        https_port=world.https.port, clock=world.clock, refuse=guard.refusal,
    )  # fmt: skip
    assert sts.discover("example.test") is None
    assert world.https.hits == {}
    allowed = EgressGuard.from_setting("127.0.0.1")
    sts = MtaSts(
        world.dns.resolver(), world.cache, ca_file=str(ca.ca_file),
        https_port=world.https.port, clock=world.clock, refuse=allowed.refusal,
    )  # fmt: skip
    assert sts.discover("example.test") is not None
    assert world.https.hits == {HOST: 1}


def test_hosts_outside_the_policy_do_not_use_up_the_address_limit(world: World) -> None:
    """Six MX hosts the enforced policy does not name, preferred over the one it names:
    filtered before addresses are counted, the named host is still tried."""
    bad = [f"bad{i}.other.test" for i in range(6)]
    for i, host in enumerate(bad):
        world.dns.set(host, "A", [f"192.0.2.{i + 1}"])
    world.dns.set("mx.example.test", "A", ["127.0.0.1"])
    world.dns.set("example.test", "MX", [f"10 {h}." for h in bad] + ["20 mx.example.test."])
    entry = world.sts.discover("example.test")
    assert entry is not None and entry.policy.mode is Mode.ENFORCE
    resolver = world.dns.resolver()
    hops = resolve_next_hops("example.test", None, resolver, mx_filter=entry.policy.matches)
    assert [h.host for h in hops] == ["mx.example.test"]
    applied = world.sts.apply_entry(entry, hops)
    assert isinstance(applied, list) and applied[0].tls is TlsPolicy.REQUIRED_VERIFY
    # unfiltered, the five-address limit is spent on hosts the policy refuses: 4.7.5
    unfiltered = resolve_next_hops("example.test", None, resolver)
    assert "mx.example.test" not in {h.host for h in unfiltered}
    refused = world.sts.apply_entry(entry, unfiltered)
    assert isinstance(refused, Result) and refused.status == "4.7.5"
