"""sslscan (Debian's, an outside scanner) against the front door's STARTTLS listeners.

Issue 43 found with it that its STARTTLS probe gave up on our EHLO reply (one TCP segment
a line: it reads once and looks for STARTTLS there; it scans Postfix fine) and, where it
could scan, TLS 1.2 CBC suites outside Mozilla's intermediate profile. Here it scans the
submission (587) and receiving (25) listeners: it gets through STARTTLS, and every suite
it finds accepted is the profile's (services/smtpd/tls.py), over TLS 1.2 or 1.3 only.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import xml.etree.ElementTree as ET

import pytest
from mailqueue.services.smtpd.tls import INTERMEDIATE_TLS12, INTERMEDIATE_TLS13

from tests.smtpd.conftest import Door

SSLSCAN = shutil.which("sslscan")
_reason = None if SSLSCAN else "sslscan is not installed (make test installs it as root)"
if _reason is not None and os.environ.get("MAILQUEUE_REQUIRE_POSTFIX") == "1":
    raise RuntimeError(f"sslscan is required here (make test as root): {_reason}")
pytestmark = pytest.mark.skipif(_reason is not None, reason=_reason or "")

# OpenSSL's names for TLS 1.3's suites, as sslscan prints them
_TLS13_NAMES = {"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"}


def scan(port: int) -> list[tuple[str, str]]:
    """(protocol, suite) of every suite sslscan found accepted over STARTTLS."""
    assert SSLSCAN is not None
    proc = subprocess.run(
        [SSLSCAN, "--starttls-smtp", "--no-colour", "--no-heartbleed", "--xml=-"]
        + [f"127.0.0.1:{port}"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    start = proc.stdout.find("<?xml")
    assert start >= 0, proc.stdout[-2000:]
    root = ET.fromstring(proc.stdout[start:])
    return [
        (c.attrib["sslversion"], c.attrib["cipher"])
        for c in root.iter("cipher")
        if c.attrib.get("status") in ("accepted", "preferred")
    ]


@pytest.mark.parametrize("listener", ["submission", "receive"])
def test_sslscan_gets_through_starttls_and_finds_the_profile_only(
    door: Door, listener: str
) -> None:
    port = door.port if listener == "submission" else door.receive_port
    found = scan(port)
    assert found, "sslscan found no suite: its STARTTLS probe did not get through"
    versions = {v for v, _ in found}
    assert versions <= {"TLSv1.2", "TLSv1.3"}, found
    tls12 = {c for v, c in found if v == "TLSv1.2"}
    assert tls12 and tls12 <= set(INTERMEDIATE_TLS12), sorted(tls12)
    assert not {"ECDHE-ECDSA-AES256-SHA384", "ECDHE-ECDSA-AES128-SHA256"} & tls12
    tls13 = {c for v, c in found if v == "TLSv1.3"}
    assert tls13 and tls13 <= set(INTERMEDIATE_TLS13) | _TLS13_NAMES, sorted(tls13)
