"""`make demo`: four mails through the local stack, and how each moved through the queue.

Starts its own stack (fast retries, the sink's demo rules), submits over the HTTP API:

* deliverable      → alice@example.net     delivered on the first attempt;
* temporary        → bob@tempfail.demo     451 twice, then delivered (5 s, 10 s backoff);
* permanent        → nobody@nosuch.demo    550: bounced, a DSN goes back to the sender;
* delayed          → carol@example.net     ``not_before`` 15 s ahead, delivered then;

then prints every transition it sees on the table's stream (the same stream the event
writer reads) and every reply of the sink, with the time since the first submission,
until all four are finished and the DSN has landed. Then the feedback a sender gets back
(issue 44), each through the door it uses in production:

* complaint        → dave@example.net      delivered; the receiver's feedback loop sends an
                                            ARF report to its VERP return path;
* unsubscribe      → erin@example.net      bulk, delivered with a one-click link, which is
                                            POSTed as a mail client does (RFC 8058);
* late bounce      → frank@example.net     delivered; the receiver bounces it later (RFC 3464);

the reports go to the stack's receiving listener (the port-25 role) over SMTP. The demo
waits until the event log holds the late `Bounce`, the `Complaint` and the `Subscription`
(what `make report`'s feedback section counts). Then the reputation guard (on, with a
verdict from 5 sends instead of 200): the complaint, 1 in 7 sends, is over SES's 0.5 %, so
the development principal and example.org are paused (``mailqueue reputation show``
prints it); one more mail waits in the queue; ``mailqueue reputation resume`` for both,
and it is delivered. The demo's bounce bands are raised (review 50 %, pause 90 %): two of
its seven mails bounce on purpose, and SES's 10 % would pause it on those before the
complaint arrives. Then it stops the stack.

    .venv/bin/python -m mailqueue_local.demo [--var var/demo] [--timeout 120]
"""

from __future__ import annotations

import argparse
import base64
import gzip
import io
import json
import logging
import queue
import re
import secrets
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TextIO

from boto3.dynamodb.types import TypeDeserializer
from mailqueue.core.events import REPUTATION_EVENT

from mailqueue_local import receivers
from mailqueue_local.runtime import ACCOUNT_ID, REGION
from mailqueue_local.sink import SinkEvent, SinkRules
from mailqueue_local.stack import FAST_RETRIES, LocalStack, StackOptions
from mailqueue_local.streams import StreamPoller

SENDER = "demo@example.org"
PRINCIPAL = f"arn:aws:iam::{ACCOUNT_ID}:user/local-dev"  # the development token's caller
DELAY_SECONDS = 15
BOUNCE_DOMAIN = "bounces.example.org"
UNSUBSCRIBE_URL = "https://mail.example.org"


@dataclass
class Submission:
    label: str
    recipient: str
    not_before: datetime | None = None
    mail_id: str = ""
    priority: str = "transactional"


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
    if s.priority != "transactional":
        doc["priority"] = s.priority
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


def _progress_to(out: TextIO) -> Callable[[str], None]:
    """The stack's start-up steps, each on its own line as it begins (issue 44, friction 3)."""

    def say(step: str) -> None:
        out.write(f"  starting the stack {step}\n")
        out.flush()

    return say


