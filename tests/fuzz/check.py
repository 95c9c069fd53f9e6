"""Send generated requests to the local stack over HTTP and account for every answer.

`send_all` sends each `Case` (its method and target: `POST /v1/messages` for ingress, every
admin route for the admin fuzz) with the development token and records status, answer and
time; a client timeout is a hang. `stored_state` reads back what the queue holds (content
objects, mail and group items, delivery triggers) from moto; `partial_writes` compares it
with the 202 answers: anything stored that no 202 names, or any 202 whose parts are not
all stored, is a partial write.
"""

from __future__ import annotations

import http.client
import json
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import boto3

from tests.fuzz.gen import Case

TIMEOUT = 30.0  # seconds; API Gateway's own integration timeout is 30 s


@dataclass
class Outcome:
    case: Case
    status: int  # 0: no answer within TIMEOUT (a hang)
    body: Any
    replayed: bool
    seconds: float


@dataclass
class Results:
    outcomes: list[Outcome] = field(default_factory=list)
    seconds: float = 0.0

    def statuses(self) -> Counter[int]:
        return Counter(o.status for o in self.outcomes)

    def errors(self) -> Counter[str]:
        return Counter(
            str(o.body.get("error") or o.body.get("message")) if isinstance(o.body, dict) else "-"
            for o in self.outcomes
            if o.status >= 400
        )

    def server_errors(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.status >= 500]

    def hangs(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.status == 0]

    def bad_shapes(self, extra: bool = False) -> list[Outcome]:
        """4xx answers without the machine-readable shape (the gateway's own: message).

        `extra`: the reason may carry more keys (the admin API's 409 busy names its groups).
        """
        out = []
        for o in self.outcomes:
            if 400 <= o.status < 500 and o.case.method != "HEAD":  # HEAD: never a body
                keys = set(o.body) if isinstance(o.body, dict) else set()
                reason = {"error", "message", "field"}
                ok = (
                    keys == {"message"}
                    or (reason <= keys if extra else keys == reason)
                    and isinstance(o.body.get("error"), str)
                )
                if not ok:
                    out.append(o)
        return out

    def accepted(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.status == 202]


def send_all(api_url: str, token: str, cases: Iterable[Case]) -> Results:
    parts = urlsplit(api_url)
    results = Results()
    started = time.monotonic()
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=TIMEOUT)
    for case in cases:
        headers = {"authorization": f"Bearer {token}"}
        if case.body or case.method not in ("GET", "DELETE"):
            headers["content-length"] = str(len(case.body))
        if case.content_type:
            headers["content-type"] = case.content_type
        if case.key is not None:
            headers["idempotency-key"] = case.key
        t0 = time.monotonic()
        try:
            conn.request(case.method, case.path, body=case.body or None, headers=headers)
            resp = conn.getresponse()
            raw = resp.read()
            status = resp.status
            replayed = resp.getheader("idempotent-replayed") == "true"
        except TimeoutError:
            status, raw, replayed = 0, b"", False
            conn.close()
            conn = http.client.HTTPConnection(
                parts.hostname or "127.0.0.1", parts.port, timeout=TIMEOUT
            )
        except (http.client.HTTPException, ConnectionError):
            # the server closed a kept-alive connection: once more on a fresh one
            conn.close()
            conn = http.client.HTTPConnection(
                parts.hostname or "127.0.0.1", parts.port, timeout=TIMEOUT
            )
            conn.request(case.method, case.path, body=case.body or None, headers=headers)
            resp = conn.getresponse()
            raw, status = resp.read(), resp.status
            replayed = resp.getheader("idempotent-replayed") == "true"
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw[:200]
        results.outcomes.append(Outcome(case, status, body, replayed, time.monotonic() - t0))
    conn.close()
    results.seconds = time.monotonic() - started
    return results


@dataclass(frozen=True)
class Stored:
    content: frozenset[str]  # mail ids with content (an S3 object, the mail item, a content item)
    items: frozenset[tuple[str, str]]  # (mail id, "M" | group key)
    triggers: int  # messages in the delivery queue(s): visible, in flight, delayed


