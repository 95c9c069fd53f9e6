"""A late bounce, a complaint and an unsubscribe travel through the local stack (issue 27).

The stack runs in this process (moto in its own, the real handlers, the SMTP sink) with a
VERP return-path policy for example.org. Two mails go in over the HTTP API; the sink
records the envelope sender each was delivered with (the VERP return path). A receiver's
DSN and an ARF complaint, addressed to those return paths, arrive as SES receipts (the raw
mail in S3, the ingress function invoked with the receipt event, as SES's S3 and Lambda
actions do). A third, bulk mail carries a one-click List-Unsubscribe link, which a plain
HTTP client POSTs (RFC 8058). All three must reach the event log the stack mirrors to
<var>/events (a late `Bounce`, a `Complaint`, a `Subscription`), the suppression list, and
the Spark report (`make report`: feedback.csv's complaint and unsubscribe counts per
recipient domain and per sender, and the summary's feedback counts). One stack, one
report run for all three.
"""

from __future__ import annotations

import base64
import csv
import gzip
import json
import os
import re
import subprocess
import time
import urllib.error
import urllib.request
from email import message_from_bytes
from pathlib import Path
from typing import Any

from mailqueue.backends.aws.suppression_store import DynamoSuppressionStore
from mailqueue.core.verp import KeyRing, decode
from mailqueue.outbound.suppression import scoped_key
from mailqueue_local.stack import LocalStack, StackOptions

from tests.feedback.messages import arf, dsn
from tests.feedback.test_verp import ring_json
from tests.local.test_run import REPO
from tests.support import events as ev

SENDER = "alice@example.org"
BOUNCES = "bounces.example.org"
UNSUB_KEYS = json.dumps({"k1": base64.b64encode(b"0123456789abcdef0123456789abcdef").decode()})


def _open(req: urllib.request.Request) -> Any:
    """urlopen, with a refusal's reason and body in the failure (a 4xx says why)."""
    try:
        return urllib.request.urlopen(req, timeout=30)
    except urllib.error.HTTPError as e:
        detail = e.read()[:2000].decode("utf-8", "replace")
        raise AssertionError(
            f"{req.get_method()} {req.full_url}: {e.code} "
            f"{e.headers.get('X-Mailqueue-Error', '')} {detail}"
        ) from e


def _post(stack: LocalStack, body: dict[str, Any]) -> dict[str, Any]:
    req = urllib.request.Request(
        stack.api_url + "/v1/messages",
        json.dumps(body).encode(),
        {"content-type": "application/json", "authorization": f"Bearer {stack.token}"},
        method="POST",
    )
    with _open(req) as resp:
        assert resp.status == 202
        answer: dict[str, Any] = json.loads(resp.read())
        return answer


def _submit(stack: LocalStack, rcpt: str, label: str, priority: str = "transactional") -> str:
    content = (
        f"From: Alice <{SENDER}>\r\nTo: <{rcpt}>\r\nSubject: feedback e2e {label}\r\n"
        f"Message-ID: <{label}@example.org>\r\n\r\nhello {label}\r\n"
    ).encode()
    body = {
        "sender": SENDER,
        "recipients": [rcpt],
        "content": base64.b64encode(content).decode(),
        "priority": priority,
    }
    return str(_post(stack, body)["mail_id"])


def _unsubscribe_path(stack: LocalStack, rcpt: str, deadline: float) -> str:
    """The one-click link's path in the delivered mail's List-Unsubscribe field."""
    while time.monotonic() < deadline:
        for side in sorted(stack.mail_dir.glob("*.json")):
            eml = side.with_suffix(".eml")
            if rcpt in json.loads(side.read_text()).get("rcpt_tos", []) and eml.exists():
                lu = " ".join(str(message_from_bytes(eml.read_bytes())["List-Unsubscribe"]).split())
                m = re.search(r"<https://mail\.example\.org(/u/[A-Za-z0-9_.-]+)>", lu)
                assert m, lu
                return m.group(1)
        time.sleep(0.3)
    raise AssertionError(f"no delivery to {rcpt} in {stack.mail_dir}")


def _one_click(stack: LocalStack, path: str) -> int:
    """RFC 8058's POST, as a mail client sends it: no credentials at all."""
    req = urllib.request.Request(
        stack.api_url + path,
        b"List-Unsubscribe=One-Click",
        {"content-type": "application/x-www-form-urlencoded"},
        method="POST",
    )
    with _open(req) as resp:
        return int(resp.status)


