"""MTA-STS (RFC 8461) for outbound delivery: discover, fetch, cache and apply a policy.

Discovery (§3, §5.1): the ``_mta-sts.<domain>`` TXT record names the current policy id;
the policy itself comes over HTTPS from ``https://mta-sts.<domain>/.well-known/mta-sts.txt``
with the certificate verified (no redirects, ``text/plain``, at most 64 KiB). Policies are
cached (a :class:`PolicyCache` port; DynamoDB in production) until ``max_age`` runs out and
refetched when the TXT id changes. A fetch that fails falls back to a cached, unexpired
policy, else to no policy at all (§5.1: a failed fetch must not stop mail).

Application (§4, §5): ``enforce`` keeps only the MX hosts the policy names (``*.x`` matches
exactly one left-most label) and requires TLS with a certificate valid for the MX name;
anything else is deferred 4.7.5 with a diagnostic naming the policy. ``testing`` logs what
``enforce`` would refuse and delivers as usual; ``none`` is no policy. A configured relay
(a routing entry with ``next_hop``) is not the recipient domain's MX: no MTA-STS there.

The core depends on no AWS SDK: the cache is a protocol, the fetcher plain ``ssl`` +
``http.client`` over addresses our own resolver found. Addresses never reach INFO logs
(only domains and MX host names).
"""

from __future__ import annotations

import dataclasses
import enum
import http.client
import logging
import re
import socket
import ssl
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Protocol

import dns.exception

if TYPE_CHECKING:  # only annotations here: the caller passes the resolver
    import dns.resolver

from mailqueue.core.model import Result, utcnow
from mailqueue.core.policy import local_result
from mailqueue.outbound.routing import Hop, TlsPolicy

__all__ = [
    "MAX_AGE_LIMIT",
    "MAX_POLICY_BYTES",
    "CachedPolicy",
    "MemoryPolicyCache",
    "Mode",
    "MtaSts",
    "Policy",
    "PolicyCache",
    "PolicyError",
    "explain",
    "fetch_policy",
    "mx_matches",
    "parse_policy",
    "parse_txt",
]

log = logging.getLogger(__name__)

#: §3.2: max_age is at most 31557600 seconds (about a year).
MAX_AGE_LIMIT = 31_557_600
#: §3.3: senders should not accept policies larger than 64 KiB.
MAX_POLICY_BYTES = 64 * 1024
_ID = re.compile(r"[A-Za-z0-9]{1,32}")
_MAX_AGE = re.compile(r"[0-9]{1,10}")
_WELL_KNOWN = "/.well-known/mta-sts.txt"


class PolicyError(ValueError):
    """A TXT record or policy file that does not follow RFC 8461's grammar."""


class Mode(enum.StrEnum):
    ENFORCE = "enforce"
    TESTING = "testing"
    NONE = "none"


@dataclass(frozen=True, slots=True)
class Policy:
    """A parsed policy file: mode, the MX patterns, and how long it may be cached."""

    mode: Mode
    mx: tuple[str, ...]
    max_age: int

    def matches(self, host: str) -> bool:
        return any(mx_matches(pattern, host) for pattern in self.mx)


@dataclass(frozen=True, slots=True)
class CachedPolicy:
    """A policy as fetched for a domain, under the id its TXT record had then."""

    domain: str
    policy_id: str
    policy: Policy
    fetched_at: datetime

    @property
    def expires_at(self) -> datetime:
        return self.fetched_at + timedelta(seconds=self.policy.max_age)

    def fresh(self, now: datetime) -> bool:
        return now < self.expires_at

    def label(self) -> str:
        return f"MTA-STS policy of {self.domain} (mode {self.policy.mode}, id {self.policy_id})"


class PolicyCache(Protocol):
    """Where fetched policies live between invocations (DynamoDB in production)."""

    def get(self, domain: str) -> CachedPolicy | None: ...

    def put(self, entry: CachedPolicy) -> None: ...


class MemoryPolicyCache:
    """A per-process cache for local runs without a table."""

    def __init__(self) -> None:
        self._entries: dict[str, CachedPolicy] = {}
        self._lock = threading.Lock()

    def get(self, domain: str) -> CachedPolicy | None:
        with self._lock:
            return self._entries.get(domain)

    def put(self, entry: CachedPolicy) -> None:
        with self._lock:
            self._entries[entry.domain] = entry


# ------------------------------------------------------------------------- parsing


def _canon(host: str) -> str:
    return host.strip().rstrip(".").lower()


def mx_matches(pattern: str, host: str) -> bool:
    """§4.1: exact (case-insensitive) or ``*.suffix`` matching exactly one extra label."""
    p, h = _canon(pattern), _canon(host)
    if p.startswith("*."):
        label, dot, rest = h.partition(".")
        return bool(label) and bool(dot) and rest == p[2:]
    return p == h


