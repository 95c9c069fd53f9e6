"""Where mail for a domain goes: the routing table first, then DNS (MX, implicit MX).

Routing-table syntax mirrors Postfix ``transport_maps`` + ``smtp_tls_policy_maps``::

    {
      "example.com": "relay.example.net:587",
      ".example.org": {"next_hop": "[192.0.2.10]:25", "tls": "required"},
      "bank.example": {"tls": "required-verify"},
      "default": {"next_hop": "[smarthost.example]:587", "tls": "required-verify",
                  "credentials": "secretsmanager:mailqueue/relay"}
    }

* keys: an exact domain, ``.suffix`` for every subdomain of ``suffix`` (not ``suffix``
  itself, as in Postfix), or ``default`` (a smart host for everything else); the exact
  key wins over suffixes, the longest suffix over shorter ones;
* ``next_hop``: ``host``, ``host:port``, ``[host]:port`` or ``[IPv6]:port``. As in Postfix,
  brackets turn off the MX lookup; without them the host's MX records are used (falling
  back to its A/AAAA). Without ``next_hop`` the recipient domain's MX is used with the
  entry's TLS options;
* ``tls``: ``none`` | ``opportunistic`` (default) | ``required`` | ``required-verify``;
* ``credentials``: ``secretsmanager:<id>`` or ``ssm:<name>``, resolved by an injected
  callable at connection time, never from the environment; AUTH then happens only over
  TLS unless ``allow_plaintext_auth`` is true;
* ``ca_file``: trust anchors for ``required-verify`` (default: the system store).

DNS failures raise :class:`NextHopError` carrying the Result to record. Failures to resolve
a *configured* relay are temporary (4.4.4/4.4.3): they are our configuration, not the
recipient's fault, and bouncing on them would lose mail.

Egress guard (``EgressMode=direct``): inside a VPC the delivery function can reach the
VPC's private networks and the instance metadata service, and an MX answer or an address
literal is chosen by whoever sends or receives the mail. :class:`EgressGuard` drops every
address that is not globally routable (private, loopback, link-local, metadata, CGNAT,
unspecified, multicast, reserved, documentation, ...) from the MX/literal path, unless an
explicit allow-list names it. Routing-table next hops are the operator's own configuration
and are not filtered. When every address of every MX host is refused the result is 4.7.0,
*temporary*, as Postfix records a DNS answer its reply filter drops entirely (DNS_POLICY →
4.7.0): a DNS answer can change (a migration, a split-horizon mistake) and the operator can
extend the allow-list, so the mail waits and bounces only at the queue lifetime, saying
why. A refused address *literal* (``user@[10.0.0.1]``) is 5.7.1 at once: nothing in DNS can
change it, so waiting five days would only delay the same answer.
"""

from __future__ import annotations

import enum
import ipaddress
import json
import logging
import random
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

import dns.exception

if TYPE_CHECKING:
    import dns.resolver

    from mailqueue.outbound.dane import DanePolicy

# dns.name and dns.resolver are imported where a lookup is made, not here: routing's
# types and config checks are imported by every handler, the resolver (~40 ms of cold
# import) only used where a next hop is resolved (direct mode).

from mailqueue.core.config import ConfigError
from mailqueue.core.model import Result
from mailqueue.core.policy import dns_null_mx, dns_nxdomain, dns_temporary, local_result
from mailqueue.outbound.special import embedded_ipv4, lookup

__all__ = [
    "DEFAULT_MAX_ADDRESSES",
    "Credentials",
    "CredentialsProvider",
    "EgressGuard",
    "Hop",
    "NextHopError",
    "Route",
    "RoutingConfigError",
    "RoutingTable",
    "TlsPolicy",
    "address_refusal",
    "credentials_from_secret",
    "parse_credentials_ref",
    "parse_next_hop",
    "resolve_next_hops",
]

log = logging.getLogger(__name__)

