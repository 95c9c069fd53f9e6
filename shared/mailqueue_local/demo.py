"""`make demo`: four mails through the local stack, and how each moved through the queue.

Starts its own stack (fast retries, the sink's demo rules), submits over the HTTP API:

* deliverable      → alice@example.net     delivered on the first attempt;
* temporary        → bob@tempfail.demo     451 twice, then delivered (5 s, 10 s backoff);
* permanent        → nobody@nosuch.demo    550: bounced, a DSN goes back to the sender;
* delayed          → carol@example.net     ``not_before`` 15 s ahead, delivered then;

then prints every transition it sees on the table's stream (the same stream the event
writer reads) and every reply of the sink, with the time since the first submission,
until all four are finished and the DSN has landed, and stops the stack.

    .venv/bin/python -m mailqueue_local.demo [--var var/demo] [--timeout 120]
"""

from __future__ import annotations

import argparse
import base64
import json
import logging
import queue
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from boto3.dynamodb.types import TypeDeserializer

from mailqueue_local.runtime import REGION
from mailqueue_local.sink import SinkEvent, SinkRules
from mailqueue_local.stack import FAST_RETRIES, LocalStack, StackOptions
from mailqueue_local.streams import StreamPoller

SENDER = "demo@example.org"
DELAY_SECONDS = 15


@dataclass
class Submission:
    label: str
    recipient: str
    not_before: datetime | None = None
    mail_id: str = ""


@dataclass
class Tracker:
    """Turns stream records of the table into one line per visible transition."""

    labels: dict[str, str] = field(default_factory=dict)  # mail id → label
    finished: set[str] = field(default_factory=set)  # mail ids whose recipients are all final
    dsn_pending: set[str] = field(default_factory=set)
    _des: TypeDeserializer = field(default_factory=TypeDeserializer)

    held: list[dict[str, Any]] = field(default_factory=list)  # records of unlabelled mails

    def feed(self, records: list[dict[str, Any]], submitted: bool) -> list[tuple[str, str]]:
        """Lines for new stream records, in order. A record of a mail not yet labelled
        (its 202 not read yet: the stream can be faster than the answer) waits, so a mail
        is never shown by a bare id before its label; once every submission is answered,
        what is left is shown as it is (DSNs label themselves)."""
        pending, self.held = self.held + records, []
        out: list[tuple[str, str]] = []
        for i, rec in enumerate(pending):
            mail_id = str(self._image(rec["dynamodb"].get("Keys")).get("pk", ""))[2:]
            new = self._image(rec["dynamodb"].get("NewImage"))
            known = mail_id in self.labels or new.get("sender", None) == ""
            if not (known or submitted):
                self.held = pending[i:]  # keep the order: later records wait as well
                break
            out.extend(self.lines(rec))
        return out

    def _image(self, raw: dict[str, Any] | None) -> dict[str, Any]:
        return {k: self._des.deserialize(v) for k, v in (raw or {}).items()}

    def lines(self, record: dict[str, Any]) -> list[tuple[str, str]]:
        """(label, text) pairs for one stream record of the table."""
        ddb = record["dynamodb"]
        keys = self._image(ddb.get("Keys"))
        pk, sk = str(keys.get("pk", "")), str(keys.get("sk", ""))
        if not pk.startswith("M#"):
            return []  # sites, suppressions, suspensions, outbox, jobs
        mail_id = pk[2:]
        new, old = self._image(ddb.get("NewImage")), self._image(ddb.get("OldImage"))
        solo = sk.startswith("G#") and "body" in new  # a solo mail: stored as its group
        if (sk == "M" or solo) and record["eventName"] == "INSERT":
            if mail_id not in self.labels and new.get("sender", None) == "":
                self.labels[mail_id] = "DSN"
            label = self.labels.get(mail_id, mail_id[:10])
            # a solo mail's item carries its recipients itself (no rcpt_count)
            rcpts = len(new.get("rcpts") or {}) if solo else int(new.get("rcpt_count", 0))
            stored = (label, f"stored: {mail_id}, {rcpts} recipient(s), {new.get('size')} octets")
            if not solo:
                return [stored]
        if not sk.startswith("G#"):
            return []
        label = self.labels.get(mail_id, mail_id[:10])
        if record["eventName"] == "REMOVE":
            return [(label, f"group {sk[2:]}: cleaned up (content and state removed)")]
        out: list[tuple[str, str]] = []
        if solo and record["eventName"] == "INSERT":
            out.append(stored)
        # the state without its index shard ("queued#07")
        st_old = str(old["st"]).split("#", 1)[0] if old.get("st") else None
        st_new = str(new["st"]).split("#", 1)[0] if new.get("st") else None
        before = old.get("rcpts") or {}
        after = new.get("rcpts") or {}
        # a claim: a new lease token (the state index is not touched; before that change
        # a claim moved `st` to inflight)
        token = new.get("lease_token")
        if (token and token != old.get("lease_token")) or (
            st_new == "inflight" and st_new != st_old
        ):
            tries = max((int(r.get("attempts", 0)) for r in after.values()), default=0)
            out.append((label, f"group {sk[2:]}: claimed, attempt {tries + 1}"))
        elif st_new != st_old:
            if st_new == "queued" and st_old is None:
                when = new.get("next_at", "")
                out.append((label, f"group {sk[2:]}: queued, first attempt at {_clock(when)}"))
        for rid, r in sorted(after.items()):
            prev = before.get(rid) or {}
            addr = r.get("address", rid)
            state, prev_state = r.get("state"), prev.get("state")
            reply = _reply(r.get("last_result") or {})
            if state != prev_state and state in ("delivered", "bounced", "deleted"):
                out.append((label, f"{addr}: {state} — {reply}"))
            elif int(r.get("attempts", 0)) > int(prev.get("attempts", 0)) and state == "queued":
                out.append(
                    (
                        label,
                        f"{addr}: deferred — {reply}; next attempt at "
                        f"{_clock(new.get('next_at', ''))}",
                    )
                )
            if r.get("dsn_pending") and not prev.get("dsn_pending"):
                self.dsn_pending.add(mail_id)
                out.append((label, f"{addr}: DSN ({r['dsn_pending']}) to be sent to the sender"))
            elif prev.get("dsn_pending") and not r.get("dsn_pending"):
                out.append((label, f"{addr}: DSN queued"))
        if after and all(
            r.get("state") in ("delivered", "bounced", "deleted") for r in after.values()
        ):
            self.finished.add(mail_id)
        return out


