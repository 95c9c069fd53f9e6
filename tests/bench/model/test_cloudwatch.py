"""CloudWatch's lines (bench/model/cloudwatch.py): Lambda's own log lines, the sweeper's log
per run."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest

from bench.model.assumptions import ASSUMPTIONS
from bench.model.bill import model
from bench.model.run import Run
from bench.model.template import FUNCTIONS, Template
from tests.bench.model.synthetic import TPL, _line, _run


def test_lambdas_own_log_lines_are_priced_only_where_the_template_sends_them() -> None:
    """START/END/REPORT are INFO-level system lines: with the JSON log format and
    SystemLogLevel WARN (the template's default) Lambda does not send them; INFO does."""
    from dataclasses import replace

    tpl = Template.load()
    assert tpl.platform_logs == frozenset()  # every function: JSON, WARN by default
    run = Run(mails=20)
    run.invocations.update({"ingress": 20, "delivery": 4})
    for i in range(20):
        keys = {"pk": {"S": f"M#{i}"}, "sk": {"S": "G#a.example"}}
        run.records.append({"eventName": "INSERT", "dynamodb": {"Keys": keys, "NewImage": keys}})
    name = "Logs ingestion"

    def logs(t: Template) -> float:
        return sum(x.per_month for x in model(run, 10_000_000, t) if x.item.startswith(name))

    warn, info = logs(tpl), logs(replace(tpl, platform_logs=frozenset(FUNCTIONS)))
    line = ASSUMPTIONS["platform_log_bytes_per_invocation"]
    line += 3 * ASSUMPTIONS["cw_log_event_overhead_bytes"]
    # at least the ingress invocations' lines (one per mail: 10 M a month)
    least = 10_000_000 * line / 2**30 * 0.50
    assert info - warn >= least * 0.99, (info, warn, least)


def test_the_sweepers_log_is_priced_per_scheduled_run() -> None:
    tpl = replace(TPL, schedules={"sweeper": 8760.0})
    quiet = _run()
    quiet.log_bytes = Counter()
    quiet.log_events = Counter()
    a = _line(model(_run(), 1_000_000, tpl), "Logs ingestion")
    b = _line(model(quiet, 1_000_000, tpl), "Logs ingestion")
    ovh = ASSUMPTIONS["cw_log_event_overhead_bytes"]
    assert a - b == pytest.approx(8760 * (1000 + 2 * ovh) / 2**30 * 0.5)
