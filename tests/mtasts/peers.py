"""A test CA, a loopback HTTPS policy server and STARTTLS contexts for the MTA-STS tests.

Everything is real: certificates from ``cryptography``, HTTPS from ``http.server`` + ``ssl``
on 127.0.0.1, verified by the code under test against this CA only.
"""

from __future__ import annotations

import datetime as _dt
import ipaddress
import ssl
import tempfile
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


class Ca:
    """A throw-away CA that issues server certificates for any names."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="mailqueue-mtasts-"))
        self._now = _dt.datetime.now(_dt.UTC)
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "mtasts test CA")])
        cert = (
            x509.CertificateBuilder()
            .subject_name(self.name)
            .issuer_name(self.name)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(self._now - _dt.timedelta(hours=1))
            .not_valid_after(self._now + _dt.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(self.key.public_key()), False)
            .sign(self.key, hashes.SHA256())
        )
        self.ca_file = self.dir / "ca.pem"
        self.ca_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        self._n = 0

    def server_context(self, *names: str) -> ssl.SSLContext:
        """A server context with a certificate for ``names`` (DNS names or IPs)."""
        key = ec.generate_private_key(ec.SECP256R1())
        sans: list[x509.GeneralName] = []
        for n in names:
            try:
                sans.append(x509.IPAddress(ipaddress.ip_address(n)))
            except ValueError:
                sans.append(x509.DNSName(n))
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
            .issuer_name(self.name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(self._now - _dt.timedelta(hours=1))
            .not_valid_after(self._now + _dt.timedelta(days=2))
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()), False
            )
            .sign(self.key, hashes.SHA256())
        )
        self._n += 1
        cert_file, key_file = self.dir / f"c{self._n}.pem", self.dir / f"k{self._n}.pem"
        pem = serialization.Encoding.PEM
        cert_file.write_bytes(cert.public_bytes(pem))
        key_file.write_bytes(
            key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
        )
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert_file, key_file)
        return ctx


@lru_cache(maxsize=1)
def shared_ca() -> Ca:
    """The process-wide test CA (the code under test is told to trust only it)."""
    return Ca()


@dataclass
class Reply:
    body: str
    status: int = 200
    content_type: str = "text/plain"


@dataclass
class PolicyServer:
    """Serves ``/.well-known/mta-sts.txt`` per Host header; counts the requests per host."""

    port: int
    replies: dict[str, Reply]
    hits: dict[str, int] = field(default_factory=dict)

    def policy(self, host: str, text: str) -> None:
        self.replies[host] = Reply(text)


def policy_text(mode: str, *mx: str, max_age: int = 86400) -> str:
    lines = ["version: STSv1", f"mode: {mode}", *(f"mx: {m}" for m in mx), f"max_age: {max_age}"]
    return "\r\n".join(lines) + "\r\n"


@contextmanager
def policy_server(ca: Ca, replies: Mapping[str, Reply | str]) -> Iterator[PolicyServer]:
    """HTTPS on 127.0.0.1 with one certificate naming every host in ``replies``."""
    state = PolicyServer(
        0, {h: r if isinstance(r, Reply) else Reply(r) for h, r in replies.items()}
    )
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            host = (self.headers.get("Host") or "").split(":")[0].lower()
            with lock:
                state.hits[host] = state.hits.get(host, 0) + 1
            reply = state.replies.get(host)
            if reply is None or self.path != "/.well-known/mta-sts.txt":
                self.send_error(404)
                return
            data = reply.body.encode()
            self.send_response(reply.status)
            self.send_header("Content-Type", reply.content_type)
            self.send_header("Content-Length", str(len(data)))
            if 300 <= reply.status < 400:
                self.send_header("Location", "https://elsewhere.test/")
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    ctx = ca.server_context(*state.replies, "127.0.0.1")
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    state.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
