"""Metric definitions shared by the Spark job and the Spark-free renderer and checks.

Standard library only: the renderer and the DuckDB reference import this without Spark.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

# The event vocabulary: a copy of the producer's (`mailqueue.core.events`), which this package
# cannot import (it is installed alone on EMR); tests/events/test_ses_schema.py holds the
# two equal. On the wire the operator type is namespaced; the job calls it "Operator".
NAMESPACE = "mailqueue"
OPERATOR_EVENT = "mailqueue:Operator"
REPUTATION_EVENT = "mailqueue:Reputation"
WIRE_EVENT_TYPES = (
    "Send", "Delivery", "DeliveryDelay", "Bounce", "Reject", "Complaint", OPERATOR_EVENT,
    "Subscription", REPUTATION_EVENT,
)
EVENT_TYPES = (
    "Send", "Delivery", "DeliveryDelay", "Bounce", "Reject", "Complaint", "Operator",
    "Subscription", "Reputation",
)
# operator command (what the admin API is asked) -> the action the event log records
OPERATOR_COMMANDS = {
    "hold": "held", "release": "released", "retry": "retried", "delete": "deleted",
    "bounce": "bounced",
}
OPERATOR_ACTIONS = ("deleted", "held", "released", "retried", "bounced")
SES_BOUNCE_TYPES = {
    "Undetermined": ("Undetermined",),
    "Permanent": ("General", "NoEmail", "Suppressed", "OnAccountSuppressionList"),
    "Transient": (
        "General", "MailboxFull", "MessageTooLarge", "ContentRejected", "AttachmentRejected",
    ),
}
SES_DELAY_TYPES = (
    "InternalFailure", "General", "MailboxFull", "SpamDetected", "RecipientServerError",
    "IPFailure", "TransientCommunicationFailure", "BYOIPHostNameLookupUnavailable",
    "Undetermined", "SendingDeferral",
)
FINAL_STATES = ("delivered", "bounced", "deleted")
STATES = (*FINAL_STATES, "pending")

# percentile_approx accuracy: the returned value's rank is within n / ACCURACY of the
# exact rank (a relative rank error of 1 / ACCURACY = 0.01 %); memory per group grows
# with it. Spark's default is also 10 000.
PERCENTILE_ACCURACY = 10_000
PERCENTILES = (0.5, 0.9, 0.95, 0.99)

# SES bounce-rate guidance: stay below 2 %, account review at 5 %, sending paused at 10 %.
BOUNCE_BANDS = ((0.10, "pause"), (0.05, "review"), (0.02, "elevated"))
# The reputation guards' bands (outbound/reputation.Thresholds' defaults, SES's: "Reputation
# metrics messages", https://docs.aws.amazon.com/ses/latest/dg/reputationdashboardmessages.html:
# bounce rate under review at 5 %, sending paused at 10 %; complaint rate 0.1 % / 0.5 %).
# The bounce rate counts hard bounces only, as SES's does.
REPUTATION_BOUNCE_BANDS = ((0.10, "pause"), (0.05, "review"))
REPUTATION_COMPLAINT_BANDS = ((0.005, "pause"), (0.001, "review"))
REPUTATION_MIN_SENDS = 200  # fewer sends: no verdict ("too_few"), as the guard's min_sends
PRINCIPAL_TAG = "mailqueue:principal"  # = mailqueue.core.model.PRINCIPAL_TAG

# qshape age buckets in minutes: 0-5, 5-10, 10-20, 20-40, ... doubling; the last is open.
QSHAPE_EDGES_MIN = (5, 10, 20, 40, 80, 160, 320, 640, 1280)

# Attempts histogram: counts at or above this fold into one "N+" bucket.
ATTEMPTS_CAP = 10

# Scheduling lag histogram bucket upper bounds in seconds; the last bucket is open.
LAG_EDGES_S = (1.0, 5.0, 30.0, 60.0, 300.0, 900.0)

# Scheduling lag quantiles come from a log-spaced histogram (bins grow by LAG_GAMMA), like
# DDSketch: cheap, mergeable, and each quantile is within LAG_REL_ERROR of the exact value
# at its rank (absolute LAG_MIN_S for lags at or below LAG_MIN_S).
LAG_PERCENTILES = (0.5, 0.9, 0.99)
LAG_GAMMA = 1.02
LAG_MIN_S = 0.001
LAG_REL_ERROR = (LAG_GAMMA - 1) / (LAG_GAMMA + 1)


def bounce_band(rate: float | None) -> str:
    """The band a hard-bounce rate falls in: ok, elevated (>= 2 %), review, pause."""
    if rate is None:
        return "ok"
    for limit, name in BOUNCE_BANDS:
        if rate >= limit:
            return name
    return "ok"


def lag_bucket_labels() -> list[str]:
    """Labels for sched_lag's lag_bucket_<i> columns."""

    def fmt(s: float) -> str:
        return f"{s / 60:g}m" if s >= 60 else f"{s:g}s"

    e = LAG_EDGES_S
    labels = [f"<{fmt(e[0])}"]
    labels += [f"{fmt(e[i])}-{fmt(e[i + 1])}" for i in range(len(e) - 1)]
    labels.append(f">={fmt(e[-1])}")
    return labels


