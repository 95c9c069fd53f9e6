"""Producer and consumer together: the local stack writes the event log, `make report` reads it.

The stack runs as `make run` runs it (a subprocess of `mailqueue_local.run`, real handlers,
moto, the SMTP sink with its demo rules); a known mix goes in over the HTTP APIs:

* delivered      ok@example.net          250 on the first attempt
* deferred       slow@tempfail.demo      451 twice, then 250 (NOTIFY=FAILURE: no warning)
* delay warning  late@tempfail.demo      451 twice, then 250; a delay DSN to the sender
* bounced        nobody@nosuch.demo      550 5.1.1: a hard bounce and a failure DSN
* operator       5 mails held back by not_before: hold / hold+release / retry / delete /
                 bounce (the last one sends a failure DSN)
* rejected       one request with a malformed recipient (a 4xx and a Reject event)

When the mirrored log (var/events) holds every expected event, the stack is stopped and
`make report EVENTS=<that log>` runs the real Spark job and the renderer. The summary's
numbers must be the mix's, the DSNs counted apart, and the run quiet.
"""

from __future__ import annotations

import base64
import csv
import gzip
import json
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.local.test_run import PYTHON, REPO, Stack, _stop, _wait_ready

SENDER = "a@example.org"
TEMPFAILS = 2  # 451 replies per @tempfail.demo recipient


@pytest.fixture()
def stack(tmp_path: Path) -> Iterator[Stack]:
    stdout, stderr = tmp_path / "stdout.txt", tmp_path / "stderr.txt"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MQ_", "MAILQUEUE_"))}
    python = PYTHON if PYTHON.exists() else Path(sys.executable)
    argv = [str(python), "-m", "mailqueue_local.run", "--var", str(tmp_path / "var")]
    argv += ["--port", "0", "--fast-retries", "--sweep-interval", "2", "--strict-limits"]
    argv += ["--tempfail-attempts", str(TEMPFAILS), "--set", "MQ_DELAY_WARNING_SECONDS=3"]
    with open(stdout, "wb") as out, open(stderr, "wb") as err:
        proc = subprocess.Popen(
            argv, cwd=REPO, stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=env
        )
    try:
        running = Stack(proc, _wait_ready(proc, stdout, stderr), stdout, stderr)
        yield running
        assert running.limit_violations() == [], "requests over AWS limits (moto accepted them)"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


def _submit(stack: Stack, rcpt: str | dict[str, Any], label: str, **extra: Any) -> tuple[int, Any]:
    content = (
        f"From: {SENDER}\r\nTo: <{rcpt if isinstance(rcpt, str) else rcpt['address']}>\r\n"
        f"Subject: report e2e {label}\r\nMessage-ID: <{label}@example.org>\r\n\r\n"
        + f"{label}\r\n"
        * 20
    ).encode()
    body = {
        "sender": SENDER,
        "recipients": [rcpt],
        "content": base64.b64encode(content).decode(),
        **extra,
    }
    return stack.call("POST", "/v1/messages", body)


def _log(events_dir: Path) -> list[dict[str, Any]]:
    docs = []
    for p in sorted(events_dir.rglob("*.json.gz")):
        docs += [json.loads(line) for line in gzip.decompress(p.read_bytes()).splitlines()]
    return docs


def _kinds(docs: list[dict[str, Any]]) -> Counter[str]:
    """Event types, with each operator event counted by its action."""
    c: Counter[str] = Counter()
    seen = set()
    for d in docs:
        eid = d["mailqueue"]["eventId"]
        if eid in seen:
            continue
        seen.add(eid)
        op = d["mailqueue"].get("operator")
        c[f"Operator:{op['action']}" if op else d["eventType"]] += 1
    return c


# What the mix writes (each event once): 9 mails + 3 DSNs; Deliveries of 4 mails + 3 DSNs.
EXPECTED = Counter(
    {
        "Send": 12,
        "Delivery": 7,
        "DeliveryDelay": 2 * TEMPFAILS,
        "Bounce": 2,
        "Reject": 1,
        "Operator:held": 2,
        "Operator:released": 1,
        "Operator:retried": 1,
        "Operator:deleted": 1,
        "Operator:bounced": 1,
    }
)


