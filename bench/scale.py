"""The scale model's measured input: SMTP transactions in progress at once per delivery
invocation, against a slow local peer (bench.mix runs it before pricing the mix; the
model itself is bench/model/scale.py)."""

from __future__ import annotations


def measure_parallelism(delay: float = 0.4, groups: int = 10) -> tuple[float, str]:
    """SMTP transactions in progress at once in one delivery invocation: a batch of
    `groups` groups to a local peer answering each final dot after `delay` seconds, less
    the same batch at no delay, against `groups` x `delay` (1: one after the other;
    `groups`: all at once). Measured, so the delivery branch's concurrency shows here."""
    import json as _json

    from mailqueue.compose.aws import delivery_service
    from mailqueue.services.delivery import DeliverySettings

    from bench import run as brun
    from tests.support.aws import make_env, reset_moto
    from tests.support.smtp_peers import Behaviour, SmtpPeer

    times: dict[float, float] = {}
    peaks: dict[float, int] = {}
    with brun.moto_server() as endpoint:
        for d in (0.0, delay):
            peer = SmtpPeer(Behaviour(data_delay=d)).start()
            try:
                routes = _json.dumps(
                    {"default": {"next_hop": f"[127.0.0.1]:{peer.port}", "tls": "none"}}
                )
                reset_moto(endpoint)
                env = make_env(endpoint)
                svc = delivery_service(
                    DeliverySettings(hostname="bench.test", routes=routes), env.storage()
                )
                times[d], _ = brun.deliver_batch(env, svc, groups, 1024)
                peaks[d] = peer.peak_transactions
            finally:
                peer.stop()
    extra = max(1e-3, times[delay] - times[0.0])
    # the timing is noisy on a loaded machine (moto's own time varies by a second): never
    # more than the peer saw in DATA at once
    par = max(1.0, min(float(groups), groups * delay / extra, float(peaks[delay] or 1)))
    return par, (
        f"(measured: a batch of {groups} groups took {times[delay]:.2f} s with "
        f"{delay * 1000:.0f} ms per transaction against {times[0.0]:.2f} s without; "
        f"peak transactions at once at the peer: {peaks[delay]})"
    )
