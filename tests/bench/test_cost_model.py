"""The cost model (bench/cost.py): its DynamoDB size rules, the template's settings as it
reads them, and a small measured run through the local stack whose request counts per
mail are asserted (they are what docs/benchmarks.md prices)."""

from __future__ import annotations

from collections import Counter
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


def test_the_template_as_the_model_reads_it() -> None:
    tpl = cost.Template.load()
    assert tpl.tracing is False  # X-Ray off unless the Tracing parameter turns it on
    assert tpl.dashboards == 0  # the dashboard is optional, off by default
    assert tpl.architecture == "arm64" and tpl.memory_mb["ingress"] == 1024
    assert tpl.indexes == (cost.Index("by_state", ("st", "due"), "ALL"),)
    assert tpl.schedules["sweeper"] == pytest.approx(730 * 12 + 30, rel=0.01)
    assert tpl.sqs_sources == 3  # delivery, bulk delivery (priority), bounce: idle polls each
    on = cost.Template.load(tracing=True)
    assert on.tracing is True
    # the events source's batch size and window are template parameters (!Ref), read at
    # their defaults: the window chosen from the model (docs/benchmarks.md)
    assert (tpl.events_batch_size, tpl.events_window_s) == (100, 60)

    # the events function sees group items and outbox events, not the counters' writes
    def rec(pk: str, sk: str) -> dict[str, Any]:
        return {"dynamodb": {"Keys": {"pk": {"S": pk}, "sk": {"S": sk}}}}

    seen = cost.delivered_to_events(
        [
            rec("M#1", "G#a.example"),
            rec("M#1", "M"),
            rec("C#0", "rcpt#queued"),
            rec("CP", "0001#ab"),
            rec("E#x", "E"),
        ],
        tpl.events_filters,
    )
    assert [r["dynamodb"]["Keys"]["pk"]["S"] for r in seen] == ["M#1", "E#x"]


@pytest.fixture(scope="module")
def run() -> cost.Run:
    return cost.measure(3)


def test_a_measured_run_counts_each_functions_requests(run: cost.Run) -> None:
    per_mail = {f: {k: n / run.mails for k, n in run.ops(f).items()} for f in run.requests}
    # accepted: the suppression-list check (one BatchGetItem for up to 100 recipients),
    # state (mail item with the content, zlib'd to ~164 B, + group item in one batch),
    # trigger
    assert per_mail["ingress"] == {
        "dynamodb:BatchGetItem": 1,
        "dynamodb:BatchWriteItem": 1,
        "dynamodb:BatchWriteItem:items": 2,
        "sqs:SendMessageBatch": 1,
    }
    # delivered and cleaned: claim, content (from the mail item), result, items (and
    # content) delete; the
    # DKIM key read from Secrets Manager is cached per container (at most one per
    # invocation, not per mail)
    secrets = run.ops("delivery").get("secretsmanager:GetSecretValue", 0)
    assert secrets <= run.invocations["delivery"]
    per_mail["delivery"].pop("secretsmanager:GetSecretValue", None)
    # operator suspensions: one Query, cached 30 s per container (not per mail)
    suspensions = run.ops("delivery").get("dynamodb:Query", 0)
    assert suspensions <= run.invocations["delivery"]
    per_mail["delivery"].pop("dynamodb:Query", None)
    assert per_mail["delivery"] == {
        "dynamodb:UpdateItem": 2,
        "dynamodb:GetItem": 1,
        "dynamodb:BatchWriteItem": 1,
        "dynamodb:BatchWriteItem:items": 2,
    }
    # the events function: one header read of the mail item per mail; counters one
    # Query + one transaction per batch that changes a counter (never a marker per record)
    ev = Counter(run.ops("events"))
    assert ev["dynamodb:GetItem"] == run.mails and "s3:GetObject" not in ev
    assert ev["dynamodb:TransactWriteItems"] == ev["dynamodb:Query"] >= 1
    assert set(ev) <= {
        "dynamodb:GetItem",
        "s3:PutObject",
        "dynamodb:Query",
        "dynamodb:TransactWriteItems",
    }
    # the stream: per mail a mail item and a group item inserted, the group claimed and
    # recorded, both deleted at cleanup
    state = cost.state_records(run.records)
    assert Counter(r["eventName"] for r in state) == {
        "INSERT": 2 * run.mails,
        "MODIFY": 2 * run.mails,
        "REMOVE": 2 * run.mails,
    }
    assert run.invocations["ingress"] == run.mails
    assert run.log_bytes["ingress"] > 0 and run.metrics


def test_the_model_prices_every_line(run: cost.Run) -> None:
    tpl = cost.Template.load()
    lines = cost.model(run, 100_000_000, tpl)
    services = {x.service for x in lines}
    assert {"API Gateway", "S3", "DynamoDB", "SQS", "Lambda", "X-Ray", "CloudWatch"} <= services
    total = sum(x.per_month for x in lines)
    assert 1.0 < total / 100 < 60.0  # $ per million: a sane order of magnitude
    by = {x.item: x.per_month for x in lines}
    # the bench's body lives in the mail item: no content PUT, delivery's read is priced
    assert by["content PUT (+copy/list)"] == pytest.approx(0.0)
    assert by["reads (RRU from items returned)"] >= 100e6 * 0.125 / 1e6
    xray_on = cost.model(run, 1_000_000, cost.Template.load(tracing=True))
    assert sum(x.per_month for x in xray_on if x.service == "X-Ray") > 5.0
    assert sum(x.per_month for x in cost.model(run, 1_000_000, tpl) if x.service == "X-Ray") == 0
    req = cost.path_requests(run, tpl, 100_000_000)
    assert 8.0 < sum(req.values()) < 13.0
