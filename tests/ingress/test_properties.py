"""Property-based: generated envelopes through the handler, checked against moto.

Every invalid request gets a 4xx and leaves no trace in S3, DynamoDB or SQS; every
valid one is stored exactly once, also when retried with its Idempotency-Key. moto is
not reset between examples: each example checks what it changed.

The table is measured by DescribeTable's ItemCount (live in moto, unlike DynamoDB) rather
than a full Scan per example, which would dominate the run time; the new items of a
valid mail are then named exactly by a Query on its partition.
"""

from __future__ import annotations

import base64
import json
import uuid
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.ingress.conftest import DSN_PRINCIPAL, Ingress, stored_once
from tests.support import events as ev
from tests.support.aws import AwsEnv

ATEXT = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789!#$%&'*+/=?^_`{|}~-"
RCPT_DOMAINS = ["example.net", "example.com", "d1.example", "mail.example.org", "[192.0.2.7]"]
SENDER_DOMAINS = ["shop.example.org", "example.org"]
MAX_RECIPIENTS = 10
MAX_SIZE = 20_000
HYPOTHESIS = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

local_parts = st.lists(st.text(ATEXT, min_size=1, max_size=8), min_size=1, max_size=3).map(".".join)


def _cased(draw: st.DrawFn, domain: str) -> str:
    flips = draw(st.lists(st.booleans(), min_size=len(domain), max_size=len(domain)))
    return "".join(c.upper() if f else c for c, f in zip(domain, flips, strict=True))


@st.composite
def addresses(draw: st.DrawFn, domains: list[str]) -> str:
    return f"{draw(local_parts)}@{_cased(draw, draw(st.sampled_from(domains)))}"


@st.composite
def recipients(draw: st.DrawFn) -> Any:
    address = draw(addresses(RCPT_DOMAINS))
    if draw(st.booleans()):
        return address
    rcpt: dict[str, Any] = {"address": address}
    notify = draw(
        st.sampled_from(
            [None, ["NEVER"], ["SUCCESS"], ["failure", "DELAY"], ["SUCCESS", "FAILURE"]]
        )
    )
    if notify is not None:
        rcpt["notify"] = notify
    if draw(st.booleans()):
        rcpt["orcpt"] = f"rfc822;{address}"
    return rcpt


@st.composite
def contents(draw: st.DrawFn) -> bytes:
    subject = draw(st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=60))
    lines = draw(
        st.lists(
            st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=200),
            max_size=20,
        )
    )
    head = f"From: x@example.org\r\nSubject: {subject}\r\n\r\n".encode()
    return head + "".join(f"{ln}\r\n" for ln in lines).encode()


@dataclass
class Request:
    body: dict[str, Any]
    principal: str | None = None  # None: the sample's ordinary caller

    def event(self, key: str | None = None, raw: str | None = None) -> dict[str, Any]:
        kw: dict[str, Any] = {"key": key}
        if self.principal is not None:
            kw["principal"] = self.principal
        return ev.http_send(raw if raw is not None else self.body, **kw)


@st.composite
def valid_requests(draw: st.DrawFn) -> Request:
    null = draw(st.booleans()) and draw(st.booleans())  # a quarter use the null sender
    body: dict[str, Any] = {
        "sender": "" if null else draw(addresses(SENDER_DOMAINS)),
        "recipients": draw(st.lists(recipients(), min_size=1, max_size=MAX_RECIPIENTS)),
        "content": base64.b64encode(draw(contents())).decode(),
    }
    if draw(st.booleans()):
        body["ret"] = draw(st.sampled_from(["FULL", "HDRS", "hdrs"]))
    if draw(st.booleans()):
        body["envid"] = draw(
            st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=40)
        )
    if draw(st.booleans()):
        body["smtputf8"] = draw(st.booleans())
    return Request(body, DSN_PRINCIPAL if null else None)


