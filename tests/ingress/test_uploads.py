"""Large messages: POST /v1/uploads, a PUT to the presigned URL, then POST /v1/messages."""

from __future__ import annotations

import urllib.parse
import urllib.request
from typing import Any

from tests.ingress.conftest import Ingress, deliver_all, stored_once
from tests.support import events as ev
from tests.support import factories as f

OTHER = "arn:aws:iam::123456789012:user/someone-else"


def _upload(ingress: Ingress, content: bytes, **kw: Any) -> str:
    status, body, _ = ingress.http(ev.http_upload(**kw))
    assert status == 201
    assert body["method"] == "PUT" and body["expires_in"] == 900
    assert body["max_size"] == ingress.settings.max_size
    # as `curl -T`: no form content type (werkzeug would swallow a form-encoded body)
    req = urllib.request.Request(
        body["url"], data=content, method="PUT", headers={"Content-Type": "message/rfc822"}
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status == 200
    upload_id: str = body["upload_id"]
    return upload_id


def _send(
    ingress: Ingress, upload_id: str, **kw: Any
) -> tuple[int, dict[str, Any], dict[str, Any]]:
    return ingress.http(ev.http_send(content=None, upload_id=upload_id, **kw))


def _keys(ingress: Ingress, prefix: str) -> list[str]:
    return sorted(k for k in ingress.trace().s3 if k.startswith(prefix))


def test_presigned_url_is_for_a_per_caller_upload_key(ingress: Ingress) -> None:
    status, body, _ = ingress.http(ev.http_upload())
    assert status == 201
    url = urllib.parse.urlparse(body["url"])
    query = urllib.parse.parse_qs(url.query)
    assert query["X-Amz-Expires"] == ["900"]
    principal = ev.principal_of(ev.http_upload())
    key = ingress.service.upload_key(principal, body["upload_id"])
    assert url.path.endswith(f"/{ingress.aws.resources.bucket}/{key}")
    assert key.startswith("uploads/")


def test_upload_flow_queues_the_uploaded_content_and_removes_the_upload(
    ingress: Ingress,
) -> None:
    content = f.content(300 * 1024)
    upload_id = _upload(ingress, content)
    assert len(_keys(ingress, "uploads/")) == 1
    status, body, _ = _send(ingress, upload_id, key=None)
    assert status == 202
    assert _keys(ingress, "uploads/") == []
    # wherever the storage put it (300 KB of repeated text is a 5 KB content item)
    stored = ingress.aws.storage().read_content(body["mail_id"]).read()
    assert stored.endswith(content) and stored[: -len(content)].startswith(b"Received: ")


def test_a_retry_after_the_upload_was_consumed_gets_the_first_answer(ingress: Ingress) -> None:
    for key in (None, "with-a-key"):
        upload_id = _upload(ingress, f.content(5000, subject=str(key)))
        before = ingress.trace()
        s1, first, _ = _send(ingress, upload_id, key=key)
        s2, second, headers = _send(ingress, upload_id, key=key)
        assert (s1, s2) == (202, 202)
        assert second == first and headers["Idempotent-Replayed"] == "true"
        s3, ddb, _ = ingress.trace().new_since(before)
        stored_once(ingress.aws, first["mail_id"], s3)
        assert len(ddb) == 1 + len(first["groups"])


def test_a_retry_after_the_mail_was_delivered_gets_the_first_answer(ingress: Ingress) -> None:
    upload_id = _upload(ingress, f.content(5000))
    status, first, _ = _send(ingress, upload_id, key=None)
    assert status == 202
    deliver_all(ingress.aws, first["mail_id"])
    status, again, headers = _send(ingress, upload_id, key=None)
    assert (status, again, headers["Idempotent-Replayed"]) == (202, first, "true")


def test_an_upload_sent_again_to_other_recipients_is_a_conflict(ingress: Ingress) -> None:
    upload_id = _upload(ingress, f.content(5000))
    assert _send(ingress, upload_id, key=None)[0] == 202
    status, body, _ = _send(ingress, upload_id, key=None, recipients=["new@example.net"])
    assert (status, body["error"], body["field"]) == (409, "idempotency_conflict", "upload_id")


def test_another_callers_upload_is_unknown(ingress: Ingress) -> None:
    upload_id = _upload(ingress, f.content(5000), principal=OTHER)
    before = ingress.trace()
    status, body, _ = _send(ingress, upload_id)
    assert (status, body["error"], body["field"]) == (422, "unknown_upload", "upload_id")
    assert ingress.trace().new_since(before) == (set(), set(), 0)
    assert len(_keys(ingress, "uploads/")) == 1  # the owner's upload is untouched
    assert _send(ingress, upload_id, principal=OTHER)[0] == 202


def test_an_oversized_upload_is_refused_before_it_is_read(ingress_factory: Any) -> None:
    small: Ingress = ingress_factory(max_size=10_000)
    upload_id = _upload(small, f.content(10_001))
    before = small.trace()
    with small.aws.counter.measure() as calls:
        status, body, _ = _send(small, upload_id)
    assert (status, body["error"], body["field"]) == (413, "too_large", "upload_id")
    assert "s3:GetObject" not in calls.calls  # HeadObject told us
    assert small.trace().new_since(before) == (set(), set(), 0)


def test_an_invalid_upload_is_refused_and_nothing_is_queued(ingress: Ingress) -> None:
    upload_id = _upload(ingress, b"no header here\r\n")
    before = ingress.trace()
    status, body, _ = _send(ingress, upload_id)
    assert (status, body["error"]) == (422, "no_header")
    assert ingress.trace().new_since(before) == (set(), set(), 0)


def test_an_upload_needs_a_principal(ingress: Ingress) -> None:
    status, body, _ = ingress.http(ev.http_upload(principal=None))
    assert (status, body["error"]) == (403, "unauthenticated")
