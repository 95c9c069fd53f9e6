"""Before/after of issue 18's cost changes, each step priced by the same model.

    python -m bench.compare BEFORE.pkl [AFTER.pkl]

BEFORE.pkl is a `cost.Run` measured on the revision before these steps (queue-size
counters, the events function's header read per mail: revision 6cfeda2, or d8f9a86 before
small mails' content moved into the mail item), AFTER.pkl one measured on this revision
(measured now when not given). The template settings of each step are applied to the model: the events filter,
the memory sizes. (`first_round` priced the earlier steps from a run of revision 9986081.)
"""

from __future__ import annotations

import pickle
import sys
from collections import Counter
from dataclasses import replace
from pathlib import Path

from bench import cost

#: the template before these steps (revisions d8f9a86 .. 6cfeda2): the events filter
#: without the mail item's INSERT, and its memory sizes
D8F9A86_MEMORY = {
    "ingress": 1024,
    "delivery": 512,
    "bounce": 512,
    "events": 512,
    "sweeper": 256,
    "admin": 512,
}


def _total(run: cost.Run, tpl: cost.Template, volume: int) -> float:
    return sum(x.per_month for x in cost.model(run, volume, tpl)) / volume * 1e6


def first_round(before: cost.Run, after: cost.Run) -> list[str]:
    now = cost.Template.load()
    old = replace(now, tracing=True, dashboards=1, events_filters=[], events_window_s=5)
    steps = [
        (
            "before (revision 9986081): a marker per stream record, X-Ray on, dashboard, "
            "every stream record to the events function",
            before,
            old,
        ),
        ("counters: one checkpoint per stream batch", after, old),
        (
            "+ the events function sees only group and outbox records (stream filter)",
            after,
            replace(old, events_filters=now.events_filters),
        ),
        (
            "+ X-Ray off by default (Tracing parameter)",
            after,
            replace(old, events_filters=now.events_filters, tracing=False),
        ),
        (
            "+ dashboard optional, off by default",
            after,
            replace(now, events_window_s=5),
        ),
        (
            f"+ events batching window {now.events_window_s} s instead of 5 s, "
            f"batch {now.events_batch_size} (template parameters; = this revision)",
            after,
            now,
        ),
        (
            "what-if, not done: events batching window 300 s (Lambda's maximum)",
            after,
            replace(now, events_window_s=300),
        ),
    ]
    return _rows(steps)


def without_counters(run: cost.Run) -> cost.Run:
    """A run of a revision with counters, priced as if it had none: no counter lines, the
    events function's counter requests (Query, TransactWriteItems) left out and its reads
    reduced to its header reads (consistent GetItem of a mail item under 4 KB: 1 unit)."""
    requests = {
        f: Counter({k: n for k, n in c.items() if not (f == "events" and k in cost._COUNTER_OPS)})
        for f, c in run.requests.items()
    }
    rru = Counter(run.rru)
    rru["events"] = cost._events_reads(run)
    return replace(run, counters_by_batch={}, requests=requests, rru=rru)


def second_round(before: cost.Run, after: cost.Run) -> list[str]:
    now = cost.Template.load()
    old_filters = [f for f in now.events_filters if "eventName" not in f]
    old = replace(now, events_filters=old_filters, memory_mb=dict(D8F9A86_MEMORY))
    steps = [
        ("start: queue-size counters, a header read per mail (GET or GetItem)", before, old),
        (
            "queue size read from the by_state index when asked; counters removed",
            without_counters(before),
            old,
        ),
        (
            "+ Send headers from the mail item's INSERT (its content, or `hdrs`) instead of "
            "a read per mail",
            after,
            replace(now, memory_mb=dict(D8F9A86_MEMORY)),
        ),
        (
            "+ memory sizes from the sweep ("
            + ", ".join(f"{f} {now.memory_mb[f]}" for f in cost.FUNCTIONS)
            + " MB; = this revision)",
            after,
            now,
        ),
    ]
    return _rows(steps)


def _rows(steps: list[tuple[str, cost.Run, cost.Template]]) -> list[str]:
    lines = [
        "| step | $/M at 1 M/month | at 10 M | at 100 M | requests per mail |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, run, tpl in steps:
        vals = [_total(run, tpl, v) for v in cost.VOLUMES]
        req = sum(cost.path_requests(run, tpl, cost.VOLUMES[-1]).values())
        lines.append(f"| {name} | " + " | ".join(f"{v:.2f}" for v in vals) + f" | {req:.2f} |")
    return lines


def main() -> None:
    before = pickle.loads(Path(sys.argv[1]).read_bytes())
    if len(sys.argv) > 2:
        after = pickle.loads(Path(sys.argv[2]).read_bytes())
    else:
        after = cost.measure(20)
        Path("var").mkdir(exist_ok=True)
        Path("var/cost-after.pkl").write_bytes(pickle.dumps(after))
    # runs pickled before `replayed_per_mail` existed: the records their replay was fed
    for r, filters in ((before, []), (after, cost.Template.load().events_filters)):
        if not getattr(r, "replayed_per_mail", 0.0):
            fed = cost.delivered_to_events(cost.state_records(r.records), filters)
            r.replayed_per_mail = len(fed) / r.mails
    print("\n".join(second_round(before, after)))
    print()
    print("\n".join(cost.report(after, cost.Template.load())))


if __name__ == "__main__":
    main()
