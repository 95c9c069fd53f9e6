"""The cost model's runner (bench/cost.py): a small measured run through the local stack whose
request counts per mail are asserted (they are what docs/benchmarks.md prices), the botocore
hooks, the CPU of the threads a handler starts, a handler's own memory floor."""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import replace

import pytest

from bench import cost
from bench.model.bill import model, path_requests
from bench.model.dynamodb import item_size
from bench.model.prices import SECONDS_PER_MONTH
from bench.model.report import batch_report
from bench.model.run import Run, with_ingress_of
from bench.model.sqs import delivery_batch
from bench.model.template import Template


@pytest.fixture(scope="module")
def run() -> Run:
    return cost.measure(3)


def test_a_measured_run_counts_each_functions_requests(run: Run) -> None:
    per_mail = {f: {k: n / run.mails for k, n in run.ops(f).items()} for f in run.requests}
    # accepted: the suppression-list check (one BatchGetItem for up to 100 recipients),
    # state (a solo mail: one item with the content, zlib'd to ~300 B), trigger
    assert per_mail["ingress"] == {
        "dynamodb:BatchGetItem": 1,
        "dynamodb:PutItem": 1,
        "sqs:SendMessageBatch": 1,
    }
    # delivered and cleaned: claim (which returns the content), result (the finished
    # item is DynamoDB's TTL's to delete); the
    # DKIM key read from Secrets Manager is cached per container (at most one per
    # invocation, not per mail)
    secrets = run.ops("delivery").get("secretsmanager:GetSecretValue", 0)
    assert secrets <= run.invocations["delivery"]
    per_mail["delivery"].pop("secretsmanager:GetSecretValue", None)
    # operator suspensions: one Query, cached 30 s per container (not per mail)
    suspensions = run.ops("delivery").get("dynamodb:Query", 0)
    assert suspensions <= run.invocations["delivery"]
    per_mail["delivery"].pop("dynamodb:Query", None)
    assert per_mail["delivery"] == {"dynamodb:UpdateItem": 2}
    # the events function: the event log's PUT per batch, nothing else — the Send's
    # headers come from the mail item's INSERT (no GET), no counters (size reads the index)
    ev = Counter(run.ops("events"))
    assert set(ev) == {"s3:PutObject"} and ev["s3:PutObject"] <= run.invocations["events"]
    # the stream: per mail one item inserted, claimed and recorded (its delete is the
    # TTL's, which moto does not run); nothing else writes to the table
    assert Counter(r["eventName"] for r in run.records) == {
        "INSERT": run.mails,
        "MODIFY": 2 * run.mails,
    }
    # the item carries the content the Send's headers are read from, and every image of
    # it stays within one write unit (the result drops the content)
    inserts = [r["dynamodb"]["NewImage"] for r in run.records if r["eventName"] == "INSERT"]
    assert len(inserts) == run.mails and all("body" in i for i in inserts)
    images = [
        img
        for r in run.records
        for img in (r["dynamodb"].get("OldImage"), r["dynamodb"].get("NewImage"))
        if img
    ]
    assert all(item_size(i) <= 1024 for i in images)
    assert run.invocations["ingress"] == run.mails
    assert run.log_bytes["ingress"] > 0 and run.metrics
    # each function's service was built before the measured window (a warm container):
    # its CPU is recorded apart, not spread over the run's few mails
    assert run.init_cpu_s["delivery"] > 0 and run.init_cpu_s["ingress"] > 0


