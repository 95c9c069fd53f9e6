"""HTTPS webhooks: one signed POST per event (mailqueue.services.destinations).

The body is the event as the event log holds it (SES's shape), the headers name the event
id (for the receiver's de-duplication: delivery is at least once) and carry the HMAC
signature over timestamp and body. What the reply means: 2xx sent; 408, 429 and 5xx, a
timeout or a refused connection are tried again; any other 4xx is the receiver refusing
this event, which no retry fixes (dead-lettered at once)."""

from __future__ import annotations

import http.client
import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable

from mailqueue.services.destinations import (
    EVENT_ID_HEADER,
    SIGNATURE_HEADER,
    Destination,
    DestinationError,
    Envelope,
    sign,
)

_RETRY_STATUS = {408, 425, 429}


class WebhookSender:
    def __init__(self, timeout: float = 10.0, clock: Callable[[], float] = time.time) -> None:
        self.timeout = timeout
        self.clock = clock

    def send(self, dest: Destination, env: Envelope) -> None:
        body = json.dumps(env.event, separators=(",", ":")).encode()
        req = urllib.request.Request(
            dest.target,
            body,
            {
                "content-type": "application/json",
                "user-agent": "mailqueue-webhook/1",
                EVENT_ID_HEADER: env.event_id,
                "X-Mailqueue-Event-Type": env.event_type,
                SIGNATURE_HEADER: sign(dest.secret, body, self.clock()),
            },
            method="POST",
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                resp.read(1024)
        except urllib.error.HTTPError as e:
            retry = e.code >= 500 or e.code in _RETRY_STATUS
            raise DestinationError(f"webhook {dest.name}: HTTP {e.code}", retry=retry) from e
        except (urllib.error.URLError, http.client.HTTPException, OSError) as e:
            raise DestinationError(f"webhook {dest.name}: {type(e).__name__}") from e
