"""DKIM signing cost per mail size: `.venv/bin/python -m bench.dkim_sign 1 2 40` (MiB).

One process per size (peak RSS is per process): an rsa-sha256 and an ed25519-sha256
signature, as delivery makes them (DkimSigner.sign), over a text body with ordinary
word spacing (dkimpy's relaxed body canonicalisation costs per whitespace run).
Prints the time and the growth of peak RSS while signing.
"""

from __future__ import annotations

import resource
import subprocess
import sys
import time

from mailqueue.outbound.dkim import ALGORITHMS, DkimConfig, DkimSigner, generate_key, key_json

LINE = b"The quick brown fox jumps over the lazy dog 0123456789 and some more text here.\r\n"


def measure(mib: float) -> str:
    keys = {a: key_json(a, generate_key(a)) for a in ALGORITHMS}
    store = {f"secretsmanager:mq/dkim/example.com/s{i}": keys[a] for i, a in enumerate(ALGORITHMS)}
    config = DkimConfig.parse('{"example.com": ["s0", "s1"]}', "send", "")
    signer = DkimSigner(config, store.__getitem__, prefix="mq/")
    head = b"From: a@example.com\r\nTo: b@example.net\r\nSubject: size\r\n\r\n"
    msg = head + LINE * int(mib * 1024 * 1024 // len(LINE))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t = time.perf_counter()
    out, sigs = signer.sign(msg, from_domain="example.com", null_sender=False)
    took = time.perf_counter() - t
    grew = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    canon = out.split(b"c=", 1)[1].split(b";", 1)[0].decode()
    return (
        f"{mib:g} MiB: {len(sigs)} signatures c={canon} in {took:.2f} s, peak RSS +{grew:.0f} MiB"
    )


def main(argv: list[str]) -> int:
    if len(argv) == 1:
        print(measure(float(argv[0])))
        return 0
    for size in argv or ["1", "2", "10", "40"]:
        subprocess.run([sys.executable, "-m", "bench.dkim_sign", size], check=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
