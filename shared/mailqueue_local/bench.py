"""End-to-end throughput of the local stack: HTTP submission → SMTP sink, on this machine.

    .venv/bin/python -m mailqueue_local.bench [--mails 200] [--scenario single|fanout|all]

Starts a local stack in this process (the same `LocalStack` as `make run`), then for each
scenario submits ``--mails`` 1 KB mails over the HTTP API from ``--clients`` threads and
waits until the sink has received every expected SMTP transaction:

* ``single``: one recipient per mail (one group, one SMTP transaction);
* ``fanout``: 100 recipients over 10 domains per mail (10 groups, 10 transactions).

Reported per scenario: mails/s and recipients/s end to end (first submission → last
transaction at the sink), the submission rate alone, per-mail latency (p50/p95), the
deepest the delivery queue got (visible + in flight, sampled every 0.25 s), each
function's busy share of the wall time, the process CPU use, and where the process spent
its CPU (a sampling profiler over every thread: moto server, AWS client, handlers, ...).
The recipients' local parts carry the mail's number, so each transaction is matched to
its mail without reading the files. Numbers are for this machine only.
"""

from __future__ import annotations

import argparse
import base64
import json
import logging
import os
import resource
import statistics
import sys
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mailqueue_local.sink import SinkEvent, SinkRules
from mailqueue_local.stack import LocalStack, StackOptions


@dataclass(frozen=True)
class Scenario:
    name: str
    recipients: int
    domains: int

    def envelope(self, i: int) -> list[str]:
        per = self.recipients // self.domains
        return [f"m{i}r{k}@d{k // per}.bench.example" for k in range(self.recipients)]


SCENARIOS = {
    "single": Scenario("single", 1, 1),
    "fanout": Scenario("fanout", 100, 10),
}


