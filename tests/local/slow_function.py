"""A function for tests/local/test_gateway.py: it answers once the file named in the
request's body exists (a request that takes as long as the test wants)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    wait_for = json.loads(event.get("body") or "{}").get("wait_for")
    deadline = time.monotonic() + 60
    while wait_for and not Path(wait_for).exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return {"statusCode": 200, "body": json.dumps({"waited": bool(wait_for)})}
