"""Reports received by SES for the bounce domain: the ingress's SES path hands them to the
feedback service (real ingress handler, moto's S3 and DynamoDB), which writes SES-shaped
events (validated against the committed schema) and suppression entries."""

from __future__ import annotations

from typing import Any

from mailqueue.backends.aws.suppression_store import DynamoSuppressionStore
from mailqueue.core.verp import KeyRing, encode

from tests.events.test_ses_schema import errors
from tests.feedback.messages import arf, dsn, vacation
from tests.feedback.test_verp import ring_json
from tests.ingress.conftest import Ingress, deliver_all, make_ingress
from tests.support import events as ev
from tests.support import factories as f
from tests.support.aws import AwsEnv

BOUNCES = "bounces.example.org"
RING = KeyRing.parse(ring_json())


def feedback_ingress(aws: AwsEnv) -> Ingress:
    return make_ingress(
        aws,
        return_path_policy=f'{{"example.org": "{BOUNCES}"}}',
        return_path_keys=ring_json(),
    )


def receive(ing: Ingress, to: str, raw: bytes, message_id: str) -> dict[str, Any]:
    event = ev.ses_receipt(message_id=message_id, source="", recipients=[to])
    key = f"{ing.settings.ses_prefix}{message_id}"
    ing.aws.clients.s3.put_object(Bucket=ing.settings.inbound_bucket, Key=key, Body=raw)
    out = ing(event)
    return out


def finished_mail(aws: AwsEnv, *rcpts: str) -> str:
    q = aws.storage().enqueue(f.envelope(*rcpts), f.content())
    deliver_all(aws, q.mail_id)  # finished and cleaned up: only the event log remembers it
    return q.mail_id


def suppressed(aws: AwsEnv, address: str) -> Any:
    store = DynamoSuppressionStore(aws.clients.dynamodb, aws.resources.table)
    return store.get_many([address]).get(address)


def check_late_hard_bounce(aws: AwsEnv, doc: dict[str, Any], mail_id: str) -> None:
    """A late 5.1.1 for gone@x.example of `mail_id`: a schema-valid Permanent/NoEmail
    Bounce, and the suppression entry it fed (whichever door the report came by)."""
    assert errors(doc) == []
    assert doc["mail"]["messageId"] == mail_id and doc["mail"]["source"] == "alice@example.org"
    b = doc["bounce"]
    assert (b["bounceType"], b["bounceSubType"]) == ("Permanent", "NoEmail")
    assert b["bouncedRecipients"][0]["emailAddress"] == "gone@x.example"
    assert b["bouncedRecipients"][0]["status"] == "5.1.1"
    assert doc["mailqueue"]["feedback"]["late"] is True
    entry = suppressed(aws, "gone@x.example")
    assert entry is not None and entry.source == mail_id and "user unknown" in entry.reason
    assert entry.actor == "feedback" and entry.status == "5.1.1"


def test_a_late_hard_bounce_of_a_finished_mail(aws: AwsEnv) -> None:
    ing = feedback_ingress(aws)
    mail_id = finished_mail(aws, "gone@x.example")
    to = encode(RING, mail_id, "0", BOUNCES)
    raw = dsn(to, "gone@x.example", "5.1.1", "550 5.1.1 <gone@x.example>: user unknown")
    assert receive(ing, to, raw, "late-1") == {"disposition": "STOP_RULE"}
    bounces = [e.to_json() for e in ing.events.of_type("Bounce")]
    assert len(bounces) == 1, ing.events.events
    doc = bounces[0]
    check_late_hard_bounce(aws, doc, mail_id)
    # nothing queued, the raw report dropped; the same receipt again: the same event id
    assert ing.rejects() == []
    again = feedback_ingress(aws)
    receive(again, to, raw, "late-1")
    assert [e.event_id for e in again.events.of_type("Bounce")] == [
        e.event_id for e in ing.events.of_type("Bounce")
    ]


def test_a_soft_late_bounce_is_transient_and_not_suppressed(aws: AwsEnv) -> None:
    ing = feedback_ingress(aws)
    mail_id = finished_mail(aws, "full@x.example")
    to = encode(RING, mail_id, "0", BOUNCES)
    receive(ing, to, dsn(to, "full@x.example", "5.2.2", "552 5.2.2 mailbox full"), "late-2")
    (doc,) = [e.to_json() for e in ing.events.of_type("Bounce")]
    assert errors(doc) == []
    assert (doc["bounce"]["bounceType"], doc["bounce"]["bounceSubType"]) == (
        "Transient",
        "MailboxFull",
    )
    assert suppressed(aws, "full@x.example") is None


