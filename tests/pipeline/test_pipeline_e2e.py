"""The whole job over event files written by the real producer, then the renderer."""

from __future__ import annotations

import csv
import json
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from mailqueue.core.model import Result
from mq_pipeline import job, render
from mq_pipeline.transforms import TimeRange
from pyspark.sql import SparkSession

from tests.pipeline import factory as fx

DAY = datetime(2026, 5, 4, tzinfo=UTC)


def t(h: int, m: int = 0, s: float = 0, day: datetime = DAY) -> datetime:
    return day + timedelta(hours=h, minutes=m, seconds=s)


def scenario() -> list[tuple[Any, datetime]]:
    """(event, write time) pairs covering duplicates, late writes and range edges."""
    out: list[tuple[Any, datetime]] = []
    # A: deferred once, delivered on attempt 2; the Delivery is written twice, once late.
    a = fx.mail("A", "a@gmail.test", t(10))
    a1 = fx.attempt(1, t(10), 1.5, 2.0, 451, "4.7.1", "greylisted, retry in 300 s")
    a2 = fx.attempt(2, t(10, 5), 0.5, 1.0, 250, "2.0.0", "Ok: queued as 1A2B")
    dl = fx.delivery(a, "a@gmail.test", a2)
    out += [(fx.send(a, "a@gmail.test"), t(10)), (fx.delay(a, "a@gmail.test", a1), t(10)),
            (dl, t(10, 6)), (dl, t(11, 10))]
    # B: hard bounce on attempt 1, written two hours late.
    b = fx.mail("B", "b@x.test", t(10, 1))
    b1 = fx.attempt(1, t(10, 1), 0.2, 0.3, 550, "5.1.1", "<b@x.test>: user unknown")
    out += [(fx.send(b, "b@x.test"), t(10, 1)),
            (fx.bounce(b, "b@x.test", b1.finished_at, b1.result, b1), t(12, 5))]
    # C: accepted at 23:50, delivered after midnight: pending as of the end of the day.
    c = fx.mail("C", "c@x.test", t(23, 50))
    c1 = fx.attempt(1, t(23, 50), 0.1, 0.1, 421, "4.3.2", "busy")
    c2 = fx.attempt(2, t(24, 20), 0.1, 0.1, 250, "2.0.0", "Ok")
    out += [(fx.send(c, "c@x.test"), t(23, 50)), (fx.delay(c, "c@x.test", c1), t(23, 50)),
            (fx.delivery(c, "c@x.test", c2), t(24, 20))]
    # E: accepted the day before, delivered today: counted in volumes, no outcome row.
    e = fx.mail("E", "e@gmail.test", t(-1, 55))
    e1 = fx.attempt(1, t(0, 0), 0.1, 0.1, 250, "2.0.0", "Ok")
    out += [(fx.send(e, "e@gmail.test"), t(-1, 55)),
            (fx.delivery(e, "e@gmail.test", e1), t(0, 0, 1))]
    # F: deleted by an operator after a deferral; expiry-style bounce is ignored afterwards.
    f = fx.mail("F", "f@gmail.test", t(9))
    f1 = fx.attempt(1, t(9), 0.1, 0.2, 452, "4.2.2", "mailbox full")
    out += [(fx.send(f, "f@gmail.test"), t(9)), (fx.delay(f, "f@gmail.test", f1), t(9)),
            (fx.operator(f, "f@gmail.test", t(9, 30), "deleted"), t(9, 30)),
            (fx.bounce(f, "f@gmail.test", t(21), Result(0, "4.4.7", "expired")), t(21))]
    # R: rejected at ingress, no recipient, two destinations.
    r = fx.mail("R", ["r1@x.test", "r2@y.test"], t(11))
    out += [(fx.reject(r, t(11)), t(11))]
    return out


