"""Render the job's CSV/JSON outputs as one self-contained HTML page with inline SVG charts.

Plain Python (standard library only, no Spark, no network, no CDN): it runs anywhere the
outputs were copied to, and the page opens offline. Usage:

    python -m mq_pipeline.render var/report            # writes var/report/report.html
"""

from __future__ import annotations

import argparse
import csv
import html
import json
import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from .consts import BOUNCE_BANDS, PERCENTILES, attempts_label, fmt_n, fmt_pct

# Colour-blind-safe palette (Okabe-Ito), one colour per meaning, reused across charts.
C = {
    "Send": "#999999",
    "Delivery": "#009E73",
    "DeliveryDelay": "#E69F00",
    "Bounce": "#D55E00",
    "Reject": "#CC79A7",
    "Operator": "#56B4E9",
    "delivered": "#009E73",
    "bounced": "#D55E00",
    "deleted": "#CC79A7",
    "pending": "#E69F00",
    "p50": "#009E73",
    "p90": "#56B4E9",
    "p95": "#0072B2",
    "p99": "#D55E00",
    "deferral": "#E69F00",
    "bounce": "#D55E00",
}
W = 760  # chart width in px
FONT = "font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif"


def esc(s: object) -> str:
    return html.escape(str(s), quote=True)


def read_csv(path: Path) -> list[dict[str, str]]:
    if not path.exists():
        return []
    with path.open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def num(v: str | None) -> float | None:
    if v is None or v == "":
        return None
    try:
        return float(v)
    except ValueError:
        return None


def fmt_s(v: float | None) -> str:
    if v is None:
        return "–"
    if v < 1:
        return f"{v * 1000:.0f} ms"
    if v < 120:
        return f"{v:.1f} s"
    if v < 7200:
        return f"{v / 60:.1f} min"
    return f"{v / 3600:.1f} h"


def fmt_bytes(v: float | None) -> str:
    if v is None:
        return "–"
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(v) >= size:
            return f"{v / size:.1f} {unit}"
    return f"{v:,.0f} B"


def nice_max(v: float) -> float:
    """A round axis maximum at or above v."""
    if v <= 0:
        return 1.0
    exp = 10.0 ** math.floor(math.log10(v))
    for m in (1, 2, 2.5, 5, 10):
        if m * exp >= v:
            return m * exp
    return 10 * exp


class Svg:
    """A tiny SVG builder: enough for bars, lines, text and rectangles."""

    def __init__(self, width: int, height: int, title: str) -> None:
        self.w, self.h = width, height
        self.parts: list[str] = [
            f'<svg width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" role="img" aria-label="{esc(title)}" '
            f'style="{FONT};font-size:11px">',
            f"<title>{esc(title)}</title>",
        ]

    def rect(self, x: float, y: float, w: float, h: float, fill: str, tip: str = "") -> None:
        t = f"<title>{esc(tip)}</title>" if tip else ""
        self.parts.append(
            f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(w, 0):.1f}" height="{max(h, 0):.1f}" '
            f'fill="{fill}">{t}</rect>'
        )

    def line(self, x1: float, y1: float, x2: float, y2: float, stroke: str = "#ccc",
             width: float = 1, dash: str = "") -> None:
        d = f' stroke-dasharray="{dash}"' if dash else ""
        self.parts.append(
            f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" '
            f'stroke="{stroke}" stroke-width="{width}"{d}/>'
        )

    def path(self, pts: Sequence[tuple[float, float]], stroke: str, tip: str = "") -> None:
        if not pts:
            return
        d = " ".join(f"{'M' if i == 0 else 'L'}{x:.1f},{y:.1f}" for i, (x, y) in enumerate(pts))
        t = f"<title>{esc(tip)}</title>" if tip else ""
        self.parts.append(
            f'<path d="{d}" fill="none" stroke="{stroke}" stroke-width="2">{t}</path>'
        )
        for x, y in pts:
            self.parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2" fill="{stroke}"/>')

    def text(self, x: float, y: float, s: object, anchor: str = "start", fill: str = "#333",
             size: int = 11, weight: str = "normal", halo: bool = False) -> None:
        # halo: a white outline under the glyphs, so a guide line drawn earlier never runs
        # through the text (issue 44: the dashed band lines crossed the "0.0 %" labels)
        h = ' stroke="#fff" stroke-width="3" paint-order="stroke"' if halo else ""
        self.parts.append(
            f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" fill="{fill}" '
            f'font-size="{size}" font-weight="{weight}"{h}>{esc(s)}</text>'
        )

    def legend(self, items: Sequence[tuple[str, str]], x: float, y: float) -> None:
        for label, colour in items:
            self.rect(x, y - 9, 10, 10, colour)
            self.text(x + 14, y, label)
            x += 24 + 7 * len(label)

    def render(self) -> str:
        return "\n".join([*self.parts, "</svg>"])


