"""`mailqueue doctor`: is the DNS ready for direct delivery from our own IPs?

Pure checks over a resolver and the configuration, each a :class:`Finding` (ok or not,
and when not, the DNS record to publish):

* ``fcrdns`` — each sending IP's PTR names a host whose A/AAAA records include that IP
  (forward-confirmed reverse DNS; receivers such as Gmail and Microsoft require it);
* ``ehlo`` — the configured EHLO name is such a forward-confirmed name of every sending IP;
* ``spf`` — SPF (RFC 7208, evaluated by pyspf) passes each sending IP for each sender
  domain (MAIL FROM identity) and for the EHLO name (HELO identity);
* ``dkim`` — each configured selector's ``<selector>._domainkey.<domain>`` TXT record
  exists and carries the public half of the stored key (RFC 6376 / RFC 8463);
* ``dmarc`` — ``_dmarc.<domain>`` has a ``v=DMARC1`` record (RFC 7489).

Keys are read, never written, through a :data:`KeySource`: the secret
``<prefix>dkim/<domain>/<selector>`` holds ``{"algorithm": "rsa-sha256" | "ed25519-sha256",
"private_key": <PEM> | <base64 of the 32-byte ed25519 seed>}``.
"""

from __future__ import annotations

import ipaddress
import json
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import dns.exception
import dns.resolver
import dns.reversename

from mailqueue.core.config import ConfigError, settings_from_env
from mailqueue.outbound.dnscache import DnsCache
from mailqueue.outbound.routing import make_resolver

__all__ = [
    "DoctorInput",
    "DoctorSettings",
    "Finding",
    "KeySource",
    "check_dkim",
    "check_dmarc",
    "check_fcrdns",
    "check_spf",
    "local_stack_report",
    "dkim_public_txt",
    "render",
    "run",
    "zone_txt",
]

KeySource = Callable[[str], str | None]
"""A key reference (``secretsmanager:<name>`` or ``ssm:/<name>``) -> its JSON, None if absent."""


@dataclass(frozen=True, slots=True)
class Finding:
    check: str  # fcrdns | ehlo | spf | dkim | dmarc
    subject: str  # the IP, domain or selector checked
    ok: bool
    detail: str
    publish: str | None = None  # the record to publish (zone-file form) when not ok

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class DoctorInput:
    ehlo: str
    sending_ips: tuple[str, ...]
    dkim: Mapping[str, Sequence[str]]  # domain -> selectors
    sender_domains: tuple[str, ...] = ()  # more domains (without DKIM keys)
    dkim_key_prefix: str = "mailqueue/"
    key_store: str = "secretsmanager"  # or ssm
    # the other egress pools (outbound/pools.py): (name, EHLO name, its addresses)
    pools: tuple[tuple[str, str, tuple[str, ...]], ...] = ()

    @property
    def domains(self) -> list[str]:
        return sorted({d.lower().rstrip(".") for d in [*self.dkim, *self.sender_domains]})

    def key_ref(self, domain: str, selector: str) -> str:
        name = f"{self.dkim_key_prefix}dkim/{domain}/{selector}"
        return f"secretsmanager:{name}" if self.key_store == "secretsmanager" else f"ssm:/{name}"


