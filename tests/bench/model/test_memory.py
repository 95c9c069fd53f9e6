"""Lambda memory sizes priced and chosen (bench/model/memory.py)."""

from __future__ import annotations

from collections import Counter

import pytest

from bench.model.memory import MEMORY_SIZES, memory_sweep
from bench.model.run import Run
from bench.model.template import FUNCTIONS, Template


def test_the_memory_sweep_chooses_the_smallest_size_that_fits() -> None:
    tpl = Template.load()
    run = Run(mails=10)
    for f in ("ingress", "delivery", "events"):
        run.cpu_s[f] = 0.05
        run.invocations[f] = 10
        run.requests[f] = Counter({"dynamodb:BatchWriteItem": 10})
    for i in range(10):  # a group item inserted per mail
        keys = {"pk": {"S": f"M#{i}"}, "sk": {"S": "G#a.example"}}
        run.records.append({"eventName": "INSERT", "dynamodb": {"Keys": keys, "NewImage": keys}})
    rss = dict.fromkeys(FUNCTIONS, 60.0)
    sweep = memory_sweep(run, tpl, rss)
    # cost rises with memory (the CPU part costs the same GB-s below one vCPU)
    costs = [sweep["ingress"]["cost"][m] for m in MEMORY_SIZES]
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
