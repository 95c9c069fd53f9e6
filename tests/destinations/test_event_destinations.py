"""Event destinations (issue 42, deliverable 4): the list as data, the signature, the
webhook's answers, EventBridge and SNS on moto, the outbox batches, retry and dead letters.
The whole path through the local stack is tests/destinations/test_webhook_e2e.py."""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mailqueue.backends.aws.destinations import (
    EventBridgeSender,
    SnsSender,
    SqsOutbox,
    SqsRetry,
)
from mailqueue.backends.webhook import WebhookSender
from mailqueue.core.config import ConfigError
from mailqueue.services.destinations import (
    MAX_EVENT_BYTES,
    MAX_MESSAGE_BYTES,
    Destination,
    DestinationError,
    DestinationService,
    DestinationSettings,
    Envelope,
    envelopes,
    envelopes_and_too_large,
    event_bytes,
    fit,
    parse_destinations,
    sign,
    verify_signature,
)

from tests.destinations.receiver import WINDOW_SECONDS, Receiver, verify
from tests.support.aws import AwsEnv, session

SECRET = "s" * 32
BUS = "arn:aws:events:us-east-1:123456789012:event-bus/default"
TOPIC = "arn:aws:sns:us-east-1:123456789012:mail-events"


def _event(kind: str = "Bounce", eid: str = "e1") -> dict[str, Any]:
    return {"eventType": kind, "mail": {"messageId": "m1"}, "mailqueue": {"eventId": eid}}


def _one(**d: Any) -> str:
    return json.dumps({"destinations": [d]})


@pytest.mark.parametrize(
    ("doc", "reason"),
    [
        ("{", "not JSON"),
        ('{"destinations": {}}', "expected"),
        (_one(name="Bad Name", type="sns", arn=TOPIC), ".name"),
        ('{"destinations": [{"name": "a", "type": "kafka"}]}', ".type"),
        ('{"destinations": [{"name": "a", "type": "webhook", "url": "http://x.example/h"}]}',
         "https://"),
        ('{"destinations": [{"name": "a", "type": "webhook", "url": "https://x.example/h",'
         ' "events": ["Bounced"]}]}', "unknown event type 'Bounced'"),
        (_one(name="a", type="sns", arn=BUS), ".arn"),
        (json.dumps({"destinations": [{"name": "a", "type": "sns", "arn": TOPIC}] * 2}),
         "used twice"),
        ('{"destinations": [{"name": "nokey", "type": "webhook", "url": "https://x.example/h"}]}',
         "signing secret"),
        (_one(name="a", type="sns", arn=TOPIC, filter=1), "unknown field"),
    ],
)
def test_a_bad_destination_list_is_refused_with_its_place(doc: str, reason: str) -> None:
    with pytest.raises(ConfigError, match="MQ_EVENT_DESTINATIONS") as e:
        parse_destinations(doc, secrets={"a": SECRET})
    assert reason in str(e.value)


def test_filters_take_each_event_once_per_destination() -> None:
    dests = parse_destinations(
        json.dumps({"destinations": [
            {"name": "crm", "type": "webhook", "url": "https://crm.example/h",
             "events": ["Bounce", "Complaint", "Subscription"]},
            {"name": "bus", "type": "eventbridge", "arn": BUS},
        ]}),
        secrets={"crm": SECRET},
    )
    got = envelopes([_event("Send", "a"), _event("Bounce", "b")], dests)
    assert [(e.destination, e.event_id) for e in got] == [("bus", "a"), ("crm", "b"), ("bus", "b")]
    assert Envelope.decode(got[1].encode()) == got[1]


def test_signature_covers_body_and_time_and_refuses_replays() -> None:
    body = b'{"eventType":"Bounce"}'
    header = sign(SECRET, body, 1_000_000)
    assert verify_signature(SECRET, header, body, 1_000_000 + 299)
    assert not verify_signature(SECRET, header, body, 1_000_000 + 301)  # replayed later
    assert not verify_signature(SECRET, header, body + b" ", 1_000_000)  # body changed
    assert not verify_signature("t" * 32, header, body, 1_000_000)  # another key
    assert not verify_signature(SECRET, "v1=00", body, 1_000_000)


