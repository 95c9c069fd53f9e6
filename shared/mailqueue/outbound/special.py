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
"""

from __future__ import annotations

import csv
import functools
import io
import ipaddress
import re
from dataclasses import dataclass
from importlib import resources

__all__ = ["REGISTRY_FILES", "SpecialBlock", "lookup", "registry"]

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
