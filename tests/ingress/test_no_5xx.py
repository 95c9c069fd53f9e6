"""Never a 5xx for what a client sends (issue 14, finding 2).

Each case was a 500 before: JSON nested ~1,000 deep hit the parser's recursion limit; a
lone surrogate (``"\\ud800"``) in a string field failed UTF-8 encoding, in the ORCPT's case
after the content was already in S3. Now each is a 4xx with the usual error shape, stored
nothing (S3, table, queues unchanged), and left one Reject event.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from mailqueue.core.errors import InvalidInput
from mailqueue.core.validate import check_text
from mailqueue.services.ingress.request import MAX_JSON_DEPTH, guard_parse, parse_body

from tests.ingress.conftest import Ingress
from tests.support import events as ev

LONE = "\ud800"  # a high surrogate without its low half: no UTF-8 encoding exists


def _raw(doc: dict[str, Any]) -> str:
    """The body as a client's JSON encoder writes it (surrogates as \\u escapes)."""
    return json.dumps(doc)


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def _rcpt(**kw: Any) -> list[dict[str, Any]]:
    return [{"address": "b@example.net", **kw}]


# (name, event, status, error, field)
CASES: list[tuple[str, dict[str, Any], int, str, str | None]] = [
    ("1,000 levels of nesting (2 KB)",
     ev.http_send(body=f'{{"sender": {_nested(1000)}}}'), 400, "json_too_deep", None),
    ("100,000 levels of nesting", ev.http_send(body=_nested(100_000)), 400, "json_too_deep",
     None),
    ("nesting inside a string is only text",
     ev.http_send(body=_raw({**ev.send_body(), "x": "[" * 5000})), 400, "unknown_field", "x"),
    (f"{MAX_JSON_DEPTH + 1} levels in an unknown field",
     ev.http_send(body=_raw({**ev.send_body(), "x": json.loads(_nested(MAX_JSON_DEPTH))})),
     400, "json_too_deep", None),
    ("duplicate key", ev.http_send(body='{"sender": "a@example.org", "sender": "x@example.org",'
                                        ' "recipients": ["b@example.net"], "content": "eA=="}'),
     400, "duplicate_field", "sender"),
    ("NaN", ev.http_send(body=_raw(ev.send_body(smtputf8=float("nan")))), 400, "invalid_json",
     None),
    ("lone surrogate in sender", ev.http_send(sender=f"a{LONE}@example.org"), 400,
     "invalid_unicode", "sender"),
    ("lone surrogate in sender, smtputf8", ev.http_send(sender=f"a{LONE}@example.org",
                                                        smtputf8=True),
     400, "invalid_unicode", "sender"),
    ("lone surrogate in recipient", ev.http_send(recipients=[f"b{LONE}@example.net"],
                                                 smtputf8=True),
     400, "invalid_unicode", "recipients[0].address"),
    ("lone surrogate in recipient object",
     ev.http_send(recipients=[{"address": f"b@ex{LONE}ample.net"}], smtputf8=True), 400,
     "invalid_unicode", "recipients[0].address"),
    ("lone surrogate in orcpt", ev.http_send(recipients=_rcpt(orcpt=f"rfc822;b{LONE}@x.net")),
     400, "invalid_unicode", "recipients[0].orcpt"),
    ("lone surrogate in orcpt, smtputf8",
     ev.http_send(recipients=_rcpt(orcpt=f"utf-8;b{LONE}@x.net"), smtputf8=True), 400,
     "invalid_unicode", "recipients[0].orcpt"),
    ("lone surrogate in envid", ev.http_send(envid=f"e{LONE}"), 400, "invalid_unicode", "envid"),
    ("lone surrogate in ret", ev.http_send(ret=f"FULL{LONE}"), 400, "invalid_unicode", "ret"),
    ("lone surrogate in notify", ev.http_send(recipients=_rcpt(notify=[f"NEVER{LONE}"])), 400,
     "invalid_unicode", "recipients[0].notify[0]"),
    ("lone surrogate in not_before", ev.http_send(not_before=f"2030-01-01T00:00:00Z{LONE}"),
     400, "invalid_unicode", "not_before"),
    ("lone surrogate in upload_id", ev.http_send(content=None, upload_id=f"{LONE}" * 32), 400,
     "invalid_unicode", "upload_id"),
    ("lone surrogate in content", ev.http_send(content=f"eA=={LONE}"), 400, "invalid_base64",
     "content"),
    ("lone surrogate as a field name",
     ev.http_send(body=_raw({**ev.send_body(), f"x{LONE}": 1})), 400, "invalid_unicode", None),
    ("lone low surrogate in sender", ev.http_send(sender="a\udfff@example.org"), 400,
     "invalid_unicode", "sender"),
    ("lone surrogate in the raw body, not escaped",
     ev.http_send(body='{"sender": "a\ud800@example.org"}'), 400, "invalid_json", None),
    ("lone surrogate in Idempotency-Key", ev.http_send(key=f"k{LONE}"), 400,
     "invalid_idempotency_key", "Idempotency-Key"),
    ("ESC in orcpt", ev.http_send(recipients=_rcpt(orcpt="rfc822;b\x1b@example.net")), 400,
     "forbidden_character", "recipients[0].orcpt"),
    ("DEL in orcpt", ev.http_send(recipients=_rcpt(orcpt="rfc822;b\x7f@example.net")), 400,
     "forbidden_character", "recipients[0].orcpt"),
    ("C1 control in orcpt, smtputf8",
     ev.http_send(recipients=_rcpt(orcpt="utf-8;b\x85@example.net"), smtputf8=True), 400,
     "forbidden_character", "recipients[0].orcpt"),
    ("tab in sender", ev.http_send(sender="a\t@example.org"), 400, "forbidden_character",
     "sender"),
    ("ESC in recipient", ev.http_send(recipients=["b\x1b@example.net"]), 400,
     "forbidden_character", "recipients[0].address"),
    ("BEL in not_before", ev.http_send(not_before="2030-01-01T00:00:00Z\x07"), 400,
     "forbidden_character", "not_before"),
    ("orcpt over 500 characters",
     ev.http_send(recipients=_rcpt(orcpt="rfc822;" + "b" * 600 + "@example.net")), 422,
     "orcpt_too_long", "recipients[0].orcpt"),
    ("recipient a number", ev.http_send(recipients=[42]), 400, "invalid_type", "recipients[0]"),
    ("notify not a list", ev.http_send(recipients=_rcpt(notify="NEVER")), 400, "invalid_type",
     "recipients[0].notify"),
]


