"""The renderer's charts and tables on hand-made CSV rows (no Spark): an hour and a month of
data give real charts, no bar leaves its axis, the title always names the range, and the
tables show the numbers they are given."""

from __future__ import annotations

import html
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from mq_pipeline import consts, render

W = render.W


def _rects(svg: str) -> list[tuple[float, float, float, float]]:
    return [
        tuple(float(v) for v in m)  # type: ignore[misc]
        for m in re.findall(
            r'<rect x="([-\d.]+)" y="([-\d.]+)" width="([-\d.]+)" height="([-\d.]+)"', svg
        )
    ]


def _texts_x(svg: str) -> list[float]:
    return [float(x) for x in re.findall(r'<text x="([-\d.]+)"', svg)]


def timeline_rows(start: datetime, n: int, bucket_s: int) -> list[dict[str, str]]:
    rows = []
    for i in range(n):
        t = start + timedelta(seconds=i * bucket_s)
        iso = t.strftime("%Y-%m-%dT%H:%M:%SZ")
        rows.append(
            {
                "bucket_start": iso,
                "bucket_s": str(bucket_s),
                "event_type": "Send",
                "events": str(10 + i),
            }
        )
        rows.append(
            {
                "bucket_start": iso,
                "bucket_s": str(bucket_s),
                "event_type": "Delivery",
                "events": str(9 + i),
            }
        )
    return rows


def test_an_hour_of_data_is_drawn_per_minute_with_gaps_kept() -> None:
    t0 = datetime(2026, 5, 4, 10, 0, tzinfo=UTC)
    rows = timeline_rows(t0, 60, 60)
    rows = [r for r in rows if r["bucket_start"] != "2026-05-04T10:30:00Z"]  # a quiet minute
    svg = render.chart_timeline(rows)
    bars = _rects(svg)
    # one Delivery bar per non-empty minute (+ the 6 legend squares)
    assert len(bars) == 59 + 6
    assert "10:00" in svg and "10:55" in svg  # clock labels, not hours only
    assert all(x + w <= W and y >= 0 for x, y, w, _ in bars)


def test_a_month_is_drawn_per_day_with_dates() -> None:
    t0 = datetime(2026, 4, 5, tzinfo=UTC)
    svg = render.chart_timeline(timeline_rows(t0, 30, 86400))
    assert len(_rects(svg)) == 30 + 6
    assert "04-05" in svg and "05-02" in svg
    assert all(x + w <= W for x, _, w, _ in _rects(svg))


def delivery_row(domain: str, recipients: int, rate: float, hard: float) -> dict[str, str]:
    return {
        "grain": "domain",
        "day": "",
        "hour": "",
        "domain": domain,
        "recipients": str(recipients),
        "delivered": str(int(recipients * rate)),
        "delivery_rate": str(rate),
        "hard_bounce_rate": str(hard),
        "bounce_band": "pause",
        "deferred": "1",
        "deferrals": "3",
        "bounced": "2",
        "deleted": "0",
        "pending": "1",
        "ttd_mean_s": "90",
        "ttd_max_s": "600",
        "bytes_delivered": "2500000",
        "delivered_of_sent": str(rate * 0.9),
    }


def test_hard_bounce_bars_stay_on_their_axis() -> None:
    rows = [
        delivery_row("worst.example", 100, 0.2, 1.0),
        delivery_row("ok.example", 90, 1.0, 0.0),
        delivery_row("some.example", 80, 0.9, 0.05),
    ]
    svg = render.chart_domain_rates(rows)
    assert all(x + w <= W for x, _, w, _ in _rects(svg)), _rects(svg)
    assert all(x <= W - 40 for x in _texts_x(svg))  # room for "100.0 %" after a bar
    assert "axis 0–100%" in svg  # the axis grew to hold 100 %
    low = render.chart_domain_rates([delivery_row("a.example", 100, 0.99, 0.01)])
    assert "axis 0–12%" in low  # the usual axis shows the 10 % pause line


def test_time_to_deliver_with_one_point_is_bars_not_a_line() -> None:
    overall = {
        "grain": "overall",
        "day": "",
        "hour": "",
        "domain": "",
        "ttd_p50_s": "2",
        "ttd_p90_s": "10",
        "ttd_p95_s": "20",
        "ttd_p99_s": "30",
        "ttd_max_s": "31",
    }
    hour = {**overall, "grain": "hour", "day": "2026-05-04", "hour": "10"}
    svg = render.chart_ttd([overall, hour])
    assert "<path" not in svg and len(_rects(svg)) == 5 and "31.0 s" in svg