def parse_txt(strings: Sequence[str]) -> str:
    """The policy id of one ``_mta-sts`` TXT record (its strings already joined per RR)."""
    if len(strings) != 1:
        raise PolicyError(f"{len(strings)} MTA-STS TXT records (need exactly one)")
    fields = [f.strip() for f in strings[0].split(";")]
    if not fields or fields[0] != "v=STSv1":
        raise PolicyError("TXT record does not start with v=STSv1")
    found: str | None = None
    for f in fields[1:]:
        if not f:
            continue
        key, eq, value = f.partition("=")
        if not eq:
            raise PolicyError(f"malformed TXT field {f!r}")
        if key.strip() == "id" and found is None:
            value = value.strip()
            if not _ID.fullmatch(value):
                raise PolicyError(f"invalid policy id {value!r}")
            found = value
    if found is None:
        raise PolicyError("TXT record has no id")
    return found


def parse_policy(text: str) -> Policy:
    """Parse a policy file (§3.2): ``key: value`` lines, CRLF or LF, unknown keys ignored."""
    first: dict[str, str] = {}
    mx: list[str] = []
    for line in text.replace("\r\n", "\n").split("\n"):
        if not line.strip():
            continue
        key, colon, value = line.partition(":")
        if not colon:
            raise PolicyError(f"malformed policy line {line[:80]!r}")
        key, value = key.strip(), value.strip()
        if key == "mx":
            mx.append(_canon(value))
        else:
            first.setdefault(key, value)
    if first.get("version") != "STSv1":
        raise PolicyError("policy version is not STSv1")
    try:
        mode = Mode(first.get("mode", ""))
    except ValueError:
        raise PolicyError(f"invalid policy mode {first.get('mode')!r}") from None
    age = first.get("max_age", "")
    if not _MAX_AGE.fullmatch(age):
        raise PolicyError(f"invalid max_age {age!r}")
    max_age = min(int(age), MAX_AGE_LIMIT)
    for pattern in mx:
        body = pattern[2:] if pattern.startswith("*.") else pattern
        if not body or "*" in body or " " in body:
            raise PolicyError(f"invalid mx pattern {pattern!r}")
    if mode is not Mode.NONE and not mx:
        raise PolicyError(f"mode {mode} without any mx")
    return Policy(mode, tuple(mx), max_age)


# ------------------------------------------------------------------------- fetching


class _PinnedHTTPSConnection(http.client.HTTPSConnection):
    """HTTPS to a name at an address our resolver chose; SNI and verification use the name."""

    def __init__(
        self, host: str, address: str, port: int, ctx: ssl.SSLContext, timeout: float
    ) -> None:
        super().__init__(host, port, timeout=timeout, context=ctx)
        self._address = address
        self._ctx = ctx

    def connect(self) -> None:
        sock = socket.create_connection((self._address, self.port), self.timeout)
        self.sock = self._ctx.wrap_socket(sock, server_hostname=self.host)


def fetch_policy(
    domain: str,
    resolver: dns.resolver.Resolver,
    *,
    ca_file: str | None = None,
    port: int = 443,
    timeout: float = 10.0,
    refuse: Callable[[str], str | None] | None = None,
) -> str:
    """GET the policy text; PolicyError for anything but a verified 200 text/plain reply.
    `refuse` is the egress guard of direct mode: a policy host at an address it refuses
    (private, metadata...) is not contacted, as an MX there would not be."""
    host = f"mta-sts.{domain}"
    addresses: list[str] = []
    for rdtype in ("A", "AAAA"):
        try:
            answer = resolver.resolve(host, rdtype, search=False, raise_on_no_answer=False)
        except dns.exception.DNSException:
            continue
        addresses.extend(r.address for r in (answer.rrset or ()))
    if not addresses:
        raise PolicyError(f"{host} has no address")
    if refuse is not None:
        refused = [a for a in addresses if refuse(a) is not None]
        addresses = [a for a in addresses if a not in refused]
        if not addresses:
            raise PolicyError(f"{host}: every address refused by the egress guard ({refused})")
    ctx = ssl.create_default_context(cafile=ca_file)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    last: Exception | None = None
    for address in addresses:
        conn = _PinnedHTTPSConnection(host, address, port, ctx, timeout)
        try:
            conn.request("GET", _WELL_KNOWN, headers={"Host": host, "Accept": "text/plain"})
            resp = conn.getresponse()
            if resp.status != 200:  # §3.3: redirects are not followed
                raise PolicyError(f"https://{host}{_WELL_KNOWN}: HTTP {resp.status}")
            ctype = (resp.getheader("Content-Type") or "").split(";")[0].strip().lower()
            if ctype != "text/plain":
                raise PolicyError(f"https://{host}{_WELL_KNOWN}: media type {ctype!r}")
            body = resp.read(MAX_POLICY_BYTES + 1)
            if len(body) > MAX_POLICY_BYTES:
                raise PolicyError(f"https://{host}{_WELL_KNOWN}: larger than 64 KiB")
            return body.decode("utf-8")
        except ssl.SSLCertVerificationError as exc:
            last = PolicyError(f"https://{host}: certificate not verified: {exc.verify_message}")
        except (OSError, http.client.HTTPException, UnicodeDecodeError) as exc:
            last = PolicyError(f"https://{host}: {type(exc).__name__}: {exc}")
        finally:
            conn.close()
    assert last is not None
    raise last


