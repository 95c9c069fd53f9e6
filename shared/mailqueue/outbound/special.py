"""IANA's special-purpose address registries as the egress guard's refused set.

The data are IANA's own CSV files, committed unchanged in form (``mailqueue/data/``):

- https://www.iana.org/assignments/iana-ipv4-special-registry/iana-ipv4-special-registry-1.csv
- https://www.iana.org/assignments/iana-ipv6-special-registry/iana-ipv6-special-registry-1.csv

(transcribed from the registries as of 2026, each row citing its RFC in the registry's own
RFC column; the machine that wrote them had no route to iana.org. To refresh: download the
two files over these and run ``tests/smtp/test_special_registry.py``.)

An address is judged by the *most specific* registry entry holding it: an entry whose
"Globally Reachable" is ``True`` is allowed (``192.0.0.9/32`` inside the refused
``192.0.0.0/24``), anything else — ``False``, ``N/A``, or a terminated entry with no
flags — is refused. The IPv4-embedding entries (``::ffff:0:0/96``, ``64:ff9b::/96``,
``64:ff9b:1::/48``, ``2002::/16``) are judged by the IPv4 address inside before this (see
``routing.address_refusal``), since a VPC's NAT64 or 6to4 path leads there.

Where the IPv4 address sits is a table too (`EMBEDDINGS`, keyed by the registry row's
name), so the blocks come from the registry and only the layouts from the RFCs: a
translator prefix ("IPv4-IPv6 Translat.", RFC 6052 and RFC 8215) carries it at its own
prefix length, RFC 6052 §2.2 (/32, /40, /48, /56, /64 or /96, bits 64-71, the "u" octet,
skipped), so ``64:ff9b:1::/48`` is read as a /48 translator reads it, not by its last 32
bits (issue 43 item 13: ``64:ff9b:1:a9fe:a9:fe00:101:101`` is 169.254.169.254 there).
"""

from __future__ import annotations

import csv
import functools
import io
import ipaddress
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import resources

__all__ = [
    "EMBEDDINGS",
    "REGISTRY_FILES",
    "SpecialBlock",
    "embedded_ipv4",
    "lookup",
    "registry",
    "rfc6052_ipv4",
]

REGISTRY_FILES = ("iana-ipv4-special-registry-1.csv", "iana-ipv6-special-registry-1.csv")
_FOOTNOTE = re.compile(r"\s*\[\d+\]")

_Network = ipaddress.IPv4Network | ipaddress.IPv6Network
_Address = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True, slots=True)
class SpecialBlock:
    """One block of a registry row: its name, RFC and whether it is globally reachable."""

    network: _Network
    name: str
    rfc: str
    globally_reachable: bool  # only an explicit "True" counts

    @property
    def refusal(self) -> str:
        return f"special-purpose address: {self.name} ({self.network}, {self.rfc})"


def parse_registry(text: str) -> list[SpecialBlock]:
    """Rows of an IANA special-purpose CSV: footnote marks dropped, a cell naming two blocks
    split, line breaks inside the RFC cell joined."""
    out: list[SpecialBlock] = []
    for row in csv.DictReader(io.StringIO(text)):
        reach = _FOOTNOTE.sub("", row["Globally Reachable"] or "").strip()
        rfc = " ".join((row["RFC"] or "").split())
        name = row["Name"].strip().strip('"')
        for cell in _FOOTNOTE.sub("", row["Address Block"]).split(","):
            net = ipaddress.ip_network(cell.strip(), strict=True)
            out.append(SpecialBlock(net, name, rfc, reach == "True"))
    return out


@functools.cache
def registry() -> tuple[SpecialBlock, ...]:
    """Both registries, most specific block first (read once per process, on first use)."""
    blocks: list[SpecialBlock] = []
    for name in REGISTRY_FILES:
        text = resources.files("mailqueue").joinpath("data", name).read_text(encoding="utf-8")
        blocks.extend(parse_registry(text))
    return tuple(sorted(blocks, key=lambda b: -b.network.prefixlen))


def lookup(ip: _Address) -> SpecialBlock | None:
    """The most specific registry block holding ``ip``, or None."""
    for b in registry():
        if b.network.version == ip.version and ip in b.network:
            return b
    return None


# ------------------------------------------------------------------ IPv4 embeddings
#: RFC 6052 §2.2: the octets holding the IPv4 address for each prefix length (octet 8,
#: bits 64-71, is the "u" octet and never holds any)
_RFC6052_OCTETS: Mapping[int, tuple[int, int, int, int]] = {
    32: (4, 5, 6, 7),
    40: (5, 6, 7, 9),
    48: (6, 7, 9, 10),
    56: (7, 9, 10, 11),
    64: (9, 10, 11, 12),
    96: (12, 13, 14, 15),
}


def rfc6052_ipv4(ip: ipaddress.IPv6Address, prefixlen: int) -> ipaddress.IPv4Address:
    """The IPv4 address an RFC 6052 translator with a /`prefixlen` prefix reads in `ip`."""
    try:
        octets = _RFC6052_OCTETS[prefixlen]
    except KeyError:
        raise ValueError(f"RFC 6052 defines no /{prefixlen} prefix") from None
    packed = ip.packed
    return ipaddress.IPv4Address(bytes(packed[i] for i in octets))


def _translator(block: SpecialBlock, ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address:
    return rfc6052_ipv4(ip, block.network.prefixlen)


def _last_32(block: SpecialBlock, ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address:
    return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)


def _sixtofour(block: SpecialBlock, ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address:
    return ipaddress.IPv4Address((int(ip) >> 80) & 0xFFFFFFFF)  # bits 16-47 (RFC 3056 §2)


_Decode = Callable[[SpecialBlock, ipaddress.IPv6Address], ipaddress.IPv4Address]
#: registry row name → where its addresses carry an IPv4 address
EMBEDDINGS: Mapping[str, _Decode] = {
    "IPv4-IPv6 Translat.": _translator,  # RFC 6052 (64:ff9b::/96), RFC 8215 (64:ff9b:1::/48)
    "IPv4-mapped Address": _last_32,  # RFC 4291 §2.5.5.2
    "6to4": _sixtofour,  # RFC 3056
}


@functools.cache
def _embedding_blocks() -> tuple[SpecialBlock, ...]:
    blocks = tuple(b for b in registry() if b.name in EMBEDDINGS)
    names = {b.name for b in blocks}
    if names != set(EMBEDDINGS):  # a registry file without a row the table expects
        raise ValueError(f"registry rows missing for {sorted(set(EMBEDDINGS) - names)}")
    return blocks


def embedded_ipv4(ip: ipaddress.IPv6Address) -> tuple[SpecialBlock, ipaddress.IPv4Address] | None:
    """The embedding block holding `ip` (the most specific) and the IPv4 address it
    carries there, or None if `ip` is in no embedding block."""
    for b in _embedding_blocks():
        if ip in b.network:
            return b, EMBEDDINGS[b.name](b, ip)
    return None