def stored_state(ready: dict[str, Any]) -> Stored:
    """What the queue holds, read from moto with the stack's own names."""
    session = boto3.session.Session(
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        region_name=ready["region"],
    )
    kw = {"endpoint_url": ready["endpoint_url"]}
    s3, ddb, sqs = (session.client(n, **kw) for n in ("s3", "dynamodb", "sqs"))
    content: set[str] = set()
    for page in s3.get_paginator("list_objects_v2").paginate(
        Bucket=ready["bucket"], Prefix="content/"
    ):
        # content/<hashed prefix>/<mail id>: the id is the last segment
        content.update(o["Key"].rsplit("/", 1)[-1] for o in page.get("Contents", []))
    items: set[tuple[str, str]] = set()
    for page in ddb.get_paginator("scan").paginate(
        TableName=ready["table"],
        ProjectionExpression="pk, sk, #b, content_key",
        ExpressionAttributeNames={"#b": "body"},
    ):
        for it in page["Items"]:
            pk, sk = it["pk"]["S"], it["sk"]["S"]
            if pk.startswith("M#") and sk == "C":  # a content item (issue 40): the content
                content.add(pk[2:])
                continue
            if pk.startswith("M#"):
                items.add((pk[2:], "M" if sk == "M" else sk.removeprefix("G#")))
                if sk == "M" and "body" in it:  # a small mail's content, in its mail item
                    content.add(pk[2:])
                if sk.startswith("G#") and "body" in it:  # a solo mail: its one item holds
                    content.add(pk[2:])  # the content and stands for the mail item
                    items.add((pk[2:], "M"))
                key = it.get("content_key", {}).get("S", "")
                if sk.startswith("G#") and key.endswith("|C"):  # a content item's group
                    items.add((pk[2:], "M"))  # item stands for the mail item
    triggers = 0
    for url in sqs.list_queues().get("QueueUrls", []):
        if "delivery" not in url.rsplit("/", 1)[-1]:
            continue  # the delivery queue and its DLQ: ingress posts nothing elsewhere
        attrs = sqs.get_queue_attributes(
            QueueUrl=url,
            AttributeNames=[
                "ApproximateNumberOfMessages",
                "ApproximateNumberOfMessagesNotVisible",
                "ApproximateNumberOfMessagesDelayed",
            ],
        )["Attributes"]
        triggers += sum(int(v) for v in attrs.values())
    return Stored(frozenset(content), frozenset(items), triggers)


@dataclass(frozen=True)
class Accounting:
    """Stored state against the answers; every list empty means no partial write."""

    content_without_answer: list[str]
    answer_without_content: list[str]
    items_without_answer: list[tuple[str, str]]
    answer_without_items: list[tuple[str, str]]
    triggers: int
    triggers_min: int  # one per accepted (mail, group)
    triggers_max: int  # a keyed replay re-posts its never-attempted groups' triggers

    @property
    def partial_writes(self) -> int:
        bad = (
            self.content_without_answer,
            self.answer_without_content,
            self.items_without_answer,
            self.answer_without_items,
        )
        out = sum(len(b) for b in bad)
        if not self.triggers_min <= self.triggers <= self.triggers_max:
            out += 1
        return out


def account(results: Results, stored: Stored) -> Accounting:
    ids: set[str] = set()
    expected: set[tuple[str, str]] = set()
    posted = 0
    for o in results.accepted():
        mail_id, groups = o.body["mail_id"], o.body["groups"]
        ids.add(mail_id)
        expected.add((mail_id, "M"))
        expected.update((mail_id, g) for g in groups)
        posted += len(groups)
    distinct = len(expected) - len(ids)
    return Accounting(
        content_without_answer=sorted(stored.content - ids),
        answer_without_content=sorted(ids - stored.content),
        items_without_answer=sorted(stored.items - expected),
        answer_without_items=sorted(expected - stored.items),
        triggers=stored.triggers,
        triggers_min=distinct,
        triggers_max=posted,
    )
