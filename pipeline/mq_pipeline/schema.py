"""Explicit schemas and constants: the event contract is declared here, never inferred.

Inference would scan the whole input once more and would turn a field that happens to be
all-null in one hour into a different type than the next hour; an explicit schema reads
every partition the same way and lets the JSON parser skip fields we do not use.
"""

from __future__ import annotations

from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DoubleType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)


def _s(name: str) -> StructField:
    return StructField(name, StringType(), True)


def _t(name: str) -> StructField:
    return StructField(name, TimestampType(), True)


MAIL = StructType(
    [
        _s("messageId"),
        _t("timestamp"),
        _s("source"),
        StructField("destination", ArrayType(StringType(), True), True),
        # SES's tags; ours carry `mailqueue:principal` (the reputation table's key)
        StructField("tags", MapType(StringType(), ArrayType(StringType(), True), True), True),
    ]
)

DELIVERY = StructType(
    [
        _t("timestamp"),
        StructField("recipients", ArrayType(StringType(), True), True),
        _s("smtpResponse"),
        _s("remoteMtaIp"),
        _s("reportingMTA"),
        StructField("processingTimeMillis", LongType(), True),
    ]
)

BOUNCED_RCPT = StructType(
    [_s("emailAddress"), _s("action"), _s("status"), _s("diagnosticCode")]
)
BOUNCE = StructType(
    [
        _t("timestamp"),
        _s("bounceType"),
        _s("bounceSubType"),
        StructField("bouncedRecipients", ArrayType(BOUNCED_RCPT, True), True),
        _s("feedbackId"),
        _s("reportingMTA"),
        _s("remoteMtaIp"),
    ]
)

DELAYED_RCPT = StructType([_s("emailAddress"), _s("status"), _s("diagnosticCode")])
DELIVERY_DELAY = StructType(
    [
        _t("timestamp"),
        _s("delayType"),
        _t("expirationTime"),
        StructField("delayedRecipients", ArrayType(DELAYED_RCPT, True), True),
        _s("reportingMTA"),
    ]
)

REJECT = StructType([_s("reason")])
COMPLAINED_RCPT = StructType([_s("emailAddress")])
COMPLAINT = StructType(
    [
        _t("timestamp"),
        _s("complaintFeedbackType"),
        _s("userAgent"),
        StructField("complainedRecipients", ArrayType(COMPLAINED_RCPT, True), True),
        _s("feedbackId"),
    ]
)
# SES's Subscription object (services/unsubscribe writes it for a one-click opt-out);
# contactList is the list id or sender domain the opt-out is scoped to
TOPIC_STATUS = StructType([_s("topicName"), _s("subscriptionStatus")])
TOPIC_PREFS = StructType(
    [
        StructField("unsubscribeAll", BooleanType(), True),
        StructField("topicSubscriptionStatus", ArrayType(TOPIC_STATUS, True), True),
        _s("topicDefaultSubscriptionStatus"),
    ]
)
SUBSCRIPTION = StructType(
    [
        _s("contactList"),
        _t("timestamp"),
        _s("source"),
        StructField("newTopicPreferences", TOPIC_PREFS, True),
        StructField("oldTopicPreferences", TOPIC_PREFS, True),
    ]
)
# a late Bounce or a Complaint: the receiver's report it came from (services/feedback)
FEEDBACK = StructType([_s("report"), StructField("late", BooleanType(), True)])
# Our additions, namespaced under the top-level `mailqueue` object.
OUR_REJECT = StructType([_t("timestamp"), _s("reason"), _s("field"), _s("recipient")])
OPERATOR = StructType(
    [
        _t("timestamp"),
        _s("action"),
        _s("actor"),
        _s("job"),
        StructField("recipients", ArrayType(StringType(), True), True),
    ]
)
ATTEMPT = StructType(
    [
        StructField("number", IntegerType(), True),
        _t("scheduledAt"),
        _t("startedAt"),
        _t("finishedAt"),
        _s("remoteMta"),
        StructField("tls", BooleanType(), True),
    ]
)
OURS = StructType(
    [
        _s("eventId"),
        StructField("size", LongType(), True),  # the message's octets
        StructField("attempt", ATTEMPT, True),
        StructField("operator", OPERATOR, True),
        StructField("reject", OUR_REJECT, True),
        _t("nextAttemptAt"),
        _s("remoteMta"),
        StructField("feedback", FEEDBACK, True),
    ]
)