def test_default_retries_span_more_than_a_day() -> None:
    s = DestinationSettings()
    assert s.retry_span_seconds() > 24 * 3600
    assert [s.backoff(n) for n in (1, 2, 3, 8, 20)] == [30, 60, 120, 3600, 3600]
    with pytest.raises(ConfigError):
        DestinationSettings(destination_retry_base_seconds=60, destination_retry_max_seconds=30)


def _port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = int(s.getsockname()[1])
    s.close()
    return p


@pytest.fixture()
def receiver() -> Iterator[Receiver]:
    r = Receiver(_port(), SECRET).start()
    yield r
    r.stop()


def _hook(port: int) -> Destination:
    return parse_destinations(
        json.dumps({"destinations": [
            {"name": "app", "type": "webhook", "url": f"http://127.0.0.1:{port}/h"}
        ]}),
        secrets={"app": SECRET},
        allow_http_loopback=True,
    )[0]


def test_webhook_answers_decide_retry(receiver: Receiver) -> None:
    dest, env = _hook(receiver.port), Envelope("app", "e1", "Bounce", _event())
    WebhookSender().send(dest, env)
    assert receiver.unique() == {"e1": _event()} and receiver.bad_signatures == 0
    receiver.status = 503
    with pytest.raises(DestinationError) as e:
        WebhookSender().send(dest, env)
    assert e.value.retry
    receiver.status = 400  # the receiver refuses this event: no retry fixes it
    with pytest.raises(DestinationError) as e:
        WebhookSender().send(dest, env)
    assert not e.value.retry
    receiver.stop()  # down: connection refused
    with pytest.raises(DestinationError) as e:
        WebhookSender(timeout=2).send(dest, env)
    assert e.value.retry


def _queue(sqs: Any, name: str) -> tuple[str, str]:
    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]
    return url, arn["QueueArn"]


def _drain(sqs: Any, url: str, want: int, wait: float = 10) -> list[dict[str, Any]]:
    got: list[dict[str, Any]] = []
    deadline = time.monotonic() + wait
    while len(got) < want and time.monotonic() < deadline:
        got += sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1).get(
            "Messages", []
        )
    return got


def test_eventbridge_and_sns_destinations_on_moto(aws: AwsEnv) -> None:
    sess = session()
    events = sess.client("events", endpoint_url=aws.endpoint)
    sns, sqs = sess.client("sns", endpoint_url=aws.endpoint), aws.clients.sqs
    bus_url, bus_arn = _queue(sqs, "from-bus")
    events.put_rule(Name="mail", EventPattern=json.dumps({"source": ["mailqueue"]}))
    events.put_targets(Rule="mail", Targets=[{"Id": "q", "Arn": bus_arn}])
    topic = sns.create_topic(Name="mail-events")["TopicArn"]
    topic_url, topic_q = _queue(sqs, "from-topic")
    sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=topic_q,
                  Attributes={"RawMessageDelivery": "true"})
    dests = parse_destinations(json.dumps({"destinations": [
        {"name": "bus", "type": "eventbridge", "arn": BUS},
        {"name": "topic", "type": "sns", "arn": topic},
    ]}))
    svc = DestinationService(
        DestinationSettings(), dests, {"eventbridge": EventBridgeSender(events),
                                       "sns": SnsSender(sns)},  # type: ignore[dict-item]
    )
    for env in envelopes([_event("Complaint", "c1")], dests):
        svc.deliver(env.encode())
    (from_bus,) = _drain(sqs, bus_url, 1)
    doc = json.loads(from_bus["Body"])
    assert doc["detail-type"] == "Email Complaint Received" and doc["source"] == "mailqueue"
    assert doc["detail"] == _event("Complaint", "c1")  # SES's shape in `detail`
    (from_topic,) = _drain(sqs, topic_url, 1)
    assert json.loads(from_topic["Body"]) == _event("Complaint", "c1")