def test_the_model_prices_every_line(run: Run) -> None:
    tpl = Template.load()
    lines = model(run, 100_000_000, tpl)
    services = {x.service for x in lines}
    assert {"API Gateway", "S3", "DynamoDB", "SQS", "Lambda", "X-Ray", "CloudWatch"} <= services
    total = sum(x.per_month for x in lines)
    assert 1.0 < total / 100 < 60.0  # $ per million: a sane order of magnitude
    by = {x.item: x.per_month for x in lines}
    # the bench's body lives in its solo item: no content PUT; reads: the suppression
    # check's (eventually consistent: half a unit per key)
    assert by["content PUT (+copy/list)"] == pytest.approx(0.0)
    assert by["reads (RRU from items returned)"] >= 100e6 * 0.5 * 0.125 / 1e6
    xray_on = model(run, 1_000_000, Template.load(tracing=True))
    assert sum(x.per_month for x in xray_on if x.service == "X-Ray") > 5.0
    assert sum(x.per_month for x in model(run, 1_000_000, tpl) if x.service == "X-Ray") == 0
    # AWS requests per delivered mail, accepted -> cleaned (what docs/benchmarks.md
    # prices): ingress 3, delivery 3 (a solo mail: no read for the content), no header read, no
    # counters; per batch or invocation: the event-log PUT, the SQS event source,
    # delivery's cached reads
    req = path_requests(run, tpl, 100_000_000)
    shared = {  # per batch, invocation or container: their share of a mail
        "s3:PutObject (event log)",
        "sqs:ReceiveMessage + DeleteMessageBatch (event source)",
        "dynamodb:Query",  # delivery: operator suspensions, cached per container
        "secretsmanager:GetSecretValue",  # delivery: the DKIM key, cached per container
    }
    per_mail = {k: v for k, v in req.items() if k not in shared}
    assert per_mail == {
        "dynamodb:BatchGetItem": 1,
        "dynamodb:PutItem": 1,
        "dynamodb:UpdateItem": 2,
        "sqs:SendMessageBatch": 1,
    }
    # 3 records per mail reach the events function (the item's INSERT and 2 MODIFYs), one
    # PUT per batch of 1,000
    assert req["s3:PutObject (event log)"] == pytest.approx(3 / 1000)
    # the SQS event source: a receive and a delete per delivery invocation, at the batch
    # fill of the volume (issue 25: not the run's; the template's 1 s batching window
    # gathers ~9 records a batch at 100 M/month, ~1.4 without one)
    esm = req["sqs:ReceiveMessage + DeleteMessageBatch (event source)"]
    fill = delivery_batch(tpl, 100_000_000 / SECONDS_PER_MONTH)
    assert 5.0 < fill <= 10.0
    assert 1.0 < delivery_batch(replace(tpl, delivery_window_s=0.0), 38.0) < 2.0
    assert esm == pytest.approx(2 / fill)
    assert sum(v for k, v in req.items() if k in per_mail) == 5


@pytest.fixture(scope="module")
def batch_run() -> Run:
    """The 3 mails of `run` through the local stack's batch route, in one call."""
    return cost.measure(3, per_call=3)


def test_a_batch_run_delivers_each_mail_with_one_ingress_invocation(
    run: Run, batch_run: Run
) -> None:
    # measure() returned: every mail of the batch was delivered to the SMTP sink and
    # cleaned up; one API request, one ingress invocation for the three
    assert batch_run.mails_per_call == 3 and batch_run.invocations["ingress"] == 1
    # each mail enqueued as from the single route: the same requests per mail
    assert batch_run.ops("ingress") == run.ops("ingress")
    assert Counter(r["eventName"] for r in batch_run.records) == {
        "INSERT": batch_run.mails,
        "MODIFY": 2 * batch_run.mails,
    }
    # one access-log line for the call instead of one per mail
    assert 0 < batch_run.api_log_bytes < run.api_log_bytes


def test_the_batch_figure_prices_api_requests_per_call(run: Run, batch_run: Run) -> None:
    tpl = Template.load()
    v = 100_000_000
    priced = with_ingress_of(run, batch_run)
    assert priced.invocations["ingress"] == 1 and priced.mails_per_call == 3
    assert priced.invocations["delivery"] == run.invocations["delivery"]  # delivery: run's

    def line(r: Run, item: str) -> float:
        return next(x.per_month for x in model(r, v, tpl) if x.item == item)

    api = "HTTP API requests"
    assert line(run, api) == pytest.approx(v * 1.00 / 1e6)  # one per mail, $1.00/M
    assert line(priced, api) == pytest.approx(line(run, api) / 3)
    # the rest of the submission side is the batch run's: fewer Lambda requests
    lam = "requests"
    assert line(priced, lam) < line(run, lam)
    lines = batch_report(run, batch_run, tpl, more=(50,))
    assert any(x.startswith("| batches of 3 (measured) | 0.333 |") for x in lines)
    assert any(x.startswith("| batches of 50 ") and "| 0.020 |" in x for x in lines)


