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
