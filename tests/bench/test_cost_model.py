"""The cost model (bench/cost.py): its DynamoDB size rules, the template's settings as it
reads them, and a small measured run through the local stack whose request counts per
mail are asserted (they are what docs/benchmarks.md prices)."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import replace
from typing import Any

import pytest
from boto3.dynamodb.types import TypeSerializer

from bench import cost

_ser = TypeSerializer()


def img(**attrs: Any) -> dict[str, Any]:
    return {k: _ser.serialize(v) for k, v in attrs.items()}


def test_item_sizes_follow_dynamodbs_rules() -> None:
    # names count, strings by UTF-8 length, numbers ~1 byte per 2 significant digits + 1
    assert cost.item_size(img(pk="M#1")) == 2 + 3
    assert cost.item_size(img(n=12345)) == 1 + 4
    assert cost.item_size(img(s="é")) == 1 + 2
    # a map: 3 bytes + per element 1 byte + its name and value
    assert cost.item_size(img(m={"a": "xy"})) == 1 + 3 + 1 + 1 + 2
    assert cost.units(1024, 1024) == 1 and cost.units(1025, 1024) == 2


def test_write_units_on_the_table_and_the_index() -> None:
    ix = (cost.Index("by_state", ("st", "due"), "ALL"),)
    big = "x" * 1500
    queued = img(pk="M#1", sk="G#a", st="queued", due=1, body=big)
    inflight = img(pk="M#1", sk="G#a", st="inflight", due=2, body=big)
    done = img(pk="M#1", sk="G#a", body=big)

    def rec(old: Any, new: Any) -> dict[str, Any]:
        return {"dynamodb": {"OldImage": old, "NewImage": new}}

    assert cost.write_units(rec(None, queued), ix) == {"table": 2, "by_state": 2}
    # an index key change is a delete and a put on the index
    assert cost.write_units(rec(queued, inflight), ix) == {"table": 2, "by_state": 4}
    # leaving the index (st removed): a delete there
    assert cost.write_units(rec(inflight, done), ix) == {"table": 2, "by_state": 2}
    assert cost.write_units(rec(done, None), ix) == {"table": 2}
    assert cost.write_units(rec(done, None), ix, transactional=True) == {"table": 4}
    ttl = {
        "dynamodb": {"OldImage": done},
        "userIdentity": {"principalId": "dynamodb.amazonaws.com"},
    }
    assert cost.write_units(ttl, ix) == {}


def test_a_write_that_changes_nothing_projected_writes_no_index_entry() -> None:
    """A claim (the lease on the item, the keys unchanged): under KEYS_ONLY the entry is
    not written ("If a write to a table does not require a global secondary index update,
    then no write capacity is consumed from the index"); under ALL it is rewritten."""
    big = "x" * 1500
    queued = img(pk="M#1", sk="G#a", st="queued#07", due=1, body=big)
    claimed = img(pk="M#1", sk="G#a", st="queued#07", due=1, body=big, lease_ms=9, lease_token="t")
    moved = img(pk="M#1", sk="G#a", st="queued#07", due=5, body=big)

    def rec(old: Any, new: Any) -> dict[str, Any]:
        return {"dynamodb": {"OldImage": old, "NewImage": new}}

    keys = (cost.Index("by_state", ("st", "due"), "KEYS_ONLY"),)
    assert cost.write_units(rec(queued, claimed), keys) == {"table": 2}
    assert cost.write_units(rec(claimed, moved), keys) == {"table": 2, "by_state": 2}
    whole = (cost.Index("by_state", ("st", "due"), "ALL"),)
    assert cost.write_units(rec(queued, claimed), whole) == {"table": 2, "by_state": 2}
    assert cost.write_units(rec(queued, queued), whole) == {"table": 2}


def test_the_template_as_the_model_reads_it() -> None:
    tpl = cost.Template.load()
    assert tpl.tracing is False  # X-Ray off unless the Tracing parameter turns it on
    assert tpl.dashboards == 0  # the dashboard is optional, off by default
    assert tpl.architecture == "arm64"
    # memory sizes chosen by the sweep (docs/benchmarks.md, "Lambda memory sizes")
    assert tpl.memory_mb == {
        "ingress": 512,
        "delivery": 512,
        "bounce": 512,
        "events": 1769,  # by throughput (issue 40: the stream at 10,000 mails/s)
        "sweeper": 256,
        "admin": 256,
    }
    # the projection is a parameter (StateIndexProjection): its default, keys only
    assert tpl.indexes == (cost.Index("by_state", ("st", "due"), "KEYS_ONLY"),)
    assert tpl.schedules["sweeper"] == pytest.approx(730 * 12 + 30, rel=0.01)
    assert tpl.sqs_sources == 3  # delivery, bulk delivery (priority), bounce: idle polls each
    on = cost.Template.load(tracing=True)
    assert on.tracing is True
    # the events source's batch size and window are template parameters (!Ref), read at
    # their defaults: the window chosen from the model (docs/benchmarks.md)
    assert (tpl.events_batch_size, tpl.events_window_s) == (1000, 60)

    # the events function sees group items, outbox events and a mail item's INSERT (its
    # headers), not the mail item's later writes nor other items
    def rec(pk: str, sk: str, name: str = "MODIFY") -> dict[str, Any]:
        return {"eventName": name, "dynamodb": {"Keys": {"pk": {"S": pk}, "sk": {"S": sk}}}}

    # (a group's REMOVE neither: it derives no event, and a solo mail's TTL delete is one)
    seen = cost.delivered_to_events(
        [
            rec("M#1", "G#a.example"),
            rec("M#1", "G#a.example", "REMOVE"),
            rec("M#1", "M", "INSERT"),
            rec("M#1", "M", "REMOVE"),
            rec("M#1", "M"),
            rec("J#1", "J", "INSERT"),
            rec("E#x", "E", "INSERT"),
        ],
        tpl.events_filters,
    )
    assert [(r["dynamodb"]["Keys"]["sk"]["S"], r["eventName"]) for r in seen] == [
        ("G#a.example", "MODIFY"),
        ("M", "INSERT"),
        ("E", "INSERT"),
    ]


def test_lambda_cpu_scales_with_memory() -> None:
    """Below one vCPU (1,769 MB) the CPU part of a duration stretches by 1769/MB; the
    waits for AWS and SMTP do not."""
    run = cost.Run(mails=10)
    run.cpu_s["events"] = 0.1
    run.invocations["events"] = 2
    run.requests["events"] = Counter({"s3:PutObject": 2})
    wait = 2 * 0.020 + 2 * 0.0005
    assert cost.lambda_seconds(run, "events", 1769) == pytest.approx(0.1 + wait)
    assert cost.lambda_seconds(run, "events", 3538) == pytest.approx(0.1 + wait)
    assert cost.lambda_seconds(run, "events", 128) == pytest.approx(0.1 * 1769 / 128 + wait)
    assert cost.cpu_factor(512) == pytest.approx(1769 / 512)


def test_the_memory_sweep_chooses_the_smallest_size_that_fits() -> None:
    tpl = cost.Template.load()
    run = cost.Run(mails=10)
    for f in ("ingress", "delivery", "events"):
        run.cpu_s[f] = 0.05
        run.invocations[f] = 10
        run.requests[f] = Counter({"dynamodb:BatchWriteItem": 10})
    for i in range(10):  # a group item inserted per mail
        keys = {"pk": {"S": f"M#{i}"}, "sk": {"S": "G#a.example"}}
        run.records.append({"eventName": "INSERT", "dynamodb": {"Keys": keys, "NewImage": keys}})
    rss = dict.fromkeys(cost.FUNCTIONS, 60.0)
    sweep = cost.memory_sweep(run, tpl, rss)
    # cost rises with memory (the CPU part costs the same GB-s below one vCPU)
    costs = [sweep["ingress"]["cost"][m] for m in cost.MEMORY_SIZES]
    assert costs == sorted(costs) and costs[0] < costs[-1]
    # 60 MB + 3 x 40 MiB held by ingress: x1.5 is 270 MB -> 512; events holds header
    # sections only, but is sized for the stream's throughput (one vCPU, issue 40), and
    # its cost hardly moves with memory (CPU per record, waits per batch); the sweeper and
    # admin are not chosen by cost
    assert sweep["ingress"]["peak_mb"] == pytest.approx(180.0)
    assert sweep["ingress"]["chosen"] == 512
    assert sweep["events"]["chosen"] == 1769
    ev = sweep["events"]["cost"]
    assert ev[1769] - ev[128] < 0.05 * max(ev[128], 1e-9) + 0.01
    assert sweep["sweeper"]["chosen"] == 256 and sweep["admin"]["chosen"] == 256
    # the template holds the chosen sizes
    assert {f: r["chosen"] for f, r in sweep.items()} == tpl.memory_mb


@pytest.fixture(scope="module")
def run() -> cost.Run:
    return cost.measure(3)


def test_a_measured_run_counts_each_functions_requests(run: cost.Run) -> None:
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
    assert all(cost.item_size(i) <= 1024 for i in images)
    assert run.invocations["ingress"] == run.mails
    assert run.log_bytes["ingress"] > 0 and run.metrics
    # each function's service was built before the measured window (a warm container):
    # its CPU is recorded apart, not spread over the run's few mails
    assert run.init_cpu_s["delivery"] > 0 and run.init_cpu_s["ingress"] > 0


def test_the_model_prices_every_line(run: cost.Run) -> None:
    tpl = cost.Template.load()
    lines = cost.model(run, 100_000_000, tpl)
    services = {x.service for x in lines}
    assert {"API Gateway", "S3", "DynamoDB", "SQS", "Lambda", "X-Ray", "CloudWatch"} <= services
    total = sum(x.per_month for x in lines)
    assert 1.0 < total / 100 < 60.0  # $ per million: a sane order of magnitude
    by = {x.item: x.per_month for x in lines}
    # the bench's body lives in its solo item: no content PUT; reads: the suppression
    # check's (eventually consistent: half a unit per key)
    assert by["content PUT (+copy/list)"] == pytest.approx(0.0)
    assert by["reads (RRU from items returned)"] >= 100e6 * 0.5 * 0.125 / 1e6
    xray_on = cost.model(run, 1_000_000, cost.Template.load(tracing=True))
    assert sum(x.per_month for x in xray_on if x.service == "X-Ray") > 5.0
    assert sum(x.per_month for x in cost.model(run, 1_000_000, tpl) if x.service == "X-Ray") == 0
    # AWS requests per delivered mail, accepted -> cleaned (what docs/benchmarks.md
    # prices): ingress 3, delivery 3 (a solo mail: no read for the content), no header read, no
    # counters; per batch or invocation: the event-log PUT, the SQS event source,
    # delivery's cached reads
    req = cost.path_requests(run, tpl, 100_000_000)
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
    fill = cost.delivery_batch(tpl, 100_000_000 / cost.SECONDS_PER_MONTH)
    assert 5.0 < fill <= 10.0
    assert 1.0 < cost.delivery_batch(replace(tpl, delivery_window_s=0.0), 38.0) < 2.0
    assert esm == pytest.approx(2 / fill)
    assert sum(v for k, v in req.items() if k in per_mail) == 5


@pytest.fixture(scope="module")
def batch_run() -> cost.Run:
    """The 3 mails of `run` through the local stack's batch route, in one call."""
    return cost.measure(3, per_call=3)


def test_a_batch_run_delivers_each_mail_with_one_ingress_invocation(
    run: cost.Run, batch_run: cost.Run
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


def test_the_batch_figure_prices_api_requests_per_call(run: cost.Run, batch_run: cost.Run) -> None:
    tpl = cost.Template.load()
    v = 100_000_000
    priced = cost.with_ingress_of(run, batch_run)
    assert priced.invocations["ingress"] == 1 and priced.mails_per_call == 3
    assert priced.invocations["delivery"] == run.invocations["delivery"]  # delivery: run's

    def line(r: cost.Run, item: str) -> float:
        return next(x.per_month for x in cost.model(r, v, tpl) if x.item == item)

    api = "HTTP API requests"
    assert line(run, api) == pytest.approx(v * 1.00 / 1e6)  # one per mail, $1.00/M
    assert line(priced, api) == pytest.approx(line(run, api) / 3)
    # the rest of the submission side is the batch run's: fewer Lambda requests
    lam = "requests"
    assert line(priced, lam) < line(run, lam)
    lines = cost.batch_report(run, batch_run, tpl, more=(50,))
    assert any(x.startswith("| batches of 3 (measured) | 0.333 |") for x in lines)
    assert any(x.startswith("| batches of 50 ") and "| 0.020 |" in x for x in lines)


def test_secrets_are_priced_per_container_and_cache_period_not_per_mail() -> None:
    """A warm delivery container reads each DKIM key once per 5 minutes: at volume the
    share per mail is what the containers alive at that volume read, not the run's rate,
    and not all of the template's 90 (a light load keeps a few warm)."""
    tpl = cost.Template.load()
    assert tpl.delivery_containers == 90  # DeliveryMaxConcurrency 60 + bulk 30
    run = cost.Run(mails=20)
    run.invocations["delivery"] = 4
    run.requests["delivery"] = Counter({"secretsmanager:GetSecretValue": 2})
    for i in range(20):  # a group item inserted per mail (the model needs a stream)
        keys = {"pk": {"S": f"M#{i}"}, "sk": {"S": "G#a.example"}}
        run.records.append({"eventName": "INSERT", "dynamodb": {"Keys": keys, "NewImage": keys}})
    f, op = "delivery", "secretsmanager:GetSecretValue"
    # a run of 20 mails: its rate (2 reads per 20 mails) is what one container reads
    assert cost.per_container_share(run, tpl, 20, f, op) == pytest.approx(0.1)
    # 1 M a month keeps one container warm: 2 keys every 5 minutes, all month
    assert cost.warm_containers(run, tpl, 1_000_000) == 1
    one = 2 * cost.SECONDS_PER_MONTH / 300 / 1_000_000
    assert cost.per_container_share(run, tpl, 1_000_000, f, op) == pytest.approx(one)
    # delivery busy ~0.13 s a mail (0.1 s of CPU at its memory size, the rest AWS's and
    # the relay's answers): at 100 M a month ~5 busy at once on average, so
    # 5 + 3 x sqrt(5) -> 12 containers stay warm, not 90
    run.cpu_s["delivery"] = 2.0 / cost.cpu_factor(tpl.memory_mb["delivery"])
    busy = cost.lambda_seconds(run, f, tpl.memory_mb["delivery"]) / 20
    assert 0.1 <= busy <= 0.2
    mean = busy * 100_000_000 / cost.SECONDS_PER_MONTH
    alive = cost.warm_containers(run, tpl, 100_000_000)
    assert alive == math.ceil(mean + 3 * math.sqrt(mean)) and 8 <= alive <= 16
    most = alive * 2 * cost.SECONDS_PER_MONTH / 300 / 100_000_000
    assert cost.per_container_share(run, tpl, 100_000_000, f, op) == pytest.approx(most)
    assert cost.path_requests(run, tpl, 100_000_000)[op] == pytest.approx(most)
    lines = {x.item: x.per_month for x in cost.model(run, 100_000_000, tpl)}
    name = f"GetSecretValue (per warm container and 5 min: {alive} containers)"
    assert lines[name] == pytest.approx(most * 100_000_000 * 0.05 / 1e4)
    assert lines["secrets stored (2 DKIM keys read in the run)"] == pytest.approx(0.80)
    # a slow delivery at a huge volume is held to the template's concurrency
    run.cpu_s["delivery"] = 2000.0
    assert cost.warm_containers(run, tpl, 1_000_000_000) == tpl.delivery_containers


def test_a_client_kept_from_an_earlier_run_counts_in_the_run_in_progress(
    moto_endpoint: str,
) -> None:
    """A module keeps its client across runs (Powertools' parameters client does): its
    requests belong to the run in progress, not to the run that made the client."""
    from tests.support.aws import REGION, session

    first, second = cost.Run(mails=1), cost.Run(mails=1)
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


def test_lambdas_own_log_lines_are_priced_only_where_the_template_sends_them() -> None:
    """START/END/REPORT are INFO-level system lines: with the JSON log format and
    SystemLogLevel WARN (the template's default) Lambda does not send them; INFO does."""
    from dataclasses import replace

    tpl = cost.Template.load()
    assert tpl.platform_logs == frozenset()  # every function: JSON, WARN by default
    run = cost.Run(mails=20)
    run.invocations.update({"ingress": 20, "delivery": 4})
    for i in range(20):
        keys = {"pk": {"S": f"M#{i}"}, "sk": {"S": "G#a.example"}}
        run.records.append({"eventName": "INSERT", "dynamodb": {"Keys": keys, "NewImage": keys}})
    name = "Logs ingestion"

    def logs(t: cost.Template) -> float:
        return sum(x.per_month for x in cost.model(run, 10_000_000, t) if x.item.startswith(name))

    warn, info = logs(tpl), logs(replace(tpl, platform_logs=frozenset(cost.FUNCTIONS)))
    line = cost.ASSUMPTIONS["platform_log_bytes_per_invocation"]
    line += 3 * cost.ASSUMPTIONS["cw_log_event_overhead_bytes"]
    # at least the ingress invocations' lines (one per mail: 10 M a month)
    least = 10_000_000 * line / 2**30 * 0.50
    assert info - warn >= least * 0.99, (info, warn, least)


def test_lagging_index_entries_are_priced_as_the_sweeps_that_read_them() -> None:
    """A reschedule that kept its index entry (same `st` and `due`, a later `next_at`):
    each sweep until `next_at` reads the item back. A retry is priced at the policy's
    first retry (300 s: one sweep), whatever the run's fast retry; a shaping re-arm of
    60 s at its own lag (a fifth of a sweep); an entry that moved costs no such read."""

    def mod(old: Any, new: Any) -> dict[str, Any]:
        return {"eventName": "MODIFY", "dynamodb": {"OldImage": old, "NewImage": new}}

    base = {"pk": "M#1", "sk": "G#a", "st": "queued#07", "due": 1_800_000_000_000}
    at = "2027-01-15T08:00:00.000Z"  # due's own time
    claimed = img(**base, next_at=at, lease_ms=9, history=[])
    retried = img(**base, next_at="2027-01-15T08:00:05.000Z", history=[{"n": 1}])
    postponed = img(**base, next_at="2027-01-15T08:01:00.000Z", history=[])
    moved = img(**{**base, "due": 1_800_000_005_000}, next_at="2027-01-15T08:00:05.000Z")
    assert cost.lagging_entry_reads([mod(claimed, retried)]) == pytest.approx(1.0)
    assert cost.lagging_entry_reads([mod(claimed, postponed)]) == pytest.approx(0.2)
    assert cost.lagging_entry_reads([mod(claimed, moved)]) == 0.0
    # a claim (the lease on the item, next_at unchanged) is no lag
    assert cost.lagging_entry_reads([mod(img(**base, next_at=at), claimed)]) == 0.0
    # never more sweeps than the slack allows: 900 s / 300 s
    far = img(**base, next_at="2027-01-15T09:00:00.000Z", history=[{"n": 1}])
    assert cost.lagging_entry_reads([mod(claimed, far)]) == pytest.approx(3.0)