def test_a_complaint_becomes_a_complaint_event_and_a_suppression(aws: AwsEnv) -> None:
    ing = feedback_ingress(aws)
    mail_id = finished_mail(aws, "annoyed@x.example")
    to = encode(RING, mail_id, "0", BOUNCES)
    receive(ing, to, arf(to, "annoyed@x.example"), "fbl-1")
    (doc,) = [e.to_json() for e in ing.events.of_type("Complaint")]
    assert errors(doc) == []
    c = doc["complaint"]
    assert c["complainedRecipients"] == [{"emailAddress": "annoyed@x.example"}]
    assert (c["complaintFeedbackType"], c["userAgent"]) == ("abuse", "SomeGenerator/1.0")
    assert c["arrivalDate"] == "2005-03-08T18:00:00.000Z"  # the report's date in ISO 8601
    assert doc["mail"]["messageId"] == mail_id
    entry = suppressed(aws, "annoyed@x.example")
    assert entry is not None and entry.reason == "complaint: abuse"
    assert ing.events.of_type("Bounce") == []


def test_a_live_mail_names_the_recipient_by_its_rid(aws: AwsEnv) -> None:
    """While the mail is still in the queue, its recipient comes from the VERP's rid,
    whatever address the report spells (a forwarding hop rewrote it)."""
    ing = feedback_ingress(aws)
    q = aws.storage().enqueue(f.envelope("Real@x.example"), f.content())
    to = encode(RING, q.mail_id, "0", BOUNCES)
    receive(ing, to, dsn(to, "alias@fwd.example", "5.1.1", "550 5.1.1 no such user"), "late-3")
    (doc,) = [e.to_json() for e in ing.events.of_type("Bounce")]
    assert doc["bounce"]["bouncedRecipients"][0]["emailAddress"] == "Real@x.example"
    assert doc["mail"]["destination"] == ["Real@x.example"]
    assert aws.storage().get_mail(q.mail_id)[1][0].recipients[0].state.value == "queued"


def test_forged_reports_and_auto_replies_are_dropped_and_counted(aws: AwsEnv) -> None:
    ing = feedback_ingress(aws)
    mail_id = finished_mail(aws, "victim@x.example")
    good = encode(RING, mail_id, "0", BOUNCES)
    forged = good.replace("-0-", "-1-")
    raw = dsn(forged, "victim@x.example", "5.1.1", "550 5.1.1 user unknown")
    event = ev.ses_receipt(message_id="forged-1", source="", recipients=[forged])
    key = f"{ing.settings.ses_prefix}forged-1"
    aws.clients.s3.put_object(Bucket=ing.settings.inbound_bucket, Key=key, Body=raw)
    got = ing.service.receive_ses(event)
    assert dict(got.feedback) == {"forged": 1} and got.disposition == "STOP_RULE"
    event = ev.ses_receipt(message_id="ooo-1", source="bob@x.example", recipients=[good])
    aws.clients.s3.put_object(
        Bucket=ing.settings.inbound_bucket,
        Key=f"{ing.settings.ses_prefix}ooo-1",
        Body=vacation(good),
    )
    assert dict(ing.service.receive_ses(event).feedback) == {"autoreply": 1}
    assert ing.events.events == [] and suppressed(aws, "victim@x.example") is None
    listed = aws.clients.s3.list_objects_v2(
        Bucket=ing.settings.inbound_bucket, Prefix=ing.settings.ses_prefix
    )
    assert listed.get("KeyCount", 0) == 0  # the raw reports are gone


def test_without_a_policy_mail_to_the_bounce_domain_is_not_feedback(aws: AwsEnv) -> None:
    ing = make_ingress(aws)  # off: as before, a recipient outside receiving_domains
    mail_id = finished_mail(aws, "gone@x.example")
    to = encode(RING, mail_id, "0", BOUNCES)
    receive(ing, to, dsn(to, "gone@x.example", "5.1.1", "550 5.1.1 user unknown"), "late-9")
    assert ing.events.of_type("Bounce") == []
    assert [r["mailqueue"]["reject"]["reason"] for r in ing.rejects()] == ["relay_denied"]
