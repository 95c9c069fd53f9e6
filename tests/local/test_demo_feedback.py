"""Issue 44, friction 7: `make demo` produces a complaint, an unsubscribe and a late bounce
through the real doors (the receiving listener over SMTP, the one-click endpoint over
HTTP), so the report's feedback section is not empty for a newcomer, and a reputation
pause and resume: the complaint pauses the development principal and example.org, a mail
submitted then waits, and is delivered after `mailqueue reputation resume`. The demo
itself waits for each step and fails without it; this runs it whole."""

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

    # the pause (the CLI's verdict, by the complaint), the held mail, the resume, in order
    lines = text.splitlines()

    def at(*parts: str) -> int:
        found = [i for i, line in enumerate(lines) if all(p in line for p in parts)]
        assert found, (parts, text[-3000:])
        return found[0]

    paused = at("reputation show --principal", "PAUSED", "complaint rate")
    assert at("reputation show --sender-domain example.org", "PAUSED") > paused
    held = at("after pause", "held by the pause", "not delivered")
    resumed = at("reputation resume --principal", "resumed principal")
    assert at("reputation resume --sender-domain example.org", "resumed sender_domain") > resumed
    delivered = at("after pause", "delivered to grace@example.net after the resume")
    assert paused < held < resumed < delivered
    assert lines[held].split("held by the pause: ")[1].split(" after 4 s")[0] in (
        "queued",
        "inflight",
        "inflight, queued",
    ), lines[held]
    rep = {
        (d["mailqueue"]["reputation"]["action"], d["mailqueue"]["reputation"]["scope"])
        for d in docs
        if d["eventType"] == "mailqueue:Reputation"
    }
    assert {
        ("paused", "principal"),
        ("paused", "sender_domain"),
        ("resumed", "principal"),
        ("resumed", "sender_domain"),
    } <= rep, rep
