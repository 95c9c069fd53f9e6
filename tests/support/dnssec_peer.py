"""A DNSSEC-signed zone on loopback behind a real validating resolver, for the DANE tests.

Debian's ``ldnsutils`` make the keys and sign the zone (``ldns-keygen``,
``ldns-signzone``), ``nsd`` serves it authoritatively on one loopback port, ``unbound``
validates on another with the zone's KSK as its trust anchor and a stub zone pointing at
nsd. Both run in the foreground as our children and are stopped by PID. ``tamper`` lets a
test change a record after signing: the validating resolver then answers SERVFAIL (bogus),
as it would for an attacker's forgery. Missing packages: ``missing()`` says which, and the
tests skip with that reason (``make test`` installs them when root: mk/dane.mk).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import dns.flags
import dns.message
import dns.query
import dns.rcode
import dns.resolver

TOOLS = {
    "ldns-keygen": "ldnsutils",
    "ldns-signzone": "ldnsutils",
    "nsd": "nsd",
    "unbound": "unbound",
}
_SBIN = ("/usr/sbin", "/usr/bin", "/sbin", "/bin")


def _which(tool: str) -> str | None:
    return shutil.which(tool) or next(
        (f"{d}/{tool}" for d in _SBIN if Path(f"{d}/{tool}").exists()), None
    )


def missing() -> str | None:
    """Why the DNSSEC tests cannot run here (None: they can)."""
    absent = sorted({pkg for tool, pkg in TOOLS.items() if _which(tool) is None})
    return f"Debian packages not installed: {', '.join(absent)}" if absent else None


def free_port() -> int:
    """A port free for both UDP and TCP on 127.0.0.1 (never 53)."""
    for _ in range(50):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
            u.bind(("127.0.0.1", 0))
            port = int(u.getsockname()[1])
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as t:
                try:
                    t.bind(("127.0.0.1", port))
                except OSError:
                    continue
        return port
    raise RuntimeError("no free loopback port")


@dataclass
class SignedDns:
    zone: str
    dir: Path
    nsd_port: int
    resolver_port: int

    @property
    def nameservers(self) -> str:
        """The validating resolver, in the settings' "host:port" form."""
        return f"127.0.0.1:{self.resolver_port}"

    def resolver(self) -> dns.resolver.Resolver:
        r = dns.resolver.Resolver(configure=False)
        r.nameservers = ["127.0.0.1"]
        r.port = self.resolver_port
        r.lifetime = 3.0
        r.timeout = 3.0
        return r


def _run(argv: Sequence[str], cwd: Path) -> str:
    out = subprocess.run(argv, cwd=cwd, check=True, capture_output=True, text=True, timeout=60)
    return out.stdout.strip()


