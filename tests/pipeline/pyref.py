"""A straightforward pure-Python computation of every pipeline metric, for cross-checks.

Written from the metric definitions (pipeline/README.md), not from the Spark code: plain
loops and dicts over the decoded JSON lines, so a disagreement points at a bug in one of
the two. It shares only the reason normaliser's rule list (its Spark twin is tested
against hand-written expectations separately).
"""

from __future__ import annotations

import gzip
import json
import math
from bisect import bisect_left, bisect_right
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from mq_pipeline.consts import (
    ATTEMPTS_CAP,
    LAG_EDGES_S,
    OPERATOR_EVENT,
    PERCENTILES,
    QSHAPE_EDGES_MIN,
    bounce_band,
)
from mq_pipeline.transforms import STATUS_RE, normalise_reason_py


def parse_ts(s: str | None) -> datetime | None:
    if s is None:
        return None
    try:
        return datetime.fromisoformat(s.replace("Z", "+00:00")).astimezone(UTC)
    except ValueError:
        return None


def micros(t: datetime) -> int:
    return round(t.timestamp() * 1_000_000)


def seconds_between(a: datetime, b: datetime) -> float:
    return (micros(b) - micros(a)) / 1_000_000.0


@dataclass
class Ev:
    event_id: str
    event_type: str
    message_id: str
    rcpt: str | None
    domain: str | None
    accepted_at: datetime
    ts: datetime
    status: str | None
    diag: str | None
    bounce_type: str | None
    action: str | None
    attempt: int | None
    sched_lag_s: float | None
    late: bool
    copies: int = 1
    sender: str | None = None  # Send and Reject only
    size: int | None = None


def read_lines(events_root: Path) -> list[tuple[str, str, dict[str, Any]]]:
    """(dt, hr, document) for every line of every partition file."""
    out = []
    for f in sorted(events_root.glob("dt=*/hr=*/*.gz")):
        dt = f.parent.parent.name.split("=", 1)[1]
        hr = f.parent.name.split("=", 1)[1]
        with gzip.open(f, "rt") as fh:
            for line in fh:
                if line.strip():
                    out.append((dt, hr, json.loads(line)))
    return out


def to_events(dt: str, hr: str, d: dict[str, Any]) -> list[Ev]:
    """One row per event and recipient: a Send per destination (eventId + "/" + address)."""
    import re

    ours = d.get("mailqueue") or {}
    if not ours.get("eventId") or not d.get("eventType"):
        return []
    et = "Operator" if d["eventType"] == OPERATOR_EVENT else d["eventType"]
    mail = d.get("mail") or {}
    dest = mail.get("destination") or []
    objs = [d.get("delivery"), d.get("deliveryDelay"), d.get("bounce"), ours.get("operator"),
            ours.get("reject")]
    ts_str = next((o["timestamp"] for o in objs if o and o.get("timestamp")), mail.get("timestamp"))
    rec: dict[str, Any] = {}
    if d.get("bounce"):
        rec = (d["bounce"].get("bouncedRecipients") or [{}])[0]
    elif d.get("deliveryDelay"):
        rec = (d["deliveryDelay"].get("delayedRecipients") or [{}])[0]
    diag = rec.get("diagnosticCode") or (ours.get("reject") or {}).get("reason")
    status = rec.get("status")
    if status is None and diag:
        m = re.search(STATUS_RE, diag)
        status = m.group(1) if m else None
    att = ours.get("attempt") or {}
    lag = None
    if att.get("startedAt") and att.get("scheduledAt"):
        s, c = parse_ts(att["startedAt"]), parse_ts(att["scheduledAt"])
        if s and c:
            lag = seconds_between(c, s)
    ts = parse_ts(ts_str)
    acc = parse_ts(mail.get("timestamp"))
    assert ts is not None and acc is not None
    if et == "Send":
        rcpts: list[str | None] = list(dest)
    elif et == "Reject":
        rcpts = [(ours.get("reject") or {}).get("recipient") or (dest[0] if dest else None)]
    else:
        one = (
            ((d.get("delivery") or {}).get("recipients") or [None])[0]
            or rec.get("emailAddress")
            or ((ours.get("operator") or {}).get("recipients") or [None])[0]
        )
        rcpts = [one]
    return [
        Ev(
            event_id=f"{ours['eventId']}/{r.lower()}" if et == "Send" and r else ours["eventId"],
            event_type=et,
            message_id=mail["messageId"],
            rcpt=r if et != "Reject" else None,
            domain=r.rsplit("@", 1)[-1].lower() if r else None,
            accepted_at=acc,
            ts=ts,
            status=status,
            diag=diag,
            bounce_type=(d.get("bounce") or {}).get("bounceType"),
            action=(ours.get("operator") or {}).get("action"),
            attempt=att.get("number"),
            sched_lag_s=lag,
            late=f"{dt}{int(hr):02d}" > ts.strftime("%Y-%m-%d%H"),
            sender=mail.get("source") if et in ("Send", "Reject") else None,
            size=ours.get("size") if et in ("Send", "Reject") else None,
        )
        for r in rcpts
    ]