def content(i: int, size: int = 1024) -> bytes:
    head = (
        f"From: bench@example.org\r\nTo: undisclosed-recipients:;\r\nSubject: bench {i}\r\n"
        f"Message-ID: <bench-{i}-{time.time_ns()}@example.org>\r\n\r\n"
    ).encode()
    line = b"x" * 76 + b"\r\n"
    body = (line * (size // len(line) + 1))[: max(0, size - len(head) - 2)] + b"\r\n"
    return head + body


class Sampler:
    """A statistical profiler: every few ms, what each thread is doing, by package."""

    BLOCKING = frozenset(
        {
            "wait",
            "select",
            "poll",
            "recv_into",
            "recv",
            "accept",
            "readinto",
            "sleep",
            "_wait_for_tstate_lock",
            "acquire",
            "serve_forever",
            "readline",
        }
    )
    PACKAGES = (
        ("site-packages/moto/", "moto server"),
        ("site-packages/werkzeug/", "moto server"),
        ("site-packages/flask", "moto server"),
        ("site-packages/botocore/", "AWS client (botocore)"),
        ("site-packages/boto3/", "AWS client (botocore)"),
        ("site-packages/urllib3/", "AWS client (botocore)"),
        ("site-packages/aws_lambda_powertools/", "Powertools"),
        ("site-packages/aiosmtpd/", "SMTP sink"),
        ("site-packages/dns/", "mailqueue core"),
        ("/functions/", "handlers"),
        ("/mailqueue_local/", "local runtime"),
        ("/mailqueue/", "mailqueue core"),
    )

    def __init__(self, interval: float = 0.005) -> None:
        self.interval = interval
        self.busy: Counter[str] = Counter()
        self.samples = 0
        self._stop = threading.Event()
        self._driver = threading.get_ident()
        self._thread = threading.Thread(target=self._run, name="bench-sampler", daemon=True)

    def _classify(self, frame: Any) -> str | None:
        if frame.f_code.co_name in self.BLOCKING:
            return None
        f = frame
        while f is not None:
            path = f.f_code.co_filename
            for needle, label in self.PACKAGES:
                if needle in path:
                    return label
            f = f.f_back
        return "other (stdlib)"

    def _run(self) -> None:
        # the load generator (this thread, the driver, the HTTP clients) is not the stack
        skip = {threading.get_ident(), self._driver}
        names = {t.ident: t.name for t in threading.enumerate()}
        while not self._stop.wait(self.interval):
            self.samples += 1
            for ident, frame in sys._current_frames().items():
                if ident not in names:
                    names = {t.ident: t.name for t in threading.enumerate()}
                if ident not in skip and not names.get(ident, "").startswith("bench-"):
                    label = self._classify(frame)
                    if label is not None:
                        self.busy[label] += 1

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()

    def shares(self) -> list[tuple[str, float]]:
        total = sum(self.busy.values()) or 1
        return [(k, v / total) for k, v in self.busy.most_common()]


@dataclass
class Result:
    scenario: Scenario
    mails: int
    submit_seconds: float
    total_seconds: float
    latencies: list[float]
    max_depth: int
    cpu_seconds: float
    moto_cpu_seconds: float | None
    busy: dict[str, float]
    profile: list[tuple[str, float]]
    errors: list[str] = field(default_factory=list)

    @property
    def mails_per_second(self) -> float:
        return self.mails / self.total_seconds

    def to_json(self) -> dict[str, Any]:
        lat = sorted(self.latencies)
        return {
            "scenario": self.scenario.name,
            "recipients_per_mail": self.scenario.recipients,
            "domains_per_mail": self.scenario.domains,
            "mails": self.mails,
            "seconds": round(self.total_seconds, 2),
            "mails_per_second": round(self.mails_per_second, 2),
            "recipients_per_second": round(self.mails_per_second * self.scenario.recipients, 1),
            "submit_mails_per_second": round(self.mails / self.submit_seconds, 2),
            "latency_p50_s": round(statistics.median(lat), 2) if lat else None,
            "latency_p95_s": round(lat[int(0.95 * (len(lat) - 1))], 2) if lat else None,
            "max_delivery_queue_depth": self.max_depth,
            "process_cpu_share": round(self.cpu_seconds / self.total_seconds, 2),
            "moto_cpu_share": (
                round(self.moto_cpu_seconds / self.total_seconds, 2)
                if self.moto_cpu_seconds is not None
                else None
            ),
            "function_busy_share": {
                k: round(v / self.total_seconds, 2) for k, v in self.busy.items()
            },
            "cpu_profile": {k: round(v, 3) for k, v in self.profile},
            "errors": self.errors,
        }


def _cpu_of(pid: int | None) -> float | None:
    """CPU seconds (user + system) a process has used so far, from /proc."""
    if pid is None:
        return None
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def _post(api: str, token: str, doc: dict[str, Any]) -> int:
    req = urllib.request.Request(
        f"{api}/v1/messages",
        data=json.dumps(doc).encode(),
        headers={"content-type": "application/json", "authorization": f"Bearer {token}"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=60) as resp:
        return int(resp.status)


def run_scenario(
    stack: LocalStack,
    sc: Scenario,
    mails: int,
    clients: int,
    delivered: dict[str, float],
    lock: threading.Lock,
    timeout: float,
) -> Result:
    expected = {f"m{i}": sc.domains for i in range(mails)}
    got: Counter[str] = Counter()
    done_at: dict[str, float] = {}
    submitted_at: dict[str, float] = {}
    with lock:
        delivered.clear()
    depth = 0
    errors: list[str] = []
    sqs = stack.clients.sqs
    assert stack.deployment is not None
    queue = stack.deployment.delivery_queue_url

    def sample_depth() -> int:
        a = sqs.get_queue_attributes(
            QueueUrl=queue,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        return int(a["ApproximateNumberOfMessages"]) + int(
            a["ApproximateNumberOfMessagesNotVisible"]
        )

    def submit(i: int) -> None:
        doc = {
            "sender": "bench@example.org",
            "recipients": sc.envelope(i),
            "content": base64.b64encode(content(i)).decode(),
        }
        submitted_at[f"m{i}"] = time.monotonic()
        status = _post(stack.api_url, stack.token, doc)
        if status != 202:
            errors.append(f"mail {i}: HTTP {status}")

    for f in stack.functions.values():
        f.busy_seconds = 0.0
    moto0 = _cpu_of(stack.moto_pid)
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.monotonic()
    with Sampler() as sampler:
        with ThreadPoolExecutor(clients, thread_name_prefix="bench-client") as pool:
            futures = [pool.submit(submit, i) for i in range(mails)]
            while not all(fu.done() for fu in futures):
                depth = max(depth, sample_depth())
                time.sleep(0.25)
            for fu in futures:
                if fu.exception() is not None:
                    errors.append(repr(fu.exception()))
        submit_seconds = time.monotonic() - t0
        deadline = t0 + timeout
        while time.monotonic() < deadline:
            with lock:
                for rcpt, at in delivered.items():
                    mail = rcpt.split("r", 1)[0]
                    got[mail] += 1
                    if got[mail] == expected.get(mail):
                        done_at[mail] = at
                delivered.clear()
            if len(done_at) == mails:
                break
            depth = max(depth, sample_depth())
            time.sleep(0.25)
        else:
            errors.append(f"timed out: {mails - len(done_at)} mail(s) not delivered")
    total = max(done_at.values(), default=time.monotonic()) - t0
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    moto1 = _cpu_of(stack.moto_pid)
    moto_cpu = moto1 - moto0 if moto0 is not None and moto1 is not None else None
    return Result(
        scenario=sc,
        mails=mails,
        submit_seconds=submit_seconds,
        total_seconds=total,
        latencies=[done_at[m] - submitted_at[m] for m in done_at],
        max_depth=depth,
        cpu_seconds=cpu,
        moto_cpu_seconds=moto_cpu,
        busy={n: f.busy_seconds for n, f in stack.functions.items() if f.busy_seconds > 0.05},
        profile=sampler.shares(),
        errors=errors,
    )


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m mailqueue_local.bench", description=__doc__)
    p.add_argument("--mails", type=int, default=200, help="mails per scenario")
    p.add_argument("--fanout-mails", type=int, default=20, help="mails for the fanout scenario")
    p.add_argument("--scenario", choices=("single", "fanout", "all"), default="all")
    p.add_argument("--clients", type=int, default=4, help="concurrent HTTP clients")
    p.add_argument("--var", type=Path, default=Path("var/bench"))
    p.add_argument("--deploy", choices=("auto", "cloudformation", "direct"), default="auto")
    p.add_argument("--timeout", type=float, default=600.0, help="per scenario")
    p.add_argument("--json", action="store_true", help="one JSON object per scenario")
    p.add_argument(
        "--no-moto-patch",
        action="store_true",
        help="moto's own TransactWriteItems (copies the whole table per transaction)",
    )
    ns = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

    delivered: dict[str, float] = {}
    lock = threading.Lock()

    def on_sink(ev: SinkEvent) -> None:
        if ev.kind != "accepted":
            return
        now = time.monotonic()
        with lock:
            for rcpt in ev.recipients:
                if rcpt.endswith(".bench.example"):
                    delivered[rcpt.split("@", 1)[0] + "@" + rcpt.split("@", 1)[1]] = now

    options = StackOptions(
        var_dir=ns.var,
        api_port=0,
        sink_rules=SinkRules(),
        on_sink_event=on_sink,
        deploy=ns.deploy,
        moto_patch=not ns.no_moto_patch,
    )
    names = ["single", "fanout"] if ns.scenario == "all" else [ns.scenario]
    results = []
    with LocalStack(options) as stack:
        for name in names:
            sc = SCENARIOS[name]
            mails = ns.mails if name == "single" else ns.fanout_mails
            r = run_scenario(stack, sc, mails, ns.clients, delivered, lock, ns.timeout)
            results.append(r)
            doc = r.to_json()
            if ns.json:
                print(json.dumps(doc), flush=True)
            else:
                print(_human(doc), flush=True)
    return 0 if all(not r.errors for r in results) else 1


def _human(d: dict[str, Any]) -> str:
    busy = ", ".join(f"{k} {v:.0%}" for k, v in d["function_busy_share"].items())
    prof = ", ".join(f"{k} {v:.0%}" for k, v in d["cpu_profile"].items() if v >= 0.02)
    return (
        f"{d['scenario']}: {d['mails']} mails × {d['recipients_per_mail']} recipient(s) "
        f"over {d['domains_per_mail']} domain(s) in {d['seconds']} s\n"
        f"  end to end   {d['mails_per_second']} mails/s, "
        f"{d['recipients_per_second']} recipients/s\n"
        f"  submission   {d['submit_mails_per_second']} mails/s (HTTP → 202)\n"
        f"  latency      p50 {d['latency_p50_s']} s, p95 {d['latency_p95_s']} s "
        "(202 → at the sink)\n"
        f"  queue depth  at most {d['max_delivery_queue_depth']} delivery triggers\n"
        f"  busy         {busy}\n"
        f"  CPU          this process {d['process_cpu_share']:.0%} of one core, moto "
        + (f"{d['moto_cpu_share']:.0%}" if d["moto_cpu_share"] is not None else "(in process)")
        + "\n"
        f"  CPU samples  {prof}\n" + (f"  ERRORS       {d['errors']}\n" if d["errors"] else "")
    )


if __name__ == "__main__":
    raise SystemExit(main())