def test_outbox_batches_and_retry_or_dead_letter(aws: AwsEnv, receiver: Receiver) -> None:
    sqs = aws.clients.sqs
    out_url, _ = _queue(sqs, "dest-outbox")
    dlq_url, _ = _queue(sqs, "dest-dlq")
    header = [{"name": "X", "value": "v" * 60_000}]
    big = {**_event(), "mail": {"messageId": "m1", "headers": header}}
    items = [Envelope("app", f"e{i}", "Bounce", big if i < 5 else _event("Bounce", f"e{i}"))
             for i in range(25)]
    SqsOutbox(sqs, out_url).put(items)  # the limits guard fails the test on a batch > 256 KiB
    got = _drain(sqs, out_url, 25)
    assert sorted(Envelope.decode(m["Body"]).event_id for m in got) == sorted(
        e.event_id for e in items
    )
    retry = SqsRetry(sqs, out_url, dlq_url)
    svc = DestinationService(
        DestinationSettings(destination_max_attempts=3), [_hook(receiver.port)],
        {"webhook": WebhookSender(timeout=2)},  # type: ignore[dict-item]
    )
    first, second, third = got[0], got[1], got[2]
    assert svc.process(first["Body"], 1, first["ReceiptHandle"], retry) == "sent"
    receiver.status = 503
    with pytest.raises(DestinationError):
        svc.process(second["Body"], 1, second["ReceiptHandle"], retry)  # back in 30 s
    assert svc.process(third["Body"], 3, third["ReceiptHandle"], retry) == "dead"  # the last try
    receiver.status = 410  # gone: dead-lettered at once, whatever the count
    fourth = got[3]
    assert svc.process(fourth["Body"], 1, fourth["ReceiptHandle"], retry) == "dead"
    dead = _drain(sqs, dlq_url, 2)
    assert sorted(Envelope.decode(m["Body"]).event_id for m in dead) == sorted(
        Envelope.decode(m["Body"]).event_id for m in (third, fourth)
    )


# ------------------------------------------------------------------ the documentation
DOCS = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


def _documented_example() -> tuple[str, int, bytes, str]:
    text = DOCS.read_text()
    section = text.split("### Verifying a webhook's signature", 1)[1].split("\n### ", 1)[0]

    def item(label: str) -> str:
        m = re.search(rf"^- {label}: `([^`]+)`$", section, re.M)
        assert m, f"docs/operations.md: the worked example's {label} is missing"
        return m.group(1)

    return item("key"), int(item("timestamp")), item("body").encode(), item("header")


def test_the_documented_signature_example_is_what_the_code_and_receiver_do() -> None:
    """The worked example in docs/operations.md: the sender's `sign` makes its header, and
    the test receiver's verifier (written from the docs, importing nothing of ours)
    accepts it within the replay window only, and refuses any change."""
    key, t, body, header = _documented_example()
    assert sign(key, body, t) == header
    assert verify(key, header, body, t + WINDOW_SECONDS) and verify(key, header, body, t - 299)
    assert not verify(key, header, body, t + WINDOW_SECONDS + 1)  # replayed too late
    assert not verify(key, header, body + b" ", t)  # body changed
    assert not verify(key, header.replace(f"t={t}", f"t={t + 1}"), body, t)  # time changed
    assert not verify(key[:-1] + "x", header, body, t)  # another key
    # and both sides agree on a fresh signature over a real event body
    ev = json.dumps(_event(), separators=(",", ":")).encode()
    now = time.time()
    assert verify(SECRET, sign(SECRET, ev, now), ev, now)
    assert verify_signature(SECRET, header_for(ev, now), ev, now)


def header_for(body: bytes, now: float) -> str:
    """A header made by hand from the documented steps (the sender's check reads it)."""
    mac = hmac.new(SECRET.encode(), f"{int(now)}.".encode() + body, hashlib.sha256)
    return f"t={int(now)},v1={mac.hexdigest()}"


# ------------------------------------------------------------------ size limits
def _many_recipients(kind: str = "Bounce", eid: str = "big") -> dict[str, Any]:
    """A mail to 1,000 long addresses (ingress's limit): over 256 KiB as SES shapes it."""
    rcpts = [f"{'r' * 120}.{i:04d}@{'d' * 60}.example" for i in range(1000)]
    return {
        "eventType": kind,
        "mail": {
            "messageId": "m1",
            "destination": rcpts,
            "headersTruncated": False,
            "headers": [{"name": "X-Pad", "value": "v" * 9000}],
            "commonHeaders": {"to": rcpts, "subject": "s"},
        },
        "bounce": {"bouncedRecipients": [{"emailAddress": rcpts[7]}]},
        "mailqueue": {"eventId": eid},
    }