def qshape_labels() -> list[str]:
    """Bucket labels like postfix qshape's columns: 0-5, 5-10, ... minutes, last open."""
    e = (0, *QSHAPE_EDGES_MIN)
    labels = [f"{e[i]}-{e[i + 1]}" for i in range(len(e) - 1)]
    labels.append(f"{e[-1]}+")
    return labels


def attempts_label(bucket: int) -> str:
    return f"{bucket}+" if bucket >= ATTEMPTS_CAP else str(bucket)


# The producer's classification rules (`mailqueue.core.events.bounce_class` / `delay_type`),
# copied for the synthetic generator; tests/events/test_ses_schema.py holds them equal.
def ses_bounce_class(status: str | None) -> tuple[str, str]:
    """(bounceType, bounceSubType) of a final failure's enhanced status."""
    if status is None or status[:1] not in ("4", "5"):
        return ("Undetermined", "Undetermined")
    if status in ("5.2.2", "4.2.2"):
        return ("Transient", "MailboxFull")
    if status in ("5.3.4", "5.2.3", "4.3.4", "4.2.3"):
        return ("Transient", "MessageTooLarge")
    if status.startswith("4"):
        return ("Transient", "General")
    if status in ("5.1.1", "5.1.2", "5.1.10", "5.1.6"):
        return ("Permanent", "NoEmail")
    return ("Permanent", "General")


def ses_delay_type(code: int, status: str | None, text: str) -> str:
    """SES's delayType of a temporary failure."""
    if status is None:
        return "Undetermined"
    st = status
    if st == "4.2.2":
        return "MailboxFull"
    if st in ("4.7.1", "4.7.0") and "spam" in text.lower():
        return "SpamDetected"
    if st.startswith("4.1."):
        return "RecipientServerError"
    if st in ("4.4.1", "4.4.2", "4.4.3", "4.4.4", "4.4.6"):
        return "TransientCommunicationFailure"
    if st == "4.3.0" and code == 0:
        return "InternalFailure"
    if code >= 400 or st.startswith(("4.2.", "4.3.", "4.7.")):
        return "RecipientServerError"
    return "Undetermined"


# ---- formatting shared by the job's closing line and the renderer (the EMR zip holds
# the job's modules only: bundle.JOB_MODULES)


def fmt_n(v: float | None) -> str:
    if v is None:
        return "–"
    if abs(v) >= 1e6:
        return f"{v / 1e6:.2f} M"
    if abs(v) >= 1e4:
        return f"{v / 1e3:.1f} k"
    return f"{v:,.0f}" if float(v).is_integer() else f"{v:.3g}"


def fmt_pct(v: float | None, digits: int = 2) -> str:
    return "–" if v is None else f"{v * 100:.{digits}f} %"


def breach_lines(breaches: Sequence[dict[str, Any]], limit: int = 10) -> list[str]:
    """The job's closing line names each breach: "domain gmail.test: hard bounces 5.30 %
    of 1,200 recipients, over the review band (5 %)", not "breaches": 2."""
    bands = {name: limit for limit, name in BOUNCE_BANDS}
    out = [
        f"{b['grain']} {b.get('key') or 'all'}: hard bounces {fmt_pct(b['value'])} of "
        f"{fmt_n(b['recipients'])} recipients, over the {b['band']} band "
        f"({bands.get(b['band'], 0):.0%})"
        for b in breaches[:limit]
    ]
    if len(breaches) > limit:
        out.append(f"... and {len(breaches) - limit} more in summary.json")
    return out
