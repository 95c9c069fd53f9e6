"""Issue 44, friction 7: `make demo` produces a complaint, an unsubscribe and a late bounce
through the real doors (the receiving listener over SMTP, the one-click endpoint over
HTTP), so the report's feedback section is not empty for a newcomer. The demo itself waits
for the three events in its event log and fails without them; this runs it whole."""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path

from mailqueue_local import demo


def test_the_demo_ends_with_a_complaint_an_unsubscribe_and_a_late_bounce(tmp_path: Path) -> None:
    out = io.StringIO()
    rc = demo.run(tmp_path / "demo", 300.0, out)
    text = out.getvalue()
    assert rc == 0, text[-3000:]
    for label, kind in (
        ("complaint", "Complaint"),
        ("unsubscribe", "Subscription"),
        ("late bounce", "Bounce"),
    ):
        assert any(
            label in line and f"event log: {kind} event" in line for line in text.splitlines()
        ), text[-3000:]
    docs = [
        json.loads(line)
        for f in (tmp_path / "demo" / "events").rglob("*.json.gz")
        for line in gzip.decompress(f.read_bytes()).splitlines()
    ]
    kinds = {d["eventType"] for d in docs if d.get("mailqueue", {}).get("feedback")}
    assert {"Bounce", "Complaint"} <= kinds
    assert any(d["eventType"] == "Subscription" for d in docs)