#: Postfix ``smtp_mx_address_limit``: addresses tried per delivery, across all MX hosts.
DEFAULT_MAX_ADDRESSES = 5


class TlsPolicy(enum.StrEnum):
    """Postfix security levels: none, may, encrypt, secure/verify."""

    NONE = "none"
    OPPORTUNISTIC = "opportunistic"
    REQUIRED = "required"
    REQUIRED_VERIFY = "required-verify"

    @property
    def mandatory(self) -> bool:
        return self in (TlsPolicy.REQUIRED, TlsPolicy.REQUIRED_VERIFY)


class RoutingConfigError(ValueError):
    """A routing table or route is invalid; raised at construction, never at delivery."""


#: Where the instance metadata service answers inside a VPC (IPv4 and the Nitro IPv6 one).
METADATA_ADDRESSES = frozenset(
    {ipaddress.ip_address("169.254.169.254"), ipaddress.ip_address("fd00:ec2::254")}
)
_CGNAT = ipaddress.ip_network("100.64.0.0/10")  # RFC 6598 shared address space
# IANA's IPv6 address space registry: only 2000::/3 is allocated as global unicast
_GLOBAL_UNICAST_V6 = ipaddress.ip_network("2000::/3")

_Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def address_refusal(address: str, allow: Iterable[_Network] = ()) -> str | None:
    """Why delivery must not connect to ``address`` from inside a VPC; None if it may.

    Anything not globally routable is refused (the named classes first, for a clear
    diagnostic): every block IANA's special-purpose registries list as not globally
    reachable (:mod:`mailqueue.outbound.special`), IPv6 outside 2000::/3; IPv6 forms that
    embed an IPv4 address (mapped, 6to4, NAT64) are judged by that address too, since the
    VPC's NAT64/6to4 would lead there. ``allow`` wins over all.
    """
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return "not an IP address"
    if any(ip in net for net in allow):
        return None
    if ip in METADATA_ADDRESSES:
        return "instance metadata address"
    if isinstance(ip, ipaddress.IPv6Address):
        # where the registry's embedding blocks carry an IPv4 address, each at its own
        # layout (special.EMBEDDINGS: RFC 6052 §2.2 by the translator prefix's length)
        found = embedded_ipv4(ip)
        if found is not None:
            inner = address_refusal(str(found[1]), allow)
            return None if inner is None else f"{inner} embedded in IPv6"
    # IANA's special-purpose registries decide for every block they list, the most
    # specific entry winning (192.0.0.9/32 is reachable inside the refused 192.0.0.0/24);
    # a refused one is named by its usual class first, for a clear diagnostic
    special = lookup(ip)
    if special is not None and special.globally_reachable:
        return None
    for test, reason in (
        (ip.is_unspecified, "unspecified address"),
        (ip.is_loopback, "loopback address"),
        (ip.is_link_local, "link-local address"),
        (ip.is_multicast, "multicast address"),
        (ip.version == 4 and ip in _CGNAT, "shared address space (CGNAT)"),
        (ip.version == 4 and ip.is_reserved, "reserved address"),
        (ip.is_private, "private address"),
        (ip.is_reserved, "reserved address"),
    ):
        if test:
            return reason
    if special is not None:
        return special.refusal
    if ip.version == 6 and ip not in _GLOBAL_UNICAST_V6:
        return "outside IPv6 global unicast 2000::/3 (e.g. deprecated site-local fec0::/10)"
    if not ip.is_global:
        return "address not globally routable"
    return None


class EgressGuard:
    """The SSRF guard of direct delivery: refuses non-public addresses but the allowed."""

    def __init__(self, allow: Iterable[_Network] = ()) -> None:
        self.allow: tuple[_Network, ...] = tuple(allow)

    @classmethod
    def from_setting(cls, text: str) -> EgressGuard:
        """``"127.0.0.1, 10.1.0.0/16"``: addresses or networks (comma or space separated)."""
        nets: list[_Network] = []
        for part in re.split(r"[\s,]+", text.strip()):
            if not part:
                continue
            try:
                nets.append(ipaddress.ip_network(part, strict=True))
            except ValueError as exc:
                raise RoutingConfigError(f"egress allow-list entry {part!r}: {exc}") from None
        return cls(nets)

    def refusal(self, address: str) -> str | None:
        return address_refusal(address, self.allow)


