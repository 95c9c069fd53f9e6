"""The one-click endpoint's service belongs to the ingress function's container.

Why: the tests' workers start several local stacks in one process, each with its own
unsubscribe keys (`make demo` makes fresh ones per run). A service cached in a shared
module (compose/unsubscribe.py) outlived its stack, so the next stack verified its genuine
links with the old keys: ``400 invalid_token``, intermittently, depending on which test
files a worker happened to run before (test_demo_feedback, test_feedback_e2e). A new
stack's container 0 forgets the function module's caches (runtime._load_container); the
service must be one of them.
"""

from __future__ import annotations

import base64
import json
import secrets
import time
from typing import Any

import pytest
from mailqueue.backends.aws.suppression_store import DynamoSuppressionStore
from mailqueue.outbound import unsubscribe as unsub
from mailqueue.outbound.suppression import scoped_key
from mailqueue_local.runtime import LocalContext, _load_container

from tests.support.aws import AwsEnv


def _env(aws: AwsEnv, keys_json: str) -> dict[str, str]:
    r = aws.resources
    return {
        "MQ_TABLE": r.table,
        "MQ_BUCKET": r.bucket,
        "MQ_DELIVERY_QUEUE_URL": r.delivery_queue_url,
        "MQ_BOUNCE_QUEUE_URL": r.bounce_queue_url,
        "MQ_REGION": "us-east-1",
        "MQ_ENDPOINT_URL": aws.endpoint,
        "MQ_RECEIVING_DOMAINS": "example.org",
        "MQ_ROUTES": json.dumps({"example.org": "[192.0.2.25]"}),
        "MQ_LIST_UNSUBSCRIBE_KEYS": keys_json,
        "MQ_LIST_UNSUBSCRIBE_KID": "k1",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }


def _one_click(token: str) -> dict[str, Any]:
    """The HTTP API's event for RFC 8058's POST, as the local gateway makes it."""
    return {
        "version": "2.0",
        "rawPath": f"/u/{token}",
        "rawQueryString": "",
        "headers": {"content-type": "application/x-www-form-urlencoded"},
        "requestContext": {
            "http": {"method": "POST", "path": f"/u/{token}", "sourceIp": "127.0.0.1"}
        },
        "body": "List-Unsubscribe=One-Click",
        "isBase64Encoded": False,
    }


def test_a_second_stack_in_the_process_verifies_links_with_its_own_keys(
    aws: AwsEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = DynamoSuppressionStore(aws.clients.dynamodb, aws.resources.table)
    for run, rcpt in enumerate(("first@example.net", "second@example.net")):
        # a new stack: its own keys in the environment, container 0 loaded afresh
        keys_json = json.dumps({"k1": base64.b64encode(secrets.token_bytes(32)).decode()})
        for name, value in _env(aws, keys_json).items():
            monkeypatch.setenv(name, value)
        app = _load_container("functions.ingress.app", 0)
        keys = unsub.UnsubscribeKeys.parse(keys_json, "k1")
        day = int(time.time() // 86400)
        token = unsub.make_token(
            keys,
            unsub.Unsubscription(f"mail-{run}", rcpt, "sender_domain", "example.org", day, "k1"),
        )
        service = None  # the /u/ route never reaches the ingress service
        answer = app.handle(_one_click(token), LocalContext("mailqueue-ingress", 29), service)
        assert answer["statusCode"] == 200, (run, answer["headers"], answer["body"][:300])
        key = scoped_key(rcpt, "sender_domain:example.org")
        assert store.get_many([key])[key].reason == "unsubscribed (one-click)"
    _load_container("functions.ingress.app", 0)  # leave no service built from this test's env