@dataclass
class Outcome:
    message_id: str
    rcpt: str
    domain: str
    accepted_at: datetime
    final_state: str
    final_at: datetime | None
    attempts: int
    deferrals: int
    delivered_attempt: int | None
    hard_bounce: bool
    dsn: bool = False  # the mail's Send has the null sender
    size: int | None = None

    @property
    def ttf(self) -> float | None:
        return None if self.final_at is None else seconds_between(self.accepted_at, self.final_at)


@dataclass
class Reference:
    events: list[Ev]
    outcomes: list[Outcome]
    rows_read: int
    qshape_at: datetime | None
    extra: dict[str, Any] = field(default_factory=dict)


def compute(
    events_root: Path, start: datetime | None, end: datetime | None, late_hours: int
) -> Reference:
    """Read, filter by partition and event time, de-duplicate, derive outcomes."""
    lo = start.strftime("%Y-%m-%d%H") if start else None
    hi = (end + timedelta(hours=late_hours) - timedelta(microseconds=1)).strftime(
        "%Y-%m-%d%H"
    ) if end else None
    by_id: dict[str, Ev] = {}
    rows = 0
    for dt, hr, doc in read_lines(events_root):
        key = f"{dt}{int(hr):02d}"
        if (lo and key < lo) or (hi and key > hi):
            continue
        for ev in to_events(dt, hr, doc):
            if (start and ev.ts < start) or (end and ev.ts >= end):
                continue
            rows += 1
            prev = by_id.get(ev.event_id)
            if prev is None:
                by_id[ev.event_id] = ev
            else:
                prev.copies += 1
                prev.late = prev.late and ev.late
                prev.ts = min(prev.ts, ev.ts)
    events = list(by_id.values())

    per: dict[tuple[str, str, str], list[Ev]] = defaultdict(list)
    for e in events:
        if e.event_type != "Reject" and e.rcpt is not None:
            per[(e.message_id, e.rcpt, e.domain or "")].append(e)
    outcomes: list[Outcome] = []
    for (mid, rcpt, dom), evs in per.items():
        acc = min(e.accepted_at for e in evs)
        if (start and acc < start) or (end and acc >= end):
            continue
        finals: list[tuple[datetime, int, str]] = []
        hard = False
        for e in evs:
            if e.event_type == "Delivery":
                finals.append((e.ts, 0, "delivered"))
            elif e.event_type == "Bounce" or (e.event_type == "Operator" and e.action == "bounced"):
                finals.append((e.ts, 1, "bounced"))
            elif e.event_type == "Operator" and e.action == "deleted":
                finals.append((e.ts, 2, "deleted"))
            if (
                e.event_type == "Bounce"
                and e.bounce_type == "Permanent"
                and (e.status or "").startswith("5")
            ):
                hard = True
        finals.sort()
        state, fat = ("pending", None) if not finals else (finals[0][2], finals[0][0])
        attempts = max((e.attempt for e in evs if e.attempt is not None), default=0)
        d_att = [e.attempt for e in evs if e.event_type == "Delivery" and e.attempt is not None]
        outcomes.append(
            Outcome(
                message_id=mid,
                rcpt=rcpt,
                domain=dom,
                accepted_at=acc,
                final_state=state,
                final_at=fat,
                attempts=attempts,
                deferrals=sum(1 for e in evs if e.event_type == "DeliveryDelay"),
                delivered_attempt=min(d_att) if d_att else None,
                hard_bounce=state == "bounced" and hard,
                dsn=any(e.event_type == "Send" and e.sender == "" for e in evs),
                size=next((e.size for e in evs if e.event_type == "Send"), None),
            )
        )
    last = max((e.ts for e in events), default=None)
    ends = [t for t in (end, last) if t is not None]
    return Reference(events, outcomes, rows, min(ends) if ends else None)


