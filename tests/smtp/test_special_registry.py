"""Issue 28, item 14: the egress guard refuses what IANA's special-purpose registries
(IPv4 and IPv6) say is not globally reachable, tested for every entry of both files."""

from __future__ import annotations

import csv
import io
import ipaddress
from importlib import resources

import pytest
from mailqueue.outbound.routing import address_refusal
from mailqueue.outbound.special import (
    EMBEDDINGS,
    REGISTRY_FILES,
    SpecialBlock,
    lookup,
    registry,
    rfc6052_ipv4,
)

IANA_HEADER = (
    "Address Block,Name,RFC,Allocation Date,Termination Date,Source,Destination,"
    "Forwardable,Globally Reachable,Reserved-by-Protocol"
)
# judged by the IPv4 address inside (routing.address_refusal), not by their own row
EMBEDDING = {"::ffff:0:0/96", "64:ff9b::/96", "64:ff9b:1::/48", "2002::/16"}
BLOCKS = [b for b in registry() if str(b.network) not in EMBEDDING]


def _samples(b: SpecialBlock) -> list[str]:
    """First, middle and last address of the block that no more specific entry holds."""
    net = b.network
    picks = {net[0], net[net.num_addresses // 2], net[-1]}
    inner = [
        o.network
        for o in registry()
        if o is not b and o.network.version == net.version and o.network.subnet_of(net)  # type: ignore[arg-type]
    ]
    return sorted(str(a) for a in picks if not any(a in n for n in inner))


def test_the_files_are_ianas_csv_with_both_families() -> None:
    for name in REGISTRY_FILES:
        text = resources.files("mailqueue").joinpath("data", name).read_text(encoding="utf-8")
        assert text.splitlines()[0] == IANA_HEADER
        assert len(list(csv.DictReader(io.StringIO(text)))) >= 24
    versions = {b.network.version for b in registry()}
    assert versions == {4, 6}


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: str(b.network))
def test_every_registry_entry_decides_its_addresses(block: SpecialBlock) -> None:
    samples = _samples(block)
    if block.network.prefixlen < block.network.max_prefixlen - 1:
        assert samples, block  # a wide block keeps at least one address of its own
    for addr in samples:
        assert lookup(ipaddress.ip_address(addr)) == block
        refusal = address_refusal(addr)
        if block.globally_reachable:
            assert refusal is None, (addr, block)
        else:
            assert refusal is not None, (addr, block)


@pytest.mark.parametrize(
    "addr",
    [
        "192.0.0.8",  # IPv4 dummy address, inside IETF Protocol Assignments
        "192.0.0.200",  # IETF Protocol Assignments, no more specific entry
        "3fff::1",  # documentation, RFC 9637
        "3fff:fff:ffff::1",
        "fec0::1",  # deprecated site-local: outside 2000::/3
        "4000::1",  # unallocated IPv6 space
        "5f00::1",  # SRv6 SIDs
        "100:0:0:1::1",  # dummy IPv6 prefix
        "2001:db8::1",
        "2001::1",  # Teredo: "N/A"
        "192.88.99.1",  # terminated 6to4 relay anycast
    ],
)
def test_the_issues_examples_are_refused(addr: str) -> None:
    assert address_refusal(addr) is not None


@pytest.mark.parametrize(
    ("addr", "refused"),
    [
        ("::ffff:192.0.0.8", True),
        ("::ffff:9.9.9.9", False),
        ("64:ff9b::9.9.9.9", False),
        ("64:ff9b::10.0.0.1", True),
        ("2002:0909:0909::1", False),
        ("2002:c000:0008::1", True),
    ],
)
def test_ipv4_embedding_entries_are_judged_by_the_ipv4_inside(addr: str, refused: bool) -> None:
    assert (address_refusal(addr) is not None) is refused


@pytest.mark.parametrize("addr", ["192.0.0.9", "192.0.0.10", "2001:1::1", "2001:4:112::1"])
def test_globally_reachable_entries_inside_refused_ones_pass(addr: str) -> None:
    assert address_refusal(addr) is None


# RFC 6052 §2.4's own examples: 192.0.2.33 under a network-specific prefix of each length
RFC6052_EXAMPLES = [
    (32, "2001:db8:c000:221::"),
    (40, "2001:db8:1c0:2:21::"),
    (48, "2001:db8:122:c000:2:2100::"),
    (56, "2001:db8:122:3c0:0:221::"),
    (64, "2001:db8:122:344:c0:2:2100:0"),
    (96, "2001:db8:122:344::192.0.2.33"),
]


@pytest.mark.parametrize(("length", "addr"), RFC6052_EXAMPLES)
def test_rfc6052_layouts_read_the_rfcs_examples(length: int, addr: str) -> None:
    assert rfc6052_ipv4(ipaddress.IPv6Address(addr), length) == ipaddress.IPv4Address("192.0.2.33")


@pytest.mark.parametrize(
    ("addr", "refused"),
    [
        # issue 43 item 13: RFC 8215's local-use /48 read as a /48 translator reads it
        ("64:ff9b:1:a9fe:a9:fe00:101:101", True),  # 169.254.169.254 (metadata) at /48
        ("64:ff9b:1:a9fe:a9:fe00::", True),
        ("64:ff9b:1:0a00:0:100::", True),  # 10.0.0.1 at /48
        ("64:ff9b:1:7f00:0:100::", True),  # 127.0.0.1 at /48
        ("64:ff9b:1:909:9:900::", False),  # 9.9.9.9 at /48
        ("64:ff9b:1:909:9:900:a9fe:a9fe", False),  # the last 32 bits are not read at /48
        ("64:ff9b::a9fe:a9fe", True),  # the well-known /96
    ],
)
def test_translator_prefixes_are_read_at_their_own_length(addr: str, refused: bool) -> None:
    refusal = address_refusal(addr)
    assert (refusal is not None) is refused, refusal


def test_the_embedding_table_names_registry_rows() -> None:
    """The layouts are keyed by registry row names: every name is a row, and every
    translator row is read at a prefix length RFC 6052 §2.2 defines."""
    names = {b.name for b in registry()}
    assert set(EMBEDDINGS) <= names
    translators = [b for b in registry() if b.name == "IPv4-IPv6 Translat."]
    assert {str(b.network) for b in translators} == {"64:ff9b::/96", "64:ff9b:1::/48"}
    for b in translators:
        rfc6052_ipv4(ipaddress.IPv6Address(int(b.network[0])), b.network.prefixlen)