def make_resolver(nameservers: str = "") -> dns.resolver.Resolver:
    """The system resolver, or one for ``"10.0.0.2,10.0.0.3:5353"`` (one port for all):
    the one reading of the `dns_nameservers` setting, for delivery and doctor alike.
    Uncached as made: delivery and the doctor bind it to a `DnsCache` (dnscache.py)."""
    import dns.resolver  # here, not at import: ~40 ms of cold start

    if not nameservers:
        return dns.resolver.Resolver()
    r = dns.resolver.Resolver(configure=False)
    servers = [s.strip() for s in nameservers.split(",") if s.strip()]
    r.nameservers = [s.rsplit(":", 1)[0] for s in servers]
    ports = {int(s.rsplit(":", 1)[1]) for s in servers if ":" in s}
    if len(ports) > 1:
        raise ConfigError("all dns_nameservers must share one port")
    if ports:
        r.port = ports.pop()
    return r


class NextHopError(Exception):
    """No usable next hop; ``result`` is what to record for every recipient of the group."""

    def __init__(self, result: Result) -> None:
        super().__init__(f"{result.status} {result.text}")
        self.result = result


@dataclass(frozen=True, slots=True)
class Credentials:
    """SMTP AUTH credentials; the password never appears in repr or logs."""

    username: str
    password: str = field(repr=False)


CredentialsProvider = Callable[[str], Credentials]
"""Resolves a reference such as ``secretsmanager:relay`` to credentials (Powertools in prod)."""

_CRED_REF = re.compile(r"(secretsmanager|ssm):(\S+)")


def parse_credentials_ref(ref: str) -> tuple[Literal["secretsmanager", "ssm"], str]:
    """Split ``secretsmanager:<id>`` / ``ssm:<name>`` into (source, name)."""
    m = _CRED_REF.fullmatch(ref)
    if m is None:
        raise RoutingConfigError(
            f"credentials must be 'secretsmanager:<id>' or 'ssm:<name>', got {ref!r}"
        )
    source: Literal["secretsmanager", "ssm"] = (
        "secretsmanager" if m.group(1) == "secretsmanager" else "ssm"
    )
    return source, m.group(2)


def credentials_from_secret(value: str | bytes | Mapping[str, Any]) -> Credentials:
    """Parse a secret holding ``{"username": ..., "password": ...}`` (JSON or a mapping)."""
    data: Any = json.loads(value) if isinstance(value, str | bytes) else value
    if not isinstance(data, Mapping):
        raise ValueError("credentials secret must be a JSON object")
    user, password = data.get("username"), data.get("password")
    if not isinstance(user, str) or not isinstance(password, str) or not user:
        raise ValueError("credentials secret needs string 'username' and 'password'")
    return Credentials(user, password)


_LDH_LABEL = re.compile(r"(?!-)[a-z0-9_-]{1,63}(?<!-)")


def _normalise_domain(domain: str) -> str:
    """Lower-case A-label form without a trailing dot; RoutingConfigError if malformed."""
    d = domain.strip().rstrip(".").lower()
    if not d:
        raise RoutingConfigError("empty domain")
    if not d.isascii():
        try:
            d = d.encode("idna").decode("ascii")
        except UnicodeError as exc:
            raise RoutingConfigError(f"invalid domain {domain!r}: {exc}") from exc
    labels = d.split(".")
    if len(d) > 253 or not all(_LDH_LABEL.fullmatch(label) for label in labels):
        raise RoutingConfigError(f"invalid domain {domain!r}")
    return d


def _is_ip(value: str) -> bool:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True


