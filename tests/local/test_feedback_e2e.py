"""A late bounce and a complaint travel through the local stack (issue 27).

The stack runs in this process (moto in its own, the real handlers, the SMTP sink) with a
VERP return-path policy for example.org. Two mails go in over the HTTP API; the sink
records the envelope sender each was delivered with (the VERP return path). A receiver's
DSN and an ARF complaint, addressed to those return paths, arrive as SES receipts (the raw
mail in S3, the ingress function invoked with the receipt event, as SES's S3 and Lambda
actions do). They must reach the event log the stack mirrors to <var>/events (a late
`Bounce` and a `Complaint`), the suppression list, and the Spark report (`make report`:
feedback.csv and the summary's feedback counts).
"""

from __future__ import annotations

import base64
import csv
import gzip
import json
import os
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

from mailqueue.backends.aws.suppression_store import DynamoSuppressionStore
from mailqueue.core.verp import KeyRing, decode
from mailqueue_local.stack import LocalStack, StackOptions

from tests.feedback.messages import arf, dsn
from tests.feedback.test_verp import ring_json
from tests.local.test_run import REPO
from tests.support import events as ev

SENDER = "alice@example.org"
BOUNCES = "bounces.example.org"


def _post(stack: LocalStack, body: dict[str, Any]) -> dict[str, Any]:
    req = urllib.request.Request(
        stack.api_url + "/v1/messages",
        json.dumps(body).encode(),
        {"content-type": "application/json", "authorization": f"Bearer {stack.token}"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert resp.status == 202
        answer: dict[str, Any] = json.loads(resp.read())
        return answer


def _submit(stack: LocalStack, rcpt: str, label: str) -> str:
    content = (
        f"From: Alice <{SENDER}>\r\nTo: <{rcpt}>\r\nSubject: feedback e2e {label}\r\n"
        f"Message-ID: <{label}@example.org>\r\n\r\nhello {label}\r\n"
    ).encode()
    body = {
        "sender": SENDER,
        "recipients": [rcpt],
        "content": base64.b64encode(content).decode(),
    }
    return str(_post(stack, body)["mail_id"])


def _delivered_from(stack: LocalStack, rcpt: str, deadline: float) -> str:
    """The envelope sender the sink recorded for the one mail to `rcpt`."""
    while time.monotonic() < deadline:
        for side in sorted(stack.mail_dir.glob("*.json")):
            doc = json.loads(side.read_text())
            if rcpt in doc.get("rcpt_tos", []) and (side.with_suffix(".eml")).exists():
                return str(doc["mail_from"])
        time.sleep(0.3)
    raise AssertionError(f"no delivery to {rcpt} in {stack.mail_dir}")


def _log(events_dir: Path) -> list[dict[str, Any]]:
    docs = []
    for p in sorted(events_dir.rglob("*.json.gz")):
        docs += [json.loads(line) for line in gzip.decompress(p.read_bytes()).splitlines()]
    return docs


def _receive(stack: LocalStack, to: str, raw: bytes, message_id: str) -> None:
    """What SES's receipt rule does: the S3 action stores the raw mail, the Lambda action
    invokes ingress with the receipt."""
    bucket = os.environ.get("MQ_SES_BUCKET") or stack.readiness()["bucket"]
    prefix = os.environ.get("MQ_SES_PREFIX") or "ses-inbound/"
    stack.clients.s3.put_object(Bucket=bucket, Key=f"{prefix}{message_id}", Body=raw)
    event = ev.ses_receipt(message_id=message_id, source="", recipients=[to])
    answer = stack.functions["ingress"](event)  # functions/ingress
    assert answer == {"disposition": "STOP_RULE"}, answer


def test_a_late_bounce_and_a_complaint_reach_log_suppression_and_report(
    tmp_path: Path,
) -> None:
    ring = KeyRing.parse(ring_json())
    options = StackOptions(
        var_dir=tmp_path / "var",
        api_port=0,
        fast_retries=True,
        sweep_interval=2.0,
        route_output=False,
        dkim=False,
        settings={
            "MQ_RETURN_PATH_POLICY": json.dumps({"example.org": BOUNCES}),
            "MQ_RETURN_PATH_KEYS": ring_json(),
        },
    )
    events_dir = tmp_path / "var" / "events"
    with LocalStack(options) as stack:
        gone = _submit(stack, "gone@example.net", "gone")
        annoyed = _submit(stack, "annoyed@example.net", "annoyed")
        deadline = time.monotonic() + 90
        verp_gone = _delivered_from(stack, "gone@example.net", deadline)
        verp_annoyed = _delivered_from(stack, "annoyed@example.net", deadline)
        # delivered with a return path naming the mail and its recipient, on the bounce domain
        for verp, mail_id in ((verp_gone, gone), (verp_annoyed, annoyed)):
            d = decode(ring, verp)
            assert d is not None and (d.mail_id, d.rid, d.domain) == (mail_id, "r0", BOUNCES)

        _receive(
            stack,
            verp_gone,
            dsn(
                verp_gone, "gone@example.net", "5.1.1", "550 5.1.1 <gone@example.net>: no such user"
            ),
            "late-bounce-1",
        )
        _receive(stack, verp_annoyed, arf(verp_annoyed, "annoyed@example.net"), "fbl-1")

        want = {("Bounce", gone), ("Complaint", annoyed)}
        while time.monotonic() < deadline:
            got = {
                (d["eventType"], d["mail"]["messageId"])
                for d in _log(events_dir)
                if d["mailqueue"].get("feedback")
            }
            if want <= got:
                break
            time.sleep(0.5)
        store = DynamoSuppressionStore(stack.clients.dynamodb, stack.readiness()["table"])
        entries = store.get_many(["gone@example.net", "annoyed@example.net"])
    docs = _log(events_dir)
    late = [d for d in docs if d["mailqueue"].get("feedback")]
    assert {(d["eventType"], d["mail"]["messageId"]) for d in late} == want, late
    bounce = next(d for d in late if d["eventType"] == "Bounce")
    assert bounce["bounce"]["bounceType"] == "Permanent"
    assert bounce["bounce"]["bouncedRecipients"][0]["emailAddress"] == "gone@example.net"
    complaint = next(d for d in late if d["eventType"] == "Complaint")
    assert complaint["complaint"]["complaintFeedbackType"] == "abuse"
    # the mails' own events are still there: the late ones were appended
    delivered = {d["mail"]["messageId"] for d in docs if d["eventType"] == "Delivery"}
    assert {gone, annoyed} <= delivered
    assert entries["gone@example.net"].status == "5.1.1"
    assert entries["annoyed@example.net"].reason == "complaint: abuse"

    out = tmp_path / "report"
    run = subprocess.run(
        ["make", "--no-print-directory", "report", f"EVENTS={events_dir}", f"REPORT_OUT={out}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["feedback"] == {"complaints": 1, "late_bounces": 1, "late_hard_bounces": 1}
    with (out / "csv" / "feedback.csv").open() as fh:
        rows = {(r["grain"], r["domain"] or r["sender"]): r for r in csv.DictReader(fh)}
    assert (
        rows[("domain", "example.net")]["complaints"],
        rows[("sender", SENDER)]["complaints"],
    ) == (
        "1",
        "1",
    )
    assert rows[("sender", SENDER)]["late_hard_bounces"] == "1"
    # the late bounce does not turn the delivered mail into a bounced one
    assert summary["headline"]["delivered"] == 2 and summary["headline"]["bounced"] == 0
