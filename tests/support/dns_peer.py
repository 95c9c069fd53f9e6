"""A tiny authoritative DNS server on 127.0.0.1 (UDP) serving a zone from a dict.

Built on dnspython's message API, so MX/A/AAAA answers, NXDOMAIN, NODATA, SERVFAIL and
silence (client timeouts) are real DNS on the wire, and code under test can use a real
``dns.resolver.Resolver`` pointed at it::

    zone = {
        "example.org": {"MX": ["10 mx1.example.org.", "20 mx2.example.org."]},
        "mx1.example.org": {"A": ["127.0.0.1"]},
        "nullmx.example": {"MX": ["0 ."]},
        "alias.example": {"CNAME": ["mx1.example.org."]},
    }
    with dns_server(zone, servfail={"broken.example"}, silent={"slow.example"}) as dns:
        resolver = dns.resolver()
        ...
        assert ("example.org.", "MX") in dns.queries

A name absent from the zone is NXDOMAIN; a present name without the asked type is
NOERROR with an empty answer (NODATA). Names are case-insensitive, trailing dot optional.

TTLs: 60 s for every record unless ``ttl`` says otherwise (an int, or per type:
``{"MX": 300, "A": 3600}``, "*" for the rest). ``soa`` ({zone apex: (SOA TTL, MINIMUM)})
puts the enclosing zone's SOA in the authority section of NXDOMAIN and NODATA answers, as
an authoritative server does (RFC 2308 §3: the negative TTL a cache uses). ``secure``
names are answered with the AD bit when the query asked for DNSSEC (DO or AD), as a
validating resolver does for data it validated; every other answer has AD clear.

TXT values are given as the record's text (``"v=spf1 -all"``, ``"v=STSv1; id=1"``) and
served as one RR each, split into 255-byte strings; a value already in zone-file form
(starting with a double quote) is used as is. PTR works like any type
(``"1.0.0.127.in-addr.arpa": {"PTR": ["mx.example."]}``).
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager

import dns.exception
import dns.flags
import dns.message
import dns.name
import dns.rcode
import dns.rdataclass
import dns.rdatatype
import dns.resolver
import dns.rrset

__all__ = ["DnsPeer", "dns_server"]

Zone = Mapping[str, Mapping[str, Sequence[str]]]


def _canon(name: str) -> str:
    return name.lower().rstrip(".") + "."


def _txt(value: str) -> str:
    """Zone-file form of a TXT value: quoted 255-byte strings (``;`` is not a comment)."""
    if value.startswith('"'):
        return value
    raw = value.encode("utf-8")
    chunks = [raw[i : i + 255] for i in range(0, len(raw), 255)] or [b""]
    esc = [
        c.decode("utf-8", "surrogateescape").replace("\\", "\\\\").replace('"', '\\"')
        for c in chunks
    ]
    return " ".join(f'"{c}"' for c in esc)


class DnsPeer:
    """The running server: ``port``, ``queries`` seen, and a ``resolver()`` for it."""

    def __init__(
        self,
        zone: Zone,
        servfail: Iterable[str] = (),
        silent: Iterable[str] = (),
        *,
        ttl: int | Mapping[str, int] = 60,
        soa: Mapping[str, tuple[int, int]] | None = None,
        secure: Iterable[str] = (),
    ) -> None:
        self.ttls = {"*": ttl} if isinstance(ttl, int) else {k.upper(): v for k, v in ttl.items()}
        self.soa = {_canon(k): v for k, v in (soa or {}).items()}
        self.secure = {_canon(n) for n in secure}
        self.zone = {
            _canon(name): {
                t.upper(): [_txt(x) for x in v] if t.upper() == "TXT" else list(v)
                for t, v in types.items()
            }
            for name, types in zone.items()
        }
        self.servfail = {_canon(n) for n in servfail}
        self.silent = {_canon(n) for n in silent}
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.settimeout(0.1)
        self.port: int = self._sock.getsockname()[1]
        self._queries: list[tuple[str, str]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @property
    def queries(self) -> list[tuple[str, str]]:
        with self._lock:
            return list(self._queries)

    def set(self, name: str, rdtype: str, values: Sequence[str]) -> None:
        """Replace (or, with no values, remove) one name's records of one type."""
        t = rdtype.upper()
        with self._lock:
            records = self.zone.setdefault(_canon(name), {})
            if values:
                records[t] = [_txt(x) for x in values] if t == "TXT" else list(values)
            else:
                records.pop(t, None)

    def resolver(self, *, timeout: float = 1.0, lifetime: float = 2.0) -> dns.resolver.Resolver:
        """A resolver that asks only this server (no /etc/resolv.conf, no cache)."""
        r = dns.resolver.Resolver(configure=False)
        r.nameservers = ["127.0.0.1"]
        r.port = self.port
        r.timeout = timeout
        r.lifetime = lifetime
        r.retry_servfail = False
        return r

    def start(self) -> DnsPeer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._sock.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                data, addr = self._sock.recvfrom(4096)
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                reply = self._answer(dns.message.from_wire(data))
            except dns.exception.DNSException:
                continue
            if reply is not None:
                self._sock.sendto(reply.to_wire(), addr)

    def _ttl(self, rdtype: str) -> int:
        return self.ttls.get(rdtype, self.ttls.get("*", 60))

    def _negative(self, response: dns.message.Message, name: str) -> dns.message.Message:
        """The enclosing zone's SOA in the authority section (when ``soa`` names one)."""
        labels = name.rstrip(".").split(".")
        for i in range(len(labels)):
            apex = ".".join(labels[i:]) + "."
            if apex in self.soa:
                soa_ttl, minimum = self.soa[apex]
                response.authority.append(
                    dns.rrset.from_text_list(
                        apex,
                        soa_ttl,
                        dns.rdataclass.IN,
                        "SOA",
                        [f"ns.{apex} hostmaster.{apex} 1 3600 600 86400 {minimum}"],
                    )
                )
                break
        return response

    def _answer(self, query: dns.message.Message) -> dns.message.Message | None:
        response = dns.message.make_response(query)
        response.flags |= dns.flags.AA
        if not query.question:
            response.set_rcode(dns.rcode.FORMERR)
            return response
        question = query.question[0]
        name = _canon(question.name.to_text())
        rdtype = dns.rdatatype.to_text(question.rdtype)
        with self._lock:
            self._queries.append((name, rdtype))
        if name in self.silent:
            return None
        if name in self.servfail:
            response.set_rcode(dns.rcode.SERVFAIL)
            return response
        dnssec = bool(query.ednsflags & dns.flags.DO) or bool(query.flags & dns.flags.AD)
        if dnssec and name in self.secure:
            response.flags |= dns.flags.AD
        else:
            response.flags &= ~dns.flags.AD
        for _ in range(8):  # follow CNAMEs inside the zone
            with self._lock:
                records = self.zone.get(name)
                records = dict(records) if records is not None else None
            if records is None:
                response.set_rcode(dns.rcode.NXDOMAIN)
                return self._negative(response, name)
            if rdtype != "CNAME" and "CNAME" in records:
                target = records["CNAME"][0]
                response.answer.append(
                    dns.rrset.from_text_list(
                        name, self._ttl("CNAME"), dns.rdataclass.IN, "CNAME", [target]
                    )
                )
                name = _canon(target)
                continue
            values = records.get(rdtype)
            if not values:
                return self._negative(response, name)
            response.answer.append(
                dns.rrset.from_text_list(name, self._ttl(rdtype), dns.rdataclass.IN, rdtype, values)
            )
            return response
        response.set_rcode(dns.rcode.SERVFAIL)
        return response


@contextmanager
def dns_server(
    zone: Zone,
    *,
    servfail: Iterable[str] = (),
    silent: Iterable[str] = (),
    ttl: int | Mapping[str, int] = 60,
    soa: Mapping[str, tuple[int, int]] | None = None,
    secure: Iterable[str] = (),
) -> Iterator[DnsPeer]:
    peer = DnsPeer(zone, servfail, silent, ttl=ttl, soa=soa, secure=secure).start()
    try:
        yield peer
    finally:
        peer.stop()