@dataclass(frozen=True, slots=True)
class DoctorSettings:
    """MQ_* settings the doctor reads (the same names the delivery function uses)."""

    hostname: str = "mailqueue.invalid"
    sending_ips: str = ""  # JSON list or comma list (the egress stack's Elastic IPs)
    dkim_domains: str = "{}"  # {"example.com": ["sel1", "sel2"]}
    sender_domains: str = ""  # comma list of further sender domains
    dkim_key_prefix: str = "mailqueue/"
    dkim_key_store: str = "secretsmanager"
    dns_nameservers: str = ""  # "127.0.0.1:5353" for tests; empty: the system resolver
    dns_timeout_seconds: float = 5.0
    # the local stack (MQ_LOCAL_STACK): it publishes no DNS, so the checks are skipped
    # with a plain word instead of failing against the machine's resolver
    local_stack: bool = False
    # egress pools (outbound/pools.py): the pools file, and the NAT addresses of each
    # added pool whose file entry says "@nat" ("pool=ip,ip;pool2=ip": the stack's
    # PoolSendingIps); every pool but the default one is checked under its own EHLO name
    pools: str = ""
    pool_sending_ips: str = ""

    def __post_init__(self) -> None:
        self.input()  # fail fast on malformed settings

    def input(self) -> DoctorInput:
        raw = self.sending_ips.strip()
        if raw.startswith("["):
            try:
                ips = json.loads(raw)
            except ValueError as e:
                raise ConfigError(f"sending_ips is not JSON: {e}") from e
            if not isinstance(ips, list) or not all(isinstance(i, str) for i in ips):
                raise ConfigError("sending_ips must be a list of addresses")
        else:
            ips = [p.strip() for p in raw.split(",") if p.strip()]
        for ip in ips:
            try:
                ipaddress.ip_address(ip)
            except ValueError:
                raise ConfigError(f"sending_ips: {ip!r} is not an IP address") from None
        try:
            dkim = json.loads(self.dkim_domains or "{}")
        except ValueError as e:
            raise ConfigError(f"dkim_domains is not JSON: {e}") from e
        if not isinstance(dkim, dict) or not all(
            isinstance(k, str) and isinstance(v, list) and all(isinstance(s, str) for s in v)
            for k, v in dkim.items()
        ):
            raise ConfigError('dkim_domains must be {"domain": ["selector", ...]}')
        if self.dkim_key_store not in ("secretsmanager", "ssm"):
            raise ConfigError("dkim_key_store must be secretsmanager or ssm")
        return DoctorInput(
            pools=self._pools(),
            ehlo=self.hostname.lower().rstrip("."),
            sending_ips=tuple(str(ipaddress.ip_address(i)) for i in ips),
            dkim={k.lower().rstrip("."): tuple(v) for k, v in dkim.items()},
            sender_domains=tuple(d.strip() for d in self.sender_domains.split(",") if d.strip()),
            dkim_key_prefix=self.dkim_key_prefix,
            key_store=self.dkim_key_store,
        )

    def _pools(self) -> tuple[tuple[str, str, tuple[str, ...]], ...]:
        from mailqueue.outbound.pools import NAT, load_pools

        nat: dict[str, list[str]] = {}
        for part in self.pool_sending_ips.split(";"):
            name, sep, ips = part.strip().partition("=")
            if not part.strip():
                continue
            if not sep:
                raise ConfigError(f"pool_sending_ips: {part!r} is not pool=ip,ip")
            try:
                nat[name] = [str(ipaddress.ip_address(i.strip())) for i in ips.split(",") if i]
            except ValueError as e:
                raise ConfigError(f"pool_sending_ips: {e}") from e
        cfg = load_pools(self.pools)
        out = []
        for p in cfg.pools.values():
            if p.name == cfg.default and p.ehlo_name(self.hostname) == self.hostname:
                continue  # the default pool: the checks above (sending_ips, hostname)
            if p.addresses == (NAT,):
                addrs = nat.get(p.name, [])
            else:
                addrs = [str(a) for n in p.networks() for a in list(n)[:256]]
            out.append((p.name, p.ehlo_name(self.hostname).lower(), tuple(addrs)))
        return tuple(out)

    def resolver(self) -> dns.resolver.Resolver:
        """The run's resolver, through a cache of its own (dnscache.py): the SPF includes
        and A/AAAA a run asks again per IP or domain are asked once, and the next run
        (after the operator fixed a record) asks afresh."""
        r = make_resolver(self.dns_nameservers)
        r.lifetime = self.dns_timeout_seconds
        return DnsCache().bind(r)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **explicit: Any) -> DoctorSettings:
        return settings_from_env(cls, env=env, **explicit)


# ------------------------------------------------------------------------ DNS helpers


class _Lookup:
    """Answers as lists; NXDOMAIN/NODATA are empty, other failures raise `_DnsTrouble`."""

    def __init__(self, resolver: dns.resolver.Resolver) -> None:
        self.r = resolver

    def __call__(self, name: str, rdtype: str) -> list[Any]:
        try:
            ans = self.r.resolve(name, rdtype, search=False, raise_on_no_answer=False)
        except dns.resolver.NXDOMAIN:
            return []
        except dns.exception.DNSException as e:
            raise _DnsTrouble(f"{name} {rdtype}: {type(e).__name__}") from None
        return list(ans.rrset or ())

    def txt(self, name: str) -> list[str]:
        return [b"".join(r.strings).decode("utf-8", "replace") for r in self(name, "TXT")]


class _DnsTrouble(Exception):
    """A lookup failed (timeout, SERVFAIL): the check cannot tell; reported as a failure."""


