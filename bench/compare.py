"""Before/after of issue 18's cost changes, each step priced by the same model.

    python -m bench.compare BEFORE.pkl [AFTER.pkl]
    python -m bench.compare --third B1.pkl,B2.pkl,... A1.pkl,A2.pkl,...   (third round)

BEFORE.pkl is a `Run` measured on the revision before these steps (queue-size
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
from bench.model.bill import model, path_requests
from bench.model.prices import VOLUMES
from bench.model.report import report
from bench.model.run import Run
from bench.model.state_table import _COUNTER_OPS, _events_reads, state_records
from bench.model.stream import delivered_to_events
from bench.model.template import FUNCTIONS, Template

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


def _total(run: Run, tpl: Template, volume: int) -> float:
    return sum(x.per_month for x in model(run, volume, tpl)) / volume * 1e6


def first_round(before: Run, after: Run) -> list[str]:
    now = Template.load()
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


def without_counters(run: Run) -> Run:
    """A run of a revision with counters, priced as if it had none: no counter lines, the
    events function's counter requests (Query, TransactWriteItems) left out and its reads
    reduced to its header reads (consistent GetItem of a mail item under 4 KB: 1 unit)."""
    requests = {
        f: Counter({k: n for k, n in c.items() if not (f == "events" and k in _COUNTER_OPS)})
        for f, c in run.requests.items()
    }
    rru = Counter(run.rru)
    rru["events"] = _events_reads(run)
    return replace(run, counters_by_batch={}, requests=requests, rru=rru)


def second_round(before: Run, after: Run) -> list[str]:
    now = Template.load()
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
            + ", ".join(f"{f} {now.memory_mb[f]}" for f in FUNCTIONS)
            + " MB; = this revision)",
            after,
            now,
        ),
    ]
    return _rows(steps)


def _third_figures(run: Run, tpl: Template) -> dict[str, float]:
    lines = model(run, VOLUMES[-1], tpl)

    def line(prefix: str) -> float:
        return sum(x.per_month for x in lines if x.item.startswith(prefix)) / VOLUMES[-1] * 1e6

    out = {
        "CPU per mail, ingress (ms)": run.cpu_s.get("ingress", 0.0) / run.mails * 1e3,
        "CPU per mail, delivery (ms)": run.cpu_s.get("delivery", 0.0) / run.mails * 1e3,
        "CPU per stream record, events (ms)": run.cpu_s.get("events", 0.0)
        / max(1, len(run.records))
        * 1e3,
        "log bytes per mail, ingress": run.log_bytes["ingress"] / run.mails,
        "log bytes per mail, delivery": run.log_bytes["delivery"] / run.mails,
        "log bytes per invocation, delivery": run.log_bytes["delivery"]
        / max(1, run.invocations["delivery"]),
        "log bytes per invocation, events": run.log_bytes["events"]
        / max(1, run.invocations["events"]),
        "EMF metrics seen in the run": float(len(run.metrics)),
        "$/M at 100 M: ingress Lambda": line("ingress:"),
        "$/M at 100 M: delivery Lambda": line("delivery:"),
        "$/M at 100 M: events Lambda": line("events:"),
        "$/M at 100 M: Logs ingestion": line("Logs ingestion"),
    }
    for v in VOLUMES:
        out[f"all-in $/M at {v // 1_000_000} M"] = _total(run, tpl, v)
    return out


def third_round(before: list[Run], after: list[Run]) -> list[str]:
    """Medians over repeated runs of each side (this machine's load moves one run's CPU
    by ±20 %), and the after side's totals priced with the before side's EMF metric set
    (the model counts the metrics a run saw; a happy-path run of the after side sees
    fewer, since delivery no longer publishes zeros)."""
    import statistics

    tpl = Template.load()
    b = [_third_figures(r, tpl) for r in before]
    a = [_third_figures(r, tpl) for r in after]
    same = [replace(r, metrics=set(before[0].metrics)) for r in after]
    a_same = [_third_figures(r, tpl) for r in same]
    lines = [
        f"| figure | before (median of {len(b)}) | after (median of {len(a)}) |",
        "|---|---:|---:|",
    ]
    for k in b[0]:
        mb, ma = statistics.median(x[k] for x in b), statistics.median(x[k] for x in a)
        nd = 0 if "bytes" in k or "metrics" in k else 3 if k.startswith("$") else 2
        lines.append(f"| {k} | {mb:,.{nd}f} | {ma:,.{nd}f} |")
    for v in VOLUMES:
        k = f"all-in $/M at {v // 1_000_000} M"
        ma = statistics.median(x[k] for x in a_same)
        lines.append(f"| {k}, after with the before side's EMF metrics | | {ma:,.2f} |")
    return lines


def _rows(steps: list[tuple[str, Run, Template]]) -> list[str]:
    lines = [
        "| step | $/M at 1 M/month | at 10 M | at 100 M | requests per mail |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, run, tpl in steps:
        vals = [_total(run, tpl, v) for v in VOLUMES]
        req = sum(path_requests(run, tpl, VOLUMES[-1]).values())
        lines.append(f"| {name} | " + " | ".join(f"{v:.2f}" for v in vals) + f" | {req:.2f} |")
    return lines


def main() -> None:
    if sys.argv[1] == "--third":  # --third B1.pkl,B2.pkl,... A1.pkl,A2.pkl,...
        runs = [[pickle.loads(Path(p).read_bytes()) for p in a.split(",")] for a in sys.argv[2:4]]
        print("\n".join(third_round(runs[0], runs[1])))
        return
    before = pickle.loads(Path(sys.argv[1]).read_bytes())
    if len(sys.argv) > 2:
        after = pickle.loads(Path(sys.argv[2]).read_bytes())
    else:
        after = cost.measure(20)
        Path("var").mkdir(exist_ok=True)
        Path("var/cost-after.pkl").write_bytes(pickle.dumps(after))
    # runs pickled before `replayed_per_mail` existed: the records their replay was fed
    for r, filters in ((before, []), (after, Template.load().events_filters)):
        if not getattr(r, "replayed_per_mail", 0.0):
            fed = delivered_to_events(state_records(r.records), filters)
            r.replayed_per_mail = len(fed) / r.mails
    print("\n".join(second_round(before, after)))
    print()
    print("\n".join(report(after, Template.load())))


if __name__ == "__main__":
    main()