def parse_next_hop(spec: str) -> tuple[str, int, bool]:
    """Parse ``host``, ``host:port``, ``[host]:port`` into (host, port, mx_lookup)."""
    s = spec.strip()
    if not s:
        raise RoutingConfigError("empty next hop")
    port = 25
    if s.startswith("["):
        host, sep, rest = s[1:].partition("]")
        if not sep:
            raise RoutingConfigError(f"unbalanced brackets in next hop {spec!r}")
        if rest:
            if not rest.startswith(":"):
                raise RoutingConfigError(f"junk after ']' in next hop {spec!r}")
            port = _parse_port(rest[1:], spec)
        mx_lookup = False
        if host.lower().startswith("ipv6:"):
            host = host[5:]
    else:
        if s.count(":") > 1:
            raise RoutingConfigError(f"IPv6 next hop must be bracketed: {spec!r}")
        host, sep, p = s.partition(":")
        if sep:
            port = _parse_port(p, spec)
        mx_lookup = not _is_ip(host)
    if _is_ip(host):
        host = str(ipaddress.ip_address(host))
        mx_lookup = False
    else:
        host = _normalise_domain(host)
    if port == 465:
        raise RoutingConfigError(
            f"{spec!r}: implicit TLS (SMTPS, port 465) is not supported; use 587 with STARTTLS"
        )
    return host, port, mx_lookup


def _parse_port(text: str, spec: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise RoutingConfigError(f"invalid port in next hop {spec!r}")
    return int(text)


@dataclass(frozen=True, slots=True)
class Route:
    """One routing-table entry. ``host`` None: the recipient domain's own MX."""

    host: str | None = None
    port: int = 25
    tls: TlsPolicy = TlsPolicy.OPPORTUNISTIC
    credentials: str | None = None
    mx_lookup: bool = False
    allow_plaintext_auth: bool = False
    ca_file: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.tls, TlsPolicy):
            raise RoutingConfigError(f"invalid tls policy {self.tls!r}")
        if not 0 < self.port < 65536:
            raise RoutingConfigError(f"invalid port {self.port}")
        if self.credentials is not None:
            parse_credentials_ref(self.credentials)
            if self.host is None:
                raise RoutingConfigError(
                    "credentials need an explicit next_hop: never send them to arbitrary MX hosts"
                )
            if self.tls is TlsPolicy.NONE and not self.allow_plaintext_auth:
                raise RoutingConfigError(
                    "credentials with tls 'none' would be sent in clear text; "
                    "set allow_plaintext_auth to accept that"
                )

    @classmethod
    def from_config(cls, value: str | Mapping[str, Any]) -> Route:
        """Build from a table value: a next-hop string or an options object."""
        if isinstance(value, str):
            name, number, lookup = parse_next_hop(value)
            return cls(host=name, port=number, mx_lookup=lookup)
        if not isinstance(value, Mapping):
            raise RoutingConfigError(f"route must be a string or an object, got {value!r}")
        known = {"next_hop", "tls", "credentials", "allow_plaintext_auth", "ca_file"}
        unknown = set(value) - known
        if unknown:
            raise RoutingConfigError(f"unknown route option(s): {', '.join(sorted(unknown))}")
        host: str | None = None
        port, mx = 25, False
        if value.get("next_hop") is not None:
            if not isinstance(value["next_hop"], str):
                raise RoutingConfigError("next_hop must be a string")
            host, port, mx = parse_next_hop(value["next_hop"])
        try:
            tls = TlsPolicy(value.get("tls", TlsPolicy.OPPORTUNISTIC.value))
        except ValueError:
            raise RoutingConfigError(
                f"tls must be one of {', '.join(p.value for p in TlsPolicy)}, "
                f"got {value.get('tls')!r}"
            ) from None
        creds = value.get("credentials")
        if creds is not None and not isinstance(creds, str):
            raise RoutingConfigError("credentials must be a string")
        plain = value.get("allow_plaintext_auth", False)
        if not isinstance(plain, bool):
            raise RoutingConfigError("allow_plaintext_auth must be true or false")
        ca_file = value.get("ca_file")
        if ca_file is not None and (not isinstance(ca_file, str) or not ca_file):
            raise RoutingConfigError("ca_file must be a path")
        return cls(
            host=host,
            port=port,
            tls=tls,
            credentials=creds,
            mx_lookup=mx,
            allow_plaintext_auth=plain,
            ca_file=ca_file,
        )