def zone_txt(name: str, value: str) -> str:
    """``name. IN TXT "..." "..."``, split into 255-byte strings as DNS requires."""
    chunks = [value[i : i + 255] for i in range(0, len(value), 255)] or [""]
    return f"{name.rstrip('.')}. IN TXT " + " ".join(
        '"' + c.replace("\\", "\\\\").replace('"', '\\"') + '"' for c in chunks
    )


# ------------------------------------------------------------------------ checks


def check_fcrdns(ip: str, ehlo: str, resolver: dns.resolver.Resolver) -> list[Finding]:
    """The ``fcrdns`` and ``ehlo`` findings for one sending IP."""
    look = _Lookup(resolver)
    addr = ipaddress.ip_address(ip)
    family = "A" if addr.version == 4 else "AAAA"
    rev = dns.reversename.from_address(ip).to_text()
    want_a = f"{ehlo}. IN {family} {ip}"
    try:
        names = [r.target.to_text().rstrip(".").lower() for r in look(rev, "PTR")]
        confirmed = [
            n
            for n in names
            if any(ipaddress.ip_address(r.address) == addr for r in look(n, family))
        ]
        ehlo_addrs = {ipaddress.ip_address(r.address) for r in look(ehlo, family)}
    except _DnsTrouble as e:
        detail = f"DNS lookup failed: {e}"
        return [Finding("fcrdns", ip, False, detail), Finding("ehlo", ip, False, detail)]
    ptr_note = f"PTR {rev} -> {ehlo}. (ask AWS to set reverse DNS for the Elastic IP)"
    if not names:
        fc = Finding("fcrdns", ip, False, "no PTR record", ptr_note)
    elif not confirmed:
        fc = Finding(
            "fcrdns",
            ip,
            False,
            f"PTR names {', '.join(names)}, whose {family} records do not include {ip}",
            want_a,
        )
    else:
        fc = Finding("fcrdns", ip, True, f"PTR {', '.join(confirmed)} resolves back to {ip}")
    if ehlo in confirmed:
        hello = Finding("ehlo", ip, True, f"EHLO name {ehlo} is the confirmed PTR name")
    else:
        missing = [] if addr in ehlo_addrs else [want_a]
        if ehlo not in names:
            missing.append(ptr_note)
        hello = Finding(
            "ehlo",
            ip,
            False,
            f"EHLO name {ehlo} is not a forward-confirmed PTR name of {ip}"
            + (f" (PTR: {', '.join(names)})" if names else ""),
            "\n".join(missing) or None,
        )
    return [fc, hello]


_SPF_LOCK = threading.Lock()


def _spf_lookup(resolver: dns.resolver.Resolver) -> Callable[..., list[Any]]:
    """pyspf's DNS hook (``spf.DNSLookup``) on our resolver, with pyspf's answer shapes."""
    import spf

    def lookup(name: str, qtype: str, tcpfallback: bool = True, timeout: int = 30) -> list[Any]:
        out: list[Any] = []
        try:
            ans = resolver.resolve(name, qtype, search=False, raise_on_no_answer=False)
        except dns.resolver.NXDOMAIN:
            return out
        except dns.exception.Timeout as x:
            raise spf.TempError(f"DNS {x}") from None
        except dns.exception.DNSException as x:
            raise spf.TempError(f"DNS {type(x).__name__}") from None
        for rdata in ans.rrset or ():
            if qtype in ("A", "AAAA"):
                out.append(((name, qtype), rdata.address))
            elif qtype == "MX":
                out.append(((name, qtype), (rdata.preference, rdata.exchange)))
            elif qtype == "PTR":
                out.append(((name, qtype), rdata.target.to_text(True)))
            elif qtype in ("TXT", "SPF"):
                out.append(((name, qtype), rdata.strings))
        return out

    return lookup


def _spf_result(ip: str, sender: str, helo: str, resolver: dns.resolver.Resolver) -> str:
    """The RFC 7208 result (pass, fail, softfail, neutral, none, ...) by pyspf.

    pyspf resolves through its module-level ``DNSLookup`` hook (how it chooses between
    pydns and dnspython); it is pointed at our resolver for the duration of one check.
    """
    import spf

    with _SPF_LOCK:
        saved = spf.DNSLookup
        spf.DNSLookup = _spf_lookup(resolver)
        try:
            result, _explanation = spf.check2(i=ip, s=sender, h=helo)
        finally:
            spf.DNSLookup = saved
    return str(result)


def _spf_records(look: _Lookup, domain: str) -> list[str]:
    return [t for t in look.txt(domain) if t.lower() == "v=spf1" or t.lower().startswith("v=spf1 ")]