def _delivered_from(stack: LocalStack, rcpt: str, deadline: float) -> str:
    """The envelope sender the sink recorded for the one mail to `rcpt`."""
    while time.monotonic() < deadline:
        for side in sorted(stack.mail_dir.glob("*.json")):
            doc = json.loads(side.read_text())
            if rcpt in doc.get("rcpt_tos", []) and (side.with_suffix(".eml")).exists():
                return str(doc["mail_from"])
        time.sleep(0.3)
    raise AssertionError(f"no delivery to {rcpt} in {stack.mail_dir}")


def _reported(doc: dict[str, Any]) -> bool:
    """A receiver's report (a late Bounce, a Complaint) or a recipient's (a Subscription)."""
    return bool(doc["mailqueue"].get("feedback")) or doc["eventType"] == "Subscription"


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
            "MQ_LIST_UNSUBSCRIBE_URL": "https://mail.example.org",
            "MQ_LIST_UNSUBSCRIBE_KEYS": UNSUB_KEYS,
            "MQ_LIST_UNSUBSCRIBE_KID": "k1",
        },
    )
    events_dir = tmp_path / "var" / "events"
    with LocalStack(options) as stack:
        gone = _submit(stack, "gone@example.net", "gone")
        annoyed = _submit(stack, "annoyed@example.net", "annoyed")
        leaving = _submit(stack, "leaving@example.net", "leaving", priority="bulk")
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
        assert _one_click(stack, _unsubscribe_path(stack, "leaving@example.net", deadline)) == 200

        want = {("Bounce", gone), ("Complaint", annoyed), ("Subscription", leaving)}
        while time.monotonic() < deadline:
            got = {
                (d["eventType"], d["mail"]["messageId"])
                for d in _log(events_dir)
                if _reported(d)
            }
            if want <= got:
                break
            time.sleep(0.5)
        store = DynamoSuppressionStore(stack.clients.dynamodb, stack.readiness()["table"])
        opted_out = scoped_key("leaving@example.net", "sender_domain:example.org")
        entries = store.get_many(["gone@example.net", "annoyed@example.net", opted_out])
    docs = _log(events_dir)
    late = [d for d in docs if _reported(d)]
    assert {(d["eventType"], d["mail"]["messageId"]) for d in late} == want, late
    bounce = next(d for d in late if d["eventType"] == "Bounce")
    assert bounce["bounce"]["bounceType"] == "Permanent"
    assert bounce["bounce"]["bouncedRecipients"][0]["emailAddress"] == "gone@example.net"
    complaint = next(d for d in late if d["eventType"] == "Complaint")
    assert complaint["complaint"]["complaintFeedbackType"] == "abuse"
    sub = next(d for d in late if d["eventType"] == "Subscription")
    assert sub["subscription"]["contactList"] == "example.org"
    assert sub["mail"]["destination"] == ["leaving@example.net"]
    # the mails' own events are still there: the late ones were appended
    delivered = {d["mail"]["messageId"] for d in docs if d["eventType"] == "Delivery"}
    assert {gone, annoyed} <= delivered
    assert entries["gone@example.net"].status == "5.1.1"
    assert entries["annoyed@example.net"].reason == "complaint: abuse"
    assert entries[opted_out].reason == "unsubscribed (one-click)"

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
    assert summary["feedback"] == {
        "complaints": 1, "unsubscribes": 1, "late_bounces": 1, "late_hard_bounces": 1
    }
    with (out / "csv" / "feedback.csv").open() as fh:
        rows = {(r["grain"], r["domain"] or r["sender"]): r for r in csv.DictReader(fh)}
    counted = ("complaints", "unsubscribes", "late_bounces", "late_hard_bounces")
    # per recipient domain and per sender (the unsubscribe's from its mail's Send)
    assert [rows[("domain", "example.net")][k] for k in counted] == ["1", "1", "1", "1"]
    assert [rows[("sender", SENDER)][k] for k in counted] == ["1", "1", "1", "1"]
    assert set(rows) == {("domain", "example.net"), ("sender", SENDER)}, rows
    page = (out / "report.html").read_text()
    assert "Complaints, unsubscribes, late bounces" in page
    # the late reports do not turn the delivered mails into bounced ones
    assert summary["headline"]["delivered"] == 3 and summary["headline"]["bounced"] == 0