# ---------------------------------------------------------------- grains


def grain_keys(t: datetime, domain: str | None, grains: tuple[str, ...]) -> list[tuple[Any, ...]]:
    """(grain, day, hour, domain) keys a row with time t and domain contributes to."""
    day = t.strftime("%Y-%m-%d")
    keys = {
        "hour": ("hour", day, t.hour, None),
        "day": ("day", day, None, None),
        "domain": ("domain", None, None, domain),
        "overall": ("overall", None, None, None),
    }
    return [keys[g] for g in grains]


def volumes(ref: Reference) -> dict[tuple[Any, ...], tuple[int, int]]:
    c: Counter[tuple[Any, ...]] = Counter()
    late: Counter[tuple[Any, ...]] = Counter()
    for e in ref.events:
        for k in grain_keys(e.ts, e.domain, ("hour", "day", "domain", "overall")):
            c[(*k, e.event_type)] += 1
            late[(*k, e.event_type)] += int(e.late)
    return {k: (v, late[k]) for k, v in c.items()}


def delivery(ref: Reference) -> dict[tuple[Any, ...], dict[str, Any]]:
    groups: dict[tuple[Any, ...], list[Outcome]] = defaultdict(list)
    for o in ref.outcomes:
        for k in grain_keys(o.accepted_at, o.domain, ("hour", "day", "domain", "overall")):
            groups[k].append(o)
    out = {}
    for k, all_ in groups.items():
        os_ = [o for o in all_ if not o.dsn]  # DSNs are counted apart
        dsn = [o for o in all_ if o.dsn]
        n = len(os_)
        deliv = [o for o in os_ if o.final_state == "delivered"]
        bounced = sum(o.final_state == "bounced" for o in os_)
        deleted = sum(o.final_state == "deleted" for o in os_)
        finalised = len(deliv) + bounced + deleted
        attempted = sum(o.attempts >= 1 for o in os_)
        fad = sum(o.delivered_attempt == 1 for o in deliv)
        deferred = [o for o in os_ if o.deferrals > 0]
        dfin = [o for o in deferred if o.final_state != "pending"]
        ddel = [o for o in deferred if o.final_state == "delivered"]
        hard = sum(o.hard_bounce for o in os_)
        ttd = sorted(o.ttf for o in deliv if o.ttf is not None)
        out[k] = {
            "recipients": n,
            "delivered": len(deliv),
            "bounced": bounced,
            "hard_bounced": hard,
            "deleted": deleted,
            "pending": sum(o.final_state == "pending" for o in os_),
            "finalised": finalised,
            "attempted": attempted,
            "first_attempt_delivered": fad,
            "deferred": len(deferred),
            "deferred_finalised": len(dfin),
            "deferred_delivered": len(ddel),
            "deferrals": sum(o.deferrals for o in os_),
            "delivery_rate": len(deliv) / finalised if finalised else None,
            "first_attempt_rate": fad / attempted if attempted else None,
            "retry_yield": len(ddel) / len(dfin) if dfin else None,
            "hard_bounce_rate": hard / n if n else None,
            "bounce_band": bounce_band(hard / n if n else None),
            "ttd_max_s": ttd[-1] if ttd else None,
            "ttd_mean_s": sum(ttd) / len(ttd) if ttd else None,
            "_ttd": ttd,
            "delivered_of_sent": len(deliv) / n if n else None,
            "bytes_delivered": sum(o.size or 0 for o in deliv) if deliv else None,
            "dsn_recipients": len(dsn),
            "dsn_delivered": sum(o.final_state == "delivered" for o in dsn),
            "dsn_bounced": sum(o.final_state == "bounced" for o in dsn),
            "dsn_pending": sum(o.final_state == "pending" for o in dsn),
        }
    return out


