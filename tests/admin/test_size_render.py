"""Issue 44, friction 1: `mailqueue size` says what the index can say, labelled so."""

from __future__ import annotations

import io

from mailqueue.cli.main import render_size


def _render(doc: dict) -> str:
    out = io.StringIO()
    render_size(doc, out)
    return out.getvalue()


def test_no_delivered_zero_after_deliveries() -> None:
    # three solo mails delivered and one bounced: the index holds none of them
    text = _render({"recipients": {"queued": 1}, "groups": {"queued": 1}, "pending": 1})
    assert "delivered" not in text.split("(")[0]  # no "delivered 0" row to misread
    assert "bounced" not in text.split("(")[0]
    assert "not counted here" in text and "make report" in text
    assert text.splitlines()[0].startswith("IN THE QUEUE")


def test_finished_rows_are_labelled_as_not_totals() -> None:
    text = _render(
        {
            "recipients": {"queued": 2, "delivered": 3, "bounced": 1},
            "groups": {"queued": 1, "done": 2},
            "pending": 2,
        }
    )
    head, _, tail = text.partition("FINISHED, NOT YET CLEANED UP")
    assert "delivered" not in head and "bounced" not in head
    assert "these are not totals" in tail
    rows = {line.split()[0]: line.split()[1:] for line in tail.splitlines()[2:] if line.strip()}
    assert rows["delivered"] == ["3"] and rows["bounced"] == ["1"]
    assert rows["done"][-1] == "2"