class RoutingTable:
    """Domain → Route, exact matches before ``.suffix`` wildcards, then ``default``."""

    def __init__(self, routes: Mapping[str, Route], default: Route | None = None) -> None:
        self._exact: dict[str, Route] = {}
        self._suffix: dict[str, Route] = {}
        for key, route in routes.items():
            if not isinstance(route, Route):
                raise RoutingConfigError(f"{key!r}: not a Route")
            if key.startswith("."):
                self._suffix[_normalise_domain(key[1:])] = route
            else:
                self._exact[_normalise_domain(key)] = route
        self.default = default

    @classmethod
    def from_json(cls, data: str | bytes | Mapping[str, Any]) -> RoutingTable:
        """Parse and validate a table; RoutingConfigError names the bad entry."""
        try:
            obj: Any = json.loads(data) if isinstance(data, str | bytes) else data
        except ValueError as exc:
            raise RoutingConfigError(f"routing table is not valid JSON: {exc}") from exc
        if not isinstance(obj, Mapping):
            raise RoutingConfigError("routing table must be a JSON object")
        routes: dict[str, Route] = {}
        default: Route | None = None
        for key, value in obj.items():
            if not isinstance(key, str):
                raise RoutingConfigError(f"routing key {key!r} is not a string")
            try:
                route = Route.from_config(value)
                if key == "default":
                    default = route
                else:
                    _normalise_domain(key[1:] if key.startswith(".") else key)
                    routes[key] = route
            except RoutingConfigError as exc:
                raise RoutingConfigError(f"routing entry {key!r}: {exc}") from None
        return cls(routes, default)

    def lookup(self, domain: str) -> Route | None:
        """The route for ``domain`` (exact, longest ``.suffix``, default) or None (MX)."""
        try:
            d = _normalise_domain(domain)
        except RoutingConfigError:
            return self.default
        if d in self._exact:
            return self._exact[d]
        labels = d.split(".")
        for i in range(1, len(labels)):
            route = self._suffix.get(".".join(labels[i:]))
            if route is not None:
                return route
        return self.default


def explicit_route(table: RoutingTable, domain: str) -> Route | None:
    """The exact or ``.suffix`` entry for `domain` that names a next hop; never the default."""
    d = _normalise_domain(domain)
    labels = d.split(".")
    candidates = [table._exact.get(d)] + [
        table._suffix.get(".".join(labels[i:])) for i in range(1, len(labels))
    ]
    route = next((r for r in candidates if r is not None), None)
    return route if route is not None and route.host is not None else None


def check_receiving_routes(table: RoutingTable, receiving_domains: str | Iterable[str]) -> None:
    """Refuse a receiving domain without an explicit next hop.

    A domain SES receives for has its MX at SES, so delivering its mail by MX (or through
    a default smart host that is SES's SMTP interface) hands it back to SES, which gives
    it back to us: a loop only the hop count would stop. Each one therefore needs an exact
    or ``.suffix`` entry with a ``next_hop`` (the mailbox server behind the queue).
    """
    names = (
        [p for p in re.split(r"[\s,]+", receiving_domains) if p]
        if isinstance(receiving_domains, str)
        else list(receiving_domains)
    )
    missing = [d for d in names if explicit_route(table, d) is None]
    if missing:
        raise RoutingConfigError(
            "receiving domain(s) without an explicit route (a next_hop entry; the default "
            f"route does not count): {', '.join(missing)}"
        )