def attempts(ref: Reference) -> dict[tuple[Any, ...], int]:
    c: Counter[tuple[Any, ...]] = Counter()
    for o in ref.outcomes:
        if o.dsn:
            continue
        for k in grain_keys(o.accepted_at, o.domain, ("day", "domain", "overall")):
            c[(*k, min(o.attempts, ATTEMPTS_CAP), o.final_state)] += 1
    return dict(c)


def reasons(ref: Reference, top_n: int) -> dict[tuple[Any, ...], tuple[int, int, float]]:
    """(grain, day, hour, domain, kind, status, reason) -> (events, rank, share)."""
    c: Counter[tuple[Any, ...]] = Counter()
    for e in ref.events:
        if e.event_type not in ("DeliveryDelay", "Bounce"):
            continue
        kind = "deferral" if e.event_type == "DeliveryDelay" else "bounce"
        for k in grain_keys(e.ts, e.domain, ("day", "domain", "overall")):
            c[(*k, kind, e.status or "", normalise_reason_py(e.diag) or "")] += 1
    groups: dict[tuple[Any, ...], list[tuple[tuple[Any, ...], int]]] = defaultdict(list)
    for k, v in c.items():
        groups[k[:5]].append((k, v))
    out = {}
    for items in groups.values():
        total = sum(v for _, v in items)
        items.sort(key=lambda kv: (-kv[1], kv[0][5], kv[0][6]))
        for rank, (k, v) in enumerate(items[:top_n], start=1):
            out[k] = (v, rank, v / total)
    return out


def lag_bucket(x: float) -> int:
    for i, edge in enumerate(LAG_EDGES_S):
        if x < edge:
            return i
    return len(LAG_EDGES_S)


def sched_lag(ref: Reference) -> dict[tuple[Any, ...], dict[str, Any]]:
    groups: dict[tuple[Any, ...], list[float]] = defaultdict(list)
    for e in ref.events:
        if e.sched_lag_s is None:
            continue
        for k in grain_keys(e.ts, e.domain, ("hour", "day", "overall")):
            groups[k].append(e.sched_lag_s)
    out = {}
    for k, xs in groups.items():
        xs.sort()
        b = Counter(lag_bucket(x) for x in xs)
        out[k] = {
            "attempts": len(xs),
            "max_s": xs[-1],
            "mean_s": sum(xs) / len(xs),
            "buckets": [b.get(i, 0) for i in range(len(LAG_EDGES_S) + 1)],
            "_values": xs,
        }
    return out


def qshape(ref: Reference) -> dict[tuple[str, int], int]:
    """(domain or "" for overall, bucket) -> pending recipients at ref.qshape_at."""
    at = ref.qshape_at
    c: Counter[tuple[str, int]] = Counter()
    if at is None:
        return {}
    for o in ref.outcomes:
        if o.accepted_at > at or (o.final_at is not None and o.final_at <= at):
            continue
        age = seconds_between(o.accepted_at, at) / 60.0
        b = next((i for i, e in enumerate(QSHAPE_EDGES_MIN) if age < e), len(QSHAPE_EDGES_MIN))
        c[(o.domain, b)] += 1
        c[("", b)] += 1
    return dict(c)


def rank_ok(sorted_values: list[float], p: float, v: float, accuracy: int) -> bool:
    """Is v an acceptable percentile_approx answer: an element whose rank is within
    n / accuracy (+1 for rounding) of p * n."""
    n = len(sorted_values)
    if n == 0:
        return v is None
    below = bisect_left(sorted_values, v)
    upto = bisect_right(sorted_values, v)
    if upto == below:  # not one of the values
        return False
    tol = n / accuracy + 1
    target = p * n
    return below - tol <= target <= upto + tol


def close(a: float | None, b: float | None, rel: float = 1e-9) -> bool:
    if a is None or b is None:
        return a is b
    return math.isclose(a, b, rel_tol=rel, abs_tol=1e-9)


__all__ = ["PERCENTILES", "Reference", "compute", "close", "rank_ok"]