# The event document as `mailqueue.core.events.QueueEvent.to_json` writes it (SES's format;
# tests/events/ses_event_schema.json is the full contract). `send` is an empty object and
# the mail's headers and tags are not used, so they are left out (unknown fields are skipped).
EVENT_SCHEMA = StructType(
    [
        _s("eventType"),
        StructField("mail", MAIL, True),
        StructField("delivery", DELIVERY, True),
        StructField("bounce", BOUNCE, True),
        StructField("deliveryDelay", DELIVERY_DELAY, True),
        StructField("reject", REJECT, True),
        StructField("complaint", COMPLAINT, True),
        StructField("subscription", SUBSCRIPTION, True),
        StructField("mailqueue", OURS, True),
    ]
)


def _prune(schema: StructType, keep: dict[str, object]) -> StructType:
    """A sub-schema with only the `keep` fields (nested dicts prune nested structs)."""
    fields: list[StructField] = []
    for f in schema.fields:
        if f.name not in keep:
            continue
        sub = keep[f.name]
        dt = f.dataType
        if isinstance(sub, dict):
            if isinstance(dt, ArrayType) and isinstance(dt.elementType, StructType):
                dt = ArrayType(_prune(dt.elementType, sub), True)
            elif isinstance(dt, StructType):
                dt = _prune(dt, sub)
        fields.append(StructField(f.name, dt, True))
    return StructType(fields)


def _ts_as_string(schema: StructType) -> StructType:
    """The same schema with every timestamp read as its ISO string."""
    fields: list[StructField] = []
    for f in schema.fields:
        dt = f.dataType
        if isinstance(dt, TimestampType):
            dt = StringType()
        elif isinstance(dt, StructType):
            dt = _ts_as_string(dt)
        elif isinstance(dt, ArrayType) and isinstance(dt.elementType, StructType):
            dt = ArrayType(_ts_as_string(dt.elementType), True)
        fields.append(StructField(f.name, dt, True))
    return StructType(fields)


_RCPT = {"emailAddress": 1, "status": 1, "diagnosticCode": 1}
# What the job reads: only the fields the transforms use (the JSON parser skips the others
# without materialising them), with timestamps kept as strings. Measured on 1 M events:
# letting the JSON reader parse timestamps with a pattern costs about as much CPU as
# parsing all the rest of the document; a later CAST of the few timestamps we use is
# several times cheaper, and `late` compares the ISO strings directly.
READ_SCHEMA = _ts_as_string(
    _prune(
        EVENT_SCHEMA,
        {
            "eventType": 1,
            "mail": {"messageId": 1, "timestamp": 1, "source": 1, "destination": 1, "tags": 1},
            "delivery": {"timestamp": 1, "recipients": 1},
            "bounce": {"timestamp": 1, "bounceType": 1, "bouncedRecipients": _RCPT},
            "deliveryDelay": {"timestamp": 1, "delayedRecipients": _RCPT},
            "complaint": {"timestamp": 1, "complainedRecipients": {"emailAddress": 1}},
            "subscription": {
                "timestamp": 1,
                "newTopicPreferences": {
                    "unsubscribeAll": 1,
                    "topicSubscriptionStatus": {"subscriptionStatus": 1},
                },
            },
            "mailqueue": {
                "eventId": 1,
                "size": 1,
                "attempt": {"number": 1, "scheduledAt": 1, "startedAt": 1},
                "operator": {"timestamp": 1, "action": 1, "recipients": 1},
                "reject": {"timestamp": 1, "reason": 1, "recipient": 1},
                "feedback": {"late": 1},
            },
        },
    )
)