def test_client_input_never_gets_a_5xx_and_stores_nothing(
    ingress: Ingress, subtests: pytest.Subtests
) -> None:
    for name, event, status, error, field in CASES:
        with subtests.test(msg=name):
            before = ingress.trace()
            n_events = len(ingress.rejects())
            if "Idempotency" not in name:
                event["headers"].pop("idempotency-key", None)  # each case on its own
            got_status, body, _ = ingress.http(event)
            assert (got_status, body.get("error"), body.get("field")) == (status, error, field)
            assert set(body) == {"error", "message", "field"} and body["message"]
            assert ingress.trace().new_since(before) == (set(), set(), 0)
            reasons = [r["reject"]["reason"] for r in ingress.rejects()[n_events:]]
            assert [r.removeprefix("mailqueue:") for r in reasons] == [error]


def test_a_body_over_the_limit_is_refused_before_parsing(ingress_factory: Any) -> None:
    small = ingress_factory(max_size=2000)
    padding = " " * (small.service.max_body + 1)
    before = small.trace()
    status, body, _ = small.http(ev.http_send(body=_raw(ev.send_body()) + padding))
    assert (status, body["error"], body["field"]) == (413, "too_large", None)
    assert small.trace().new_since(before) == (set(), set(), 0)
    # the limit leaves room for the largest content and every recipient's parameters
    ok = _raw(ev.send_body()) + " " * (small.service.max_body - len(_raw(ev.send_body())))
    assert small.http(ev.http_send(body=ok))[0] == 202


def test_depth_limit_is_exact() -> None:
    inside = json.loads(_nested(MAX_JSON_DEPTH - 1))
    assert parse_body(json.dumps({"x": inside}).encode())["x"] == inside
    with pytest.raises(InvalidInput) as e:
        parse_body(json.dumps({"x": [inside]}).encode())
    assert e.value.code == "json_too_deep"
    # brackets inside strings (with escaped quotes) do not count
    text = json.dumps({"x": '\\"' + "[" * 100, "y": inside})
    assert parse_body(text)["y"] == inside


def test_check_text_refuses_surrogates_and_controls() -> None:
    assert check_text("jörg@exämple.net ✉ 𝔘", "f") is None
    for bad, code in ((LONE, "invalid_unicode"), ("\udc80", "invalid_unicode"),
                      ("\x00", "forbidden_character"), ("\x1f", "forbidden_character"),
                      ("\x7f", "forbidden_character"), ("\x9f", "forbidden_character")):
        with pytest.raises(InvalidInput) as e:
            check_text(f"a{bad}b", "f")
        assert (e.value.code, e.value.field) == (code, "f")


def test_an_unexpected_parser_error_is_a_400_not_a_500() -> None:
    def broken() -> None:
        raise KeyError("a parser bug")

    with pytest.raises(InvalidInput) as e:
        guard_parse(broken)
    assert (e.value.code, e.value.field) == ("invalid_request", None)
    # the client's own refusal passes through unchanged
    with pytest.raises(InvalidInput) as e2:
        guard_parse(lambda: parse_body(b"[1]"))
    assert e2.value.code == "invalid_json"


@pytest.mark.parametrize(
    ("source", "recipient", "reason"),
    [
        (f"alice{LONE}@sender.example.org", "support@example.com", "invalid_unicode"),
        ("alice\x1b@sender.example.org", "support@example.com", "forbidden_character"),
        ("alice@sender.example.org", f"supp{LONE}ort@example.com", None),
    ],
)
def test_an_ses_receipt_with_unencodable_strings_is_refused_not_retried(
    ingress: Ingress, source: str, recipient: str, reason: str | None
) -> None:
    """The SES path takes strings from the sending MTA: refused (STOP_RULE, one Reject),
    never an exception that Lambda would retry forever."""
    event = ev.ses_receipt(source=source, recipients=[recipient])
    key = f"{ingress.settings.ses_prefix}{ev.ses_message_id(event)}"
    raw = b"From: a@sender.example.org\r\nSubject: x\r\n\r\nbody\r\n"
    ingress.aws.clients.s3.put_object(Bucket=ingress.settings.inbound_bucket, Key=key, Body=raw)
    before = ingress.trace()
    assert ingress(event) == {"disposition": "STOP_RULE"}
    s3, ddb, sqs = ingress.trace().new_since(before)
    assert (s3, ddb, sqs) == (set(), set(), 0)
    reasons = [r["reject"]["reason"].removeprefix("mailqueue:") for r in ingress.rejects()]
    # an unencodable recipient is not one of ours (no receiving domain has it): dropped
    assert reasons == [reason or reasons[0]] and len(reasons) == 1
