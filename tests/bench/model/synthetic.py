"""Synthetic runs and items whose figures are known, shared by the model tests."""

from __future__ import annotations

from collections import Counter
from typing import Any

from boto3.dynamodb.types import TypeSerializer

from bench.model.dynamodb import Index
from bench.model.prices import Line
from bench.model.run import Run
from bench.model.template import FUNCTIONS, Template

_ser = TypeSerializer()


def img(**attrs: Any) -> dict[str, Any]:
    return {k: _ser.serialize(v) for k, v in attrs.items()}


IX = Index("by_state", ("st", "due"), "ALL")


TPL = Template(
    memory_mb={f: 512 for f in FUNCTIONS},
    architecture="arm64",
    tracing=False,
    alarms=0,
    dashboards=0,
    schedules={},
    log_retention_days=30,
    events_batch_size=100,
    events_window_s=5,
    events_filters=[],
    delivery_batch_size=10,
    indexes=(IX,),
)


def _item(pk: str, st: str | None, pad: int = 100) -> dict[str, Any]:
    item: dict[str, Any] = {"pk": {"S": pk}, "sk": {"S": "G#x"}, "body": {"S": "x" * pad}}
    if st is not None:
        item["st"] = {"S": st}
        item["due"] = {"N": "1"}
    return item


def _rec(old: dict[str, Any] | None, new: dict[str, Any] | None) -> dict[str, Any]:
    keys = {k: v for k, v in (new or old or {}).items() if k in ("pk", "sk")}
    ddb: dict[str, Any] = {"Keys": keys}
    if old:
        ddb["OldImage"] = old
    if new:
        ddb["NewImage"] = new
    return {"eventName": "MODIFY", "dynamodb": ddb}


def _run() -> Run:
    run = Run(mails=10)
    run.invocations = Counter({"delivery": 10, "ingress": 10, "events": 1, "sweeper": 1})
    run.records_in = Counter({"delivery": 10})
    run.cpu_s = {"delivery": 0.1, "ingress": 0.1, "events": 0.01, "sweeper": 0.01}
    run.requests = {"delivery": Counter({"dynamodb:UpdateItem": 20})}
    run.event_bytes = 10 * 500
    run.sweeps = 1
    run.log_bytes = Counter({"sweeper": 1000})
    run.log_events = Counter({"sweeper": 2})
    run.records = [_rec(None, _item(f"M#{i:04d}ABCDEFGH", "queued")) for i in range(10)]
    return run


def _line(lines: list[Line], start: str) -> float:
    return sum(x.per_month for x in lines if x.item.startswith(start))