def test_an_oversized_event_is_shrunk_to_fit_or_left_out() -> None:
    big = _many_recipients()
    assert event_bytes(big) > MAX_MESSAGE_BYTES
    (env,) = envelopes([big], [Destination("app", "webhook", "https://x.example/h",
                                           frozenset("*"), SECRET)])
    mail = env.event["mail"]
    assert event_bytes(env.event) <= MAX_EVENT_BYTES
    assert len(env.encode().encode()) <= MAX_MESSAGE_BYTES  # the outbox's SQS message
    assert mail["headersTruncated"] is True and "headers" not in mail
    assert "destination" not in mail and "commonHeaders" not in mail
    assert env.event["mailqueue"]["truncated"] == [
        "mail.headers", "mail.commonHeaders", "mail.destination"
    ]
    assert env.event["bounce"] == big["bounce"]  # the event's own recipient stays
    # headers alone over the limit: only they go
    heavy = {**_event(), "mail": {"messageId": "m1", "destination": ["a@x.example"],
                                  "headers": [{"name": "X", "value": "v" * 300_000}]}}
    small = fit(heavy)
    assert small is not None and small["mail"]["destination"] == ["a@x.example"]
    assert small["mailqueue"]["truncated"] == ["mail.headers"]
    # nothing to shrink: left out, counted (it stays in the S3 log)
    huge = {**_event(), "bounce": {"diagnosticCode": "x" * 300_000}}
    assert fit(huge) is None
    dests = parse_destinations(_one(name="bus", type="eventbridge", arn=BUS))
    assert envelopes_and_too_large([huge, _event()], dests) == (
        envelopes([_event()], dests), 1
    )


def test_oversized_events_reach_eventbridge_and_sns_shrunk(aws: AwsEnv) -> None:
    """On moto: SNS refuses a message over 256 KiB (as AWS does: InvalidParameter); the
    shrunk event is accepted by SNS and EventBridge and arrives as sent; a message over
    the limit that reaches a sender is refused before the call, with no retry."""
    sess = session()
    events = sess.client("events", endpoint_url=aws.endpoint)
    sns, sqs = sess.client("sns", endpoint_url=aws.endpoint), aws.clients.sqs
    topic = sns.create_topic(Name="big-events")["TopicArn"]
    topic_url, topic_q = _queue(sqs, "big-from-topic")
    sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=topic_q,
                  Attributes={"RawMessageDelivery": "true"})
    bus_url, bus_arn = _queue(sqs, "big-from-bus")
    events.put_rule(Name="big", EventPattern=json.dumps({"source": ["mailqueue"]}))
    events.put_targets(Rule="big", Targets=[{"Id": "q", "Arn": bus_arn}])
    big = _many_recipients("Bounce", "big-1")
    with pytest.raises(Exception, match="(?i)too long|invalid"):
        sns.publish(TopicArn=topic, Message=json.dumps(big))  # what AWS does with it
    dests = parse_destinations(json.dumps({"destinations": [
        {"name": "bus", "type": "eventbridge", "arn": BUS},
        {"name": "topic", "type": "sns", "arn": topic},
    ]}))
    senders = {"eventbridge": EventBridgeSender(events), "sns": SnsSender(sns)}
    svc = DestinationService(DestinationSettings(), dests, senders)  # type: ignore[arg-type]
    items = envelopes([big], dests)
    assert len(items) == 2
    for env in items:
        svc.deliver(env.encode())
    (from_topic,) = _drain(sqs, topic_url, 1)
    assert json.loads(from_topic["Body"]) == items[1].event
    (from_bus,) = _drain(sqs, bus_url, 1)
    assert json.loads(from_bus["Body"])["detail"] == items[0].event
    raw = Envelope("topic", "big-1", "Bounce", big)  # not through envelopes(): unshrunk
    for dest in dests:
        with pytest.raises(DestinationError, match="too large") as e:
            senders[dest.kind].send(dest, raw)
        assert not e.value.retry  # dead-lettered at once, not retried for a day
