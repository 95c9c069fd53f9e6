"""The queue's state table priced (DynamoDB): write units from the stream's images, read
units from what reads returned, failed conditional writes, the sweeper's reads, index
entries that lag their schedule, provisioned capacity at the use auto scaling achieves,
and the queue-size counters of older revisions' runs."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from mailqueue.core.config import StorageSettings

from bench.model import autoscale
from bench.model.assumptions import ASSUMPTIONS
from bench.model.dynamodb import item_size, units, write_units
from bench.model.month import Month
from bench.model.prices import PRICES, SECONDS_PER_MONTH, Line
from bench.model.run import Run
from bench.model.template import Template


def _is_counter(record: Mapping[str, Any]) -> bool:
    pk = str(record.get("dynamodb", {}).get("Keys", {}).get("pk", {}).get("S", ""))
    return pk == "CP" or pk.startswith(("C#", "CR#", "CP#", "CPP#"))


def state_records(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The stream records of the queue's own items (the counters' echo left out)."""
    return [r for r in records if not _is_counter(r)]


#: what the lag of a kept index entry is priced at (issue 25, retry floor): the storage's
#: default `index_due_slack_seconds`, the policy's first retry (Postfix's
#: minimal_backoff_time) and the sweeper's schedule (template: every 5 minutes)
INDEX_SLACK_S = 900.0
FIRST_RETRY_S = 300.0
SWEEP_PERIOD_S = 300.0