def test_a_client_kept_from_an_earlier_run_counts_in_the_run_in_progress(
    moto_endpoint: str,
) -> None:
    """A module keeps its client across runs (Powertools' parameters client does): its
    requests belong to the run in progress, not to the run that made the client."""
    from tests.support.aws import REGION, session

    first, second = Run(mails=1), Run(mails=1)
    with cost._Hooks(first).installed():
        client = session().client("sqs", endpoint_url=moto_endpoint, region_name=REGION)
    token = cost._function.set("delivery")
    try:
        with cost._Hooks(second).installed():
            client.list_queues()
        client.list_queues()  # between runs: nobody's
    finally:
        cost._function.reset(token)
    assert second.ops("delivery") == {"sqs:ListQueues": 1}
    assert first.requests == {}


def test_a_handlers_memory_floor_is_its_own_not_its_parents() -> None:
    """Measured in a child interpreter: a big parent (the bench, with moto's client side
    and its runs in memory) must not show up in the child's figure."""
    ballast = bytearray(300 * 2**20)  # the parent at > 300 MB
    ballast[::4096] = b"x" * len(ballast[::4096])  # touched: resident
    rss = cost.handler_rss_mb("events")
    assert 20 < rss < 200, rss
    del ballast


# ---------------------------------------------------------------- issue 40: CPU measured whole
def _burn(seconds: float) -> float:
    """Spin until this thread has used `seconds` of CPU; returns what it used."""

    t0 = time.thread_time()
    x = 0
    while time.thread_time() - t0 < seconds:
        x += 1
    return time.thread_time() - t0


def _lanes_handler(event: object, context: object) -> float:
    """A handler shaped like delivery's: the work on lane threads, the handler waiting."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="delivery-lane") as lanes:
        return sum(lanes.map(_burn, [0.15, 0.15]))


def test_cost_counts_the_cpu_of_the_lanes_a_handler_starts() -> None:
    """The lanes' CPU is the handler's: counting the handler thread alone (before issue
    40) saw a few ms of 300; with the threads it starts counted, all of it."""
    old: dict[str, float] = {}
    used = cost._wrap("delivery", _lanes_handler, old)({}, None)
    assert used >= 0.3
    assert old["delivery"] < 0.1 * used  # the old way: the lanes' work is missing

    cpu: dict[str, float] = {}
    with cost._ThreadCpu(cpu).installed():
        used = cost._wrap("delivery", _lanes_handler, cpu)({}, None)
    assert 0.95 * used <= cpu["delivery"] <= used + 0.1


def test_cost_counts_a_thread_still_running_when_the_handler_returns() -> None:
    """A thread that outlives the invocation is credited what it used so far at the
    handler's return, and the rest when it ends, never twice."""

    go_on = threading.Event()
    used: list[float] = []

    def worker() -> None:
        used.append(_burn(0.1))
        go_on.wait(10)
        used.append(_burn(0.1))

    def handler(event: object, context: object) -> None:
        threading.Thread(target=worker, daemon=True).start()
        while not used:
            threading.Event().wait(0.01)

    cpu: dict[str, float] = {}
    with cost._ThreadCpu(cpu).installed():
        t_before = set(threading.enumerate())
        cost._wrap("events", handler, cpu)({}, None)
        at_return = cpu["events"]
        assert at_return >= 0.09
        go_on.set()
        for t in set(threading.enumerate()) - t_before:
            t.join(10)
    assert sum(used) - 0.02 <= cpu["events"] <= sum(used) + 0.05
    assert cpu["events"] > at_return + 0.08
    assert threading.Thread.start is not None and "tagged" not in threading.Thread.start.__name__