def _spf_fix(record: str | None, missing: Iterable[str]) -> str:
    mechs = [f"ip{ipaddress.ip_address(i).version}:{i}" for i in missing]
    if record is None:
        return "v=spf1 " + " ".join(mechs) + " -all"
    terms = record.split()
    at = next(
        (
            k
            for k, t in enumerate(terms)
            if t.lstrip("+-~?").lower() == "all" or t.lower().startswith("redirect=")
        ),
        len(terms),
    )
    return " ".join(terms[:at] + mechs + terms[at:])


def check_spf(
    name: str,
    ips: Sequence[str],
    resolver: dns.resolver.Resolver,
    *,
    ehlo: str,
    helo_identity: bool = False,
) -> Finding:
    """SPF for ``name``: MAIL FROM postmaster@name, or (``helo_identity``) HELO ``name``."""
    if not ips:
        return Finding("spf", name, False, "no sending IPs configured")
    look = _Lookup(resolver)
    try:
        records = _spf_records(look, name)
    except _DnsTrouble as e:
        return Finding("spf", name, False, f"DNS lookup failed: {e}")
    if len(records) > 1:
        return Finding("spf", name, False, f"{len(records)} SPF records (RFC 7208 allows one)")
    sender = "" if helo_identity else f"postmaster@{name}"
    verdicts = {ip: _spf_result(ip, sender, ehlo, resolver) for ip in ips}
    bad = [ip for ip, v in verdicts.items() if v != "pass"]
    kind = "HELO" if helo_identity else "MAIL FROM"
    if not bad:
        return Finding("spf", name, True, f"SPF ({kind}) passes {', '.join(ips)}")
    record = records[0] if records else None
    detail = f"SPF ({kind}) does not pass " + ", ".join(f"{ip} ({verdicts[ip]})" for ip in bad)
    if record is None:
        detail += "; no SPF record"
    return Finding("spf", name, False, detail, zone_txt(name, _spf_fix(record, bad)))


def dkim_public_txt(key_json: str | bytes | Mapping[str, Any]) -> str:
    """The DKIM TXT value (``v=DKIM1; k=rsa|ed25519; p=...``) for a stored private key (the
    key contract's JSON), computed by the signer's own `mailqueue.outbound.dkim.public_txt`."""
    from mailqueue.outbound.dkim import DkimError, public_txt

    doc: Any = json.loads(key_json) if isinstance(key_json, str | bytes) else key_json
    if not isinstance(doc, Mapping):
        raise ValueError("DKIM key secret must be a JSON object")
    algorithm, private = doc.get("algorithm"), doc.get("private_key")
    if not isinstance(private, str):
        raise ValueError("DKIM key secret has no private_key")
    if algorithm not in ("rsa-sha256", "ed25519-sha256"):
        raise ValueError(f"unknown DKIM algorithm {algorithm!r}")
    try:
        return public_txt(algorithm, private)
    except DkimError as e:
        raise ValueError(str(e)) from e