def _reply(result: dict[str, Any]) -> str:
    """``451 4.3.0 text`` once, whether or not the text repeats the enhanced status."""
    code, status = str(result.get("code", "")), str(result.get("status", ""))
    text = str(result.get("text", ""))
    if status and text.startswith(status):
        text = text[len(status) :].lstrip()
    return " ".join(p for p in (code, status, text) if p)[:80]


def _clock(iso: Any) -> str:
    try:
        return datetime.fromisoformat(str(iso)).astimezone(UTC).strftime("%H:%M:%S")
    except ValueError:
        return str(iso)


def submit(api_url: str, token: str, s: Submission, content: bytes) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "sender": SENDER,
        "recipients": [s.recipient],
        "content": base64.b64encode(content).decode(),
    }
    if s.not_before is not None:
        doc["not_before"] = s.not_before.isoformat().replace("+00:00", "Z")
    req = urllib.request.Request(
        f"{api_url}/v1/messages",
        data=json.dumps(doc).encode(),
        headers={"content-type": "application/json", "authorization": f"Bearer {token}"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            answer: dict[str, Any] = json.loads(resp.read())
            return answer
    except urllib.error.HTTPError as e:
        raise SystemExit(f"submission refused: {e.code} {e.read()!r}") from e


def message(label: str, recipient: str) -> bytes:
    return (
        f"From: Demo <{SENDER}>\r\nTo: <{recipient}>\r\nSubject: mailqueue demo: {label}\r\n"
        f"Date: {datetime.now(UTC):%a, %d %b %Y %H:%M:%S +0000}\r\n"
        f"Message-ID: <demo-{label}-{time.time_ns()}@example.org>\r\n"
        "MIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n"
        f"This is the {label} mail of the local demo.\r\n"
    ).encode()


def run(var: Path, timeout: float, out: Any = sys.stdout) -> int:
    sink_events: queue.Queue[SinkEvent] = queue.Queue()
    options = StackOptions(
        var_dir=var,
        api_port=0,
        fast_retries=True,
        sweep_interval=15.0,
        sink_rules=SinkRules.demo(2),
        on_sink_event=sink_events.put,
        progress=lambda step: (out.write(f"  starting the stack {step}\n"), out.flush()),
    )
    with LocalStack(options) as stack:
        t0 = time.monotonic()
        lock = threading.Lock()

        def say(label: str, text: str) -> None:
            with lock:
                out.write(f"  +{time.monotonic() - t0:6.2f}s  {label:<12} {text}\n")
                out.flush()

        out.write(
            "mailqueue demo — the local stack with fast retries "
            f"(first retry after {FAST_RETRIES['MQ_RETRY_MIN_BACKOFF_SECONDS']} s); "
            f"received mail goes to {stack.mail_dir}\n\n"
        )
        import boto3

        assert stack.deployment is not None and stack.deployment.stream_arn
        tracker = Tracker()
        seen: list[dict[str, Any]] = []

        def collect(event: dict[str, Any], ctx: Any) -> None:
            seen.extend(event["Records"])

        watcher = StreamPoller(
            boto3.session.Session().client(
                "dynamodbstreams", endpoint_url=stack.endpoint_url, region_name=REGION
            ),
            stack.deployment.stream_arn,
            collect,
            function_name="demo-watch",
            batch_size=1000,
        )
        now = datetime.now(UTC)
        subs = [
            Submission("deliverable", "alice@example.net"),
            Submission("temporary", "bob@tempfail.demo"),
            Submission("permanent", "nobody@nosuch.demo"),
            Submission("delayed", "carol@example.net", now + timedelta(seconds=DELAY_SECONDS)),
        ]
        submitted = threading.Event()
        failures: list[BaseException] = []

        def submit_all() -> None:
            try:
                for s in subs:
                    answer = submit(stack.api_url, stack.token, s, message(s.label, s.recipient))
                    with lock:
                        s.mail_id = answer["mail_id"]
                        tracker.labels[s.mail_id] = s.label
                    extra = (
                        f", not before {_clock(s.not_before.isoformat())}" if s.not_before else ""
                    )
                    say(s.label, f"submitted to {s.recipient}: 202 {s.mail_id}{extra}")
            except BaseException as e:  # noqa: BLE001 - reported by the main thread
                failures.append(e)
            finally:
                submitted.set()

        # submitting in the background: the transitions show while the mails come in
        sender = threading.Thread(target=submit_all, name="demo-submit")
        sender.start()
        dsn_landed = False
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if failures:
                sender.join()
                out.write(f"\ndemo: submission failed: {failures[0]}\n")
                return 1
            watcher.poll_once()
            with lock:
                lines = tracker.feed(list(seen), submitted.is_set())
            seen.clear()
            for label, text in lines:
                say(label, text)
            while not sink_events.empty():
                ev = sink_events.get()
                who = ", ".join(ev.recipients)
                if ev.kind == "accepted":
                    dsn = ev.mail_from == ""
                    dsn_landed = dsn_landed or dsn
                    where = ev.path.name if ev.path else ""
                    say("sink", f"accepted {'DSN ' if dsn else ''}for {who} → {where}")
                else:
                    say("sink", f"refused {who}: {ev.reply}")
            if (
                submitted.is_set()
                and dsn_landed
                and all(s.mail_id in tracker.finished for s in subs)
            ):
                break
            time.sleep(0.2)
        else:
            sender.join()
            unfinished = [s.label for s in subs if s.mail_id not in tracker.finished]
            out.write(
                f"\ndemo: timed out after {timeout:.0f} s; unfinished: {', '.join(unfinished)}"
                f"{'' if dsn_landed else '; no DSN received'}\n"
            )
            return 1
        sender.join()
        out.write(
            f"\nAll four finished in {time.monotonic() - t0:.1f} s; the DSN and the "
            f"delivered mails are in {stack.mail_dir}. Stopping the stack.\n"
            f"Its event log is {var / 'events'}: make report EVENTS={var / 'events'}"
            f" (the report goes to {var / 'report'})\n"
        )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m mailqueue_local.demo", description=__doc__)
    p.add_argument("--var", type=Path, default=Path("var/demo"), help="state directory")
    p.add_argument("--timeout", type=float, default=120.0, help="give up after this long")
    ns = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    return run(ns.var, ns.timeout)


if __name__ == "__main__":
    raise SystemExit(main())
