"""Routing table and next-hop resolution against a real DNS server on 127.0.0.1."""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterator

import pytest
from mailqueue.outbound.routing import (
    Credentials,
    Hop,
    NextHopError,
    Route,
    RoutingConfigError,
    RoutingTable,
    TlsPolicy,
    credentials_from_secret,
    parse_credentials_ref,
    parse_next_hop,
    resolve_next_hops,
)

from tests.support.dns_peer import DnsPeer, dns_server

ZONE = {
    "example.org": {
        "MX": [
            "10 mx1.example.org.",
            "10 mx2.example.org.",
            "10 mx3.example.org.",
            "20 backup.example.org.",
        ]
    },
    "mx1.example.org": {"A": ["127.0.0.11"]},
    "mx2.example.org": {"A": ["127.0.0.12"], "AAAA": ["::12"]},
    "mx3.example.org": {"A": ["127.0.0.13"]},
    "backup.example.org": {"A": ["127.0.0.20"]},
    "implicit.example": {"A": ["127.0.0.30"], "AAAA": ["::30"]},
    "nullmx.example": {"MX": ["0 ."]},
    "mixednull.example": {"MX": ["0 .", "10 mx1.example.org."]},
    "nodata.example": {"TXT": ['"v=spf1 -all"']},
    "dangling.example": {"MX": ["10 gone.example.", "20 alsogone.example."]},
    "halfbroken.example": {"MX": ["10 sick.example.", "20 mx1.example.org."]},
    "allsick.example": {"MX": ["10 sick.example."]},
    "relay.example.net": {"A": ["127.0.0.40"]},
    "mxrelay.example.net": {"MX": ["5 mx1.example.org."]},
    "alias.example": {"MX": ["10 cname.example."]},
    "cname.example": {"CNAME": ["mx1.example.org."]},
}


@pytest.fixture(scope="module")
def dns() -> Iterator[DnsPeer]:
    with dns_server(
        ZONE, servfail={"servfail.example", "sick.example"}, silent={"slow.example"}
    ) as peer:
        yield peer


def addrs(hops: list[Hop]) -> list[str]:
    return [h.address for h in hops]


# ------------------------------------------------------------------ MX resolution


def test_mx_by_preference_with_addresses(dns: DnsPeer) -> None:
    hops = resolve_next_hops("Example.ORG", None, dns.resolver(), rng=random.Random(1))
    assert {h.host for h in hops[:-1]} == {"mx1.example.org", "mx2.example.org", "mx3.example.org"}
    assert hops[-1].host == "backup.example.org" and hops[-1].preference == 20
    assert len(hops) == 5  # 3 hosts at 10 (mx2 has A and AAAA) + backup
    mx2 = [h.address for h in hops if h.host == "mx2.example.org"]
    assert mx2 == ["127.0.0.12", "::12"]  # A before AAAA
    assert all(h.port == 25 and h.tls is TlsPolicy.OPPORTUNISTIC and not h.relay for h in hops)


def test_equal_preferences_are_shuffled_by_the_injected_rng(dns: DnsPeer) -> None:
    def order(seed: int) -> tuple[str, ...]:
        hops = resolve_next_hops("example.org", None, dns.resolver(), rng=random.Random(seed))
        names = [h.host for h in hops]
        assert names[-1] == "backup.example.org"  # never mixed across preferences
        return tuple(dict.fromkeys(names[:-1]))

    assert order(7) == order(7)  # seeded: reproducible
    seen = {order(seed) for seed in range(40)}
    assert len(seen) == 6  # all permutations of the three equal-preference hosts


def test_address_limit_and_families(dns: DnsPeer) -> None:
    r = dns.resolver()
    assert len(resolve_next_hops("example.org", None, r, max_addresses=2)) == 2
    v4 = resolve_next_hops("example.org", None, r, families=(4,))
    assert all(":" not in h.address for h in v4) and len(v4) == 4
    v6 = resolve_next_hops("implicit.example", None, r, families=(6,))
    assert addrs(v6) == ["::30"]


def test_implicit_mx_when_domain_has_no_mx(dns: DnsPeer) -> None:
    hops = resolve_next_hops("implicit.example", None, dns.resolver(), port=2525)
    assert [(h.host, h.address, h.port, h.preference) for h in hops] == [
        ("implicit.example", "127.0.0.30", 2525, 0),
        ("implicit.example", "::30", 2525, 0),
    ]


def test_mx_target_behind_cname(dns: DnsPeer) -> None:
    assert addrs(resolve_next_hops("alias.example", None, dns.resolver())) == ["127.0.0.11"]