@dataclass(frozen=True, slots=True)
class Hop:
    """One address to try. ``host`` names it for TLS verification, SNI and remote_mta."""

    host: str
    address: str
    port: int = 25
    tls: TlsPolicy = TlsPolicy.OPPORTUNISTIC
    credentials: str | None = None
    allow_plaintext_auth: bool = False
    ca_file: str | None = None
    preference: int = 0
    relay: bool = False  # from the routing table rather than the recipient's MX
    # the MTA-STS policy (mailqueue.outbound.mtasts) that made TLS verified
    mta_sts: str | None = None
    # the host's DANE TLSA records (mailqueue.outbound.dane): TLS authenticated by them
    dane: DanePolicy | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "tls", TlsPolicy(self.tls))  # accept plain strings
        if not 0 < self.port < 65536:
            raise ValueError(f"invalid port {self.port}")

    @property
    def pool_key(self) -> tuple[str, int, TlsPolicy, str | None, str | None]:
        """Connections are shared per (host, port, TLS policy, credentials, CA file):
        a session authenticated or verified one way is never lent to another."""
        return (self.host.lower(), self.port, self.tls, self.credentials, self.ca_file)

    @property
    def name(self) -> str:
        """Postfix-style ``host[address]:port`` for logs and diagnostics."""
        return f"{self.host}[{self.address}]:{self.port}"


_Families = Sequence[Literal[4, 6]]


def with_dane(
    resolver: dns.resolver.Resolver, domain: str, hops: Sequence[Hop], port: int = 25
) -> list[Hop] | None:
    """The domain's MX hops with their DANE policies (outbound/dane.py: TLS required and
    checked against the TLSA records), or None when DANE does not apply (insecure MX
    RRset, or no MX host with TLSA records): then MTA-STS and the usual TLS policy apply.
    Hosts of a DANE domain without TLSA records keep opportunistic TLS (RFC 7672 §2.2)."""
    from mailqueue.outbound import dane  # the resolver's import, only where DANE is on

    if not hops or not dane.mx_secure(resolver, domain):
        return None
    policies = {h.host: dane.lookup(resolver, h.host, port) for h in hops}
    if all(p is None for p in policies.values()):
        return None
    out: list[Hop] = []
    for h in hops:
        p = policies[h.host]
        out.append(h if p is None else replace(h, dane=p, tls=TlsPolicy.REQUIRED, mta_sts=None))
    return out