def _tags(record: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in record.split(";"):
        k, eq, v = part.partition("=")
        if eq:
            out.setdefault(k.strip().lower(), "".join(v.split()))
    return out


def check_dkim(
    domain: str, selector: str, key_json: str | None, resolver: dns.resolver.Resolver, ref: str
) -> Finding:
    subject = f"{selector}._domainkey.{domain}"
    if key_json is None:
        return Finding(
            "dkim",
            subject,
            False,
            f"no stored key at {ref} (mailqueue dkim keygen {domain} {selector})",
        )
    try:
        expected = dkim_public_txt(key_json)
    except ValueError as e:
        return Finding("dkim", subject, False, f"stored key at {ref} is unusable: {e}")
    want = _tags(expected)
    publish = zone_txt(subject, expected)
    try:
        records = [t for t in _Lookup(resolver).txt(subject) if "p=" in t]
    except _DnsTrouble as e:
        return Finding("dkim", subject, False, f"DNS lookup failed: {e}", publish)
    if not records:
        return Finding("dkim", subject, False, "no DKIM record published", publish)
    for rec in records:
        got = _tags(rec)
        if got.get("p") == want["p"] and got.get("k", "rsa") == want["k"]:
            return Finding("dkim", subject, True, f"published {want['k']} key matches {ref}")
    return Finding(
        "dkim", subject, False, "the published key is not the stored key (rotated?)", publish
    )


def check_dmarc(domain: str, resolver: dns.resolver.Resolver) -> Finding:
    name = f"_dmarc.{domain}"
    publish = zone_txt(name, f"v=DMARC1; p=none; rua=mailto:postmaster@{domain}")
    try:
        records = [
            t for t in _Lookup(resolver).txt(name) if t.replace(" ", "").startswith("v=DMARC1")
        ]
    except _DnsTrouble as e:
        return Finding("dmarc", domain, False, f"DNS lookup failed: {e}", publish)
    if len(records) == 1:
        policy = _tags(records[0]).get("p", "?")
        return Finding("dmarc", domain, True, f"DMARC record with p={policy}")
    if records:
        return Finding("dmarc", domain, False, f"{len(records)} DMARC records (need one)")
    return Finding("dmarc", domain, False, "no DMARC record", publish)


LOCAL_STACK_NOTE = (
    "these checks (PTR/FCrDNS, EHLO, SPF, DKIM, DMARC) are for a deployment: they read the "
    "public DNS of its sending IPs and domains, and the local stack publishes none. Its DKIM "
    "public keys are in var/dkim-records.txt (and the READY line); to check records you "
    "published, run `mailqueue doctor --here --ip IP --ehlo NAME --dns-server HOST:PORT`."
)


def local_stack_report() -> dict[str, Any]:
    """The doctor's answer on the local stack: nothing checked, and why (not a failure)."""
    return {"ok": True, "findings": [], "publish": [], "skipped": LOCAL_STACK_NOTE}


def run(inp: DoctorInput, resolver: dns.resolver.Resolver, keys: KeySource) -> list[Finding]:
    """Every check for the configuration, in a stable order, each line once (the EHLO
    name is often a sender domain too: its identical SPF finding is not repeated)."""
    found = _run(inp, resolver, keys)
    return [f for i, f in enumerate(found) if f not in found[:i]]


def _run(inp: DoctorInput, resolver: dns.resolver.Resolver, keys: KeySource) -> list[Finding]:
    out: list[Finding] = []
    if not inp.sending_ips:
        out.append(Finding("fcrdns", "-", False, "no sending IPs configured (SendingIps)"))
    for ip in inp.sending_ips:
        out.extend(check_fcrdns(ip, inp.ehlo, resolver))
    out.append(check_spf(inp.ehlo, inp.sending_ips, resolver, ehlo=inp.ehlo, helo_identity=True))
    for name, ehlo, ips in inp.pools:  # each egress pool: its addresses under its name
        if not ips:
            out.append(Finding("fcrdns", f"pool {name}", False, "no sending IPs (PoolSendingIps)"))
        for ip in ips:
            out.extend(check_fcrdns(ip, ehlo, resolver))
        out.append(check_spf(ehlo, ips, resolver, ehlo=ehlo, helo_identity=True))
    for domain in inp.domains:
        out.append(check_spf(domain, inp.sending_ips, resolver, ehlo=inp.ehlo))
        selectors = inp.dkim.get(domain, ())
        if not selectors:
            out.append(Finding("dkim", domain, False, "no DKIM selector configured (DkimDomains)"))
        for sel in selectors:
            ref = inp.key_ref(domain, sel)
            try:
                value = keys(ref)
            except Exception as e:  # noqa: BLE001 (an unreadable key is a finding, not a crash)
                out.append(Finding("dkim", f"{sel}._domainkey.{domain}", False, f"{ref}: {e}"))
                continue
            out.append(check_dkim(domain, sel, value, resolver, ref))
        out.append(check_dmarc(domain, resolver))
    return out


def render(findings: Sequence[Finding]) -> str:
    """The report for people: one line per check, then the records still to publish."""
    lines = [
        f"{'ok  ' if f.ok else 'FAIL'} {f.check:<6} {f.subject:<40} {f.detail}" for f in findings
    ]
    todo = [f.publish for f in findings if not f.ok and f.publish]
    failed = sum(not f.ok for f in findings)
    lines.append("")
    lines.append(f"{len(findings) - failed} ok, {failed} failing")
    if todo:
        lines.append("")
        lines.append("Records to publish:")
        seen: set[str] = set()
        for block in todo:
            for rec in block.split("\n"):
                if rec not in seen:
                    seen.add(rec)
                    lines.append(f"  {rec}")
    return "\n".join(lines) + "\n"


def doctor_report(findings: list[Finding]) -> dict[str, Any]:
    """The API's answer: every finding, and the records still to publish."""
    publish: list[str] = []
    for f in findings:
        if not f.ok and f.publish:
            publish.extend(r for r in f.publish.split("\n") if r not in publish)
    return {
        "ok": all(f.ok for f in findings),
        "findings": [f.to_json() for f in findings],
        "publish": publish,
    }