@pytest.mark.parametrize(
    ("domain", "status"),
    [
        ("nullmx.example", "5.1.10"),
        ("nx.example", "5.1.2"),
        ("nodata.example", "5.1.2"),  # exists, but no MX and no address
        ("dangling.example", "5.4.4"),  # MX hosts that do not exist
        ("servfail.example", "4.4.3"),
        ("allsick.example", "4.4.3"),  # the only MX host's lookup fails temporarily
        ("[not-an-ip]", "5.1.3"),
    ],
)
def test_dns_failures_map_to_statuses(dns: DnsPeer, domain: str, status: str) -> None:
    with pytest.raises(NextHopError) as err:
        resolve_next_hops(domain, None, dns.resolver())
    assert err.value.result.status == status
    assert err.value.result.code == 0
    assert err.value.result.permanent == status.startswith("5")


def test_dns_timeout_is_temporary_and_bounded(dns: DnsPeer) -> None:
    start = time.monotonic()
    with pytest.raises(NextHopError) as err:
        resolve_next_hops("slow.example", None, dns.resolver(timeout=0.3, lifetime=0.6))
    assert err.value.result.status == "4.4.3"
    assert "timeout" in err.value.result.text
    assert time.monotonic() - start < 3


def test_null_mx_next_to_real_mx_is_ignored(dns: DnsPeer) -> None:
    assert addrs(resolve_next_hops("mixednull.example", None, dns.resolver())) == ["127.0.0.11"]


def test_unresolvable_mx_host_is_skipped(dns: DnsPeer) -> None:
    hops = resolve_next_hops("halfbroken.example", None, dns.resolver())
    assert [(h.host, h.address) for h in hops] == [("mx1.example.org", "127.0.0.11")]


def test_address_literal_needs_no_dns(dns: DnsPeer) -> None:
    before = len(dns.queries)
    hops = resolve_next_hops("[127.0.0.9]", None, dns.resolver())
    assert [(h.host, h.address) for h in hops] == [("127.0.0.9", "127.0.0.9")]
    assert addrs(resolve_next_hops("[IPv6:::1]", None, dns.resolver())) == ["::1"]
    assert len(dns.queries) == before


# ------------------------------------------------------------------ routing table


TABLE = {
    "example.com": "relay.example.net:587",
    ".example.com": {"next_hop": "[127.0.0.50]:2525", "tls": "required"},
    ".deep.example.com": "[127.0.0.51]",
    "bank.example": {"tls": "required-verify", "ca_file": "/etc/ssl/bank.pem"},
    "mx.routed": "mxrelay.example.net",
    "auth.example": {
        "next_hop": "[relay.example.net]:587",
        "tls": "required",
        "credentials": "secretsmanager:mailqueue/relay",
    },
}


def test_table_routes_win_over_dns(dns: DnsPeer) -> None:
    table = RoutingTable.from_json(json.dumps(TABLE))
    r = dns.resolver()
    hops = resolve_next_hops("example.com", table, r)
    # unbracketed: MX lookup of relay.example.net (none) then its A record (Postfix semantics)
    assert [(h.host, h.address, h.port, h.relay) for h in hops] == [
        ("relay.example.net", "127.0.0.40", 587, True)
    ]
    sub = resolve_next_hops("a.b.example.com", table, r)
    assert [(h.address, h.port, h.tls) for h in sub] == [("127.0.0.50", 2525, TlsPolicy.REQUIRED)]
    deep = resolve_next_hops("x.deep.example.com", table, r)  # longest suffix wins
    assert [(h.address, h.port) for h in deep] == [("127.0.0.51", 25)]
    mx = resolve_next_hops("mx.routed", table, r)
    assert [(h.host, h.preference) for h in mx] == [("mx1.example.org", 5)]
    auth = resolve_next_hops("auth.example", table, r)
    assert auth[0].credentials == "secretsmanager:mailqueue/relay"
    assert ("relay.example.net.", "MX") not in dns.queries[-2:]  # bracketed: no MX query


def test_tls_only_entry_keeps_mx_delivery(dns: DnsPeer) -> None:
    table = RoutingTable.from_json(
        {"bank.example": TABLE["bank.example"], "example.org": {"tls": "required"}}
    )
    hops = resolve_next_hops("example.org", table, dns.resolver())
    assert len(hops) == 5 and all(h.tls is TlsPolicy.REQUIRED and not h.relay for h in hops)


def test_default_route_is_a_smart_host(dns: DnsPeer) -> None:
    table = RoutingTable.from_json({"default": "[127.0.0.60]:587"})
    assert addrs(resolve_next_hops("anything.example", table, dns.resolver())) == ["127.0.0.60"]
    assert addrs(resolve_next_hops("[192.0.2.1]", table, dns.resolver())) == ["127.0.0.60"]


