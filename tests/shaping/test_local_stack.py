"""Traffic shaping on the local stack (issue 17, items 8 and 9): `make run` itself (the
real handlers, moto in its own process, SQS pollers) with several delivery invocations
at once, each its own container, against an aiosmtpd peer that enforces limits as a
provider does (421 4.7.28 with Gmail's text above N messages/s or M connections).

* the runtime really overlaps invocations: against a slow peer, several transactions are
  in DATA at once; the delivery log holds every container's metrics and nothing else's;
* the site limit at or below the peer's: no 421 at all, every mail delivered;
* no limit for the site (the packaged default applies, above the peer's): the packaged
  backoff rules (their durations scaled down, as --fast-retries scales the retries) bring
  the 421s under the bound stated in the test, and every mail is still delivered.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from importlib import resources
from pathlib import Path

import pytest
from mailqueue_local.cfn import default_template_path, load_template
from mailqueue_local.stack import (
    LOCAL_CONCURRENCY_DIVISOR,
    parse_concurrency,
    trigger_concurrency,
)
from mailqueue_local.wiring import DELIVERY_MAX_CONCURRENCY, from_template

from bench.shaping import max_in_window
from tests.local.test_run import PYTHON, REPO, Stack, _stop, _wait_ready
from tests.support.smtp_peers import Behaviour, SmtpPeer, smtp_sink


@contextmanager
def local_stack(tmp_path: Path, peer: SmtpPeer, *args: str) -> Iterator[Stack]:
    """`python -m mailqueue_local.run` relaying to `peer`, with extra arguments."""
    stdout, stderr = tmp_path / "stdout.txt", tmp_path / "stderr.txt"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MQ_", "MAILQUEUE_"))}
    python = PYTHON if PYTHON.exists() else Path(sys.executable)
    argv = [str(python), "-m", "mailqueue_local.run", "--var", str(tmp_path / "var")]
    argv += ["--port", "0", "--deploy", "direct", "--relay", f"127.0.0.1:{peer.port}"]
    argv += ["--set", "MQ_DKIM_DOMAINS={}", "--fast-retries", "--strict-limits", *args]
    with open(stdout, "wb") as out, open(stderr, "wb") as err:
        proc = subprocess.Popen(
            argv, cwd=REPO, stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=env
        )
    try:
        running = Stack(proc, _wait_ready(proc, stdout, stderr), stdout, stderr)
        yield running
        assert running.limit_violations() == [], "requests over AWS limits (moto accepted them)"
        assert _stop(proc) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


def submit(stack: Stack, recipient: str, i: int) -> None:
    content = f"From: a@example.org\r\nSubject: shaping {i}\r\n\r\nbody {i}\r\n".encode()
    status, queued = stack.call(
        "POST",
        "/v1/messages",
        {
            "sender": "a@example.org",
            "recipients": [recipient],
            "content": base64.b64encode(content).decode(),
        },
    )
    assert status == 202, queued


def submit_all(stack: Stack, recipients: list[str]) -> None:
    """Every mail due at one instant (`not_before`, past the time the submissions take),
    so the peer meets them as a burst, faster than its limit: the queue, not the
    submission, has to hold the pace. (Submitted one by one from ten clients they arrived
    at ~2.5/s on a 2-core machine, under the peer's 5/s, and a run could see no 421.)"""
    due = datetime.now(UTC) + timedelta(seconds=5 + 0.6 * len(recipients))
    not_before = due.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    for at in range(0, len(recipients), 50):  # the batch route's limit
        chunk = recipients[at : at + 50]
        docs = []
        for i, rcpt in enumerate(chunk, start=at):
            content = f"From: a@example.org\r\nSubject: shaping {i}\r\n\r\nbody {i}\r\n"
            docs.append(
                {
                    "sender": "a@example.org",
                    "recipients": [rcpt],
                    "content": base64.b64encode(content.encode()).decode(),
                    "not_before": not_before,
                }
            )
        status, answer = stack.call("POST", "/v1/messages/batch", {"messages": docs})
        assert status == 207, answer
        assert [r["status"] for r in answer["results"]] == [202] * len(chunk), answer
    assert datetime.now(UTC) < due, "submissions outlasted the instant they were due"


def wait_for(peer: SmtpPeer, n: int, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and len(peer.messages) < n:
        time.sleep(0.2)


def emf_sum(log: Path, name: str) -> float:
    """A metric summed over every EMF record the function printed (all its containers)."""
    total = 0.0
    for line in log.read_text().splitlines():
        if not line.startswith("{") or '"_aws"' not in line:
            continue
        value = json.loads(line).get(name)
        if value is not None:
            total += sum(value) if isinstance(value, list) else value
    return total


# ----------------------------------------------------------------------------- item 8


def test_the_template_sets_delivery_concurrency_and_options_override_it() -> None:
    tpl = load_template(default_template_path())
    default = tpl["Parameters"]["DeliveryMaxConcurrency"]["Default"]
    assert default == DELIVERY_MAX_CONCURRENCY  # the built-in wiring says the same
    tpl["Parameters"]["DeliveryMaxConcurrency"]["Default"] = 7  # read, not assumed
    w = from_template(
        tpl,
        physical={"DeliveryQueue": "q-delivery", "BounceQueue": "q-bounce"},
        configs={"DeliveryFunction": {}, "BounceFunction": {}},
    )
    by_fn = {t.function: t for t in w.sqs}
    # the local stack runs a third of it (2 cores), never less than one
    assert trigger_concurrency(by_fn["delivery"], {}) == round(7 / LOCAL_CONCURRENCY_DIVISOR) == 2
    assert trigger_concurrency(by_fn["bounce"], {}) == 1  # the template sets none
    assert trigger_concurrency(by_fn["delivery"], parse_concurrency(["delivery=3"])) == 3
    assert trigger_concurrency(by_fn["bounce"], parse_concurrency(["2"])) == 2
    for bad in (["delivery=x"], ["=3"], ["delivery=0"]):
        with pytest.raises(ValueError):
            trigger_concurrency(by_fn["delivery"], parse_concurrency(bad))


def test_delivery_invocations_overlap_and_each_container_logs_to_the_function(
    tmp_path: Path,
) -> None:
    """A peer that takes 1.5 s to answer each final dot; mails submitted one by one. One
    invocation sends its batch one group after another, so two transactions in DATA at
    once can only be two invocations running at once."""
    n = 8
    with (
        smtp_sink(Behaviour(data_delay=1.5)) as peer,
        local_stack(tmp_path, peer, "--concurrency", "delivery=4") as stack,
    ):
        # per event source mapping: 4 on each of delivery's queues, bounce as the template
        conc = stack.ready["concurrency"]
        assert set(conc["delivery"]) == {4} and conc["bounce"] == [1]
        for i in range(n):
            submit(stack, f"u{i}@d{i}.example", i)
            time.sleep(0.1)
        wait_for(peer, n, 60)
        assert len(peer.messages) == n
        assert peer.peak_transactions >= 2, "no two delivery invocations ever overlapped"
    logs = tmp_path / "var" / "logs"
    # every container's metrics reached the delivery log (none lost, none mixed up)
    assert emf_sum(logs / "delivery.log", "GroupsAttempted") == n
    assert emf_sum(logs / "delivery.log", "RecipientsDelivered") == n
    for other in ("ingress", "events", "bounce"):
        path = logs / f"{other}.log"
        text = path.read_text() if path.exists() else ""
        assert '"service":"delivery"' not in text.replace(" ", ""), other


# ----------------------------------------------------------------------------- item 9

# the provider: 10 messages in any second, 3 connections at once; 421 4.7.28 above that
PEER = Behaviour(rate_limit=(10, 1.0), max_connections=3)
CONCURRENCY = 5  # delivery invocations at once


def test_site_limit_at_or_below_the_peers_no_421_and_everything_delivered(
    tmp_path: Path,
) -> None:
    """3 connections and 4/s with a burst of 2: GCRA grants at most 2 + 4 + 1 (a block) = 7
    tokens in any second, below the peer's 10; 5 invocations compete for the 3 connection
    slots. The peer timestamps the MAIL FROM, which follows the grant by a connection wait
    and, on a loaded machine, scheduling delays: those can bunch grants from different
    seconds together (seen: 10 in one second with the site at 6/s, burst 2, and at 5/s,
    burst 2, with an 11th refused once in ~20 runs beside another test). So the test
    keeps a margin of 3 below the peer and asserts the peer's own limit in every second
    (never an 11th, which would be a 421) and the site's rate over the run."""
    n = 40
    rules = {
        "version": 1,
        "default": {
            "max_connections": 3,
            "connection_wait": "500ms",
            "rates": [{"messages": 4, "per": "1s", "burst": 2}],
        },
    }
    with (
        smtp_sink(PEER) as peer,
        local_stack(
            tmp_path,
            peer,
            "--concurrency",
            f"delivery={CONCURRENCY}",
            "--set",
            "MQ_SHAPING=true",
            "--set",
            f"MQ_SHAPING_RULES={json.dumps(rules)}",
        ) as stack,
    ):
        submit_all(stack, [f"u{i}@peer.example" for i in range(n)])
        # 10 s at the site's rate; a loaded machine (a fresh-clone CI run beside the crash
        # sweeps) was seen at 16 mails in 60 s with no 421: what is asserted is that none
        # is lost, duplicated or refused, and the rates, not how fast a starved stack is
        wait_for(peer, n, 300)
        assert peer.throttled == 0, (  # not one 421
            f"{peer.throttled} x 421 ({peer.throttled_connections} for connections, peak "
            f"{peer.peak_connections}); most MAIL FROMs in a second "
            f"{max_in_window(peer.accepted_at, 1.0)}"
        )
        assert len(peer.messages) == n
        assert sorted(m.rcpt_tos[0] for m in peer.messages) == sorted(
            f"u{i}@peer.example" for i in range(n)
        )
        assert peer.peak_connections <= 3
        assert max_in_window(peer.accepted_at, 1.0) <= 10
        span = max(peer.accepted_at) - min(peer.accepted_at)
        # GCRA over the run: the burst and one block at most, then 4/s
        assert n - 3 <= 4 * span * 1.05, f"{n} mails in {span:.1f} s: above the site's 4/s"
        print(f"\n{n} mails in {span:.1f} s at the peer ({(n - 1) / span:.1f}/s), 0 x 421")


def _scaled_packaged_backoff(factor: float) -> str:
    """The packaged backoff rules with every suspension divided by `factor` (matching
    unchanged): minutes become seconds, so the test runs in seconds."""
    from mailqueue.outbound.shaping import parse_duration

    doc = json.loads(resources.files("mailqueue").joinpath("data", "backoff.json").read_text())
    for rule in doc["rules"]:
        action = rule["action"]
        if "suspend" in action:
            action["suspend"] = f"{parse_duration(action['suspend'], 'suspend') / factor:g}s"
    return json.dumps(doc)


def test_no_site_limit_the_backoff_rules_bound_the_421s_and_everything_is_delivered(
    tmp_path: Path,
) -> None:
    """The peer takes 5 messages in any second. The site is in no rule, so the packaged
    default (50/s, burst 20, 10 connections) applies, ten times the peer's rate. The
    packaged rule `any-rate-limited` matches the peer's Gmail-style reply: suspend the
    site (1 min, here 2 s) and halve its rate and burst.

    Bound: every 421 is one halving. Five are enough (scale 1/32, floored at 0.05: 2.5/s,
    burst 1, block 1: at most 1 + 2.5 + 1 < 5 in any second, the GCRA guarantee plus one
    block), and after the last one each of the other CONCURRENCY - 1 invocations meets at
    most one more 421 (an invocation stops at its own first 421: it records the
    suspension and drops its token block). So 421s <= 5 + (CONCURRENCY - 1) = 9.

    The peer's connection limit is not the binding one here (it equals CONCURRENCY): a
    connection limit cannot be learnt from replies and has to be configured (test above).
    Without the backoff rules the same load gets far more 421s (seen: see the report).
    """
    n = 30
    bound = 5 + (CONCURRENCY - 1)
    peer_behaviour = Behaviour(rate_limit=(5, 1.0), max_connections=CONCURRENCY)
    with (
        smtp_sink(peer_behaviour) as peer,
        local_stack(
            tmp_path,
            peer,
            "--concurrency",
            f"delivery={CONCURRENCY}",
            "--set",
            "MQ_SHAPING=true",
            "--set",
            f"MQ_BACKOFF_RULES={_scaled_packaged_backoff(30)}",
        ) as stack,
    ):
        t0 = time.monotonic()
        submit_all(stack, [f"u{i}@peer.example" for i in range(n)])
        print(f"\n{n} submitted in {time.monotonic() - t0:.1f} s")
        wait_for(peer, n, 90)
        delivered = {m.rcpt_tos[0] for m in peer.messages}
        print(f"{len(delivered)}/{n} delivered, {peer.throttled} x 421 (bound {bound})")
        assert delivered == {f"u{i}@peer.example" for i in range(n)}
        assert peer.throttled <= bound
        if peer.throttled == 0:
            # no 421 is within the bound, but shows nothing about the halving: on a slow
            # machine delivery may never meet the peer above its 5/s, even in a burst
            pytest.skip("the peer was never met above its limit: the backoff not exercised")