def lagging_entry_reads(records: list[dict[str, Any]]) -> float:
    """Read units the sweeper spends on index entries that lag their group's schedule.

    A reschedule (or a shaping re-arm) within `index_due_slack_seconds` of the entry's
    `due` leaves the entry where it was (no index write); until the group's `next_at`
    comes, each sweep's lease recovery (`find_inflight`: queued entries with `due` before
    now) reads the item back and drops it: one strongly consistent read unit per 4 KB per
    sweep. Each kept entry is priced at min(lag, slack) / sweep period sweeps, its lag the
    run's own or, for a retry, the policy's first retry (a run uses fast retries)."""
    units = 0.0
    for rec in records:
        if rec.get("eventName") != "MODIFY":
            continue
        d = rec.get("dynamodb", {})
        old, new = d.get("OldImage") or {}, d.get("NewImage") or {}
        st, due = new.get("st"), new.get("due")
        if not st or not due or st != old.get("st") or due != old.get("due"):
            continue
        if not str(st.get("S", "")).startswith("queued") or "lease_ms" in new:
            continue
        nxt, prev = new.get("next_at", {}).get("S"), old.get("next_at", {}).get("S")
        if not nxt or nxt == prev:
            continue
        lag = datetime.fromisoformat(nxt.replace("Z", "+00:00")).timestamp() - int(due["N"]) / 1000
        if len((new.get("history") or {}).get("L", [])) > len(
            (old.get("history") or {}).get("L", [])
        ):
            lag = max(lag, FIRST_RETRY_S)  # a retry: the real backoff, not the run's
        sweeps = min(max(lag, 0.0), INDEX_SLACK_S) / SWEEP_PERIOD_S
        units += sweeps * max(1, -(-item_size(new) // 4096))
    return units


#: the events function's requests for the queue-size counters (runs of revisions that
#: kept them; priced from `counters_by_batch`, not from the run's requests)
_COUNTER_OPS = frozenset(
    {
        "dynamodb:Query",
        "dynamodb:TransactWriteItems",
        "dynamodb:PutItem",
        "dynamodb:UpdateItem",
    }
)


def _events_reads(run: Run) -> float:
    """The events function's read units, the counters' left out (priced from the
    replay): in a run with counters, its GetItems (a Send's header read of a mail item
    under 4 KB, consistent: 1 unit each)."""
    if run.counters_by_batch:
        return float(run.ops("events").get("dynamodb:GetItem", 0))
    return float(run.rru.get("events", 0.0))


def _interp(table: dict[int, dict[str, float]], batch: float, key: str) -> float:
    xs = sorted(table)
    if not xs:
        return 0.0
    if batch <= xs[0]:
        return table[xs[0]].get(key, 0.0)
    for a, b in zip(xs, xs[1:], strict=False):
        if a <= batch <= b:
            t = (batch - a) / (b - a)
            return table[a].get(key, 0.0) * (1 - t) + table[b].get(key, 0.0) * t
    return table[xs[-1]].get(key, 0.0)


def state_write_units(run: Run, tpl: Template) -> tuple[float, float]:
    """The run's write units on the state table and on its indexes (from the stream)."""
    wru_table = wru_gsi = 0.0
    for r in run.records:
        keys = r["dynamodb"].get("Keys", {})
        k = (keys.get("pk", {}).get("S", ""), keys.get("sk", {}).get("S", ""))
        if _is_counter(r):
            continue  # the counters: priced from the replay in `model`
        w = write_units(r, tpl.indexes, transactional=k in run.transact_keys)
        wru_table += w.get("table", 0)
        wru_gsi += sum(v for n, v in w.items() if n != "table")
    return wru_table, wru_gsi


#: StorageSettings' default margin a content item outlives its mail's lifetime by
_CONTENT_MARGIN_S = float(
    StorageSettings.__dataclass_fields__["content_item_margin_seconds"].default
)


def ttl_storage_gb_months(records: list[dict[str, Any]], content_keep_s: float = 0.0) -> float:
    """GB-months the run's items left to DynamoDB's TTL are stored (issue 40: a content
    item is kept for the mail's lifetime and a margin): each item whose last image has
    `expires_at` and no REMOVE, from its mail's arrival to `expires_at` plus the TTL's
    deletion lag, at its size plus DynamoDB's per-item overhead. A content item is kept
    at least `content_keep_s` (the deployed lifetime and margin: a run's stack may use a
    short lifetime for its retries)."""
    lag = float(ASSUMPTIONS["ttl_delete_lag_days"]) * 86400
    overhead = int(ASSUMPTIONS["item_storage_overhead_bytes"])
    last: dict[tuple[str, str], dict[str, Any]] = {}
    arrival: dict[str, float] = {}
    for r in records:
        ddb = r.get("dynamodb") or {}
        k = ddb.get("Keys") or {}
        pk = str(k.get("pk", {}).get("S", ""))
        last[(pk, str(k.get("sk", {}).get("S", "")))] = r
        img = ddb.get("NewImage") or {}
        at = img.get("arrival", {}).get("S")
        if at and pk not in arrival:
            arrival[pk] = datetime.fromisoformat(at.replace("Z", "+00:00")).timestamp()
    gb_s = 0.0
    for (pk, sk), r in last.items():
        img = (r.get("dynamodb") or {}).get("NewImage") or {}
        ttl = img.get("expires_at", {}).get("N")
        if r.get("eventName") == "REMOVE" or ttl is None or pk not in arrival:
            continue
        kept = max(0.0, float(ttl) - arrival[pk])
        if sk == "C":
            kept = max(kept, content_keep_s)
        kept += lag
        gb_s += (item_size(img) + overhead) / 1e9 * kept
    return gb_s / (SECONDS_PER_MONTH)


def failed_writes(run: Run) -> tuple[int, int]:
    """The run's failed conditional writes and the write units DynamoDB bills for them:
    each item the larger of its size (its largest image in the stream) and 1 KB's unit,
    twice in a cancelled transaction (see ASSUMPTIONS). Absent from the stream, so the
    model priced none of them before issue 25."""
    sizes: dict[tuple[str, str], int] = {}
    for r in run.records:
        ddb = r.get("dynamodb") or {}
        k = ddb.get("Keys") or {}
        key = (str(k.get("pk", {}).get("S", "")), str(k.get("sk", {}).get("S", "")))
        sizes[key] = max(
            sizes.get(key, 0), item_size(ddb.get("OldImage")), item_size(ddb.get("NewImage"))
        )
    n = u = 0
    for e in getattr(run, "trace", []):
        if e.get("err") not in ("ConditionalCheckFailedException", "TransactionCanceledException"):
            continue
        factor = 2 if e["op"] == "TransactWriteItems" else 1
        for w in e.get("writes") or ():
            a = w["attrs"]
            n += 1
            u += factor * units(sizes.get((a.get("pk", ""), a.get("sk", "")), 1), 1024)
    return n, u


def lines(run: Run, tpl: Template, m: Month) -> list[Line]:
    """The table's and its index's writes, the reads, failed writes and counters, a month."""
    lines: list[Line] = []

    def add(service: str, item: str, usd: float) -> None:
        lines.append(Line(service, item, usd))

    p = PRICES
    per = m.per
    volume = m.volume
    batch = m.batch
    ctr_rpm = m.ctr_rpm
    # DynamoDB: writes from the stream images, reads from the responses
    ddb = p["dynamodb_on_demand"]
    wru_table, wru_gsi = state_write_units(run, tpl)
    wru = ddb["write_request_unit_per_million"] / 1e6
    rru_price = ddb["read_request_unit_per_million"] / 1e6
    rru = sum(v for f, v in run.rru.items() if f not in ("events", "sweeper")) + _events_reads(run)
    # the sweeper's reads come with its schedule (every shard of each state it walks, every
    # 5 minutes), not with the mails: per sweep of the run, times the month's sweeps
    sweep_rru = (
        run.rru.get("sweeper", 0.0)
        / max(1, run.sweeps or run.invocations["sweeper"])
        * sum(tpl.schedules.values())
    )
    lag_rru = lagging_entry_reads(state_records(run.records))
    if tpl.state_capacity == "provisioned":
        # capacity units by the hour: the month's units spread over its seconds, divided by
        # the utilization auto scaling achieves, never below the configured minimum (the
        # table and each index keep their own); a write unit per second for an hour is one
        # WCU-hour, an eventually consistent read costs half a unit as on demand
        prov = p["dynamodb_provisioned"]
        n_tables = 1 + len(tpl.indexes)

        def use(units_month: float, minimum: int, tables: int) -> float:
            """The average use auto scaling achieves (simulated unless set), per table."""
            if tpl.state_use is not None:
                return tpl.state_use
            per_table = units_month / SECONDS_PER_MONTH / max(1, tables)
            return autoscale.average_use(
                per_table,
                target=tpl.state_target,
                minimum=max(1, minimum),
                profile=ASSUMPTIONS["provisioned_traffic_profile"],
            )

        def hours(units_month: float, minimum: int, tables: int) -> tuple[float, float]:
            u = use(units_month, minimum, tables)
            if u <= 0:  # nothing consumed: the minimum capacity alone
                return minimum * tables * 730, u
            return max(units_month / SECONDS_PER_MONTH / u, minimum * tables) * 730, u

        w_floor, r_floor = tpl.state_min_units
        wcu_h = prov["write_capacity_unit_hour"]
        h, u = hours(wru_table * per, w_floor, 1)
        add("DynamoDB", f"state writes, table (provisioned WCU at {u:.0%} use)", h * wcu_h)
        h, u = hours(wru_gsi * per, w_floor, n_tables - 1)
        add("DynamoDB", f"state writes, by_state index (provisioned WCU at {u:.0%} use)", h * wcu_h)
        h, u = hours((rru + lag_rru) * per + sweep_rru, r_floor, n_tables)
        add(
            "DynamoDB",
            f"reads (provisioned RCU at {u:.0%} use)",
            h * prov["read_capacity_unit_hour"],
        )
    else:
        add("DynamoDB", "state writes, table (WRU from item sizes)", wru_table * per * wru)
        add("DynamoDB", "state writes, by_state index", wru_gsi * per * wru)
        add("DynamoDB", "reads (RRU from items returned)", rru * per * rru_price)
        add("DynamoDB", "reads by the sweeper (per sweep, on its schedule)", sweep_rru * rru_price)
        add(
            "DynamoDB",
            "reads of lagging index entries by the sweeper (kept reschedules)",
            lag_rru * per * rru_price,
        )
        failed_n, failed_u = failed_writes(run)
        add(
            "DynamoDB",
            f"failed conditional writes ({failed_n / run.mails:.2f} per mail; billed, not streamed)",
            failed_u * per * wru,
        )
    # stored the same way whatever the capacity mode
    add(
        "DynamoDB",
        "table storage of items left to TTL (content items, finished solo items)",
        ttl_storage_gb_months(
            state_records(run.records),
            content_keep_s=tpl.queue_lifetime_s + _CONTENT_MARGIN_S,
        )
        * per
        * ddb["storage_per_gb_month"],
    )
    if run.counters_by_batch:  # a run of a revision with queue-size counters
        # the upper bound (no netting within a batch): the run's mails are few and quick,
        # so in its batches most of a mail's deltas cancel; at volume they span batches
        ctr_wru = _interp(run.counters_by_batch, batch, "wru_no_netting") * volume * ctr_rpm
        ctr_reads = (
            _interp(run.counters_by_batch, batch, "dynamodb:Query")
            + _interp(run.counters_by_batch, batch, "dynamodb:GetItem")
        ) * 2
        add("DynamoDB", "queue-size counters (writes)", ctr_wru * wru)
        add(
            "DynamoDB",
            "queue-size counters (reads)",
            ctr_reads * volume * ctr_rpm * ddb["read_request_unit_per_million"] / 1e6,
        )
    return lines
