"""qshape: pending recipients per domain and age bucket, like Postfix's qshape.

Buckets (minutes since the mail's arrival) double from `bucket_minutes`: with the
defaults 0–5, 5–10, 10–20, 20–40 … 640–1280, and 1280+ — ten buckets, labelled by their
upper bound ("5", "10", … "1280", "1280+"), as `qshape -t 5 -b 10` prints them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from mailqueue.core.errors import InvalidInput
from mailqueue.core.model import Group
from mailqueue.services.admin.filters import QueueFilter


@dataclass(frozen=True, slots=True)
class ShapeRow:
    domain: str
    total: int
    counts: tuple[int, ...]

    def to_json(self) -> dict[str, Any]:
        return {"domain": self.domain, "total": self.total, "counts": list(self.counts)}


@dataclass(frozen=True, slots=True)
class Shape:
    by: str
    bucket_minutes: int
    labels: tuple[str, ...]
    total: ShapeRow
    rows: tuple[ShapeRow, ...]  # by total, largest first

    def to_json(self) -> dict[str, Any]:
        return {
            "by": self.by,
            "bucket_minutes": self.bucket_minutes,
            "labels": list(self.labels),
            "total": self.total.to_json(),
            "rows": [r.to_json() for r in self.rows],
        }


def bucket_edges(bucket_minutes: int, buckets: int) -> tuple[int, ...]:
    """Upper bounds (minutes) of every bucket but the last, open-ended one."""
    if not 1 <= bucket_minutes <= 1440:
        raise InvalidInput(
            "out_of_range", "bucket_minutes must be within 1..1440", "bucket_minutes"
        )
    if not 2 <= buckets <= 30:
        raise InvalidInput("out_of_range", "buckets must be within 2..30", "buckets")
    return tuple(bucket_minutes * (2**i) for i in range(buckets - 1))


def bucket_of(age_minutes: float, edges: tuple[int, ...]) -> int:
    for i, edge in enumerate(edges):
        if age_minutes < edge:
            return i
    return len(edges)


def build_shape(
    groups: Iterable[Group],
    now: datetime,
    flt: QueueFilter,
    *,
    bucket_minutes: int = 5,
    buckets: int = 10,
    by: str = "recipient",
) -> Shape:
    """Counts pending recipients (those the filter selects) by domain and arrival age."""
    if by not in ("recipient", "sender"):
        raise InvalidInput("invalid_value", "by must be recipient or sender", "by")
    edges = bucket_edges(bucket_minutes, buckets)
    labels = tuple(str(e) for e in edges) + (f"{edges[-1]}+",)
    table: dict[str, list[int]] = {}
    for g in groups:
        age = max(0.0, (now - g.arrival).total_seconds() / 60)
        b = bucket_of(age, edges)
        for r in g.recipients:
            if r.state.final:
                continue
            if flt.recipient_level and not flt.recipient_matches(r):
                continue
            if by == "recipient":
                key = r.domain
            else:
                key = g.sender.rpartition("@")[2].lower() if g.sender else "<>"
            row = table.setdefault(key, [0] * len(labels))
            row[b] += 1
    rows = sorted(
        (ShapeRow(d, sum(c), tuple(c)) for d, c in table.items()),
        key=lambda r: (-r.total, r.domain),
    )
    sums = tuple(sum(r.counts[i] for r in rows) for i in range(len(labels)))
    return Shape(
        by=by,
        bucket_minutes=bucket_minutes,
        labels=labels,
        total=ShapeRow("TOTAL", sum(sums), sums),
        rows=tuple(rows),
    )


def render_shape(shape: dict[str, Any], top: int | None = None) -> str:
    """The qshape table: domain, T (total), then one column per bucket."""
    labels = ["T", *shape["labels"]]
    rows = [shape["total"], *shape["rows"][: top if top else None]]
    name_w = max([len(r["domain"]) for r in rows] + [6])
    cells = [[str(r["total"]), *(str(c) for c in r["counts"])] for r in rows]
    widths = [max(len(labels[i]), *(len(c[i]) for c in cells)) for i in range(len(labels))]
    lines = [
        " " * name_w + " " + " ".join(lab.rjust(w) for lab, w in zip(labels, widths, strict=True))
    ]
    for r, c in zip(rows, cells, strict=True):
        lines.append(
            r["domain"].rjust(name_w)
            + " "
            + " ".join(v.rjust(w) for v, w in zip(c, widths, strict=True))
        )
    return "\n".join(lines)