def test_relay_resolution_failures_are_temporary(dns: DnsPeer) -> None:
    table = RoutingTable.from_json(
        {"default": "[nx.example]:587", "sick.test": "[servfail.example]"}
    )
    with pytest.raises(NextHopError) as err:
        resolve_next_hops("x.example", table, dns.resolver())
    assert err.value.result.status == "4.4.4"
    with pytest.raises(NextHopError) as err:
        resolve_next_hops("sick.test", table, dns.resolver())
    assert err.value.result.status == "4.4.3"


def test_lookup_precedence() -> None:
    table = RoutingTable.from_json(TABLE)
    assert table.lookup("EXAMPLE.COM.") == Route("relay.example.net", 587, mx_lookup=True)
    assert table.lookup("a.example.com") == Route("127.0.0.50", 2525, TlsPolicy.REQUIRED)
    assert table.lookup("example.net") is None
    assert table.default is None


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("relay.example.net", ("relay.example.net", 25, True)),
        ("relay.example.net:587", ("relay.example.net", 587, True)),
        ("[relay.example.net]:587", ("relay.example.net", 587, False)),
        ("[Relay.Example.Net]", ("relay.example.net", 25, False)),
        ("192.0.2.1:2525", ("192.0.2.1", 2525, False)),
        ("[2001:db8::1]:25", ("2001:db8::1", 25, False)),
        ("[IPv6:2001:db8::1]", ("2001:db8::1", 25, False)),
        ("bücher.example", ("xn--bcher-kva.example", 25, True)),
    ],
)
def test_parse_next_hop(spec: str, expected: tuple[str, int, bool]) -> None:
    assert parse_next_hop(spec) == expected


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ("[", "not valid JSON"),
        ("[]", "must be a JSON object"),
        ({"example.com": ""}, "empty next hop"),
        ({"example.com": "relay:0"}, "invalid port"),
        ({"example.com": "relay:99999"}, "invalid port"),
        ({"example.com": "relay:smtp"}, "invalid port"),
        ({"example.com": "2001:db8::1"}, "must be bracketed"),
        ({"example.com": "[relay"}, "unbalanced"),
        ({"example.com": "[relay]x"}, "junk"),
        ({"example.com": "relay.example:465"}, "SMTPS"),
        ({"bad domain!": "relay"}, "invalid domain"),
        ({"example.com": 42}, "string or an object"),
        ({"example.com": {"next_hop": "r", "tls": "maybe"}}, "tls must be one of"),
        ({"example.com": {"next_hop": "r", "colour": "red"}}, "unknown route option"),
        ({"example.com": {"next_hop": "r", "credentials": "env:PASSWORD"}}, "credentials"),
        ({"example.com": {"credentials": "ssm:/relay"}}, "explicit next_hop"),
        ({"example.com": {"next_hop": "r", "tls": "none", "credentials": "ssm:/x"}}, "clear text"),
        ({"example.com": {"next_hop": "r", "allow_plaintext_auth": "yes"}}, "true or false"),
    ],
)
def test_invalid_tables_raise_clear_errors(config: object, message: str) -> None:
    data = config if isinstance(config, str) else json.dumps(config)
    with pytest.raises(RoutingConfigError, match=message) as err:
        RoutingTable.from_json(data)
    if isinstance(config, dict):
        assert repr(next(iter(config))) in str(err.value)  # names the bad entry


def test_plaintext_auth_can_be_allowed_explicitly() -> None:
    table = RoutingTable.from_json(
        {
            "x.example": {
                "next_hop": "[relay.example]:25",
                "tls": "none",
                "credentials": "ssm:/relay",
                "allow_plaintext_auth": True,
            }
        }
    )
    route = table.lookup("x.example")
    assert route is not None and route.allow_plaintext_auth and route.tls is TlsPolicy.NONE


def test_credentials_helpers() -> None:
    assert parse_credentials_ref("secretsmanager:mq/relay") == ("secretsmanager", "mq/relay")
    assert parse_credentials_ref("ssm:/mq/relay") == ("ssm", "/mq/relay")
    with pytest.raises(RoutingConfigError):
        parse_credentials_ref("ssm:")
    creds = credentials_from_secret('{"username": "u", "password": "hunter2"}')
    assert creds == Credentials("u", "hunter2")
    assert "hunter2" not in repr(creds)
    with pytest.raises(ValueError):
        credentials_from_secret('{"username": "u"}')


def test_hop_accepts_string_policy_and_validates_port() -> None:
    assert Hop("h", "127.0.0.1", 25, "required").tls is TlsPolicy.REQUIRED  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        Hop("h", "127.0.0.1", 0)