# ------------------------------------------------------------------------- applying

_Fetch = Callable[[str], str]


class MtaSts:
    """Policy discovery with a cache, and its application to resolved hops."""

    def __init__(
        self,
        resolver: dns.resolver.Resolver,
        cache: PolicyCache,
        *,
        ca_file: str | None = None,
        https_port: int = 443,
        timeout: float = 10.0,
        clock: Callable[[], datetime] = utcnow,
        refuse: Callable[[str], str | None] | None = None,
    ) -> None:
        self.refuse = refuse
        self.resolver = resolver
        self.cache = cache
        self.ca_file = ca_file or None
        self.https_port = https_port
        self.timeout = timeout
        self.clock = clock

    def _txt_id(self, domain: str) -> str | None:
        """The TXT record's policy id; None when there is none (or it is unusable)."""
        try:
            answer = self.resolver.resolve(
                f"_mta-sts.{domain}", "TXT", search=False, raise_on_no_answer=False
            )
        except dns.exception.DNSException:
            return None
        records = [b"".join(r.strings).decode("utf-8", "replace") for r in (answer.rrset or ())]
        records = [r for r in records if r.split(";", 1)[0].strip() == "v=STSv1"]
        if not records:
            return None
        try:
            return parse_txt(records)
        except PolicyError as exc:
            log.warning("MTA-STS TXT record of %s ignored: %s", domain, exc)
            return None

    def _cached(self, domain: str) -> CachedPolicy | None:
        try:
            return self.cache.get(domain)
        except Exception:  # a cache outage must not stop mail: fetch afresh instead
            log.warning("MTA-STS cache unavailable for %s", domain, exc_info=True)
            return None

    def discover(self, domain: str) -> CachedPolicy | None:
        """§5.1: the policy to apply to ``domain`` now, or None."""
        domain = _canon(domain)
        now = self.clock()
        policy_id = self._txt_id(domain)
        cached = self._cached(domain)
        fresh = cached if cached is not None and cached.fresh(now) else None
        if policy_id is None:
            return fresh  # no live record: a still valid cached policy holds
        if fresh is not None and fresh.policy_id == policy_id:
            return fresh
        try:
            text = fetch_policy(
                domain,
                self.resolver,
                ca_file=self.ca_file,
                port=self.https_port,
                timeout=self.timeout,
                refuse=self.refuse,
            )
            entry = CachedPolicy(domain, policy_id, parse_policy(text), now.replace(microsecond=0))
        except (PolicyError, UnicodeError) as exc:
            log.warning("MTA-STS policy of %s not fetched: %s", domain, exc)
            return fresh
        try:
            self.cache.put(entry)
        except Exception:
            log.warning("MTA-STS policy of %s not cached", domain, exc_info=True)
        log.info(
            "MTA-STS policy of %s fetched: mode %s, id %s, max_age %s",
            domain,
            entry.policy.mode,
            policy_id,
            entry.policy.max_age,
        )
        return entry

    def apply(self, domain: str, hops: list[Hop]) -> list[Hop] | Result:
        """The hops to try under ``domain``'s policy, or the 4.7.5 to record for all."""
        if not hops or any(h.relay for h in hops) or domain.strip().startswith("["):
            return hops  # a configured relay or an address literal: not the domain's MX
        return self.apply_entry(self.discover(domain), hops)

    def apply_entry(self, entry: CachedPolicy | None, hops: list[Hop]) -> list[Hop] | Result:
        """`apply` with the policy already discovered (the caller filtered MX hosts by it
        before resolving their addresses)."""
        if not hops or any(h.relay for h in hops):
            return hops
        if entry is None or entry.policy.mode is Mode.NONE:
            return hops
        policy = entry.policy
        allowed = [h for h in hops if policy.matches(h.host)]
        if policy.mode is Mode.TESTING:
            for host in sorted({h.host for h in hops if h not in allowed}):
                log.info("%s: MX %s is not in the policy (delivering anyway)", entry.label(), host)
            return hops
        if not allowed:
            names = ", ".join(sorted({h.host for h in hops}))
            return local_result(
                "4.7.5",
                f"{entry.label()} names none of the MX hosts ({names}); "
                f"the policy allows: {', '.join(policy.mx)}",
            )
        label = entry.label()
        return [
            dataclasses.replace(
                h, tls=TlsPolicy.REQUIRED_VERIFY, ca_file=self.ca_file or h.ca_file, mta_sts=label
            )
            for h in allowed
        ]


def explain(hops: Sequence[Hop], results: Mapping[str, Result]) -> dict[str, Result]:
    """Under an enforced policy, TLS failures (4.7.x) become 4.7.5 naming the policy."""
    label = next((h.mta_sts for h in hops if h.mta_sts), None)
    if label is None:
        return dict(results)
    out: dict[str, Result] = {}
    for rid, r in results.items():
        if r.status.startswith("4.7."):
            r = Result(r.code, "4.7.5", f"{label}: {r.text}", r.remote_mta)
        out[rid] = r
    return out
