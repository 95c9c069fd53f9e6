"""The events function's stream source: ParallelizationFactor from the model, and the
order the event writer needs kept (issue 40, deliverable 3).

With ParallelizationFactor > 1 Lambda reads several batches of one shard at once and
"still ensures in-order processing at the item (partition and sort key) level" ("Using
AWS Lambda with Amazon DynamoDB", https://docs.aws.amazon.com/lambda/latest/dg/with-ddb.html).
The writer derives each event from one record's old and new images, so per-item order is
all it needs; a mail's items in different batches give its Send in parts (same eventId)
and the Send's headers from a read of the content instead of the mail item's INSERT.
The second test runs a mail's real stream records split as concurrent batches may be.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from mailqueue.compose.events import event_writer
from mailqueue.core.model import Claim, MailRef, Result, utcnow
from mailqueue.services.eventlog import EventWriterSettings, iter_jsonl

from bench.model import limits
from tests.support import factories as f
from tests.support.aws import AwsEnv
from tests.support.streams import StreamReader
from tests.template.conftest import ROOT

OK = Result(250, "2.0.0", "Ok", "mx.example")
TEMP = Result(451, "4.3.0", "try later", "mx.example")


def test_the_stream_source_sets_parallelization_from_the_model(template: dict[str, Any]) -> None:
    src = template["Resources"]["EventsStreamSource"]["Properties"]
    params = template["Parameters"]
    assert src["ParallelizationFactor"] == {"Ref": "EventsParallelizationFactor"}
    p = params["EventsParallelizationFactor"]
    # the documented range (services-ddb-params: 1-10), more than one batch per shard
    assert (p["MinValue"], p["MaxValue"]) == (1, limits.PARALLELIZATION_MAX) == (1, 10)
    # the model's choice: one batch per shard (the function at one vCPU keeps up at
    # 10,000 mails/s on a pre-warmed table's shards; above 1 a mail's items may be split,
    # the next test), and the named settings the same
    assert int(p["Default"]) == 1 == limits.NAMED["EventsParallelizationFactor"]
    assert template["Resources"]["EventsFunction"]["Properties"]["MemorySize"] == 1769
    # BatchSize and the window within the documented maxima (10,000 records, 300 s)
    assert int(params["EventsBatchSize"]["Default"]) <= 10_000
    assert int(params["EventsBatchSize"]["MaxValue"]) <= 10_000
    assert int(params["EventsBatchingWindowSeconds"]["MaxValue"]) <= 300
    assert src["BatchSize"] == {"Ref": "EventsBatchSize"}
    # the model reads the template's default, and docs/deploy.md names the model's value
    assert limits.default_deployment().events_parallelization == int(p["Default"])
    deploy = (ROOT / "docs" / "deploy.md").read_text()
    named = limits.NAMED["EventsParallelizationFactor"]
    assert re.search(rf"`EventsParallelizationFactor`[^\n]*\|\s*{named}\s*\|", deploy), (
        "docs/deploy.md's table names the factor bench/limits.py uses"
    )


def _batches_by_item(records: list[dict[str, Any]], n: int) -> list[list[dict[str, Any]]]:
    """Records split over `n` concurrent batches by item (partition and sort key), each
    item's records in their order: what Lambda guarantees with ParallelizationFactor n.
    How Lambda assigns items is not documented; here the items go round-robin in the
    order they first appear (deterministic: every run splits the same way)."""
    out: list[list[dict[str, Any]]] = [[] for _ in range(n)]
    slot: dict[tuple[str, str], int] = {}
    for r in records:
        k = r["dynamodb"]["Keys"]
        key = (k["pk"]["S"], k["sk"]["S"])
        out[slot.setdefault(key, len(slot) % n)].append(r)
    return [b for b in out if b]


def _events(aws: AwsEnv, prefix: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    listing = aws.clients.s3.list_objects_v2(Bucket=aws.resources.bucket, Prefix=prefix)
    for obj in listing.get("Contents", []):
        body = aws.clients.s3.get_object(Bucket=aws.resources.bucket, Key=obj["Key"])["Body"]
        out.extend(iter_jsonl(body.read()))
    return out


def _summary(
    evs: list[dict[str, Any]],
) -> tuple[set[tuple[str, str, str]], dict[str, set[str]], dict[str, int]]:
    """(eventType, recipient, eventId) of every event; the Sends' destinations and
    header counts by eventId (a Send in parts is the same Send)."""
    kinds = set()
    dest: dict[str, set[str]] = {}
    headers: dict[str, int] = {}
    for e in evs:
        eid = e["mailqueue"]["eventId"]
        t = e["eventType"]
        body = e.get(
            {"Delivery": "delivery", "Bounce": "bounce", "DeliveryDelay": "deliveryDelay"}.get(
                t, ""
            ),
            {},
        )
        rcpts = body.get("recipients") or [
            r.get("emailAddress")
            for r in body.get("bouncedRecipients", []) + body.get("delayedRecipients", [])
        ]
        kinds.add((t, ",".join(sorted(str(r) for r in rcpts)), eid))
        if t == "Send":
            dest.setdefault(eid, set()).update(e["mail"]["destination"])
            headers[eid] = max(headers.get(eid, 0), len(e["mail"].get("headers") or []))
    return kinds, dest, headers


@pytest.mark.parametrize("factor", [3, 10])
def test_concurrent_batches_per_shard_give_the_same_events(aws: AwsEnv, factor: int) -> None:
    """A three-domain mail's life (a delay, then deliveries) and a solo mail's: the
    events of their stream records written as one batch, and as `factor` batches split
    by item and written in reverse order (any order across items), are the same events
    with the same ids and destinations: per-item order is all the events need. The
    Send's headers are not: a mail whose mail-item INSERT went to another batch than
    all its groups' INSERTs, and which was cleaned before the writer ran (delivered
    within the batching window), has a Send without headers — why the factor stays 1."""
    st = aws.storage()
    reader = StreamReader(aws)
    q = st.enqueue(f.envelope("a@x.example", "b@y.example", "c@z.example"), f.content(3000))
    solo = st.enqueue(f.envelope("d@w.example"), f.content(500))
    for g in q.groups:
        c = st.send_start(MailRef(q.mail_id, g), utcnow(), lease_seconds=60)
        assert isinstance(c, Claim)
        rid = c.group.recipients[0].rid
        if g == "y.example":  # a delay, then the retry delivers
            st.reschedule(c, {rid: TEMP}, utcnow())
            c = st.send_start(
                MailRef(q.mail_id, g), utcnow() + timedelta(seconds=1), lease_seconds=60
            )
            assert isinstance(c, Claim)
        st.send_done(c, [rid], OK)
    c = st.send_start(MailRef(solo.mail_id, solo.groups[0]), utcnow(), lease_seconds=60)
    assert isinstance(c, Claim)
    st.send_done(c, [c.group.recipients[0].rid], OK)
    records = reader.poll()
    assert len(records) >= 10

    def writer(prefix: str) -> Any:
        return event_writer(
            EventWriterSettings(bucket=aws.resources.bucket, prefix=prefix, hostname="mq.test"),
            aws.clients.s3,
            aws.clients.dynamodb,
            aws.resources.table,
        )

    writer("events/one/").handle(records)
    split = _batches_by_item(records, factor)
    assert len(split) > 1
    for b in reversed(split):
        writer("events/split/").handle(b)
    one, parts = _events(aws, "events/one/"), _events(aws, "events/split/")
    k1, d1, h1 = _summary(one)
    k2, d2, h2 = _summary(parts)
    assert k1 == k2
    assert {t for t, _, _ in k1} >= {"Send", "Delivery", "DeliveryDelay"}
    assert d1 == d2 and sorted(d1[next(iter(d1))]) != []
    assert all(n > 0 for n in h1.values())  # one batch: every Send has its headers

    def batch_of(sk: str, mail_id: str) -> set[int]:
        return {
            i
            for i, b in enumerate(split)
            for r in b
            if r["eventName"] == "INSERT"
            and r["dynamodb"]["Keys"]["pk"]["S"] == f"M#{mail_id}"
            and r["dynamodb"]["Keys"]["sk"]["S"].startswith(sk)
        }

    apart = not (batch_of("M", q.mail_id) & batch_of("G#", q.mail_id))
    send_of = {
        e["mail"]["messageId"]: e["mailqueue"]["eventId"] for e in one if e["eventType"] == "Send"
    }
    assert h2[send_of[solo.mail_id]] == h1[send_of[solo.mail_id]]  # one item: never split
    if apart:
        assert h2[send_of[q.mail_id]] == 0  # the mail item's INSERT elsewhere, the mail gone
    else:
        assert h2[send_of[q.mail_id]] == h1[send_of[q.mail_id]]