def test_the_report_of_a_known_mix_has_the_mix_numbers(stack: Stack, tmp_path: Path) -> None:
    later = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 3600))
    ids: dict[str, str] = {}
    for label, rcpt, extra in [
        ("ok", "ok@example.net", {}),
        ("slow", {"address": "slow@tempfail.demo", "notify": ["FAILURE"]}, {}),
        ("late", "late@tempfail.demo", {}),
        ("nobody", "nobody@nosuch.demo", {}),
        *[
            (f"op-{a}", f"{a}@ops.example", {"not_before": later})
            for a in ("held", "released", "retried", "deleted", "bounced")
        ],
    ]:
        status, answer = _submit(stack, rcpt, label, **extra)
        assert status == 202, answer
        ids[label] = answer["mail_id"]
    status, refused = _submit(stack, "not an address", "refused")
    assert 400 <= status < 500, refused
    reject_code = refused["error"]
    for mail, actions in [
        ("op-held", ["hold"]),
        ("op-released", ["hold", "release"]),
        ("op-retried", ["retry"]),
        ("op-deleted", ["delete"]),
        ("op-bounced", ["bounce"]),
    ]:
        for action in actions:
            status, done = stack.call("POST", f"/v1/queue/mails/{ids[mail]}/{action}", {})
            assert status == 200 and done["recipients"] == 1, (mail, action, done)

    events_dir = Path(stack.ready["mail_dir"]).parent / "events"
    deadline = time.monotonic() + 150
    while time.monotonic() < deadline:
        if _kinds(_log(events_dir)) == EXPECTED:
            break
        time.sleep(1)
    assert _kinds(_log(events_dir)) == EXPECTED, stack.stderr.read_text()[-3000:]
    assert _stop(stack.proc) == 0
    docs = _log(events_dir)

    out = tmp_path / "report"
    t0 = time.monotonic()
    run = subprocess.run(
        ["make", "--no-print-directory", "report", f"EVENTS={events_dir}", f"REPORT_OUT={out}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    took = time.monotonic() - t0
    assert run.returncode == 0, run.stderr[-3000:]
    # quiet: the job's one line per step, no Spark INFO chatter, no stack traces
    noise = [
        line
        for line in run.stderr.splitlines()
        if line
        and not line.startswith("[mq-pipeline]")
        and not line.startswith("WARNING: Using incubator modules")
    ]
    assert noise == [], noise[:20]
    assert "Exception" not in run.stdout + run.stderr
    assert (out / "report.html").exists()

    s = json.loads((out / "summary.json").read_text())
    h = s["headline"]
    # 9 mails of one recipient each; the 3 DSNs are not among them
    assert (h["recipients"], h["mails"]) == (9, 9)
    assert (h["delivered"], h["bounced"], h["deleted"], h["pending"]) == (4, 2, 1, 2)
    assert h["hard_bounced"] == 1  # nobody@: 5.1.1; the operator's bounce is a 4.4.7 expiry
    assert h["finalised"] == 7
    assert h["delivery_rate"] == pytest.approx(4 / 7)  # delivered / finalised
    assert h["delivered_of_sent"] == pytest.approx(4 / 9)  # delivered / sent
    assert h["deferred"] == 2
    assert s["dsn"]["recipients"] == 3 and s["dsn"]["delivered"] == 3
    by_type = s["events_by_type"]
    assert by_type == {
        "Send": 12,
        "Delivery": 7,
        "DeliveryDelay": 2 * TEMPFAILS,
        "Bounce": 2,
        "Reject": 1,
        "Operator": 6,
    }
    # bytes: what the log says each accepted mail weighs, summed by the job
    sizes = {
        d["mail"]["messageId"]: d["mailqueue"]["size"]
        for d in docs
        if d["eventType"] == "Send" and d["mail"]["source"] == SENDER
    }
    assert len(sizes) == 9 and h["bytes_received"] == sum(sizes.values())
    delivered = {ids[k] for k in ("ok", "slow", "late", "op-retried")}
    assert h["bytes_delivered"] == sum(sizes[m] for m in delivered)

    def rows(name: str) -> list[dict[str, str]]:
        with (out / "csv" / f"{name}.csv").open() as fh:
            return list(csv.DictReader(fh))

    dom = {r["domain"]: r for r in rows("delivery") if r["grain"] == "domain"}
    t = dom["tempfail.demo"]
    assert (t["recipients"], t["delivered"], t["deferred"], t["deferrals"]) == (
        "2",
        "2",
        "2",
        str(2 * TEMPFAILS),
    )
    ops = dom["ops.example"]
    assert (
        ops["recipients"],
        ops["delivered"],
        ops["bounced"],
        ops["deleted"],
        ops["pending"],
    ) == ("5", "1", "1", "1", "2")
    assert (dom["nosuch.demo"]["bounced"], dom["nosuch.demo"]["hard_bounced"]) == ("1", "1")
    # the DSNs went to the sender's domain: counted there only as DSNs
    assert (dom["example.org"]["recipients"], dom["example.org"]["dsn_recipients"]) == ("0", "3")
    senders = {r["sender"]: r for r in rows("senders")}
    assert (senders[SENDER]["mails"], senders[SENDER]["rejected"]) == ("9", "1")
    assert senders[""]["mails"] == "3"  # the null sender
    assert [(r["reason"], r["events"]) for r in rows("rejects")] == [(reject_code, "1")]
    page = (out / "report.html").read_text()
    assert "(the whole log)" in page and "44.44 %" in page and "57.14 %" in page
    print(f"make report took {took:.1f} s")
