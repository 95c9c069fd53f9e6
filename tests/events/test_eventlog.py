"""Events derived from the table's real change stream (moto), written to S3 as JSON lines."""

from __future__ import annotations

from datetime import timedelta

from mailqueue.eventlog import EventWriterService, EventWriterSettings, inline_reader, iter_jsonl
from mailqueue.model import Claim, MailRef, Result, utcnow

from functions.events import app as events_app
from tests.support import factories as f
from tests.support.aws import AwsEnv
from tests.support.lambda_context import LambdaContext
from tests.support.streams import StreamReader

OK = Result(250, "2.0.0", "Ok: queued as 1", "mx.x.example")
TEMP = Result(451, "4.3.0", "try later", "mx.x.example")
PERM = Result(550, "5.1.1", "user unknown", "mx.x.example")


def _events(aws: AwsEnv) -> list[dict]:  # type: ignore[type-arg]
    out = []
    listing = aws.clients.s3.list_objects_v2(Bucket=aws.resources.bucket, Prefix="events/")
    for obj in listing.get("Contents", []):
        body = aws.clients.s3.get_object(Bucket=aws.resources.bucket, Key=obj["Key"])["Body"]
        out.extend(iter_jsonl(body.read()))
    return out


def _service(aws: AwsEnv) -> EventWriterService:
    return EventWriterService(
        EventWriterSettings(bucket=aws.resources.bucket, hostname="mq.test"),
        aws.clients.s3,
        inline_content=inline_reader(aws.clients.dynamodb, aws.resources.table),
    )


def test_a_mail_life_becomes_ses_shaped_events(aws: AwsEnv) -> None:
    st = aws.storage()
    reader = StreamReader(aws)
    q = st.enqueue(f.envelope("ok@x.example", "bad@x.example", "slow@x.example"), f.content())
    c = st.send_start(MailRef(q.mail_id, "x.example"), utcnow(), lease_seconds=60)
    assert isinstance(c, Claim)
    st.send_done(c, ["r0"], OK, tls=True)
    st.drop(c, {"r1": PERM})
    st.reschedule(c, {"r2": TEMP}, utcnow() + timedelta(minutes=5))
    records = reader.poll()
    result = events_app.handle({"Records": records}, LambdaContext(), _service(aws))
    assert result["events"] == 4  # one Send for the mail, then one per recipient outcome
    evs = _events(aws)
    kinds = sorted((e["eventType"], _rcpt(e)) for e in evs)
    assert kinds == [
        ("Bounce", "bad@x.example"),
        ("Delivery", "ok@x.example"),
        ("DeliveryDelay", "slow@x.example"),
        ("Send", None),
    ]
    by = {e["eventType"]: e for e in evs}
    assert sorted(by["Send"]["mail"]["destination"]) == [
        "bad@x.example", "ok@x.example", "slow@x.example"
    ]
    assert by["Delivery"]["delivery"]["smtpResponse"] == "250 Ok: queued as 1"
    att = by["Delivery"]["mailqueue"]["attempt"]
    assert att["number"] == 1 and att["tls"] is True
    b = by["Bounce"]["bounce"]
    assert b["bounceType"] == "Permanent" and b["bounceSubType"] == "NoEmail"
    assert b["bouncedRecipients"][0]["status"] == "5.1.1"
    assert by["DeliveryDelay"]["deliveryDelay"]["delayedRecipients"][0]["status"] == "4.3.0"
    assert all(e["mail"]["messageId"] == q.mail_id for e in evs)
    assert len({e["mailqueue"]["eventId"] for e in evs}) == 4


def _rcpt(e: dict) -> str | None:  # type: ignore[type-arg]
    for obj, key in (("delivery", "recipients"), ("bounce", "bouncedRecipients"),
                     ("deliveryDelay", "delayedRecipients")):
        if obj in e:
            r = e[obj][key][0]
            return r if isinstance(r, str) else r["emailAddress"]
    return None


def test_a_retried_batch_overwrites_instead_of_duplicating(aws: AwsEnv) -> None:
    st = aws.storage()
    reader = StreamReader(aws)
    st.enqueue(f.envelope("a@x.example", "b@y.example"), f.content())
    records = reader.poll()
    svc = _service(aws)
    first = svc.handle(records)
    second = svc.handle(records)  # Lambda retries the same batch
    assert first["objects"] == second["objects"]
    evs = _events(aws)  # one Send for the mail, with both destinations, written once
    assert len(evs) == 1 and evs[0]["eventType"] == "Send"
    assert sorted(evs[0]["mail"]["destination"]) == ["a@x.example", "b@y.example"]


def test_events_are_partitioned_by_date_and_hour(aws: AwsEnv) -> None:
    st = aws.storage()
    reader = StreamReader(aws)
    st.enqueue(f.envelope(), f.content())
    out = _service(aws).handle(reader.poll())
    (key,) = out["objects"]
    now = utcnow()
    assert key.startswith(f"events/dt={now:%Y-%m-%d}/hr=") and key.endswith(".json.gz")


def test_the_writer_also_keeps_the_queue_size_counters(aws: AwsEnv) -> None:
    from mailqueue.counters import CounterStore

    st = aws.storage()
    reader = StreamReader(aws)
    counters = CounterStore(aws.resources.table, aws.clients.dynamodb)
    svc = EventWriterService(
        EventWriterSettings(bucket=aws.resources.bucket), aws.clients.s3, counters
    )
    st.enqueue(f.envelope("a@x.example", "b@x.example", "c@y.example"), f.content())
    svc.handle(reader.poll())
    counts = counters.read()
    assert counts.pending() == 3 and counts.domains["y.example"] == {"queued": 1}
