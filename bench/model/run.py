"""What one measured run recorded (`Run`): the inputs every model prices.

bench.cost's `measure()` fills it from the local stack; runs are pickled (var/*.pkl) and
priced again later, so a field added here needs a default (older pickles lack it)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any


@dataclass
class Run:
    mails: int
    requests: dict[str, Counter[str]] = field(default_factory=dict)  # function -> op -> n
    rru: Counter[str] = field(default_factory=Counter)  # function -> read units
    invocations: Counter[str] = field(default_factory=Counter)
    busy_s: Counter[str] = field(default_factory=Counter)
    # CPU time of each function's handler thread and of every thread it started (the
    # lanes: `_ThreadCpu`); runs before issue 40 counted the handler thread alone
    cpu_s: dict[str, float] = field(default_factory=dict)
    # CPU of each function's composition root (`default_service()`), built before the
    # measured window as a warm container has it: once per container, not per mail
    init_cpu_s: dict[str, float] = field(default_factory=dict)
    log_bytes: Counter[str] = field(default_factory=Counter)
    log_events: Counter[str] = field(default_factory=Counter)
    api_log_bytes: int = 0
    records: list[dict[str, Any]] = field(default_factory=list)
    transact_keys: set[tuple[str, str]] = field(default_factory=set)
    event_objects: int = 0
    event_bytes: int = 0
    metrics: set[tuple[str, str, str]] = field(default_factory=set)
    counters_by_batch: dict[int, dict[str, float]] = field(default_factory=dict)
    replayed_per_mail: float = 0.0  # records per mail the counters replay was fed
    # SMTP transactions in progress at once per delivery invocation (bench.scale measures
    # it against a slow local peer; 1 = one after the other)
    smtp_parallel: float = 1.0
    wall_s: float = 0.0
    mails_per_call: int = 1  # mails per API request (POST /v1/messages/batch when > 1)
    # every AWS request a function made, in completion order (bench.scale reads the
    # partition key values, units, queues, S3 keys and durations from it)
    trace: list[dict[str, Any]] = field(default_factory=list)
    records_in: Counter[str] = field(default_factory=Counter)  # event records per function
    sweeps: int = 0  # scheduled sweeps run (their log and EMF output is in log_bytes)

    def ops(self, function: str | None = None) -> Counter[str]:
        out: Counter[str] = Counter()
        for fn, c in self.requests.items():
            if function is None or fn == function:
                out.update(c)
        return out


#: the ingress measurements a batch run replaces in `with_ingress_of`
_INGRESS_FIELDS = ("requests", "rru", "invocations", "busy_s", "cpu_s", "log_bytes", "log_events")


def with_ingress_of(run: Run, other: Run) -> Run:
    """`run` with its submission side — API requests per mail, the ingress function's
    invocations, AWS requests, read units, CPU and busy time, logs, the API access log —
    taken from `other` (a run of the same mails through the batch route). Delivery and
    the rest stay `run`'s, so a difference in price is the submission route's alone."""
    if other.mails != run.mails:
        raise ValueError("the runs must have the same number of mails")
    out = replace(run, mails_per_call=other.mails_per_call, api_log_bytes=other.api_log_bytes)
    for name in _INGRESS_FIELDS:
        mine = dict(getattr(run, name))
        theirs = getattr(other, name)
        if "ingress" in theirs:
            mine["ingress"] = theirs["ingress"]
        else:
            mine.pop("ingress", None)
        setattr(out, name, Counter(mine) if isinstance(getattr(run, name), Counter) else mine)
    return out