def _y_axis(svg: Svg, x0: float, y0: float, h: float, vmax: float, label: Callable[[float], str],
            ticks: int = 4) -> None:
    for i in range(ticks + 1):
        v = vmax * i / ticks
        y = y0 - h * i / ticks
        svg.line(x0, y, svg.w - 10, y, "#eee")
        svg.text(x0 - 4, y + 4, label(v), "end", "#666")


def _bucket_label(t: datetime, bucket_s: int, first: bool) -> str:
    """Axis label of a bucket: the clock for minutes, the hour, or the date for days."""
    if bucket_s >= 86400:
        return t.strftime("%m-%d")
    if bucket_s >= 3600:
        return t.strftime("%m-%d %H:00" if first or t.hour == 0 else "%H:00")
    return t.strftime("%H:%M")


def chart_timeline(timeline: list[dict[str, str]]) -> str:
    """Stacked bars of events per time bucket by type, Send as a line. The bucket width
    follows the data's span (see report.timeline_bucket): minutes for an hour, hours for
    a day, days for a month; buckets with nothing in them are drawn empty, not skipped."""
    cells: dict[datetime, dict[str, float]] = defaultdict(dict)
    bucket_s = 3600
    for r in timeline:
        t = datetime.fromisoformat(r["bucket_start"].replace("Z", "+00:00"))
        bucket_s = int(r["bucket_s"])
        cells[t][r["event_type"]] = num(r["events"]) or 0
    if not cells:
        return "<p>No events in range.</p>"
    step = timedelta(seconds=bucket_s)
    keys, k = [], min(cells)
    while k <= max(cells) and len(keys) < 400:
        keys.append(k)
        k += step
    stack = ["Delivery", "DeliveryDelay", "Bounce", "Reject", "Operator"]
    h, x0, y0 = 240, 60, 250
    svg = Svg(W, 300, "Events over time by type")
    vmax = nice_max(max(max(sum(cells[k].get(t, 0) for t in stack), cells[k].get("Send", 0))
                        for k in keys if k in cells))
    _y_axis(svg, x0, y0, h - 20, vmax, fmt_n)
    bw = (W - x0 - 10) / len(keys)
    every = max(1, -(-len(keys) // 12))  # at most ~12 labels
    pts = []
    for i, k in enumerate(keys):
        v = cells.get(k, {})
        y: float = y0
        for t in stack:
            n = v.get(t, 0)
            bh = (h - 20) * n / vmax
            if bh > 0:
                svg.rect(x0 + i * bw + 0.5, y - bh, max(bw - 1, 0.5), bh, C[t],
                         f"{k:%Y-%m-%d %H:%M} {t}: {n:,.0f}")
            y -= bh
        pts.append((x0 + (i + 0.5) * bw, y0 - (h - 20) * v.get("Send", 0) / vmax))
        if i % every == 0:
            svg.text(x0 + (i + 0.5) * bw, y0 + 14, _bucket_label(k, bucket_s, i == 0),
                     "middle", "#666")
    svg.path(pts, C["Send"], "Send (accepted)")
    svg.legend([(t, C[t]) for t in [*stack, "Send"]], x0, 290)
    return svg.render()


def bucket_words(bucket_s: int) -> str:
    if bucket_s % 86400 == 0:
        n = bucket_s // 86400
        return "day" if n == 1 else f"{n} days"
    if bucket_s % 3600 == 0:
        n = bucket_s // 3600
        return "hour" if n == 1 else f"{n} hours"
    n = bucket_s // 60
    return "minute" if n == 1 else f"{n} minutes"


def chart_domain_rates(delivery: list[dict[str, str]], top: int = 15) -> str:
    """Delivery rate and hard-bounce rate of the biggest domains, against SES bands.

    The hard-bounce axis runs to 12 % (past SES's 10 % pause line) or, if a domain is
    worse, to a round value above its rate: a bar never leaves its axis."""
    doms = [r for r in delivery if r["grain"] == "domain" and (num(r["recipients"]) or 0) > 0]
    doms.sort(key=lambda r: (-(num(r["recipients"]) or 0), r["domain"]))
    doms = doms[:top]
    if not doms:
        return "<p>No domains.</p>"
    row_h, x0, bar_w, label_w = 22, 170, 220, 56
    x1 = x0 + bar_w + label_w + 20
    bar2 = W - x1 - label_w  # the hard-bounce bars end at least label_w before the edge
    # below the rows: one line per SES band for its label, so no two labels share a line
    height = 56 + 10 * len(BOUNCE_BANDS) + row_h * len(doms)
    svg = Svg(W, height, "Delivery rate of the top domains")
    worst = max((num(r["hard_bounce_rate"]) or 0) for r in doms)
    scale = min(1.0, max(0.12, nice_max(worst)))
    svg.text(x0, 14, "delivered / finalised", weight="bold")
    svg.text(x1, 14, f"hard bounces / sent (axis 0–{scale:.0%})", weight="bold")
    bottom = 26 + row_h * len(doms)
    svg.line(x1, 20, x1, bottom, "#999")
    svg.line(x1 + bar2, 20, x1 + bar2, bottom, "#999")
    # each band's label on a line of its own below the bars (lowest band first), starting
    # at its dashed line: labels of close bands (a wide axis) never overlap, and nothing is
    # drawn where the bars' own labels are
    bands = [(k, x1 + bar2 * limit / scale, limit, name)
             for k, (limit, name) in enumerate(sorted(BOUNCE_BANDS))]
    for k, x, _, _ in bands:  # every line first: a higher band's runs past lower labels
        svg.line(x, 20, x, bottom + 14 + 10 * k, "#bbb", 1, "3,3")
    for k, x, limit, name in bands:
        svg.text(x + 2, bottom + 14 + 10 * k, f"{name} {limit:.0%}", "start", "#888", 9,
                 halo=True)
    for i, r in enumerate(doms):
        y = 24 + i * row_h
        rate, hb = num(r["delivery_rate"]), num(r["hard_bounce_rate"]) or 0
        svg.text(x0 - 6, y + 13, f"{r['domain']} ({fmt_n(num(r['recipients']))})", "end")
        svg.rect(x0, y + 3, bar_w, row_h - 6, "#eee")
        svg.rect(x0, y + 3, bar_w * min(max(rate or 0, 0), 1), row_h - 6, C["delivered"],
                 f"{r['domain']}: {fmt_pct(rate)} of finalised delivered")
        svg.text(x0 + bar_w + 4, y + 14, fmt_pct(rate, 1))
        colour = C["bounced"] if hb >= BOUNCE_BANDS[-1][0] else "#999"
        w = bar2 * min(hb, scale) / scale
        svg.rect(x1, y + 3, w, row_h - 6, colour,
                 f"{r['domain']}: {fmt_pct(hb)} hard bounces ({r['bounce_band']})")
        svg.text(x1 + w + 4, y + 14, fmt_pct(hb, 1), halo=True)
    return svg.render()


def chart_ttd(delivery: list[dict[str, str]]) -> str:
    """Time to deliver percentiles per acceptance hour (per day for more than three days),
    on a log scale (p50 is seconds, p99 minutes: a linear axis would flatten one of them).
    With fewer than three points a line says nothing: the overall percentiles are drawn
    as bars instead."""
    names = [f"p{round(p * 100)}" for p in PERCENTILES]
    hours = [r for r in delivery if r["grain"] == "hour" and num(r["ttd_p50_s"])]
    grain = "hour" if len(hours) <= 72 else "day"
    rows = sorted(
        (r for r in delivery if r["grain"] == grain and num(r["ttd_p50_s"])),
        key=lambda r: (r["day"], int(r["hour"] or 0)),
    )
    if len(rows) < 3:
        return _ttd_bars(delivery, names)
    vals_ok = [v for r in rows for n in names if (v := num(r[f"ttd_{n}_s"])) and v > 0]
    lo = 10 ** math.floor(math.log10(min(vals_ok)))
    hi = 10 ** math.ceil(math.log10(max(vals_ok)))
    hi = hi * 10 if hi <= lo else hi
    x0, y0, h = 60, 230, 210
    svg = Svg(W, 270, f"Time to deliver percentiles per {grain}")
    span = math.log10(hi) - math.log10(lo)

    def ypos(v: float) -> float:
        return y0 - h * (math.log10(v) - math.log10(lo)) / span

    d = lo
    while d <= hi * 1.0001:
        svg.line(x0, ypos(d), W - 10, ypos(d), "#eee")
        svg.text(x0 - 4, ypos(d) + 4, fmt_s(d), "end", "#666")
        d *= 10
    step = (W - x0 - 20) / max(1, len(rows) - 1)
    for n in names:
        pts = [(x0 + i * step, ypos(v)) for i, r in enumerate(rows)
               if (v := num(r[f"ttd_{n}_s"])) and v > 0]
        svg.path(pts, C[n], n)
    every = max(1, -(-len(rows) // 12))
    for i, r in enumerate(rows):
        if i % every == 0:
            lab = r["day"][5:] if grain == "day" else f"{int(r['hour']):02d}:00"
            if grain == "hour" and (i == 0 or r["hour"] == "0"):
                lab = f"{r['day'][5:]} {lab}"
            svg.text(x0 + i * step, y0 + 14, lab, "middle", "#666")
    svg.legend([(n, C[n]) for n in names], x0, 262)
    return svg.render()


def _ttd_bars(delivery: list[dict[str, str]], names: list[str]) -> str:
    o = next((r for r in delivery if r["grain"] == "overall"), None)
    items = [(n, num(o[f"ttd_{n}_s"])) for n in names] if o else []
    items += [("max", num(o["ttd_max_s"]))] if o else []
    items = [(n, v) for n, v in items if v is not None]
    if not items:
        return "<p>No deliveries.</p>"
    vmax = max(v for _, v in items) or 1.0
    row_h, x0, bar_w = 22, 60, 560
    svg = Svg(W, 10 + row_h * len(items), "Time to deliver percentiles, whole range")
    for i, (n, v) in enumerate(items):
        y = 4 + i * row_h
        svg.text(x0 - 6, y + 13, n, "end")
        w = bar_w * v / vmax
        svg.rect(x0, y + 2, w, row_h - 6, C.get(n, "#666"), f"{n}: {fmt_s(v)}")
        svg.text(x0 + w + 4, y + 13, fmt_s(v))
    return svg.render()


def chart_reasons(reasons: list[dict[str, str]], kind: str, top: int = 8) -> str:
    """Top reasons of one kind overall: status code and normalised text."""
    rows = [r for r in reasons if r["grain"] == "overall" and r["kind"] == kind]
    rows.sort(key=lambda r: int(r["rank"]))
    rows = rows[:top]
    if not rows:
        return f"<p>No {kind}s.</p>"
    vmax = max(num(r["events"]) or 0 for r in rows) or 1
    row_h, x0, bar_w = 34, 10, 300
    svg = Svg(W, 8 + row_h * len(rows), f"Top {kind} reasons")
    for i, r in enumerate(rows):
        y = 4 + i * row_h
        v = num(r["events"]) or 0
        text = r["reason"] if len(r["reason"]) <= 95 else r["reason"][:94] + "…"
        svg.text(x0, y + 11, f"{r['status'] or '?'}  {text}", size=11)
        svg.rect(x0, y + 15, bar_w * v / vmax, 12, C[kind], f"{v:,.0f} events")
        svg.text(x0 + bar_w * v / vmax + 4, y + 25,
                 f"{fmt_n(v)} ({fmt_pct(num(r['share']), 1)})", fill="#666")
    return svg.render()


def chart_qshape(qshape: list[dict[str, str]], labels: list[str], top: int = 15) -> str:
    """Pending recipients by domain and age (postfix qshape), as a heat map."""
    if not qshape:
        return "<p>Nothing pending.</p>"
    rows = qshape[: top + 1]
    # a cell is as wide as its longest age label ("640-1280"), at 0.62 em a character and
    # bold, plus a gap: at 52 px the labels ran together (issue 44: "160-320320-640640-1280")
    longest = max(len(b) for b in ["total", *labels])
    cell_w = max(52, math.ceil(0.62 * 11 * longest) + 14)
    cell_h, x0 = 20, 190
    svg = Svg(max(W, x0 + cell_w * (len(labels) + 1) + 10), 30 + cell_h * len(rows),
              "Pending recipients by domain and age")
    vmax = max((num(r[b]) or 0) for r in rows[1:] for b in labels) if len(rows) > 1 else 1
    svg.text(x0 - 6, 16, "domain \\ age (min)", "end", weight="bold")
    for j, b in enumerate(["total", *labels]):
        svg.text(x0 + j * cell_w + cell_w / 2, 16, b, "middle", weight="bold")
    for i, r in enumerate(rows):
        y = 22 + i * cell_h
        svg.text(x0 - 6, y + 14, r["domain"], "end", weight="bold" if i == 0 else "normal")
        for j, b in enumerate(["total", *labels]):
            v = num(r[b]) or 0
            x = x0 + j * cell_w
            if i > 0 and j > 0 and v > 0:
                a = 0.12 + 0.88 * math.sqrt(v / (vmax or 1))
                svg.rect(x + 1, y + 1, cell_w - 2, cell_h - 2, f"rgba(213,94,0,{a:.2f})",
                         f"{r['domain']}, {b} min: {v:,.0f}")
            else:
                svg.rect(x + 1, y + 1, cell_w - 2, cell_h - 2, "#f4f4f4")
            dark = i > 0 and j > 0 and v / (vmax or 1) > 0.35
            svg.text(x + cell_w / 2, y + 14, fmt_n(v) if v else "", "middle",
                     "#fff" if dark else "#333")
    return svg.render()


def chart_attempts(attempts: list[dict[str, str]]) -> str:
    """Recipients by number of attempts, stacked by final state (log-free: counts)."""
    cells: dict[int, dict[str, float]] = defaultdict(dict)
    for r in attempts:
        if r["grain"] == "overall":
            cells[int(r["attempts_bucket"])][r["final_state"]] = num(r["recipients"]) or 0
    if not cells:
        return "<p>No recipients.</p>"
    states = ["delivered", "bounced", "deleted", "pending"]
    buckets = list(range(0, max(cells) + 1))
    x0, y0, h = 60, 220, 200
    svg = Svg(W, 260, "Recipients by attempts")
    # Attempt 1 dwarfs the rest; a square-root scale keeps the tail visible.
    vmax = nice_max(max(sum(v.values()) for v in cells.values()))

    def sy(v: float) -> float:
        return h * math.sqrt(v / vmax)

    for frac in (0.01, 0.1, 0.25, 0.5, 1.0):
        y = y0 - sy(vmax * frac)
        svg.line(x0, y, W - 10, y, "#eee")
        svg.text(x0 - 4, y + 4, fmt_n(vmax * frac), "end", "#666")
    bw = (W - x0 - 10) / len(buckets)
    for i, b in enumerate(buckets):
        total = sum(cells.get(b, {}).values())
        top = y0 - sy(total) if total else y0
        y = y0
        for st in states:
            v = cells.get(b, {}).get(st, 0)
            if not v:
                continue
            share = v / total
            bh = (y0 - top) * share
            svg.rect(x0 + i * bw + 2, y - bh, bw - 4, bh, C[st],
                     f"{attempts_label(b)} attempts, {st}: {v:,.0f}")
            y -= bh
        svg.text(x0 + (i + 0.5) * bw, y0 + 14, attempts_label(b), "middle", "#666")
        if total:
            svg.text(x0 + (i + 0.5) * bw, top - 3, fmt_n(total), "middle", "#666", 9)
    svg.legend([(s, C[s]) for s in states], x0, 252)
    return svg.render()


def chart_lag(sched: list[dict[str, str]], labels: list[str]) -> str:
    """Scheduling lag histogram (overall): how late due attempts start."""
    o = next((r for r in sched if r["grain"] == "overall"), None)
    if o is None:
        return "<p>No attempts.</p>"
    vals = [num(o.get(f"lag {lab}")) or 0 for lab in labels]
    vmax = nice_max(max(vals) or 1)
    x0, y0, h = 60, 170, 150
    svg = Svg(W, 200, "Retry scheduling lag")
    _y_axis(svg, x0, y0, h, vmax, fmt_n)
    bw = (W - x0 - 10) / len(vals)
    for i, (lab, v) in enumerate(zip(labels, vals, strict=True)):
        bh = h * v / vmax
        svg.rect(x0 + i * bw + 4, y0 - bh, bw - 8, bh, C["Operator"], f"{lab}: {v:,.0f}")
        svg.text(x0 + (i + 0.5) * bw, y0 + 14, lab, "middle", "#666")
        svg.text(x0 + (i + 0.5) * bw, y0 - bh - 3, fmt_n(v), "middle", "#666", 9)
    return svg.render()


def _tile(label: str, value: str, note: str = "") -> str:
    n = f"<div class=n>{esc(note)}</div>" if note else ""
    return (
        f"<div class=tile><div class=l>{esc(label)}</div><div class=v>{esc(value)}</div>"
        f"{n}</div>"
    )


def range_title(summary: dict[str, Any]) -> str:
    """The range the report covers, never blank: the requested one (a whole UTC day is
    shown as the date), or without --date/--from the first and last event's time."""
    rng, inp = summary["range"], summary["input"]

    def t(v: str | None) -> datetime | None:
        return None if not v else datetime.fromisoformat(v.replace("Z", "+00:00"))

    start, end = t(rng.get("from")), t(rng.get("to"))
    if start and end and end - start == timedelta(days=1) and start.hour == 0 \
            and start.minute == 0 and start.second == 0:
        return f"{start:%Y-%m-%d} (UTC day)"
    if start or end:
        a = f"{start:%Y-%m-%d %H:%M}" if start else "start of log"
        b = f"{end:%Y-%m-%d %H:%M}" if end else "end of log"
        return f"{a} – {b} UTC"
    first, last = t(inp.get("first_event")), t(inp.get("last_event"))
    if first is None or last is None:
        return "no events in the log"
    b = f"{last:%H:%M:%S}" if first.date() == last.date() else f"{last:%Y-%m-%d %H:%M:%S}"
    return f"{first:%Y-%m-%d %H:%M:%S} – {b} UTC (the whole log)"


def _table(head: Sequence[str], rows: Sequence[Sequence[str]], right_from: int = 1) -> str:
    """An HTML table; columns from `right_from` on are numbers (right-aligned)."""
    def cells(tag: str, vals: Sequence[str]) -> str:
        return "".join(
            f"<{tag}{' class=r' if j >= right_from else ''}>{v}</{tag}>"
            for j, v in enumerate(vals)
        )
    body = "".join(f"<tr>{cells('td', r)}</tr>" for r in rows)
    # a wide table scrolls sideways rather than wrap a number ("713.5⏎k"): see .r, .tw
    heads = cells("th", [esc(h) for h in head])
    return f"<div class=tw><table><tr>{heads}</tr>{body}</table></div>"


def domain_table(delivery: list[dict[str, str]], top: int = 25) -> str:
    """Per recipient domain, like pflogsumm's "Host/Domain Summary: Message Delivery"."""
    doms = [r for r in delivery if r["grain"] == "domain" and (num(r["recipients"]) or 0) > 0]
    doms.sort(key=lambda r: (-(num(r["recipients"]) or 0), r["domain"]))
    if not doms:
        return "<p>No recipients.</p>"
    rows = [
        [
            esc(r["domain"]), fmt_n(num(r["recipients"])), fmt_n(num(r["delivered"])),
            f"{fmt_n(num(r['deferred']))} ({fmt_n(num(r['deferrals']))})",
            fmt_n(num(r["bounced"])), fmt_n(num(r["deleted"])), fmt_n(num(r["pending"])),
            fmt_s(num(r["ttd_mean_s"])), fmt_s(num(r["ttd_max_s"])),
            fmt_bytes(num(r["bytes_delivered"])), fmt_pct(num(r["delivered_of_sent"]), 1),
        ]
        for r in doms[:top]
    ]
    more = f"<p>{len(doms) - top} more domains in csv/delivery.csv.</p>" if len(doms) > top else ""
    return _table(
        ["domain", "sent", "delivered", "deferred (times)", "bounced", "deleted", "pending",
         "avg delay", "max delay", "bytes delivered", "delivered / sent"],
        rows,
    ) + more


def senders_table(senders: list[dict[str, str]]) -> str:
    if not senders:
        return "<p>No mail accepted or refused.</p>"
    rows = [
        [esc(r["sender"] or "<> (null sender: DSNs)"), fmt_n(num(r["mails"])),
         fmt_n(num(r["recipients"])), fmt_bytes(num(r["bytes"])), fmt_n(num(r["rejected"]))]
        for r in senders
    ]
    return _table(["sender", "mails", "recipients", "bytes", "refused"], rows)


def rejects_table(rejects: list[dict[str, str]]) -> str:
    if not rejects:
        return "<p class=ok>No request was refused.</p>"
    rows = [[esc(r["reason"] or "?"), fmt_n(num(r["events"])), fmt_pct(num(r["share"]), 1)]
            for r in rejects]
    return _table(["reason", "refused", "share"], rows)


def feedback_table(feedback: list[dict[str, str]], top: int = 15) -> str:
    """Complaints, unsubscribes and late bounces per recipient domain and per sender, the
    `top` of each by complaints + unsubscribes (all of them in csv/feedback.csv; absent in
    reports written before it existed)."""
    if not feedback:
        return "<p class=ok>No complaint, unsubscribe or late bounce.</p>"

    def weight(r: dict[str, str]) -> float:
        return (num(r.get("complaints")) or 0) + (num(r.get("unsubscribes")) or 0)

    shown: list[dict[str, str]] = []
    for grain in ("domain", "sender"):
        of = sorted((r for r in feedback if r["grain"] == grain), key=lambda r: -weight(r))
        shown += of[:top]
    rows = [
        [esc(r["grain"]),
         esc((r["domain"] if r["grain"] == "domain" else r["sender"]) or "(unknown)"),
         fmt_n(num(r.get("complaints"))), fmt_n(num(r.get("unsubscribes"))),
         fmt_n(num(r.get("late_bounces"))), fmt_n(num(r.get("late_hard_bounces")))]
        for r in shown
    ]
    return _table(
        ["by", "recipient domain / sender", "complaints", "unsubscribes", "late bounces",
         "hard"],
        rows,
        right_from=2,
    )


def reputation_table(rows: list[dict[str, str]], top: int = 15) -> str:
    """What the reputation guards count per principal and sender domain, worst verdict
    first: hard-bounce and complaint rates against SES's review / pause bands (all rows
    in csv/reputation.csv; absent in reports written before it existed)."""
    if not rows:
        return "<p class=ok>No sends from a principal or sender domain.</p>"
    shown: list[dict[str, str]] = []
    for scope in ("principal", "sender_domain"):
        shown += [r for r in rows if r["scope"] == scope][:top]
    cells = [
        [esc(r["scope"].replace("_", " ")), esc(r["target"]), fmt_n(num(r.get("sends"))),
         fmt_n(num(r.get("hard_bounces"))), fmt_pct(num(r.get("bounce_rate"))),
         esc(r.get("bounce_band") or ""), fmt_n(num(r.get("complaints"))),
         fmt_pct(num(r.get("complaint_rate"))), esc(r.get("complaint_band") or ""),
         fmt_n(num(r.get("soft_bounces"))), fmt_n(num(r.get("unsubscribes"))),
         esc(r.get("verdict") or "")]
        for r in shown
    ]
    return _table(
        ["by", "principal / sender domain", "sends", "hard bounces", "rate", "band",
         "complaints", "rate", "band", "soft (apart)", "unsubscribes", "verdict"],
        cells,
        right_from=2,
    )


def dsn_block(dsn: dict[str, Any]) -> str:
    n = dsn.get("recipients") or 0
    if not n:
        return "<p>No delivery status notifications were sent.</p>"
    return _table(
        ["DSNs (null sender)", "delivered", "bounced", "deleted", "pending", "bytes"],
        [[fmt_n(n), fmt_n(dsn.get("delivered")), fmt_n(dsn.get("bounced")),
          fmt_n(dsn.get("deleted")), fmt_n(dsn.get("pending")), fmt_bytes(dsn.get("bytes"))]],
        right_from=0,
    )


CSV_NAMES = ("volumes", "delivery", "attempts", "reasons", "sched_lag", "qshape", "senders",
             "rejects", "timeline")


def render(out_dir: Path) -> str:
    """The report page for the outputs in `out_dir` (summary.json and csv/)."""
    summary: dict[str, Any] = json.loads((out_dir / "summary.json").read_text(encoding="utf-8"))
    csvs = {n: read_csv(out_dir / "csv" / f"{n}.csv") for n in CSV_NAMES}
    feedback = read_csv(out_dir / "csv" / "feedback.csv")
    reputation = read_csv(out_dir / "csv" / "reputation.csv")
    h = summary["headline"]
    inp = summary["input"]
    lag = summary["sched_lag"]
    labels = summary["labels"]
    dsn = summary.get("dsn") or {}
    tiles = "".join([
        _tile("events", fmt_n(inp["events"]),
              f"{fmt_n(inp['duplicates_removed'])} duplicates, {fmt_n(inp['late_events'])} late"),
        _tile("recipients sent", fmt_n(h["recipients"]),
              f"{fmt_n(h.get('mails'))} mails, {fmt_n(h['pending'])} pending; DSNs apart"),
        _tile("delivered / sent", fmt_pct(h.get("delivered_of_sent")),
              f"{fmt_n(h['delivered'])} of {fmt_n(h['recipients'])} sent (pending included)"),
        _tile("delivered / finalised", fmt_pct(h["delivery_rate"]),
              f"{fmt_n(h['delivered'])} of {fmt_n(h['finalised'])} delivered, bounced "
              "or deleted"),
        _tile("first-attempt rate", fmt_pct(h["first_attempt_rate"]),
              "delivered on attempt 1 / attempted"),
        _tile("retry yield", fmt_pct(h["retry_yield"]),
              "delivered / deferred and finalised"),
        _tile("hard-bounce rate", fmt_pct(h["hard_bounce_rate"]),
              f"hard bounces / sent; band: {h['bounce_band']}"),
        _tile("bytes received / delivered",
              f"{fmt_bytes(h.get('bytes_received'))} / {fmt_bytes(h.get('bytes_delivered'))}",
              "per mail / per delivered recipient"),
        _tile("time to deliver p50 / p99", f"{fmt_s(h['ttd_p50_s'])} / {fmt_s(h['ttd_p99_s'])}",
              f"max {fmt_s(h['ttd_max_s'])}"),
        _tile("scheduling lag p50 / p99", f"{fmt_s(lag['p50_s'])} / {fmt_s(lag['p99_s'])}",
              f"max {fmt_s(lag['max_s'])}"),
        _tile("DSNs sent", fmt_n(dsn.get("recipients") or 0),
              f"{fmt_n(dsn.get('delivered') or 0)} delivered; not in the numbers above"),
        _tile("refused at ingress", fmt_n(summary["events_by_type"].get("Reject", 0)),
              "Reject events"),
    ])
    breaches = summary["breaches"]
    if breaches:
        rows = "".join(
            f"<tr><td>{esc(b['grain'])}</td><td>{esc(b['key'] or 'all')}</td>"
            f"<td class=r>{fmt_pct(b['value'])}</td><td><span class='band {esc(b['band'])}'>"
            f"{esc(b['band'])}</span></td><td class=r>{fmt_n(b['recipients'])}</td></tr>"
            for b in breaches[:25]
        )
        more = (
            f"<p>… and {len(breaches) - 25} more in summary.json.</p>" if len(breaches) > 25 else ""
        )
        breach_html = (
            "<table><tr><th>grain</th><th>key</th><th>hard-bounce rate</th><th>band</th>"
            f"<th>recipients</th></tr>{rows}</table>{more}"
        )
    else:
        breach_html = "<p class=ok>No hard-bounce threshold breached.</p>"
    bucket = bucket_words(int(labels.get("timeline_bucket_s") or 3600))
    sections = [
        ("Events over time", f"Events per {bucket} of their own time, by type; the line is "
         "Send (accepted).", chart_timeline(csvs["timeline"])),
        ("Domains", "Per recipient domain, by acceptance (pflogsumm's delivery summary): sent "
         "= recipients accepted; deferred = recipients deferred at least once (deferrals); "
         "delay = acceptance to delivery of the delivered ones. DSNs not included.",
         domain_table(csvs["delivery"])),
        ("Delivery rate of the top domains", "Left: delivered / finalised recipients. Right: "
         "hard bounces / sent, against SES's 2 / 5 / 10 % bands.",
         chart_domain_rates(csvs["delivery"])),
        ("Time to deliver", "Acceptance to Delivery event, percentile_approx "
         f"(accuracy {summary['percentiles']['accuracy']}).", chart_ttd(csvs["delivery"])),
        ("Top senders", "Envelope senders by mails accepted; refused = requests rejected at "
         "ingress.", senders_table(csvs["senders"])),
        ("Top reject reasons", "Why ingress refused requests (Reject events).",
         rejects_table(csvs["rejects"])),
        ("Complaints, unsubscribes, late bounces", "What receivers (feedback loops, "
         "late bounces) and recipients (one-click unsubscribe) reported after a mail was "
         "accepted, by recipient domain and by envelope sender; counted beside the "
         "outcomes above, which they do not change.", feedback_table(feedback)),
        ("Reputation: what the guards count", "Per submitting principal and envelope "
         "sender domain, as the reputation guards count them: sends = delivery's final "
         "results; hard bounces = Permanent (remote 5xx or late), soft ones counted apart as "
         "SES counts hard bounces only; rates against SES's bands (bounces 5 % review, 10 % "
         "pause; complaints 0.1 % / 0.5 %: SES's \u201cReputation metrics messages\u201d); "
         "too_few below 200 sends. Over this report's range, not the guard's window.",
         reputation_table(reputation)),
        ("Delivery status notifications", "Mail the queue sent with the null sender (bounce "
         "and delay notices), counted here and not with the mail above.", dsn_block(dsn)),
        ("Top deferral reasons", "By enhanced status and normalised diagnostic text.",
         chart_reasons(csvs["reasons"], "deferral")),
        ("Top bounce reasons", "", chart_reasons(csvs["reasons"], "bounce")),
        ("Queue shape", f"Pending recipients at {summary['qshape']['at']} by domain and age "
         "in minutes (postfix qshape).",
         chart_qshape(csvs["qshape"], labels["qshape_buckets_min"])),
        ("Attempts", "Recipients by attempts made and final state (square-root scale).",
         chart_attempts(csvs["attempts"])),
        ("Retry scheduling lag", "attempt.startedAt − scheduledAt, all attempts.",
         chart_lag(csvs["sched_lag"], labels["sched_lag_buckets"])),
    ]
    body = "".join(
        f"<section><h2>{esc(t)}</h2><p class=d>{esc(d)}</p>{c}</section>" for t, d, c in sections
    )
    title = f"mailqueue delivery report, {range_title(summary)}"
    return f"""<!doctype html>
<html lang=en><head><meta charset=utf-8><title>{esc(title)}</title>
<meta name=viewport content="width=device-width,initial-scale=1">
<style>
body{{{FONT};margin:24px auto;max-width:1240px;padding:0 16px;color:#222;background:#fff}}
h1{{font-size:22px;margin-bottom:4px}} h2{{font-size:16px;margin:28px 0 2px}}
.d{{color:#666;margin:0 0 8px;font-size:13px}} .meta{{color:#666;font-size:12px}}
.tiles{{display:grid;grid-template-columns:repeat(4,1fr);gap:8px;margin:16px 0}}
.tile{{border:1px solid #ddd;border-radius:6px;padding:8px}}
.tile .l{{font-size:11px;color:#666}} .tile .v{{font-size:18px;font-weight:600}}
.tile .n{{font-size:11px;color:#888}}
table{{border-collapse:collapse;font-size:12px}}
td,th{{border-bottom:1px solid #eee;padding:3px 8px;text-align:left}}
.r{{text-align:right;white-space:nowrap}} .tw{{overflow-x:auto}}
.band{{padding:1px 6px;border-radius:8px;color:#fff}}
.elevated{{background:#E69F00}} .review{{background:#D55E00}} .pause{{background:#8b0000}}
.ok{{color:#009E73}} svg{{max-width:100%;height:auto}}
</style></head><body>
<h1>{esc(title)}</h1>
<p class=meta>Generated {esc(summary['generated_at'])} from {fmt_n(inp['rows_read'])} event rows;
first event {esc(inp['first_event'])}, last {esc(inp['last_event'])}.</p>
<div class=tiles>{tiles}</div>
<section><h2>Threshold breaches</h2><p class=d>Hard-bounce rate at day, domain (at least
{esc(summary['thresholds']['min_domain_volume'])} recipients) and overall grain.</p>
{breach_html}</section>
{body}
</body></html>
"""


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Render the pipeline outputs as one HTML page.")
    ap.add_argument("out_dir", type=Path, help="the job's --out directory")
    ap.add_argument("--html", type=Path, default=None, help="default: OUT_DIR/report.html")
    a = ap.parse_args(argv)
    target = a.html or a.out_dir / "report.html"
    target.write_text(render(a.out_dir), encoding="utf-8")
    print(target)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