def _inject(draw: st.DrawFn, value: str) -> str:
    ch = draw(st.sampled_from(["\r", "\n", "\x00", "\r\n"]))
    at = draw(st.integers(0, len(value)))
    return value[:at] + ch + value[at:]


MUTATIONS = [
    "ctl_sender",
    "ctl_recipient",
    "no_at",
    "long_local",
    "utf8_without_smtputf8",
    "too_many",
    "no_header",
    "long_line",
    "too_large",
    "bad_base64",
    "truncated_json",
    "missing_field",
    "unknown_upload",
    "sender_domain",
    "null_sender",
    "ctl_envid",
]


@st.composite
def invalid_requests(draw: st.DrawFn) -> tuple[str, Request, str | None]:
    """A valid request with one defect; the raw JSON text when the defect is syntax."""
    req = draw(valid_requests())
    body = req.body
    kind = draw(st.sampled_from(MUTATIONS))
    raw: str | None = None
    i = draw(st.integers(0, len(body["recipients"]) - 1))

    def set_rcpt(address: str) -> None:
        r = body["recipients"][i]
        if isinstance(r, dict):
            r["address"] = address
        else:
            body["recipients"][i] = address

    def rcpt_address() -> str:
        r = body["recipients"][i]
        return str(r["address"] if isinstance(r, dict) else r)

    if kind == "ctl_sender":
        body["sender"] = _inject(draw, body["sender"] or "a@example.org")
    elif kind == "ctl_recipient":
        set_rcpt(_inject(draw, rcpt_address()))
    elif kind == "no_at":
        set_rcpt(rcpt_address().replace("@", draw(st.sampled_from(["", ".", " at "]))))
    elif kind == "long_local":
        set_rcpt("x" * draw(st.integers(65, 80)) + "@example.net")
    elif kind == "utf8_without_smtputf8":
        body["smtputf8"] = False
        set_rcpt(draw(st.sampled_from(["jörg@example.net", "user@bücher.example", "ü@d1.example"])))
    elif kind == "too_many":
        n = draw(st.integers(MAX_RECIPIENTS + 1, MAX_RECIPIENTS + 5))
        body["recipients"] = [f"u{j}@example.net" for j in range(n)]
    elif kind == "no_header":
        text = draw(st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=80))
        body["content"] = base64.b64encode(f" {text}\r\n\r\nbody\r\n".encode()).decode()
    elif kind == "long_line":
        n = draw(st.integers(999, 1500))
        body["content"] = base64.b64encode(b"Subject: x\r\n\r\n" + b"y" * n + b"\r\n").decode()
    elif kind == "too_large":
        n = draw(st.integers(MAX_SIZE + 1, MAX_SIZE + 5000))
        content = b"Subject: x\r\n\r\n" + (b"z" * 70 + b"\r\n") * (n // 72 + 1)
        body["content"] = base64.b64encode(content).decode()
    elif kind == "bad_base64":
        b64 = body["content"]
        at = draw(st.integers(0, len(b64)))
        body["content"] = b64[:at] + draw(st.sampled_from(["!", "*", "é", "="])) + b64[at:]
    elif kind == "truncated_json":
        text = json.dumps(body)
        raw = text[: draw(st.integers(0, len(text) - 1))]
    elif kind == "missing_field":
        del body[draw(st.sampled_from(["sender", "recipients", "content"]))]
    elif kind == "unknown_upload":
        del body["content"]
        body["upload_id"] = draw(st.from_regex(r"[0-9a-f]{32}", fullmatch=True))
    elif kind == "sender_domain":
        body["sender"] = draw(addresses(["forbidden.example", "example.net"]))
        req.principal = None
    elif kind == "null_sender":
        body["sender"] = ""
        req.principal = None
    elif kind == "ctl_envid":
        body["envid"] = _inject(draw, body.get("envid") or "id")
    return kind, req, raw


@dataclass(frozen=True)
class Footprint:
    s3: frozenset[str]  # every key in the bucket
    items: int  # items in the table
    messages: int  # messages in both queues (visible, in flight, delayed)

    def minus(self, before: Footprint) -> tuple[set[str], int, int]:
        return set(self.s3 - before.s3), self.items - before.items, self.messages - before.messages


def footprint(aws: AwsEnv) -> Footprint:
    keys: set[str] = set()
    for page in aws.clients.s3.get_paginator("list_objects_v2").paginate(
        Bucket=aws.resources.bucket
    ):
        keys.update(o["Key"] for o in page.get("Contents", []))
    items = aws.clients.dynamodb.describe_table(TableName=aws.resources.table)["Table"]["ItemCount"]
    messages = 0
    for url in (aws.resources.delivery_queue_url, aws.resources.bounce_queue_url):
        attrs = aws.clients.sqs.get_queue_attributes(
            QueueUrl=url,
            AttributeNames=[
                "ApproximateNumberOfMessages",
                "ApproximateNumberOfMessagesNotVisible",
                "ApproximateNumberOfMessagesDelayed",
            ],
        )["Attributes"]
        messages += sum(int(v) for v in attrs.values())
    return Footprint(frozenset(keys), int(items), messages)


def _mail_keys(aws: AwsEnv, mail_id: str) -> set[tuple[str, str]]:
    return {(f"M#{mail_id}", sk) for sk in aws.mail_items(mail_id)}


def _groups(body: dict[str, Any]) -> set[str]:
    out = set()
    for r in body["recipients"]:
        a = r["address"] if isinstance(r, dict) else r
        out.add(a.rpartition("@")[2].lower())
    return out


def _limited(ingress: Ingress) -> Ingress:
    return ingress.with_settings(
        max_recipients=MAX_RECIPIENTS,
        max_size=MAX_SIZE,
        allowed_sender_domains=tuple(SENDER_DOMAINS),
        sender_policy="",  # only SENDER_DOMAINS, for every caller
    )


def test_invalid_requests_get_a_4xx_and_leave_no_trace(ingress: Ingress) -> None:
    limited = _limited(ingress)

    @HYPOTHESIS
    @given(case=invalid_requests(), keyed=st.booleans())
    def check(case: tuple[str, Request, str | None], keyed: bool) -> None:
        kind, req, raw = case
        before = footprint(limited.aws)
        status, body, _ = limited.http(req.event(uuid.uuid4().hex if keyed else None, raw))
        assert 400 <= status < 500, (kind, status, body)
        assert isinstance(body["error"], str) and body["message"], kind
        assert footprint(limited.aws).minus(before) == (set(), 0, 0), kind

    check()


def test_valid_requests_are_stored_exactly_once(ingress: Ingress) -> None:
    limited = _limited(ingress)

    @HYPOTHESIS
    @given(req=valid_requests())
    def check(req: Request) -> None:
        key = uuid.uuid4().hex
        before = footprint(limited.aws)
        status, answer, _ = limited.http(req.event(key))
        assert status == 202, answer
        mail_id = answer["mail_id"]
        groups = _groups(req.body)
        after = footprint(limited.aws)
        s3, items, messages = after.minus(before)
        stored_once(limited.aws, mail_id, s3)
        expected = {(f"M#{mail_id}", "M")} | {(f"M#{mail_id}", f"G#{g}") for g in groups}
        assert _mail_keys(limited.aws, mail_id) == expected
        assert items == len(expected)  # and nothing else was written
        assert messages == len(groups)
        assert set(answer["groups"]) == groups
        assert [r["address"] for r in answer["recipients"]] == [
            r["address"] if isinstance(r, dict) else r for r in req.body["recipients"]
        ]
        # the retry: same answer, nothing new stored
        status, again, headers = limited.http(req.event(key))
        assert (status, again) == (202, answer)
        assert headers.get("Idempotent-Replayed") == "true"
        assert footprint(limited.aws).minus(after)[:2] == (set(), 0)

    check()
