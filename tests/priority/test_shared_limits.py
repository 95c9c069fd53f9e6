"""Both delivery paths draw on the same site limits (shaping state in the one table).

Shaping on, the site limited to one SMTP connection; the peer answers a second
concurrent connection with a 421 (as a provider enforcing concurrency does). A
transactional and a bulk consumer (each its own container) deliver at the same time:
the peer never sees two connections and never throttles, and every mail is delivered.
"""

from __future__ import annotations

import json

from tests.ingress.conftest import Ingress
from tests.priority.test_no_delay import _submit, _wait, consumers
from tests.shaping.conftest import atomic_dynamodb  # noqa: F401  (DynamoDB's atomicity)
from tests.shaping.test_delivery_shaping import NO_BACKOFF
from tests.support.aws import AwsEnv
from tests.support.smtp_peers import Behaviour, smtp_sink

N = 8  # of each priority
ONE_CONNECTION = json.dumps({"version": 1, "default": {"max_connections": 1}})


def test_transactional_and_bulk_share_one_sites_connection_limit(
    ingress: Ingress, aws: AwsEnv
) -> None:
    shaping = {"shaping": True, "shaping_rules": ONE_CONNECTION, "backoff_rules": NO_BACKOFF}
    r = aws.resources
    with smtp_sink(Behaviour(data_delay=0.1, max_connections=1)) as peer:
        for i in range(N):
            _submit(ingress, f"bulk{i}@example.net", priority="bulk")
            _submit(ingress, f"tx{i}@example.net")
        with (
            consumers(aws, aws.settings, peer.port, [r.delivery_queue_url], **shaping),
            consumers(aws, aws.settings, peer.port, [r.bulk_delivery_queue_url], **shaping),
        ):
            assert _wait(lambda: len(peer.messages) >= 2 * N, 120), len(peer.messages)
    got = sorted(m.rcpt_tos[0] for m in peer.messages)
    assert got == sorted(
        [f"bulk{i}@example.net" for i in range(N)] + [f"tx{i}@example.net" for i in range(N)]
    )
    assert (peer.peak_connections, peer.throttled) == (1, 0)