def resolve_next_hops(
    domain: str,
    table: RoutingTable | None,
    resolver: dns.resolver.Resolver,
    *,
    rng: random.Random | None = None,
    max_addresses: int = DEFAULT_MAX_ADDRESSES,
    families: _Families = (4, 6),
    port: int = 25,
    lifetime: float | None = None,
    guard: EgressGuard | None = None,
    mx_filter: Callable[[str], bool] | None = None,
) -> list[Hop]:
    """The ordered addresses to try for ``domain``; NextHopError when there are none.

    The routing table wins; otherwise MX records by preference, equal preferences
    shuffled with ``rng`` (RFC 5321 §5.1), each MX host's A then AAAA records (per
    ``families``), at most ``max_addresses`` in all. No MX: the domain's own A/AAAA
    (implicit MX). ``port`` is the SMTP port for MX delivery (25; tests use others).
    ``guard`` (direct egress) drops the MX and literal addresses it refuses; routing-table
    next hops are the operator's and are not filtered. ``mx_filter`` (an enforced MTA-STS
    policy) keeps only the MX hosts it accepts *before* addresses are counted, so hosts
    outside the policy cannot use up ``max_addresses``; when it accepts none, all are
    kept and the policy's own check refuses them with its diagnostic.
    """
    rng = rng or random.Random()
    route = table.lookup(domain) if table is not None else None
    tls = route.tls if route is not None else TlsPolicy.OPPORTUNISTIC
    ca_file = route.ca_file if route is not None else None
    resolve = _Resolve(resolver, families, lifetime, guard)

    if route is not None and route.host is not None:
        relay: dict[str, Any] = dict(
            port=route.port,
            tls=route.tls,
            credentials=route.credentials,
            allow_plaintext_auth=route.allow_plaintext_auth,
            ca_file=route.ca_file,
            relay=True,
        )
        if _is_ip(route.host):
            return [Hop(host=route.host, address=route.host, **relay)]
        try:
            if route.mx_lookup:
                hosts, implicit = resolve.mx_hosts(route.host, rng)
            else:
                hosts, implicit = [(0, route.host)], False
            hops = resolve.addresses(hosts, implicit, max_addresses, relay)
        except NextHopError as exc:
            raise NextHopError(_soften(exc.result, f"relay {route.host}")) from None
        return hops

    literal = _address_literal(domain)
    if literal is not None:
        why = guard.refusal(literal) if guard is not None else None
        if why is not None:
            log.warning("address literal refused by the egress guard", extra={"reason": why})
            raise NextHopError(
                local_result("5.7.1", f"delivery to [{literal}] refused: {why} (egress guard)")
            )
        return [Hop(host=literal, address=literal, port=port, tls=tls, ca_file=ca_file)]
    import dns.name

    try:
        name = dns.name.from_text(domain.strip().rstrip(".") + ".").to_text()
    except (dns.exception.DNSException, UnicodeError) as exc:
        raise NextHopError(
            local_result("5.1.3", f"bad destination domain {domain!r}: {exc}")
        ) from None
    mx_opts: dict[str, Any] = dict(port=port, tls=tls, ca_file=ca_file)
    hosts, implicit = resolve.mx_hosts(name, rng)
    if mx_filter is not None:
        hosts = [(pref, h) for pref, h in hosts if mx_filter(h)] or hosts
    return resolve.addresses(hosts, implicit, max_addresses, mx_opts)


def _soften(result: Result, what: str) -> Result:
    """Failures to reach a configured relay are our configuration: always temporary."""
    status = result.status if result.status.startswith("4") else "4.4.4"
    return local_result(status, f"{what}: {result.text}")


def _address_literal(domain: str) -> str | None:
    """The IP of an RFC 5321 address literal such as ``[192.0.2.1]`` or ``[IPv6:...]``."""
    d = domain.strip()
    if not (d.startswith("[") and d.endswith("]")):
        return None
    inner = d[1:-1]
    if inner.lower().startswith("ipv6:"):
        inner = inner[5:]
    try:
        return str(ipaddress.ip_address(inner))
    except ValueError:
        raise NextHopError(local_result("5.1.3", f"bad address literal {domain!r}")) from None