def _summary(rng: dict[str, Any], first: str | None, last: str | None) -> dict[str, Any]:
    return {"range": rng, "input": {"first_event": first, "last_event": last}}


def test_the_title_always_names_the_range() -> None:
    whole = _summary({"from": None, "to": None}, "2026-11-24T20:30:01.5Z", "2026-11-24T20:31:09Z")
    assert render.range_title(whole) == "2026-11-24 20:30:01 – 20:31:09 UTC (the whole log)"
    day = _summary({"from": "2026-05-04T00:00:00Z", "to": "2026-05-05T00:00:00Z"}, None, None)
    assert render.range_title(day) == "2026-05-04 (UTC day)"
    span = _summary({"from": "2026-05-01T00:00:00Z", "to": "2026-05-04T00:00:00Z"}, None, None)
    assert render.range_title(span) == "2026-05-01 00:00 – 2026-05-04 00:00 UTC"
    assert render.range_title(_summary({"from": None, "to": None}, None, None)) == (
        "no events in the log"
    )


def test_domain_senders_rejects_and_dsn_tables_show_their_numbers() -> None:
    dom = render.domain_table([delivery_row("d.example", 40, 0.5, 0.0)])
    cells = re.findall(r"<td[^>]*>([^<]*)</td>", dom)
    assert cells == [
        "d.example",
        "40",
        "20",
        "1 (3)",
        "2",
        "0",
        "1",
        "90.0 s",
        "10.0 min",
        "2.5 MB",
        "45.0 %",
    ]
    snd = render.senders_table(
        [{"sender": "", "mails": "3", "recipients": "3", "bytes": "999", "rejected": "0"}]
    )
    assert "&lt;&gt; (null sender: DSNs)" in snd and "999 B" in snd
    rej = render.rejects_table([{"reason": "invalid_recipient", "events": "4", "share": "0.8"}])
    assert "invalid_recipient" in rej and "80.0 %" in rej
    assert "No request was refused" in render.rejects_table([])
    dsn = render.dsn_block(
        {"recipients": 3, "delivered": 2, "bounced": 0, "deleted": 0, "pending": 1, "bytes": 6000}
    )
    assert re.findall(r"<td[^>]*>([^<]*)</td>", dsn) == ["3", "2", "0", "0", "1", "6.0 kB"]


def _text_boxes(svg: str) -> list[tuple[float, float, float, float, str]]:
    """(left, right, top, bottom, text) of each <text>, its width estimated at 0.62 em a
    character (wide for this sans-serif: an overlap is never missed)."""
    boxes = []
    for m in re.finditer(
        r'<text x="([\d.]+)" y="([\d.]+)" text-anchor="(\w+)"[^>]*font-size="(\d+)"[^>]*>'
        r"([^<]*)</text>",
        svg,
    ):
        x, y, anchor, size, s = float(m[1]), float(m[2]), m[3], int(m[4]), html.unescape(m[5])
        w = 0.62 * size * len(s)
        left = {"start": x, "middle": x - w / 2, "end": x - w}[anchor]
        boxes.append((left, left + w, y - size, y, s))
    return boxes


@pytest.mark.parametrize("worst", [0.0, 0.03, 0.3, 1.0])
def test_the_top_domains_chart_labels_never_overlap(worst: float) -> None:
    """Issue 28, item 8: the SES band labels overlapped each other (a wide axis puts
    2 %, 5 % and 10 % close together) and the bars' labels."""
    rows = [
        delivery_row(f"d{i}.example", 100 - i, 0.9, worst * (i % 3) / 2) for i in range(12)
    ]
    boxes = _text_boxes(render.chart_domain_rates(rows))
    clashes = [
        (a[4], b[4])
        for i, a in enumerate(boxes)
        for b in boxes[i + 1 :]
        if a[0] < b[1] and b[0] < a[1] and a[2] < b[3] and b[2] < a[3]
    ]
    assert clashes == []


def test_numbers_in_tables_do_not_wrap() -> None:
    """Issue 28, item 8: "713.5 k" and "4.0 min" wrapped in the domain table at 10 M events;
    number cells keep on one line (the table scrolls sideways instead)."""
    dom = render.domain_table([delivery_row("d.example", 713_500, 0.5, 0.0)])
    assert '<div class=tw><table>' in dom and "<td class=r>713.5 k</td>" in dom
    css = Path(render.__file__).read_text()  # the page's style sheet (an f-string there)
    assert ".r{{text-align:right;white-space:nowrap}}" in css and ".tw{{overflow-x:auto}}" in css


