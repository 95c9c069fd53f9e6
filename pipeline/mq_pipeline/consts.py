"""Metric definitions shared by the Spark job and the Spark-free renderer and checks.

Standard library only: the renderer and the DuckDB reference import this without Spark.
"""

from __future__ import annotations

EVENT_TYPES = ("Send", "Delivery", "DeliveryDelay", "Bounce", "Reject", "Operator")
OPERATOR_ACTIONS = ("deleted", "held", "released", "retried", "bounced")
FINAL_STATES = ("delivered", "bounced", "deleted")
STATES = (*FINAL_STATES, "pending")

# percentile_approx accuracy: the returned value's rank is within n / ACCURACY of the
# exact rank (a relative rank error of 1 / ACCURACY = 0.01 %); memory per group grows
# with it. Spark's default is also 10 000.
PERCENTILE_ACCURACY = 10_000
PERCENTILES = (0.5, 0.9, 0.95, 0.99)

# SES bounce-rate guidance: stay below 2 %, account review at 5 %, sending paused at 10 %.
BOUNCE_BANDS = ((0.10, "pause"), (0.05, "review"), (0.02, "elevated"))

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