# Partition columns of the event log layout events/dt=YYYY-MM-DD/hr=HH/.
PARTITION_FIELDS = [StructField("dt", StringType(), True), StructField("hr", StringType(), True)]

# The normalised, flat event: one row per unique event, what every report starts from.
NORMALISED_SCHEMA = StructType(
    [
        _s("event_id"),
        _s("event_type"),
        _s("message_id"),
        _s("rcpt"),  # lower-cased recipient; null for a Reject (see n_dest)
        _s("domain"),  # recipient domain (first destination for a Reject)
        StructField("n_dest", IntegerType(), True),
        _t("accepted_at"),  # mail.timestamp: arrival at the queue
        _t("ts"),  # event time (the type object's timestamp; arrival for Send)
        _s("status"),  # enhanced status code for Bounce / DeliveryDelay
        _s("diag"),  # diagnostic text of a Bounce / DeliveryDelay, reason of a Reject
        _s("bounce_type"),
        _s("action"),  # Operator action; a Subscription's "unsubscribed" / "subscribed"
        StructField("attempt", IntegerType(), True),
        StructField("sched_lag_s", DoubleType(), True),  # attempt.startedAt - scheduledAt
        StructField("late", BooleanType(), True),  # written to a later hour than its time
        # Send, Reject and feedback rows only (null on the others: narrow rows):
        _s("sender"),  # envelope sender; "" is the null sender (a DSN)
        StructField("size", LongType(), True),  # message octets
        StructField("dest_pos", IntegerType(), True),  # Send: 0 on a mail's first destination
        # a receiver's report (a Complaint, a late Bounce: services/feedback) or the
        # recipient's (a Subscription: services/unsubscribe); null otherwise
        StructField("feedback", BooleanType(), True),
        # what the reputation guards count under (outbound/reputation.py), on every row
        # about a mail: its `mailqueue:principal` tag and its sender's domain (lower case)
        _s("principal"),
        _s("sender_domain"),
        StructField("copies", LongType(), True),  # how many times it was in the input
    ]
)

OUTCOME_SCHEMA = StructType(
    [
        _s("message_id"),
        _s("rcpt"),
        _s("domain"),
        _t("accepted_at"),
        _s("final_state"),  # delivered | bounced | deleted | pending
        _t("final_at"),
        StructField("attempts", IntegerType(), False),
        StructField("deferrals", LongType(), False),
        StructField("delivered_attempt", IntegerType(), True),
        StructField("hard_bounce", BooleanType(), False),
        StructField("time_to_final_s", DoubleType(), True),
        StructField("dsn", BooleanType(), True),  # sent with the null sender
        StructField("size", LongType(), True),  # message octets
        StructField("first_rcpt", BooleanType(), True),  # counts the message once
    ]
)

# The reputation table (report.reputation): what the reputation guards count, per key.
REPUTATION_SCHEMA = StructType(
    [
        _s("scope"),  # principal | sender_domain
        _s("target"),  # the principal's tag value (its sha256 digest when traces are private)
        StructField("sends", LongType(), False),  # final results of delivery attempts
        StructField("hard_bounces", LongType(), False),  # Permanent: remote 5xx and late
        StructField("soft_bounces", LongType(), False),  # Transient: counted apart
        StructField("complaints", LongType(), False),
        StructField("unsubscribes", LongType(), False),  # counted apart
        StructField("bounce_rate", DoubleType(), True),  # hard_bounces / sends
        StructField("complaint_rate", DoubleType(), True),  # complaints / sends
        _s("bounce_band"),  # ok | review | pause (SES's 5 % / 10 %)
        _s("complaint_band"),  # ok | review | pause (SES's 0.1 % / 0.5 %)
        _s("verdict"),  # the worse band, or too_few under min_sends
    ]
)