def _wait(port: int, name: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 15
    q = dns.message.make_query(name, "SOA")
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"exited {proc.returncode}: {log.read_text()[-2000:]}")
        with suppress(OSError, dns.exception.DNSException):
            r = dns.query.udp(q, "127.0.0.1", port=port, timeout=0.5)
            if r.rcode() == dns.rcode.NOERROR:
                return
        time.sleep(0.1)
    raise RuntimeError(f"no answer on port {port}: {log.read_text()[-2000:]}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


@contextmanager
def signed_dns(
    zone: str,
    records: Sequence[str],
    *,
    tamper: Mapping[str, tuple[str, str]] | None = None,
) -> Iterator[SignedDns]:
    """Serve ``zone`` (records in zone-file syntax relative to it) signed, behind unbound.
    ``tamper``: {owner prefix: (old, new)} text replaced in that owner's records after
    signing (their signatures no longer verify)."""
    reason = missing()
    if reason:
        raise RuntimeError(reason)
    d = Path(tempfile.mkdtemp(prefix="mailqueue-dnssec-"))
    origin = zone.rstrip(".") + "."
    lines = [
        f"$ORIGIN {origin}",
        "$TTL 300",
        f"@ IN SOA ns.{origin} hostmaster.{origin} 1 3600 600 86400 300",
        f"@ IN NS ns.{origin}",
        "ns IN A 127.0.0.1",
        *records,
    ]
    (d / "zone").write_text("\n".join(lines) + "\n")
    keygen, signzone = _which("ldns-keygen"), _which("ldns-signzone")
    assert keygen and signzone
    ksk = _run([keygen, "-a", "ECDSAP256SHA256", "-k", origin], d)
    zsk = _run([keygen, "-a", "ECDSAP256SHA256", origin], d)
    _run([signzone, "-o", origin, "zone", zsk, ksk], d)
    signed = d / "zone.signed"
    if tamper:
        out = []
        for line in signed.read_text().splitlines():
            for owner, (old, new) in tamper.items():
                if line.startswith(f"{owner}.{origin}") and "RRSIG" not in line:
                    line = line.replace(old, new)
            out.append(line)
        signed.write_text("\n".join(out) + "\n")
    anchor = d / "anchor.key"
    anchor.write_text((d / f"{ksk}.key").read_text())
    nsd_port, res_port = free_port(), free_port()
    while res_port == nsd_port:
        res_port = free_port()
    (d / "nsd.conf").write_text(
        f"""server:
  ip-address: 127.0.0.1@{nsd_port}
  port: {nsd_port}
  do-ip6: no
  username: ""
  chroot: ""
  zonesdir: "{d}"
  database: ""
  pidfile: "{d}/nsd.pid"
  xfrdfile: "{d}/xfrd.state"
  zonelistfile: "{d}/zone.list"
  logfile: "{d}/nsd.log"
  server-count: 1
  verbosity: 1
remote-control:
  control-enable: no
zone:
  name: "{origin}"
  zonefile: "{signed}"
"""
    )
    (d / "unbound.conf").write_text(
        f"""server:
  interface: 127.0.0.1
  port: {res_port}
  do-ip6: no
  username: ""
  chroot: ""
  directory: "{d}"
  pidfile: "{d}/unbound.pid"
  use-syslog: no
  logfile: "{d}/unbound.log"
  verbosity: 1
  num-threads: 1
  so-reuseport: no
  do-not-query-localhost: no
  module-config: "validator iterator"
  trust-anchor-file: "{anchor}"
  val-log-level: 2
  qname-minimisation: no
  harden-dnssec-stripped: yes
  local-zone: "{origin}" nodefault
stub-zone:
  name: "{origin}"
  stub-addr: 127.0.0.1@{nsd_port}
remote-control:
  control-enable: no
"""
    )
    nsd_bin, unbound_bin = _which("nsd"), _which("unbound")
    assert nsd_bin and unbound_bin
    nsd = subprocess.Popen(
        [nsd_bin, "-d", "-c", str(d / "nsd.conf")],
        stdout=subprocess.DEVNULL,
        stderr=(d / "nsd.err").open("wb"),
    )
    unbound: subprocess.Popen[bytes] | None = None
    try:
        _wait(nsd_port, origin, nsd, d / "nsd.err")
        unbound = subprocess.Popen(
            [unbound_bin, "-d", "-c", str(d / "unbound.conf")],
            stdout=subprocess.DEVNULL,
            stderr=(d / "unbound.err").open("wb"),
        )
        _wait(res_port, origin, unbound, d / "unbound.log")
        yield SignedDns(origin, d, nsd_port, res_port)
    finally:
        if unbound is not None:
            _stop(unbound)
        _stop(nsd)


def authentic(dnsx: SignedDns, name: str, rdtype: str) -> bool:
    """Does the validating resolver answer this with the AD bit? (a check of the set-up)"""
    q = dns.message.make_query(name, rdtype, want_dnssec=True)
    q.flags |= dns.flags.AD
    r = dns.query.udp(q, "127.0.0.1", port=dnsx.resolver_port, timeout=3)
    return bool(r.flags & dns.flags.AD)
