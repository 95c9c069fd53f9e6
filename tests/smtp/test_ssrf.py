"""The egress guard of EgressMode=direct: MX answers and address literals that point into
the VPC (private, loopback, link-local, metadata, CGNAT, ...) are never connected to,
except what the allow-list names. Against the real loopback DNS server, and end to end
through the delivery handler with an aiosmtpd peer on 127.0.0.1 (let through by the
allow-list, as an operator would let an internal host through)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from mailqueue.core.config import ConfigError
from mailqueue.outbound.routing import (
    EgressGuard,
    NextHopError,
    RoutingConfigError,
    RoutingTable,
    address_refusal,
    resolve_next_hops,
)
from mailqueue.services.delivery import DeliverySettings

from tests.support import factories as f
from tests.support.dns_peer import DnsPeer, dns_server
from tests.support.rigs import RigFactory
from tests.support.smtp_peers import smtp_sink

#: One MX host per refused class; each domain's only MX is that host.
REFUSED = {
    "private": ("A", "10.0.0.5", "private address"),
    "private172": ("A", "172.31.255.1", "private address"),
    "loop": ("A", "127.0.0.1", "loopback address"),
    "meta": ("A", "169.254.169.254", "instance metadata address"),
    "meta6": ("AAAA", "fd00:ec2::254", "instance metadata address"),
    "linklocal": ("A", "169.254.10.10", "link-local address"),
    "linklocal6": ("AAAA", "fe80::1", "link-local address"),
    "ula": ("AAAA", "fd12:3456::1", "private address"),
    "cgnat": ("A", "100.64.0.1", "shared address space (CGNAT)"),
    "unspecified": ("A", "0.0.0.0", "unspecified address"),
    "multicast": ("A", "224.0.0.251", "multicast address"),
    "reserved": ("A", "240.0.0.1", "reserved address"),
    "broadcast": ("A", "255.255.255.255", "reserved address"),
    "testnet": ("A", "192.0.2.1", "private address"),
    "mapped": ("AAAA", "::ffff:10.0.0.1", "private address embedded in IPv6"),
    "nat64": ("AAAA", "64:ff9b::a9fe:a9fe", "instance metadata address embedded in IPv6"),
    "sixtofour": ("AAAA", "2002:7f00:1::1", "loopback address embedded in IPv6"),
}
PUBLIC = "9.9.9.9"  # only ever resolved here, never connected to

ZONE: dict[str, dict[str, list[str]]] = {}
for _name, (_type, _addr, _) in REFUSED.items():
    ZONE[f"{_name}.example"] = {"MX": [f"10 mx.{_name}.example."]}
    ZONE[f"mx.{_name}.example"] = {_type: [_addr]}
ZONE.update(
    {
        "mixed.example": {"MX": ["10 mx.private.example.", "20 mx.public.example."]},
        "mx.public.example": {"A": [PUBLIC]},
        "rebind.example": {"MX": ["10 mx.rebind.example."]},
        "mx.rebind.example": {"A": ["10.9.9.9", "127.0.0.1"]},
        "implicit.example": {"A": ["192.168.1.10"]},
        "allowed.example": {"MX": ["10 mx.allowed.example."]},
        "mx.allowed.example": {"A": ["127.0.0.1", "127.0.0.2"]},
        "internal-relay.example": {"A": ["10.1.2.3"]},
    }
)


@pytest.fixture(scope="module")
def dns() -> Iterator[DnsPeer]:
    with dns_server(ZONE) as peer:
        yield peer


NO_ALLOW = EgressGuard()


# ------------------------------------------------------------------ the classification
@pytest.mark.parametrize("name", sorted(REFUSED))
def test_each_refused_class_has_its_reason(name: str) -> None:
    _, addr, reason = REFUSED[name]
    assert address_refusal(addr) == reason


@pytest.mark.parametrize("addr", [PUBLIC, "2001:4860:4860::8888", "::ffff:9.9.9.9"])
def test_public_addresses_pass(addr: str) -> None:
    assert address_refusal(addr) is None


def test_allow_list_takes_addresses_and_networks() -> None:
    guard = EgressGuard.from_setting("127.0.0.1, 10.1.0.0/16 fd00:ec2::254")
    assert guard.refusal("127.0.0.1") is None
    assert guard.refusal("127.0.0.2") == "loopback address"
    assert guard.refusal("10.1.200.3") is None
    assert guard.refusal("10.2.0.1") == "private address"
    assert guard.refusal("fd00:ec2::254") is None
    for bad in ("10.1.0.1/16", "localhost", "300.1.1.1"):
        with pytest.raises(RoutingConfigError, match="egress allow-list"):
            EgressGuard.from_setting(bad)


def test_settings_validate_mode_and_allow_list() -> None:
    assert DeliverySettings().egress_guard() is None  # relay: no guard
    direct = DeliverySettings(egress_mode="direct", egress_allow="127.0.0.1")
    guard = direct.egress_guard()
    assert guard is not None and guard.refusal("127.0.0.1") is None
    with pytest.raises(ConfigError, match="egress_mode"):
        DeliverySettings(egress_mode="nat")
    with pytest.raises(ConfigError, match="egress allow-list"):
        DeliverySettings(egress_mode="direct", egress_allow="10.0.0.1/8")


# ------------------------------------------------------------------ MX answers
@pytest.mark.parametrize("name", sorted(REFUSED))
def test_mx_answer_into_the_vpc_is_refused_temporarily(dns: DnsPeer, name: str) -> None:
    with pytest.raises(NextHopError) as exc:
        resolve_next_hops(f"{name}.example", None, dns.resolver(), guard=NO_ALLOW)
    result = exc.value.result
    assert result.status == "4.7.0"
    assert REFUSED[name][2] in result.text and "egress guard" in result.text
    assert f"mx.{name}.example[" in result.text


def test_without_the_guard_relay_mode_resolves_as_before(dns: DnsPeer) -> None:
    hops = resolve_next_hops("private.example", None, dns.resolver())
    assert [h.address for h in hops] == ["10.0.0.5"]


def test_refused_hosts_are_skipped_and_the_public_one_kept(dns: DnsPeer) -> None:
    hops = resolve_next_hops("mixed.example", None, dns.resolver(), guard=NO_ALLOW)
    assert [(h.host, h.address) for h in hops] == [("mx.public.example", PUBLIC)]


def test_a_host_with_public_and_private_addresses_keeps_only_the_allowed(dns: DnsPeer) -> None:
    guard = EgressGuard.from_setting("127.0.0.1")
    hops = resolve_next_hops("rebind.example", None, dns.resolver(), guard=guard)
    assert [h.address for h in hops] == ["127.0.0.1"]
    hops = resolve_next_hops("allowed.example", None, dns.resolver(), guard=guard)
    assert [h.address for h in hops] == ["127.0.0.1"]  # 127.0.0.2 is not on the list


def test_implicit_mx_is_guarded_too(dns: DnsPeer) -> None:
    with pytest.raises(NextHopError) as exc:
        resolve_next_hops("implicit.example", None, dns.resolver(), guard=NO_ALLOW)
    assert exc.value.result.status == "4.7.0" and "private address" in exc.value.result.text


# ------------------------------------------------------------------ address literals
@pytest.mark.parametrize(
    ("domain", "reason"),
    [
        ("[10.0.0.1]", "private address"),
        ("[169.254.169.254]", "instance metadata address"),
        ("[IPv6:fd00:ec2::254]", "instance metadata address"),
        ("[127.0.0.1]", "loopback address"),
        ("[IPv6:::1]", "loopback address"),
        ("[100.100.100.100]", "shared address space (CGNAT)"),
    ],
)
def test_literal_into_the_vpc_is_refused_permanently(
    dns: DnsPeer, domain: str, reason: str
) -> None:
    with pytest.raises(NextHopError) as exc:
        resolve_next_hops(domain, None, dns.resolver(), guard=NO_ALLOW)
    assert exc.value.result.status == "5.7.1"
    assert reason in exc.value.result.text
    assert dns.queries == [] or all(q[0] != domain for q in dns.queries)


def test_allowed_literal_and_operator_routes_are_not_filtered(dns: DnsPeer) -> None:
    guard = EgressGuard.from_setting("127.0.0.1")
    (hop,) = resolve_next_hops("[127.0.0.1]", None, dns.resolver(), guard=guard)
    assert hop.address == "127.0.0.1"
    # the routing table is the operator's: an internal relay by address or by name
    table = RoutingTable.from_json(
        {
            "corp.example": {"next_hop": "[10.1.2.3]:25", "tls": "none"},
            "hr.example": {"next_hop": "internal-relay.example:25", "tls": "none"},
        }
    )
    for domain in ("corp.example", "hr.example"):
        (hop,) = resolve_next_hops(domain, table, dns.resolver(), guard=NO_ALLOW)
        assert (hop.address, hop.relay) == ("10.1.2.3", True)
    # a route that only sets TLS options still delivers by MX: guarded
    table = RoutingTable.from_json({"private.example": {"tls": "required"}})
    with pytest.raises(NextHopError):
        resolve_next_hops("private.example", table, dns.resolver(), guard=NO_ALLOW)


# ------------------------------------------------------------------ end to end
def test_direct_delivery_reaches_an_allowed_peer(rig: RigFactory) -> None:
    zone = {"x.example": {"MX": ["10 mx.x.example."]}, "mx.x.example": {"A": ["127.0.0.1"]}}
    with smtp_sink() as peer, dns_server(zone) as dns:
        r = rig(
            resolver=dns.resolver(),
            mx_port=peer.port,
            egress_mode="direct",
            egress_allow="127.0.0.1",
        )
        q = r.aws.storage().enqueue(f.envelope("a@x.example"), f.content())
        assert r.poll().failed == 0
        assert [m.rcpt_tos for m in peer.messages] == [["a@x.example"]]
    assert not r.aws.storage().content_exists(q.mail_id)  # finished and cleaned


def test_direct_delivery_defers_when_every_mx_is_refused(rig: RigFactory) -> None:
    zone = {"x.example": {"MX": ["10 mx.x.example."]}, "mx.x.example": {"A": ["127.0.0.1"]}}
    with smtp_sink() as peer, dns_server(zone) as dns:
        r = rig(resolver=dns.resolver(), mx_port=peer.port, egress_mode="direct")
        q = r.aws.storage().enqueue(f.envelope("a@x.example"), f.content())
        r.poll()
        assert peer.messages == [] and peer.commands == []  # never connected
    g = r.group(q.mail_id, "x.example")
    res = g.recipients[0].last_result
    assert g.recipients[0].state.value == "queued"
    assert res.status == "4.7.0" and "loopback address" in res.text
    assert r.bounce_messages() == []


def test_direct_delivery_bounces_a_literal_into_the_vpc(rig: RigFactory) -> None:
    with smtp_sink() as peer:
        r = rig(mx_port=peer.port, egress_mode="direct", egress_allow="127.0.0.1")
        q = r.aws.storage().enqueue(f.envelope("a@[169.254.169.254]", "b@[127.0.0.1]"), f.content())
        for _ in range(2):  # one group per literal domain
            r.poll()
        assert [m.rcpt_tos for m in peer.messages] == [["b@[127.0.0.1]"]]
    assert r.states(q.mail_id) == {"a@[169.254.169.254]": "bounced", "b@[127.0.0.1]": "delivered"}
    g = r.group(q.mail_id, "[169.254.169.254]")
    assert g.recipients[0].last_result.status == "5.7.1"
    assert "instance metadata address" in g.recipients[0].last_result.text
