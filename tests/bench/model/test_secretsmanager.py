"""Secrets Manager priced per container and cache period (bench/model/secretsmanager.py)."""

from __future__ import annotations

import math
from collections import Counter

import pytest

from bench.model.awslambda import cpu_factor, lambda_seconds
from bench.model.bill import model, path_requests
from bench.model.prices import SECONDS_PER_MONTH
from bench.model.run import Run
from bench.model.secretsmanager import per_container_share, warm_containers
from bench.model.template import Template


def test_secrets_are_priced_per_container_and_cache_period_not_per_mail() -> None:
    """A warm delivery container reads each DKIM key once per 5 minutes: at volume the
    share per mail is what the containers alive at that volume read, not the run's rate,
    and not all of the template's 90 (a light load keeps a few warm)."""
    tpl = Template.load()
    assert tpl.delivery_containers == 90  # DeliveryMaxConcurrency 60 + bulk 30
    run = Run(mails=20)
    run.invocations["delivery"] = 4
    run.requests["delivery"] = Counter({"secretsmanager:GetSecretValue": 2})
    for i in range(20):  # a group item inserted per mail (the model needs a stream)
        keys = {"pk": {"S": f"M#{i}"}, "sk": {"S": "G#a.example"}}
        run.records.append({"eventName": "INSERT", "dynamodb": {"Keys": keys, "NewImage": keys}})
    f, op = "delivery", "secretsmanager:GetSecretValue"
    # a run of 20 mails: its rate (2 reads per 20 mails) is what one container reads
    assert per_container_share(run, tpl, 20, f, op) == pytest.approx(0.1)
    # 1 M a month keeps one container warm: 2 keys every 5 minutes, all month
    assert warm_containers(run, tpl, 1_000_000) == 1
    one = 2 * SECONDS_PER_MONTH / 300 / 1_000_000
    assert per_container_share(run, tpl, 1_000_000, f, op) == pytest.approx(one)
    # delivery busy ~0.13 s a mail (0.1 s of CPU at its memory size, the rest AWS's and
    # the relay's answers): at 100 M a month ~5 busy at once on average, so
    # 5 + 3 x sqrt(5) -> 12 containers stay warm, not 90
    run.cpu_s["delivery"] = 2.0 / cpu_factor(tpl.memory_mb["delivery"])
    busy = lambda_seconds(run, f, tpl.memory_mb["delivery"]) / 20
    assert 0.1 <= busy <= 0.2
    mean = busy * 100_000_000 / SECONDS_PER_MONTH
    alive = warm_containers(run, tpl, 100_000_000)
    assert alive == math.ceil(mean + 3 * math.sqrt(mean)) and 8 <= alive <= 16
    most = alive * 2 * SECONDS_PER_MONTH / 300 / 100_000_000
    assert per_container_share(run, tpl, 100_000_000, f, op) == pytest.approx(most)
    assert path_requests(run, tpl, 100_000_000)[op] == pytest.approx(most)
    lines = {x.item: x.per_month for x in model(run, 100_000_000, tpl)}
    name = f"GetSecretValue (per warm container and 5 min: {alive} containers)"
    assert lines[name] == pytest.approx(most * 100_000_000 * 0.05 / 1e4)
    assert lines["secrets stored (2 DKIM keys read in the run)"] == pytest.approx(0.80)
    # a slow delivery at a huge volume is held to the template's concurrency
    run.cpu_s["delivery"] = 2000.0
    assert warm_containers(run, tpl, 1_000_000_000) == tpl.delivery_containers