@pytest.fixture(scope="module")
def result(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("e2e")
    events = fx.write_events(root, scenario())
    out = root / "out"
    cfg = job.JobConfig(events=str(events), out=str(out), rng=TimeRange.day("2026-05-04"),
                        late_hours=6, partitions=2, min_volume=1)
    summary = job.run(spark, cfg)
    return {"summary": summary, "out": out, "events": events}


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open() as fh:
        return list(csv.DictReader(fh))


def test_summary_counts_duplicates_late_and_range(result: dict[str, Any]) -> None:
    s = result["summary"]
    assert json.loads((result["out"] / "summary.json").read_text()) == json.loads(
        json.dumps(s, default=str))
    # In range by event time: A 4 rows (1 duplicate), B 2, C 2 (its delivery is tomorrow),
    # E 1 (its send was yesterday), F 4, R 1.
    assert s["input"]["rows_read"] == 14
    assert s["input"]["duplicates_removed"] == 1
    assert s["input"]["events"] == 13
    assert s["input"]["late_events"] == 1  # B's bounce; A's late copy has an on-time twin
    assert s["events_by_type"] == {"Send": 4, "DeliveryDelay": 3, "Delivery": 2, "Bounce": 2,
                                   "Operator": 1, "Reject": 1}
    h = s["headline"]
    assert (h["recipients"], h["delivered"], h["bounced"], h["deleted"], h["pending"]) == (
        4, 1, 1, 1, 1)
    assert h["hard_bounced"] == 1 and h["hard_bounce_rate"] == pytest.approx(0.25)
    assert h["delivery_rate"] == pytest.approx(1 / 3)
    assert h["first_attempt_rate"] == pytest.approx(0.0)  # A needed two attempts
    assert h["retry_yield"] == pytest.approx(0.5)  # A delivered, F deleted; C not final
    assert h["ttd_p50_s"] == pytest.approx(a_ttd := 5 * 60 + 0.5 + 1.0) and h["ttd_max_s"] == a_ttd
    assert s["qshape"]["pending"] == 1 and s["qshape"]["at"].startswith("2026-05-04T23:50")


def test_breaches_listed(result: dict[str, Any]) -> None:
    b = result["summary"]["breaches"]
    assert {(x["grain"], x["key"], x["band"]) for x in b} >= {
        ("overall", None, "pause"), ("day", "2026-05-04", "pause"), ("domain", "x.test", "pause")}
    assert all(x["value"] >= 0.02 for x in b)


def test_tables_written_as_parquet_and_csv(spark: SparkSession, result: dict[str, Any]) -> None:
    out = result["out"]
    o = {r["message_id"]: r for r in spark.read.parquet(str(out / "parquet/outcomes")).collect()}
    assert {k: o[k]["final_state"] for k in o} == {
        "A": "delivered", "B": "bounced", "C": "pending", "F": "deleted"}
    assert (o["A"]["attempts"], o["A"]["deferrals"], o["A"]["delivered_attempt"]) == (2, 1, 2)
    for name in job.TABLES:
        assert (out / "parquet" / name).is_dir(), name
        assert (out / "csv" / f"{name}.csv").exists(), name
    q = read_csv(out / "csv/qshape.csv")
    assert [(r["domain"], r["total"], r["0-5"]) for r in q] == [("TOTAL", "1", "1"),
                                                                ("x.test", "1", "1")]
    reasons = read_csv(out / "csv/reasons.csv")
    top = [r for r in reasons if r["grain"] == "overall" and r["kind"] == "bounce"]
    assert {(r["status"], r["reason"]) for r in top} == {("5.1.1", "<addr>: user unknown"),
                                                       ("4.4.7", "expired")}
    vols = read_csv(out / "csv/volumes.csv")
    send_10h = [r for r in vols if r["grain"] == "hour" and r["hour"] == "10"
                and r["event_type"] == "Send"]
    assert send_10h and send_10h[0]["events"] == "2"


class _Collect(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.attrs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.attrs += [v or "" for _, v in attrs]


def test_render_is_one_self_contained_page(result: dict[str, Any]) -> None:
    page = render.render(result["out"])
    p = _Collect()
    p.feed(page)
    assert p.tags.count("svg") == 8
    assert "script" not in p.tags and "link" not in p.tags and "img" not in p.tags
    assert not [a for a in p.attrs if "http" in a or a.startswith("//")]
    assert "x.test" in page and "pause" in page
    assert "33.33 %" in page  # the delivery rate tile
    assert "<addr>: user unknown" not in page and "&lt;addr&gt;: user unknown" in page


def test_empty_range_gives_empty_reports(spark: SparkSession, tmp_path: Path,
                                         result: dict[str, Any]) -> None:
    cfg = job.JobConfig(events=str(result["events"]), out=str(tmp_path / "out"),
                        rng=TimeRange.day("2030-01-01"), partitions=2)
    s = job.run(spark, cfg)
    assert s["input"]["events"] == 0 and s["headline"]["recipients"] is None
    assert s["breaches"] == [] and s["qshape"]["at"] == "2030-01-02T00:00:00Z"
    assert read_csv(tmp_path / "out/csv/delivery.csv") == []
    page = render.render(tmp_path / "out")
    assert "No events in range." in page and "No deliveries." in page


def test_an_events_folder_with_no_file_yet_gives_an_empty_report(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Issue 44: `make report` on an events folder that exists but holds no file asked for
    68,719,476,736 shuffle partitions (Spark's size of an unknown source) and failed."""
    (tmp_path / "events").mkdir()
    cfg = job.JobConfig(events=str(tmp_path / "events"), out=str(tmp_path / "out"))
    s = job.run(spark, cfg)  # no partitions given: sized from the input
    assert s["input"]["events"] == 0
    assert "No events in range." in render.render(tmp_path / "out")


def test_command_line_parsing() -> None:
    c = job.parse_args(["--events", "s3://b/events", "--out", "s3://b/r", "--date", "2026-05-04"])
    assert c.rng == TimeRange.day("2026-05-04") and c.events == "s3://b/events"
    c = job.parse_args(["--events", "e", "--out", "o", "--from", "2026-05-01", "--to",
                        "2026-05-03", "--late-hours", "2", "--qshape-at", "2026-05-03T12:00"])
    assert c.rng.start == datetime(2026, 5, 1, tzinfo=UTC)
    assert c.rng.end == datetime(2026, 5, 4, tzinfo=UTC)
    assert c.late_hours == 2 and c.qshape_at == datetime(2026, 5, 3, 12, tzinfo=UTC)
    with pytest.raises(SystemExit):
        job.parse_args(["--events", "e", "--out", "o", "--date", "2026-05-04", "--to", "x"])


def test_event_paths_cover_range_plus_lateness() -> None:
    rng = TimeRange.parse("2026-05-04T20:00", "2026-05-05T22:00")
    assert job.event_paths("s3://b/events/", rng, 3) == "s3://b/events/dt={2026-05-04,2026-05-05,2026-05-06}/hr=*"
    assert job.event_paths("/e", TimeRange.day("2026-05-04"), 0) == "/e/dt=2026-05-04/hr=*"
    assert job.event_paths("/e", TimeRange(None, None), 3) == "/e/dt=*/hr=*"