class _Resolve:
    """DNS lookups mapped to Results: NXDOMAIN 5.1.2, null MX 5.1.10, others 4.4.3."""

    def __init__(
        self,
        resolver: dns.resolver.Resolver,
        families: _Families,
        lifetime: float | None,
        guard: EgressGuard | None = None,
    ) -> None:
        if not families or any(f not in (4, 6) for f in families):
            raise ValueError("families must contain 4 and/or 6")
        self.resolver = resolver
        self.families = families
        self.lifetime = lifetime
        self.guard = guard

    def _query(self, name: str, rdtype: str) -> dns.resolver.Answer:
        import dns.resolver

        try:
            return self.resolver.resolve(
                name, rdtype, search=False, raise_on_no_answer=False, lifetime=self.lifetime
            )
        except dns.resolver.NXDOMAIN:
            raise
        except dns.resolver.NoNameservers:
            raise NextHopError(dns_temporary(name, rdtype, "server failure")) from None
        except dns.exception.Timeout:
            raise NextHopError(dns_temporary(name, rdtype, "timeout")) from None
        except dns.exception.DNSException as exc:
            raise NextHopError(dns_temporary(name, rdtype, type(exc).__name__)) from None

    def mx_hosts(self, name: str, rng: random.Random) -> tuple[list[tuple[int, str]], bool]:
        """MX targets by preference (ties shuffled), or the name itself (implicit: True)."""
        import dns.resolver

        domain = name.rstrip(".")
        try:
            answer = self._query(name, "MX")
        except dns.resolver.NXDOMAIN:
            raise NextHopError(dns_nxdomain(domain)) from None
        records = [
            (int(r.preference), r.exchange.to_text().rstrip(".").lower())
            for r in (answer.rrset or ())
        ]
        if not records:
            return [(0, domain)], True  # RFC 5321 §5.1: implicit MX
        # RFC 7505: a single MX whose exchange is the root means "no mail here". A root
        # exchange next to real ones is ignored (it can never be a mail server).
        if len(records) == 1 and records[0][1] == "":
            raise NextHopError(dns_null_mx(domain))
        records = [r for r in records if r[1] != ""]
        by_pref: dict[int, list[str]] = {}
        for pref, host in records:
            if host not in by_pref.setdefault(pref, []):
                by_pref[pref].append(host)
        ordered: list[tuple[int, str]] = []
        for pref in sorted(by_pref):
            hosts = sorted(by_pref[pref])  # canonical order first, so a seed decides alone
            rng.shuffle(hosts)
            ordered.extend((pref, h) for h in hosts)
        return ordered, False

    def addresses(
        self, hosts: list[tuple[int, str]], implicit: bool, limit: int, opts: Mapping[str, Any]
    ) -> list[Hop]:
        """Resolve each host's A/AAAA; skip unresolvable hosts, fail if none resolve."""
        hops: list[Hop] = []
        seen: set[tuple[str, str]] = set()  # per host, as Postfix: names may differ for TLS
        temporary: Result | None = None
        missing: list[str] = []
        refused: list[str] = []
        guard = self.guard if not opts.get("relay") else None
        for pref, host in hosts:
            if len(hops) >= limit:
                break
            if _is_ip(host):  # a (non-conforming) MX pointing at an address
                found = [host]
            else:
                found, temp = self._host_addresses(host)
                temporary = temporary or temp
                if not found and temp is None:
                    missing.append(host)
            for addr in found:
                why = guard.refusal(addr) if guard is not None else None
                if why is not None:
                    refused.append(f"{host}[{addr}]: {why}")
                    continue
                if (host, addr) not in seen and len(hops) < limit:
                    seen.add((host, addr))
                    hops.append(Hop(host=host, address=addr, preference=pref, **opts))
        if hops:
            if refused:
                log.info("egress guard skipped %d address(es)", len(refused))
            return hops
        if refused:
            # Postfix: a DNS answer its reply filter drops entirely is DNS_POLICY, 4.7.0
            log.warning("every MX address refused by the egress guard")
            raise NextHopError(
                local_result(
                    "4.7.0",
                    "no deliverable MX address: " + "; ".join(refused[:5]) + " (egress guard)",
                )
            )
        if temporary is not None:
            raise NextHopError(temporary)
        if implicit:  # the domain exists but has neither MX nor address records
            raise NextHopError(
                local_result("5.1.2", f"{hosts[0][1]}: no MX and no address records")
            )
        raise NextHopError(
            local_result("5.4.4", f"Host or domain name not found: MX host(s) {', '.join(missing)}")
        )

    def _host_addresses(self, host: str) -> tuple[list[str], Result | None]:
        """Addresses of one host, and the temporary error if a lookup failed."""
        found: list[str] = []
        import dns.resolver

        temporary: Result | None = None
        for family in self.families:
            rdtype = "A" if family == 4 else "AAAA"
            try:
                answer = self._query(host, rdtype)
            except dns.resolver.NXDOMAIN:
                log.info("MX host %s does not exist", host)
                break
            except NextHopError as exc:
                temporary = exc.result
                continue
            found.extend(r.address for r in (answer.rrset or ()))
        return found, (temporary if not found else None)
