from __future__ import annotations

from datetime import UTC, datetime, timedelta

from mq_pipeline.job import parse_args


def test_yesterday_is_the_previous_utc_day() -> None:
    cfg = parse_args(["--events", "e", "--out", "o", "--date", "yesterday"])
    expected = parse_args(
        [
            "--events",
            "e",
            "--out",
            "o",
            "--date",
            (datetime.now(UTC).date() - timedelta(days=1)).isoformat(),
        ]
    )
    assert cfg.rng == expected.rng


def test_out_date_placeholder_gives_one_report_per_day() -> None:
    cfg = parse_args(
        ["--events", "e", "--out", "s3://b/reports/dt={date}/", "--date", "2026-05-04"]
    )
    assert cfg.out == "s3://b/reports/dt=2026-05-04/"
    ranged = parse_args(
        ["--events", "e", "--out", "r/{date}", "--from", "2026-05-01", "--to", "2026-05-03"]
    )
    assert ranged.out == "r/2026-05-01"


def test_out_date_placeholder_without_a_start_is_refused() -> None:
    import pytest

    with pytest.raises(SystemExit) as e:
        parse_args(["--events", "e", "--out", "r/{date}"])
    assert e.value.code == 2