def test_the_jobs_last_line_says_what_breached() -> None:
    lines = consts.breach_lines(
        [{"grain": "domain", "key": "gmail.test", "value": 0.053, "band": "review",
          "recipients": 1200}]
    )
    assert lines == [
        "domain gmail.test: hard bounces 5.30 % of 1,200 recipients, over the review band (5%)"
    ]


def test_feedback_table_shows_complaints_and_unsubscribes_per_domain_and_sender() -> None:
    def row(grain: str, key: str, c: int, u: int, b: int, h: int) -> dict[str, str]:
        return {"grain": grain, "domain": key if grain == "domain" else "",
                "sender": key if grain == "sender" else "", "complaints": str(c),
                "unsubscribes": str(u), "late_bounces": str(b), "late_hard_bounces": str(h)}

    rows = [row("domain", "x.example", 1, 2, 3, 1), row("sender", "a@example.org", 1, 2, 3, 1),
            row("sender", "", 0, 1, 0, 0)]  # an unsubscribe whose Send was not read
    cells = re.findall(r"<td[^>]*>([^<]*)</td>", render.feedback_table(rows))
    assert cells == ["domain", "x.example", "1", "2", "3", "1",
                     "sender", "a@example.org", "1", "2", "3", "1",
                     "sender", "(unknown)", "0", "1", "0", "0"]
    assert "No complaint, unsubscribe or late bounce" in render.feedback_table([])


def _dashed_lines(svg: str) -> list[tuple[float, float, float, int]]:
    """(x, top, bottom, position in the document) of each vertical dashed line."""
    return [
        (float(m[1]), float(m[2]), float(m[4]), m.start())
        for m in re.finditer(
            r'<line x1="([\d.]+)" y1="([\d.]+)" x2="([\d.]+)" y2="([\d.]+)"[^>]*stroke-dasharray',
            svg,
        )
        if m[1] == m[3]
    ]


@pytest.mark.parametrize("worst", [0.0, 0.03, 0.3, 1.0])
def test_band_lines_never_run_through_a_label(worst: float) -> None:
    """Issue 44, friction 5: the dashed SES band lines crossed the "0.0 %" labels. A label a
    line passes under is drawn after it with a white halo, so the line stops at its glyphs."""
    rows = [
        delivery_row(f"d{i}.example", 100 - i, 0.9, worst * (i % 3) / 2) for i in range(12)
    ]
    svg = render.chart_domain_rates(rows)
    texts = [
        (m.start(), m[0]) for m in re.finditer(r"<text [^>]*>[^<]*</text>", svg)
    ]
    boxes = _text_boxes(svg)
    assert len(boxes) == len(texts)
    crossed = 0
    for (left, right, top, bottom, _), (pos, tag) in zip(boxes, texts, strict=True):
        for x, y1, y2, lpos in _dashed_lines(svg):
            if left < x < right and y1 < bottom and top < y2:
                crossed += 1
                assert lpos < pos and 'paint-order="stroke"' in tag, tag
    if worst >= 0.3:
        assert crossed  # the wide axis puts a band line under some label: the case is seen


def test_queue_shape_age_labels_do_not_run_together() -> None:
    """Issue 44, friction 5: the age header read `160-320320-640640-1280`."""
    labels = ["0-5", "5-10", "10-20", "20-40", "40-80", "80-160", "160-320", "320-640",
              "640-1280", "1280+"]
    rows = [{"domain": "TOTAL", "total": "9", **{b: "1" for b in labels}},
            {"domain": "d.example", "total": "9", **{b: "1" for b in labels}}]
    head = [b for b in _text_boxes(render.chart_qshape(rows, labels)) if b[3] <= 20]
    assert [b[4] for b in head][1:] == ["total", *labels]
    cols = sorted(head[1:])
    assert all(a[1] + 4 <= b[0] for a, b in zip(cols, cols[1:], strict=False)), cols


def test_the_page_is_wide_enough_for_the_domain_table() -> None:
    """Issue 44, friction 5: at a 1400-px window the page was an 820-px column and the
    domain table scrolled sideways, hiding its last columns."""
    css = Path(render.__file__).read_text()
    m = re.search(r"body\{\{\{FONT\};[^}]*max-width:(\d+)px", css)
    assert m and int(m[1]) >= 1200