def run(
    var: Path,
    timeout: float,
    out: Any = sys.stdout,
    *,
    settings: Mapping[str, str] | None = None,
    template_parameters: Mapping[str, str] | None = None,
    linger: Callable[[LocalStack], None] | None = None,
) -> int:
    """The demo; `settings`/`template_parameters` go to the stack as well (tests run it with
    event destinations on), `linger` is called with the stack before it stops."""
    sink_events: queue.Queue[SinkEvent] = queue.Queue()
    options = StackOptions(
        var_dir=var,
        api_port=0,
        fast_retries=True,
        sweep_interval=15.0,
        sink_rules=SinkRules.demo(2),
        on_sink_event=sink_events.put,
        progress=_progress_to(out),
        settings={**feedback_settings(), **(settings or {})},
        template_parameters=dict(template_parameters or {}),
        smtpd_receive_port=0,  # the receiving listener: where receivers' reports arrive
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
        delivered: dict[str, SinkEvent] = {}  # recipient -> the sink's acceptance
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
                    for r in ev.recipients:
                        delivered[r] = ev
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
        out.write(f"\nAll four finished in {time.monotonic() - t0:.1f} s. Now the feedback.\n\n")

        def pump() -> None:
            watcher.poll_once()
            with lock:
                lines = tracker.feed(list(seen), True)
            seen.clear()
            for label, text in lines:
                say(label, text)
            while not sink_events.empty():
                ev = sink_events.get()
                if ev.kind == "accepted":
                    for r in ev.recipients:
                        delivered[r] = ev
                    say("sink", f"accepted for {', '.join(ev.recipients)}")

        problem = feedback_phase(stack, tracker, lock, say, pump, delivered, deadline)
        if not problem:
            problem = reputation_phase(stack, tracker, lock, say, pump, delivered, deadline)
        if problem:
            out.write(f"\ndemo: {problem}\n")
            return 1
        if linger is not None:
            linger(stack)
        out.write(
            f"\nAll finished in {time.monotonic() - t0:.1f} s; the DSN and the "
            f"delivered mails are in {stack.mail_dir}. Stopping the stack.\n"
            f"Its event log is {var / 'events'}: make report EVENTS={var / 'events'}"
            f" (the report goes to {var / 'report'})\n"
        )
    return 0


def feedback_settings() -> dict[str, str]:
    """VERP return paths on the bounce domain (so a report names its mail and recipient)
    and one-click unsubscribe links, with keys made for this run."""
    key = base64.b64encode(secrets.token_bytes(32)).decode()
    unsub = base64.b64encode(secrets.token_bytes(32)).decode()
    return {
        "MQ_RETURN_PATH_POLICY": json.dumps({"example.org": BOUNCE_DOMAIN}),
        "MQ_RETURN_PATH_KEYS": json.dumps({"current": "1", "keys": {"1": key}}),
        "MQ_LIST_UNSUBSCRIBE_URL": UNSUBSCRIBE_URL,
        "MQ_LIST_UNSUBSCRIBE_KEYS": json.dumps({"k1": unsub}),
        "MQ_LIST_UNSUBSCRIBE_KID": "k1",
        **reputation_settings(),
    }


def reputation_settings() -> dict[str, str]:
    """The guard on, judging from 5 sends (the demo sends 7), evaluated at every flush; the
    bounce bands raised because the demo bounces 2 of 7 on purpose (the module's
    docstring); delivery re-reads the pauses at once and re-arms held mail after 1 s."""
    thresholds = {
        "min_sends": 5,
        "window_sends": 1000,
        "evaluate_seconds": 0,
        "bucket_seconds": 60,
        "bounce_review": 0.5,
        "bounce_pause": 0.9,
    }
    return {
        "MQ_REPUTATION": "true",
        "MQ_REPUTATION_THRESHOLDS": json.dumps(thresholds),
        "MQ_SUSPENSION_REFRESH_SECONDS": "0",
        "MQ_SUSPENSION_RECHECK_SECONDS": "1",
    }


def feedback_phase(
    stack: LocalStack,
    tracker: Tracker,
    lock: threading.Lock,
    say: Any,
    pump: Any,
    delivered: dict[str, SinkEvent],
    deadline: float,
) -> str | None:
    """Three more mails, and what their receivers and recipient send back; None when the
    event log holds all three reports, else what is missing."""
    subs = [
        Submission("complaint", "dave@example.net"),
        Submission("unsubscribe", "erin@example.net", priority="bulk"),
        Submission("late bounce", "frank@example.net"),
    ]
    for s in subs:
        answer = submit(stack.api_url, stack.token, s, message(s.label, s.recipient))
        with lock:
            s.mail_id = answer["mail_id"]
            tracker.labels[s.mail_id] = s.label
        say(s.label, f"submitted to {s.recipient}: 202 {s.mail_id}")
    while time.monotonic() < deadline and not all(s.recipient in delivered for s in subs):
        pump()
        time.sleep(0.2)
    missing = [s.label for s in subs if s.recipient not in delivered]
    if missing:
        return f"timed out; not delivered: {', '.join(missing)}"
    assert stack.smtpd is not None
    host, port = "127.0.0.1", int(stack.smtpd.readiness()["receive_port"])
    by_label = {s.label: s for s in subs}

    c = by_label["complaint"]
    verp = delivered[c.recipient].mail_from
    reply = receivers.send(host, port, verp, receivers.complaint(verp, c.recipient))
    say("receiver", f"feedback loop: ARF complaint for {c.recipient} to {verp}: {reply[:40]}")

    b = by_label["late bounce"]
    verp = delivered[b.recipient].mail_from
    reply = receivers.send(host, port, verp, receivers.late_bounce(verp, b.recipient))
    say("receiver", f"late bounce (5.1.1) for {b.recipient} to {verp}: {reply[:40]}")

    u = by_label["unsubscribe"]
    path = delivered[u.recipient].path
    link = _one_click_link(path.read_bytes() if path else b"")
    if link is None:
        return "the bulk mail carries no one-click List-Unsubscribe link"
    status = _one_click(stack.api_url + link)
    say("recipient", f"one-click unsubscribe for {u.recipient}: POST {link[:24]}… {status}")

    want = {
        ("Complaint", c.mail_id): "complaint",
        ("Bounce", b.mail_id): "late bounce",
        ("Subscription", u.mail_id): "unsubscribe",
    }
    seen: set[tuple[str, str]] = set()
    while time.monotonic() < deadline:
        pump()
        for doc in _event_log(stack.events_dir):
            key = (doc.get("eventType", ""), doc.get("mail", {}).get("messageId", ""))
            late = doc["eventType"] != "Bounce" or doc.get("mailqueue", {}).get("feedback")
            if key in want and key not in seen and late:
                seen.add(key)
                say(want[key], f"event log: {key[0]} event (make report counts it)")
        if len(seen) == len(want):
            return None
        time.sleep(0.5)
    return "timed out; not in the event log: " + ", ".join(
        v for k, v in want.items() if k not in seen
    )


def _cli(stack: LocalStack, *argv: str) -> tuple[int, str]:
    """`mailqueue …` over the stack's admin API (the development token): exit code, output."""
    from mailqueue.cli import main as cli

    out, err = io.StringIO(), io.StringIO()
    code = cli.main(
        [*argv, f"--api={stack.api_url}", "--no-sign", f"--token={stack.token}"],
        stdout=out,
        stderr=err,
    )
    return code, (out.getvalue() or err.getvalue()).strip()


def reputation_phase(
    stack: LocalStack,
    tracker: Tracker,
    lock: threading.Lock,
    say: Any,
    pump: Any,
    delivered: dict[str, SinkEvent],
    deadline: float,
) -> str | None:
    """The complaint's pause, a mail that waits, the operator's resume and its delivery;
    None when that mail is delivered after the resume, else what went wrong."""
    me = ("--principal", PRINCIPAL)
    doc: dict[str, Any] = {}
    while time.monotonic() < deadline:
        code, text = _cli(stack, "reputation", "show", *me, "--json")
        if code != 0:
            return f"mailqueue reputation show: {text}"
        doc = json.loads(text)
        if doc.get("paused"):
            break
        pump()
        time.sleep(0.3)
    else:
        return f"timed out; the complaint paused nothing: {doc}"
    for who in (me, ("--sender-domain", SENDER.rpartition("@")[2])):
        code, text = _cli(stack, "reputation", "show", *who)
        say("reputation", f"mailqueue reputation show {' '.join(who)}: {text}")
        if code != 0 or "PAUSED" not in text:
            return f"not paused: {text}"

    w = Submission("after pause", "grace@example.net")
    answer = submit(stack.api_url, stack.token, w, message(w.label, w.recipient))
    with lock:
        w.mail_id = answer["mail_id"]
        tracker.labels[w.mail_id] = w.label
    say(w.label, f"submitted to {w.recipient}: 202 {w.mail_id}")
    waited = time.monotonic() + 4  # several delivery polls and re-arms
    while time.monotonic() < waited:
        pump()
        time.sleep(0.2)
    if w.recipient in delivered:
        return "the mail submitted during the pause was delivered before the resume"
    code, text = _cli(stack, "show", w.mail_id, "--json")
    states = sorted(
        {r["state"] for g in json.loads(text)["groups"] for r in g["recipients"]}
        if code == 0
        else {text}
    )
    say(w.label, f"held by the pause: {', '.join(states)} after 4 s, not delivered")

    for who in (me, ("--sender-domain", SENDER.rpartition("@")[2])):
        code, text = _cli(stack, "reputation", "resume", *who)
        say("operator", f"mailqueue reputation resume {' '.join(who)}: {text}")
        if code != 0:
            return f"mailqueue reputation resume failed: {text}"
    while time.monotonic() < deadline:
        pump()
        if w.recipient in delivered:
            say(w.label, f"delivered to {w.recipient} after the resume")
            break
        time.sleep(0.2)
    else:
        return "timed out; the mail held by the pause was not delivered after the resume"
    return _await_reputation_events(stack, say, pump, deadline)


def _await_reputation_events(stack: LocalStack, say: Any, pump: Any, deadline: float) -> str | None:
    """The guard's pause and the operator's resume reach the event log (outbox items the
    stream carries to the events function): the demo does not stop the stack before they
    are there, so the log it hands to `make report` is whole."""
    want = {(a, s) for a in ("paused", "resumed") for s in ("principal", "sender_domain")}
    seen: set[tuple[str, str]] = set()
    while time.monotonic() < deadline:
        pump()
        for doc in _event_log(stack.events_dir):
            if doc.get("eventType") != REPUTATION_EVENT:
                continue
            rep = doc.get("mailqueue", {}).get("reputation", {})
            key = (str(rep.get("action", "")), str(rep.get("scope", "")))
            if key in want and key not in seen:
                seen.add(key)
                say("reputation", f"event log: {REPUTATION_EVENT} {key[0]} ({key[1]})")
        if seen == want:
            return None
        time.sleep(0.5)
    return "timed out; not in the event log: " + ", ".join(
        f"{REPUTATION_EVENT} {a} ({s})" for a, s in sorted(want - seen)
    )


def _one_click_link(eml: bytes) -> str | None:
    """The path of the https link in the delivered mail's List-Unsubscribe field."""
    from email import message_from_bytes

    field_ = " ".join(str(message_from_bytes(eml).get("List-Unsubscribe", "")).split())
    m = re.search(re.escape(UNSUBSCRIBE_URL) + r"(/u/[A-Za-z0-9_.-]+)>", field_)
    return m.group(1) if m else None


def _one_click(url: str) -> int:
    """RFC 8058's POST, as a mail client sends it: no credentials."""
    req = urllib.request.Request(
        url,
        b"List-Unsubscribe=One-Click",
        {"content-type": "application/x-www-form-urlencoded"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        return int(resp.status)


def _event_log(events_dir: Path) -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for f in sorted(events_dir.rglob("*.json.gz")):
        try:
            docs += [json.loads(line) for line in gzip.decompress(f.read_bytes()).splitlines()]
        except (OSError, EOFError, ValueError):
            continue  # being replaced by the mirror: read again on the next round
    return docs


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m mailqueue_local.demo", description=__doc__)
    p.add_argument("--var", type=Path, default=Path("var/demo"), help="state directory")
    p.add_argument("--timeout", type=float, default=240.0, help="give up after this long")
    ns = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    return run(ns.var, ns.timeout)


if __name__ == "__main__":
    raise SystemExit(main())
