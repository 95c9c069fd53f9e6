"""Bad input: each a 4xx with {"error", "message", "field"}, nothing stored, one Reject event.

One moto reset for the whole table (subtests), each case checked by what changed.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.ingress.conftest import Ingress
from tests.support import events as ev
from tests.support import factories as f

LONG_LINE = (
    b"From: a@example.org\r\nSubject: x\r\n\r\n" + b"x" * 999 + b"\r\n"
)
UPLOAD_ID = "0123456789abcdef0123456789abcdef"


def _event(body: Any = None, **kw: Any) -> dict[str, Any]:
    return ev.http_send(body, **kw)


# (name, event, status, error, field)
CASES: list[tuple[str, dict[str, Any], int, str, str | None]] = [
    ("malformed json", _event("{not json"), 400, "invalid_json", None),
    ("empty body", _event(""), 400, "invalid_json", None),
    ("json array", _event("[1, 2]"), 400, "invalid_json", None),
    ("not utf-8", _event(b"\xff\xfe{}", base64_body=True), 400, "invalid_json", None),
    ("unknown field", _event(recipient="x@example.net"), 400, "unknown_field", "recipient"),
    ("missing sender", _event(sender=None), 400, "missing_field", "sender"),
    ("missing recipients", _event(recipients=None), 400, "missing_field", "recipients"),
    ("missing content", _event(content=None), 400, "missing_field", "content"),
    ("recipients not a list", _event(recipients="b@example.net"), 400, "invalid_type",
     "recipients"),
    ("sender not a string", _event(sender=42), 400, "invalid_type", "sender"),
    ("smtputf8 not a bool", _event(smtputf8="yes"), 400, "invalid_type", "smtputf8"),
    ("recipient object without address", _event(recipients=[{"notify": ["NEVER"]}]), 400,
     "missing_field", "recipients[0].address"),
    ("unknown recipient field", _event(recipients=[{"address": "b@example.net", "x": 1}]), 400,
     "unknown_field", "recipients[0].x"),
    ("invalid base64", _event(content="not base64!"), 400, "invalid_base64", "content"),
    ("content and upload", _event(upload_id=UPLOAD_ID), 400, "ambiguous_content", "upload_id"),
    ("idempotency key with space", _event(key="a b"), 400, "invalid_idempotency_key",
     "Idempotency-Key"),
    ("CR in sender", _event(sender="a@example.org\r\nRCPT TO:<x@evil.example>"), 400,
     "forbidden_character", "sender"),
    ("LF in recipient", _event(recipients=["b@example.net\n"]), 400, "forbidden_character",
     "recipients[0].address"),
    ("NUL in recipient", _event(recipients=["b\x00@example.net"]), 400, "forbidden_character",
     "recipients[0].address"),
    ("LF in envid", _event(envid="id\n1"), 400, "forbidden_character", "envid"),
    ("CR in orcpt", _event(recipients=[{"address": "b@example.net", "orcpt": "rfc822;b\r"}]),
     400, "forbidden_character", "recipients[0].orcpt"),
    ("no principal", _event(principal=None), 403, "unauthenticated", None),
    ("null sender, ordinary caller", _event(sender=""), 403, "null_sender_forbidden", "sender"),
    ("invalid sender", _event(sender="no-at-sign"), 422, "invalid_address", "sender"),
    ("invalid recipient", _event(recipients=["b@-bad-.example"]), 422, "invalid_address",
     "recipients[0].address"),
    ("domain without dot", _event(recipients=["b@localhost"]), 422, "invalid_address",
     "recipients[0].address"),
    ("local part too long", _event(recipients=["x" * 65 + "@example.net"]), 422,
     "address_too_long", "recipients[0].address"),
    ("path too long", _event(recipients=["b@" + ("a" * 60 + ".") * 5 + "example"]), 422,
     "address_too_long", "recipients[0].address"),
    ("internationalised without smtputf8", _event(recipients=["jörg@example.net"]), 422,
     "smtputf8_required", "recipients[0].address"),
    ("no recipients", _event(recipients=[]), 422, "no_recipients", "recipients"),
    ("too many recipients", _event(recipients=[f"u{i}@example.net" for i in range(1001)]),
     422, "too_many_recipients", "recipients"),
    ("bad notify", _event(recipients=[{"address": "b@example.net", "notify": ["SOMETIMES"]}]),
     422, "invalid_notify", "recipients[0].notify"),
    ("NEVER with others", _event(recipients=[{"address": "b@example.net",
                                              "notify": ["NEVER", "SUCCESS"]}]),
     422, "invalid_notify", "recipients[0].notify"),
    ("bad orcpt", _event(recipients=[{"address": "b@example.net", "orcpt": "b@example.net"}]),
     422, "invalid_orcpt", "recipients[0].orcpt"),
    ("bad ret", _event(ret="BODY"), 422, "invalid_ret", "ret"),
    ("envid too long", _event(envid="e" * 101), 422, "envid_too_long", "envid"),
    ("non-ascii envid", _event(envid="é"), 422, "invalid_envid", "envid"),
    ("not_before garbage", _event(not_before="tomorrow"), 422, "invalid_not_before",
     "not_before"),
    ("not_before without zone", _event(not_before="2030-01-01T00:00:00"), 422,
     "invalid_not_before", "not_before"),
    ("not_before too far", _event(not_before="2999-01-01T00:00:00Z"), 422,
     "invalid_not_before", "not_before"),
    ("content without header", _event(content=ev.b64(b"just a body\r\n")), 422, "no_header",
     "content"),
    ("empty content", _event(content=""), 422, "empty_content", "content"),
    ("line over 998 octets", _event(content=ev.b64(LONG_LINE)), 422, "line_too_long",
     "content"),
    ("unknown upload", _event(content=None, upload_id=UPLOAD_ID), 422, "unknown_upload",
     "upload_id"),
    ("malformed upload id", _event(content=None, upload_id="../content/x"), 422,
     "unknown_upload", "upload_id"),
]


def test_bad_input_is_refused_without_a_trace(
    ingress: Ingress, subtests: pytest.Subtests
) -> None:
    for name, event, status, error, field in CASES:
        with subtests.test(msg=name):
            before = ingress.trace()
            n_events = len(ingress.rejects())
            got_status, body, _ = ingress.http(event)
            assert (got_status, body.get("error"), body.get("field")) == (status, error, field)
            assert set(body) == {"error", "message", "field"} and body["message"]
            assert ingress.trace().new_since(before) == (set(), set(), 0)
            rejects = ingress.rejects()[n_events:]
            assert [r["mailqueue"]["reject"]["reason"] for r in rejects] == [error]


def test_content_over_the_size_limit_is_413(ingress_factory: Any) -> None:
    small = ingress_factory(max_size=2000)
    before = small.trace()
    for content in (f.content(2001), f.content(4000)):
        status, body, _ = small.http(ev.http_send(content=ev.b64(content)))
        assert (status, body["error"], body["field"]) == (413, "too_large", "content")
    assert small.trace().new_since(before) == (set(), set(), 0)
    assert small.http(ev.http_send(content=ev.b64(f.content(2000))))[0] == 202


def test_recipient_limit_is_configurable(ingress_factory: Any) -> None:
    three = ingress_factory(max_recipients=3)
    rcpts = [f"u{i}@example.net" for i in range(4)]
    status, body, _ = three.http(ev.http_send(recipients=rcpts))
    assert (status, body["error"]) == (422, "too_many_recipients")
    assert three.http(ev.http_send(recipients=rcpts[:3]))[0] == 202


def test_reject_event_names_the_request(ingress: Ingress) -> None:
    ingress.http(ev.http_send(key="k-bad", recipients=["nope"]))
    ingress.http(ev.http_send(key="k-bad", recipients=["nope"]))
    first, second = ingress.rejects()
    assert first["eventType"] == "Reject"
    assert first["mail"]["source"] == "orders@shop.example.org"
    assert first["mail"]["destination"] == ["nope"]
    assert first["reject"] == {"reason": "mailqueue:invalid_address"}  # SES's object
    ours = first["mailqueue"]["reject"]  # our details, namespaced
    assert ours == {"timestamp": ours["timestamp"], "recipient": None,
                    "reason": "invalid_address", "field": "recipients[0].address"}
    # a retried refusal with the same key is the same event (de-duplicated downstream)
    assert first["mailqueue"]["eventId"] == second["mailqueue"]["eventId"]
    ingress.http(ev.http_send(key=None, recipients=["nope"]))
    assert ingress.rejects()[2]["mailqueue"]["eventId"] != first["mailqueue"]["eventId"]
