"""A model of AWS's documented limits, fed by measured runs (issue 25, deliverable 1).

    python -m bench.mix              # `make bench`: prints its table with the mix's

The runs are bench.cost's (the local stack, the real handlers): their request trace
(bench.model.trace) and the table's stream give, per mail, the load on every limit AWS
documents — per partition key value of the table and of each index, per table, per
function's concurrency, per queue, per S3 prefix, per account. Nothing about the state
layout is assumed here: the partition keys are read from template.yaml's key schemas
and the values from the items the run wrote and the requests it made, so a new layout
(write-sharded index keys, another projection) gives new figures by re-running.

Every limit cites the AWS page it comes from. Per-key loads are classified from the
run: a key family (a value with its ids, numbers and short suffixes folded: `bench.model.trace.family`)
with about one value per mail is per-mail (its load does not grow with the rate);
any other family shares its load over the values the run saw (a lower bound on how
many values there are: an upper bound on the load per value).

One module (~900 lines): every limit's load is computed from one `Profile` (a mix's per-mail
loads, read from the runs), and `loads`, `sustainable`, `burst` and the report rank them
against each other; bench/model/limits.py adds the limits past AWS's request quotas.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from mailqueue.backends.aws.items import CONTENT_PREFIXES
from mailqueue.core.config import StorageSettings

from bench.model.assumptions import ASSUMPTIONS
from bench.model.awslambda import lambda_seconds
from bench.model.dynamodb import Index, item_size, units
from bench.model.run import Run
from bench.model.state_table import _is_counter
from bench.model.template import ROOT, Template
from bench.model.trace import family, prefix

#: the values of each state of the index (`st = <state>#<shard>`): StorageSettings' default
STATE_SHARDS = StorageSettings.__dataclass_fields__["state_shards"].default
#: the content objects' prefix family (`content/<2 hex>/`), folded as bench.model.trace does
CONTENT_FAMILY = "content/*/"

# ---------------------------------------------------------------- AWS's documented limits
#: DynamoDB: one partition serves at most 1,000 write units and 3,000 read units per
#: second, on the table and on each global secondary index; a partition key value is
#: served by one partition (split-for-heat cannot split one value with a growing sort
#: key). "Understanding DynamoDB warm throughput in different scenarios":
#: https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/warm-throughput-scenarios.html
#: and "Key range throughput exceeded (hot partitions)" (KeyRangeThroughputExceeded):
#: https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/throttling-key-range-limit-exceeded-mitigation.html
PARTITION_WCU = 1_000.0
PARTITION_RCU = 3_000.0
#: DynamoDB on demand: a new table sustains 4,000 writes/s and 12,000 reads/s, takes
#: up to twice its previous peak at once, and may throttle past twice the previous peak
#: within 30 minutes; pre-warming (warm throughput) sets the level in advance.
#: "Pre-warming a table for on-demand capacity mode":
#: https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/pre-warming-on-demand-capacity-mode.html
#: and "DynamoDB on-demand capacity mode" (initial throughput and scaling properties):
#: https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/on-demand-capacity-mode.html
TABLE_INITIAL_WRU = 4_000.0
TABLE_INITIAL_RRU = 12_000.0
DOUBLING_MINUTES = 30.0
#: the same page: 40,000 table-level read and write request units per second by default
#: (an adjustable account quota, "Throughput default quotas")
TABLE_QUOTA_UNITS = 40_000.0
#: Lambda: 1,000 concurrent executions per Region by default (adjustable to tens of
#: thousands). "Lambda quotas": https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html
ACCOUNT_CONCURRENCY = 1_000.0
#: Lambda: each function scales by at most 1,000 execution environments every 10 s.
#: "Lambda scaling behavior": https://docs.aws.amazon.com/lambda/latest/dg/scaling-behavior.html
SCALE_PER_10S = 1_000.0
#: SQS event source (standard queue): starts with 5 concurrent batches, adds up to 300
#: per minute, at most 1,000 batches at once per mapping; MaximumConcurrency 2-1,000.
#: "Configuring scaling behavior for SQS event source mappings":
#: https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-scaling.html
ESM_START = 5.0
ESM_ADD_PER_MIN = 300.0
ESM_MAX = 1_000.0
#: SQS: ~120,000 in-flight messages per standard queue (received, not deleted).
#: "Amazon SQS standard queue quotas":
#: https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/quotas-queues.html
SQS_IN_FLIGHT = 120_000.0
#: API Gateway: 10,000 requests/s per account and Region across HTTP, REST and
#: WebSocket APIs, burst 5,000 (token bucket); adjustable. "Amazon API Gateway quotas":
#: https://docs.aws.amazon.com/apigateway/latest/developerguide/limits.html
API_RPS = 10_000.0
API_BURST = 5_000.0
#: S3: at least 3,500 PUT/COPY/POST/DELETE and 5,500 GET/HEAD per second per partitioned
#: prefix. "Best practices design patterns: optimizing Amazon S3 performance":
#: https://docs.aws.amazon.com/AmazonS3/latest/userguide/optimizing-performance.html
#: (the page itself was not in the search index here; the figures were found quoted from
#: it in AWS's knowledge-center article "s3-object-key-naming-pattern")
S3_PUT_PER_PREFIX = 3_500.0
S3_GET_PER_PREFIX = 5_500.0
#: Secrets Manager: GetSecretValue 10,000 per second per Region (not adjustable).
#: "AWS Secrets Manager quotas": https://docs.aws.amazon.com/secretsmanager/latest/userguide/reference_limits.html
#: (the figure from AWS's 2022 and 2025 what's-new posts on that quota)
SECRETS_RPS = 10_000.0
#: SSM Parameter Store: GetParameter/GetParameters share 40 TPS at the default
#: (standard) throughput; higher throughput is a paid setting. "Changing Parameter Store
#: throughput": https://docs.aws.amazon.com/systems-manager/latest/userguide/parameter-store-throughput.html
#: and "AWS Systems Manager endpoints and quotas" (https://docs.aws.amazon.com/general/latest/gr/ssm.html,
#: not retrieved here: the 40 TPS figure is as quoted from it by a secondary source)
SSM_RPS = 40.0
#: NAT gateway: each IPv4 address supports up to 55,000 simultaneous connections to
#: each unique destination (IP, port, protocol). "NAT gateway basics":
#: https://docs.aws.amazon.com/vpc/latest/userguide/nat-gateway-basics.html
NAT_PER_DESTINATION = 55_000.0

#: the settings docs/deploy.md names for high volume (the template's parameters and the
#: quota increases this module lists for them)
HIGH_VOLUME = {
    "DeliveryMaxConcurrency": 1000,  # the most an SQS event source allows
    "BulkDeliveryMaxConcurrency": 1000,
    "mails_per_call": 50,  # POST /v1/messages/batch
    "account_concurrency": 10_000,  # quota increase: Lambda concurrent executions
    "table_units": 140_000,  # quota increase: table-level throughput (writes and reads)
    "warm_units": 140_000,  # the state table's WarmThroughput (pre-warmed), table and index
}


# ---------------------------------------------------------------- the per-mail profile
@dataclass
class KeyLoad:
    """Units on one key family of one table or index, over a run's mails."""

    wru: float = 0.0
    rru: float = 0.0
    reads: int = 0  # read requests (a family read once or twice in a run is a cached read)
    ingress_wru: float = 0.0  # the submission's share (the burst's first phase)
    values: set[str] = field(default_factory=set)
    per_value_max: Counter[str] = field(default_factory=Counter)

    def spread(self, mails: int) -> int:
        """Values the family's load is spread over per mail-rate (0: per-mail values)."""
        if len(self.values) >= max(2, 0.8 * mails):
            return 0
        return max(1, len(self.values))


@dataclass
class Profile:
    """Per mail, what one run (or a weighted mix of runs) put on each limit."""

    name: str = ""
    # (target, family) -> units per mail on each value of the family (shared families),
    # split into all units and the submission's; per-mail families: units per mail total
    key_wru: dict[tuple[str, str], float] = field(default_factory=dict)
    key_rru: dict[tuple[str, str], float] = field(default_factory=dict)
    key_ingress_wru: dict[tuple[str, str], float] = field(default_factory=dict)
    per_mail_keys: dict[tuple[str, str], float] = field(default_factory=dict)  # peak units
    cached_reads: dict[tuple[str, str], float] = field(default_factory=dict)  # per container
    target_wru: dict[str, float] = field(default_factory=dict)  # table/index totals
    target_rru: dict[str, float] = field(default_factory=dict)
    failed_writes: float = 0.0  # failed conditional writes per mail
    failed_wru: float = 0.0
    fn_seconds: dict[str, float] = field(default_factory=dict)  # Lambda s per mail (no SMTP)
    # of which CPU on a whole core, s per mail (bench.model.limits re-prices other memory sizes)
    fn_cpu: dict[str, float] = field(default_factory=dict)
    fn_invocations: dict[str, float] = field(default_factory=dict)
    delivery_records: float = 1.0  # SQS records (groups) per mail
    smtp_transactions: float = 1.0  # per mail
    sends: dict[str, float] = field(default_factory=dict)  # queue -> messages per mail
    s3_put: dict[str, float] = field(default_factory=dict)  # prefix family -> per value
    s3_get: dict[str, float] = field(default_factory=dict)
    secrets_per_container: float = 0.0  # distinct secrets a delivery container reads
    ssm_per_container: float = 0.0
    api_requests: float = 1.0  # per mail

    def scaled(self, w: float) -> Profile:
        def m(d: Mapping[Any, float]) -> dict[Any, float]:
            return {k: v * w for k, v in d.items()}

        return Profile(
            name=self.name,
            key_wru=m(self.key_wru),
            key_rru=m(self.key_rru),
            key_ingress_wru=m(self.key_ingress_wru),
            per_mail_keys=dict(self.per_mail_keys),
            cached_reads=dict(self.cached_reads),
            target_wru=m(self.target_wru),
            target_rru=m(self.target_rru),
            failed_writes=self.failed_writes * w,
            failed_wru=self.failed_wru * w,
            fn_seconds=m(self.fn_seconds),
            fn_cpu=m(self.fn_cpu),
            fn_invocations=m(self.fn_invocations),
            delivery_records=self.delivery_records * w,
            smtp_transactions=self.smtp_transactions * w,
            sends=m(self.sends),
            s3_put=m(self.s3_put),
            s3_get=m(self.s3_get),
            secrets_per_container=self.secrets_per_container,
            ssm_per_container=self.ssm_per_container,
            api_requests=self.api_requests * w,
        )

    def __add__(self, o: Profile) -> Profile:
        def a(x: Mapping[Any, float], y: Mapping[Any, float]) -> dict[Any, float]:
            out: dict[Any, float] = dict(x)
            for k, v in y.items():
                out[k] = out.get(k, 0.0) + v
            return out

        return Profile(
            name=self.name or o.name,
            key_wru=a(self.key_wru, o.key_wru),
            key_rru=a(self.key_rru, o.key_rru),
            key_ingress_wru=a(self.key_ingress_wru, o.key_ingress_wru),
            per_mail_keys={
                k: max(self.per_mail_keys.get(k, 0.0), o.per_mail_keys.get(k, 0.0))
                for k in set(self.per_mail_keys) | set(o.per_mail_keys)
            },
            cached_reads={**self.cached_reads, **o.cached_reads},
            target_wru=a(self.target_wru, o.target_wru),
            target_rru=a(self.target_rru, o.target_rru),
            failed_writes=self.failed_writes + o.failed_writes,
            failed_wru=self.failed_wru + o.failed_wru,
            fn_seconds=a(self.fn_seconds, o.fn_seconds),
            fn_cpu=a(self.fn_cpu, o.fn_cpu),
            fn_invocations=a(self.fn_invocations, o.fn_invocations),
            delivery_records=self.delivery_records + o.delivery_records,
            smtp_transactions=self.smtp_transactions + o.smtp_transactions,
            sends=a(self.sends, o.sends),
            s3_put=a(self.s3_put, o.s3_put),
            s3_get=a(self.s3_get, o.s3_get),
            secrets_per_container=max(self.secrets_per_container, o.secrets_per_container),
            ssm_per_container=max(self.ssm_per_container, o.ssm_per_container),
            api_requests=self.api_requests + o.api_requests,
        )


def mix(parts: Iterable[tuple[float, Profile]], name: str = "mix") -> Profile:
    """A weighted mix of profiles (weights summing to 1: per mail of the mix)."""
    out = Profile(name=name, delivery_records=0.0, smtp_transactions=0.0, api_requests=0.0)
    for w, p in parts:
        out = out + p.scaled(w)
    out.name = name
    return out


def _hash_key(target: str, tpl: Template) -> str:
    if target == "table":
        return (tpl.indexes[0].table_keys if tpl.indexes else ("pk",))[0]
    ix = next(i for i in tpl.indexes if i.name == target)
    return ix.keys[0]


def record_key_units(
    record: Mapping[str, Any], tpl: Template, transactional: bool = False
) -> list[tuple[str, str, int]]:
    """(target, partition key value, write units) of the write behind one stream record:
    the table's item, and on each index the old entry's key (a delete) and the new's (a
    put), or one write when the key did not change and what the entry projects did (none
    when it did not) — as DynamoDB bills and throttles."""
    ddb = record.get("dynamodb") or {}
    old, new = ddb.get("OldImage"), ddb.get("NewImage")
    if (record.get("userIdentity") or {}).get("principalId") == "dynamodb.amazonaws.com":
        return []  # a TTL deletion: not a request
    f = 2 if transactional else 1
    table_keys = tpl.indexes[0].table_keys if tpl.indexes else ("pk", "sk")
    keys = ddb.get("Keys") or {}
    pk = keys.get(table_keys[0]) or (new or old or {}).get(table_keys[0]) or {}
    out = [("table", _val(pk), f * units(max(item_size(old), item_size(new)), 1024))]
    for ix in tpl.indexes:

        def kv(img: Mapping[str, Any] | None, ix: Index = ix) -> tuple[str, ...] | None:
            if not img or any(k not in img for k in ix.keys):
                return None
            return tuple(_val(img[k]) for k in ix.keys)

        ko, kn = kv(old), kv(new)
        if ko is not None and ko == kn:
            if ix.entry(old) != ix.entry(
                new
            ):  # else the index is not written (bench.model.dynamodb)
                size = max(ix.projected_size(old), ix.projected_size(new))
                out.append((ix.name, ko[0], f * units(size, 1024)))
            continue
        if ko is not None:
            out.append((ix.name, ko[0], f * units(ix.projected_size(old), 1024)))
        if kn is not None:
            out.append((ix.name, kn[0], f * units(ix.projected_size(new), 1024)))
    return out


def _val(v: Mapping[str, Any] | None) -> str:
    from bench.model.trace import _val as val

    return val(v)


def _attribute(run: Run, tpl: Template) -> list[str]:
    """The function behind each stream record: the run's successful writes to each item,
    in completion order, matched in order to the item's records."""
    table_keys = tpl.indexes[0].table_keys if tpl.indexes else ("pk", "sk")
    pending: dict[tuple[str, ...], deque[str]] = defaultdict(deque)
    for e in run.trace:
        if e.get("err"):
            continue
        for w in e.get("writes") or ():
            if w["op"] == "ConditionCheck":
                continue
            pending[tuple(w["attrs"].get(k, "") for k in table_keys)].append(e["fn"])
    out = []
    for r in run.records:
        keys = (r.get("dynamodb") or {}).get("Keys") or {}
        k = tuple(_val(keys.get(a)) for a in table_keys)
        q = pending.get(k)
        out.append(q.popleft() if q else "?")
    return out


def profile(run: Run, tpl: Template, name: str = "") -> Profile:
    """Per mail, the load of one measured run on every modelled limit."""
    n = max(1, run.mails)
    loads: dict[tuple[str, str], KeyLoad] = defaultdict(KeyLoad)
    target_wru: Counter[str] = Counter()
    target_rru: Counter[str] = Counter()
    sizes: dict[str, int] = {}
    fns = _attribute(run, tpl)
    table_keys = tpl.indexes[0].table_keys if tpl.indexes else ("pk", "sk")
    for r, fn in zip(run.records, fns, strict=True):
        if _is_counter(r) or fn == "sweeper":
            continue  # the sweeper runs every 5 minutes whatever the rate
        keys = (r.get("dynamodb") or {}).get("Keys") or {}
        k = (_val(keys.get(table_keys[0])), _val(keys.get(table_keys[1])))
        ddb = r.get("dynamodb") or {}
        sizes["|".join(k)] = max(
            sizes.get("|".join(k), 0),
            item_size(ddb.get("OldImage")),
            item_size(ddb.get("NewImage")),
        )
        for target, value, u in record_key_units(r, tpl, k in run.transact_keys):
            kl = loads[(target, family(value))]
            kl.wru += u
            kl.values.add(value)
            kl.per_value_max[value] += u
            if fn == "ingress":
                kl.ingress_wru += u
            target_wru[target] += u
    failed = 0.0
    failed_wru = 0.0
    for e in run.trace:
        if e["svc"] != "dynamodb" or e["fn"] == "sweeper":
            continue
        for rd in e.get("reads") or ():
            target = rd.get("index") or "table"
            hk = (
                _hash_key(target, tpl)
                if target in ("table", *[i.name for i in tpl.indexes])
                else ""
            )
            value = rd["attrs"].get(hk, "") if hk else ""
            if rd.get("table") and not _is_state(rd["table"], run):
                target = f"{rd['table']}"
            kl = loads[(target, family(value) if value else "(scan)")]
            kl.rru += rd["ru"]
            kl.reads += 1
            kl.values.add(value)
            target_rru[target] += rd["ru"]
        if e.get("err") in ("ConditionalCheckFailedException", "TransactionCanceledException"):
            # billed: the larger of the item's size and the write's, at least one unit
            # (the DynamoDB developer guide's "read/write operations" page, as quoted by
            # a secondary source here); a cancelled transaction's items at 2x (assumed)
            tx = e["op"] == "TransactWriteItems"
            for w in e.get("writes") or ():
                key = "|".join(w["attrs"].get(a, "") for a in table_keys)
                u = (2 if tx else 1) * units(sizes.get(key, 1), 1024)
                failed += 1
                failed_wru += u
                value = w["attrs"].get(table_keys[0], "")
                kl = loads[("table", family(value))]
                kl.wru += u
                kl.values.add(value)
                target_wru["table"] += u
    p = Profile(name=name or f"{run.mails} mails")
    for key, kl in loads.items():
        if not kl.wru and 0 < kl.reads < n / 2:
            # read fewer times than there were mails: cached per container (the
            # suspensions, the DKIM keys), not a per-mail load
            p.cached_reads[key] = float(kl.reads)
            continue
        spread = kl.spread(n)
        met = STATE_SHARDS * (1 - (1 - 1 / STATE_SHARDS) ** n)  # values n mails meet
        if key[0] != "table" and key[1].endswith("#*") and len(kl.values) >= met / 2:
            # the state index's sharded key (`queued#07`): a fixed set of values a hash of
            # the mail id spreads evenly, whatever subset a small run happened to meet (20
            # mails meet ~17 of 64: a run that met 15 was read as 15 values, 4x the load
            # per value); a run that met far fewer than that has fewer shards
            spread = max(len(kl.values), STATE_SHARDS)
        if spread == 0:
            p.per_mail_keys[key] = float(max(kl.per_value_max.values(), default=0))
            continue
        p.key_wru[key] = kl.wru / n / spread
        p.key_rru[key] = kl.rru / n / spread
        p.key_ingress_wru[key] = kl.ingress_wru / n / spread
    p.target_wru = {k: v / n for k, v in target_wru.items()}
    p.target_rru = {k: v / n for k, v in target_rru.items()}
    p.failed_writes = failed / n
    p.failed_wru = failed_wru / n
    for f in ("ingress", "delivery", "events", "bounce"):
        if run.invocations.get(f):
            # delivery's lanes run a batch's records at once: their AWS waits overlap, as
            # the cost model has it (bench.model.bill.model)
            lanes = max(
                1.0, min(getattr(run, "smtp_parallel", 1.0), float(tpl.delivery_batch_size))
            )
            sec = lambda_seconds(
                run,
                f,
                tpl.memory_mb.get(f, 512),
                smtp=False,
                overlap=lanes if f == "delivery" else 1.0,
            )
            p.fn_seconds[f] = sec / n
            p.fn_cpu[f] = run.cpu_s.get(f, 0.0) / n
            p.fn_invocations[f] = run.invocations[f] / n
    p.delivery_records = run.records_in.get("delivery", run.invocations.get("delivery", n)) / n
    p.smtp_transactions = p.delivery_records
    sends: Counter[str] = Counter()
    puts: dict[str, Counter[str]] = defaultdict(Counter)
    gets: dict[str, Counter[str]] = defaultdict(Counter)
    secrets: set[str] = set()
    ssm: set[str] = set()
    for e in run.trace:
        if e["svc"] == "sqs" and e["op"] in ("SendMessage", "SendMessageBatch"):
            sends[e["queue"]] += e.get("n", 1)
        elif e["svc"] == "s3" and e["fn"] != "sweeper":
            pre = prefix(e.get("key", ""))
            target = gets if e["op"] in ("GetObject", "HeadObject") else puts
            # the events function writes one object per stream batch: at volume the
            # batches are full (EventsBatchSize records), not the run's few records
            w = 1.0
            if e["fn"] == "events" and run.invocations.get("events"):
                w = run.invocations["events"] / max(
                    1.0, len(run.records) / max(1, tpl.events_batch_size)
                )
                w = 1.0 / max(1.0, w)
            target[family(pre)][pre] += w
        elif e["svc"] == "secretsmanager" and e["fn"] == "delivery":
            secrets.add(e.get("id", ""))
        elif e["svc"] == "ssm" and e["fn"] == "delivery":
            ssm.add(e.get("id", ""))
    p.sends = {q: v / n for q, v in sends.items()}
    for src, dst in ((puts, p.s3_put), (gets, p.s3_get)):
        for fam, per in src.items():
            if fam == CONTENT_FAMILY:
                # hashed prefixes (backends/aws/items.py): the load spreads over all of
                # them at volume, not over the few a short run happened to touch
                dst[fam] = sum(per.values()) / n / CONTENT_PREFIXES
                continue
            if len(per) >= max(2, 0.8 * n):
                continue  # a prefix per mail: its rate does not grow with the mails'
            dst[fam] = sum(per.values()) / n / len(per)
    p.secrets_per_container = float(len(secrets))
    p.ssm_per_container = float(len(ssm))
    p.api_requests = ASSUMPTIONS["api_requests_per_mail"] / max(1, run.mails_per_call)
    return p


def _is_state(table: str, run: Run) -> bool:
    """Whether a request's table is the streamed state table (its name ends in -state)."""
    return table.endswith("-state") or table == "state"


# ---------------------------------------------------------------- settings and loads
@dataclass(frozen=True)
class Settings:
    """What the deployment allows: the template's parameters and the account's quotas."""

    name: str
    delivery_concurrency: float  # the SQS event sources' MaximumConcurrency, summed
    account_concurrency: float = ACCOUNT_CONCURRENCY
    batch_size: int = 10
    mails_per_call: int = 1
    smtp_ms: float = 400.0  # per transaction (direct MX; see bench.mix's egress figures)
    smtp_parallel: float = 1.0  # SMTP transactions at once per invocation (measured)
    egress: str = "direct"
    table_warm_wru: float = TABLE_INITIAL_WRU
    table_warm_rru: float = TABLE_INITIAL_RRU
    table_quota: float = TABLE_QUOTA_UNITS
    api_rps: float = API_RPS
    ssm_rps: float = SSM_RPS

    @classmethod
    def default(cls, tpl_params: Mapping[str, Any] | None = None, **kw: Any) -> Settings:
        from mailqueue_local.cfn import load_template

        params = tpl_params or load_template(ROOT / "template.yaml").get("Parameters", {})
        conc = float(params["DeliveryMaxConcurrency"]["Default"]) + float(
            params.get("BulkDeliveryMaxConcurrency", {}).get("Default", 0)
        )
        return cls(name="default template", delivery_concurrency=conc, **kw)

    @classmethod
    def high_volume(cls, **kw: Any) -> Settings:
        return cls(
            name="high-volume settings (docs/deploy.md)",
            delivery_concurrency=float(
                HIGH_VOLUME["DeliveryMaxConcurrency"] + HIGH_VOLUME["BulkDeliveryMaxConcurrency"]
            ),
            account_concurrency=float(HIGH_VOLUME["account_concurrency"]),
            mails_per_call=int(HIGH_VOLUME["mails_per_call"]),
            table_warm_wru=float(HIGH_VOLUME["warm_units"]),
            table_warm_rru=float(HIGH_VOLUME["warm_units"]),
            table_quota=float(HIGH_VOLUME["table_units"]),
            **kw,
        )


def delivery_seconds_per_mail(p: Profile, s: Settings) -> float:
    """Delivery's Lambda time per mail with full batches: the measured work plus each
    record's SMTP transaction, `smtp_parallel` of a batch's at once."""
    par = max(1.0, min(s.smtp_parallel, float(s.batch_size)))
    return p.fn_seconds.get("delivery", 0.0) + p.smtp_transactions * s.smtp_ms / 1000 / par


@dataclass(frozen=True)
class Load:
    limit: str
    scope: str
    per_mail: float  # load per mail/s (units/s, requests/s, concurrent executions...)
    capacity: float
    doc: str
    adjustable: bool

    def at(self, rate: float) -> float:
        return self.per_mail * rate

    def share(self, rate: float) -> float:
        return self.at(rate) / self.capacity if self.capacity else 0.0

    @property
    def max_rate(self) -> float:
        return self.capacity / self.per_mail if self.per_mail > 0 else math.inf


DOCS = {
    "partition": "warm-throughput-scenarios; throttling-key-range-limit-exceeded-mitigation",
    "table": "pre-warming-on-demand-capacity-mode; on-demand-capacity-mode",
    "lambda": "gettingstarted-limits (Lambda quotas)",
    "esm": "services-sqs-scaling",
    "sqs": "quotas-queues (SQS standard queue quotas)",
    "api": "apigateway limits",
    "s3": "optimizing-performance (S3)",
    "secrets": "secretsmanager reference_limits",
    "ssm": "parameter-store-throughput; general/gr/ssm.html",
    "nat": "nat-gateway-basics",
}


def loads(p: Profile, s: Settings) -> list[Load]:
    """Every modelled limit's load per mail/s for a profile under settings."""
    out: list[Load] = []
    for (target, fam), u in sorted(p.key_wru.items()):
        if u > 0:
            out.append(
                Load(
                    "DynamoDB writes per partition key value",
                    f"{target} {fam!r}",
                    u,
                    PARTITION_WCU,
                    DOCS["partition"],
                    False,
                )
            )
    for (target, fam), u in sorted(p.key_rru.items()):
        if u > 0:
            out.append(
                Load(
                    "DynamoDB reads per partition key value",
                    f"{target} {fam!r}",
                    u,
                    PARTITION_RCU,
                    DOCS["partition"],
                    False,
                )
            )
    for target, u in sorted(p.target_wru.items()):
        out.append(
            Load(
                "DynamoDB on-demand writes (warm throughput)",
                target,
                u,
                s.table_warm_wru,
                DOCS["table"],
                True,
            )
        )
        out.append(
            Load("DynamoDB table quota (writes)", target, u, s.table_quota, DOCS["table"], True)
        )
    for target, u in sorted(p.target_rru.items()):
        out.append(
            Load(
                "DynamoDB on-demand reads (warm throughput)",
                target,
                u,
                s.table_warm_rru,
                DOCS["table"],
                True,
            )
        )
    deliv = delivery_seconds_per_mail(p, s)
    out.append(
        Load(
            "SQS event source MaximumConcurrency (delivery)",
            "delivery",
            deliv,
            min(s.delivery_concurrency, 2 * ESM_MAX),
            DOCS["esm"],
            True,
        )
    )
    total = deliv + sum(v for f, v in p.fn_seconds.items() if f != "delivery")
    for f, v in sorted(p.fn_seconds.items()):
        # each function scales by 1,000 environments per 10 s ("Lambda scaling behavior"):
        # the concurrency it needs, within the account's
        out.append(
            Load(
                "Lambda concurrency of one function (of the account's)",
                f,
                deliv if f == "delivery" else v,
                s.account_concurrency,
                DOCS["lambda"],
                True,
            )
        )
    out.append(
        Load(
            "Lambda concurrent executions (account)",
            "all functions",
            total,
            s.account_concurrency,
            DOCS["lambda"],
            True,
        )
    )
    for q, v in sorted(p.sends.items()):
        # a message is in flight from its receive to its delete: an invocation's length
        per_inv = deliv / max(1e-9, p.delivery_records) * s.batch_size
        out.append(
            Load(
                "SQS in-flight messages per queue", q, v * per_inv, SQS_IN_FLIGHT, DOCS["sqs"], True
            )
        )
    out.append(
        Load(
            "API Gateway requests/s (account)",
            f"{s.mails_per_call} mail(s) per call",
            1.0 / max(1, s.mails_per_call),
            s.api_rps,
            DOCS["api"],
            True,
        )
    )
    for fam, v in sorted(p.s3_put.items()):
        out.append(
            Load("S3 PUT/COPY/DELETE per prefix", fam, v, S3_PUT_PER_PREFIX, DOCS["s3"], False)
        )
    for fam, v in sorted(p.s3_get.items()):
        out.append(Load("S3 GET/HEAD per prefix", fam, v, S3_GET_PER_PREFIX, DOCS["s3"], False))
    # cached per container for 300 s (outbound/secrets.py, outbound/dkim.py): each
    # delivery container reads each secret once per 5 minutes
    containers_per_mail = deliv
    out.append(
        Load(
            "Secrets Manager GetSecretValue/s",
            "delivery containers",
            containers_per_mail * p.secrets_per_container / 300,
            SECRETS_RPS,
            DOCS["secrets"],
            False,
        )
    )
    out.append(
        Load(
            "SSM GetParameter/s",
            "delivery containers",
            containers_per_mail * p.ssm_per_container / 300,
            s.ssm_rps,
            DOCS["ssm"],
            True,
        )
    )
    if s.egress == "direct":
        # every SMTP transaction in progress holds a connection; all of them to one
        # destination (one MX address: the worst case)
        par = max(1.0, min(s.smtp_parallel, float(s.batch_size)))
        out.append(
            Load(
                "NAT gateway connections per destination",
                "one MX address (worst case)",
                deliv * par,
                NAT_PER_DESTINATION,
                DOCS["nat"],
                True,
            )
        )
    return out


#: limits that bound a step up from idle, not a sustained rate: an on-demand table takes
#: twice its previous peak at once and grows to any rate under its quota within 30
#: minutes a doubling ("DynamoDB on-demand capacity mode", initial throughput and scaling
#: properties); the burst model (`burst`) applies them, the sustained rate does not
RAMP_LIMITS = (
    "DynamoDB on-demand writes (warm throughput)",
    "DynamoDB on-demand reads (warm throughput)",
)


def sustainable(p: Profile, s: Settings) -> tuple[float, Load]:
    """The highest mails/s every limit allows once the deployment has scaled to it (the
    ramp limits, RAMP_LIMITS, apart), and the limit that binds first."""
    ls = [x for x in loads(p, s) if x.limit not in RAMP_LIMITS]
    first = min(ls, key=lambda x: x.max_rate)
    return first.max_rate, first


def quota_increases(p: Profile, s: Settings, rate: float, headroom: float = 0.5) -> list[str]:
    """What the settings need raised so that every adjustable limit stays under
    `headroom` at `rate`, and what cannot be raised."""
    out = []
    for x in loads(p, s):
        if x.share(rate) <= headroom:
            continue
        need = x.at(rate) / headroom
        if x.limit.startswith("SQS event source") and need > 2 * ESM_MAX:
            out.append(
                f"{x.limit} ({x.scope}): {need:,.0f} needed, more than two mappings' "
                f"{2 * ESM_MAX:,.0f} allow — SMTP transactions at once per invocation "
                "(branch delivery-concurrency) or more queues"
            )
        elif x.adjustable:
            out.append(f"{x.limit} ({x.scope}): {x.capacity:,.0f} → {need:,.0f}")
        elif x.limit.startswith("S3"):
            out.append(
                f"{x.limit} ({x.scope}): {x.share(rate):.0%} at {rate:,.0f}/s — S3 partitions "
                "a busy prefix by itself over time; hashed key prefixes start wider"
            )
        else:
            out.append(
                f"{x.limit} ({x.scope}): {x.share(rate):.0%} at {rate:,.0f}/s — NOT adjustable "
                "(a layout change)"
            )
    return out


# ---------------------------------------------------------------- the burst
@dataclass
class Burst:
    submitted_s: float
    drained_s: float
    peak_concurrency: float
    binding: str
    submit_binding: str


def burst(
    p: Profile, s: Settings, mails: float = 1e6, window_s: float = 300.0, step: float = 1.0
) -> Burst:
    """`mails` submitted through the batch route in `window_s` seconds: the submission
    (limited by what its own loads allow), then the queue drained by delivery as the
    SQS event source scales (5 batches, +300 per minute) up to its MaximumConcurrency,
    under the other limits. A second-by-second simulation."""
    ingress = replace(
        p, key_wru=dict(p.key_ingress_wru), key_rru={}, target_rru={}, sends={}, s3_get={}
    )
    ingress.fn_seconds = {"ingress": p.fn_seconds.get("ingress", 0.0)}
    sub_loads = [
        x
        for x in loads(ingress, s)
        if x.limit.startswith(("DynamoDB writes per", "API Gateway", "Lambda concurrent"))
    ]
    sub_cap = min((x.max_rate for x in sub_loads), default=math.inf)
    sub_bind = min(sub_loads, key=lambda x: x.max_rate).limit if sub_loads else "-"
    want = mails / window_s
    sub_rate = min(want, sub_cap)
    # delivery's other limits (everything but its concurrency and the table's warm
    # throughput): the steady ceiling; the table's on-demand throughput doubles at most
    # every 30 minutes from its warm level up to the table quota
    everything = loads(p, s)
    warm = [x for x in everything if x.limit in RAMP_LIMITS]
    others = [
        x for x in everything if not x.limit.startswith(("SQS event source", "DynamoDB on-demand"))
    ]
    ceiling = min((x.max_rate for x in others), default=math.inf)
    ceil_bind = min(others, key=lambda x: x.max_rate).limit if others else "-"

    def table_rate(t: float) -> float:
        grow = 2 ** (t / (DOUBLING_MINUTES * 60))
        return min(
            (min(x.capacity * grow, s.table_quota) / x.per_mail for x in warm if x.per_mail),
            default=math.inf,
        )

    deliv = delivery_seconds_per_mail(p, s)
    t = 0.0
    submitted = delivered = 0.0
    conc = ESM_START
    peak = conc
    binding = "queue empty"
    while delivered < mails - 1e-6 and t < 7 * 86400:
        add = min(sub_rate * step, mails - submitted)
        submitted += add
        backlog = submitted - delivered
        by_conc = conc / deliv if deliv > 0 else math.inf
        by_table = table_rate(t)
        rate = min(by_conc, ceiling, by_table)
        if backlog > rate * step:
            cap = min(s.delivery_concurrency, ESM_MAX * 2)
            binding = (
                ("event source scaling" if conc < cap else f"MaximumConcurrency ({cap:,.0f})")
                if rate == by_conc
                else ("table warm throughput (doubling)" if rate == by_table else ceil_bind)
            )
        delivered += min(backlog, rate * step)
        if backlog > conc * s.batch_size:  # messages waiting: the mapping scales up
            # (by the event source's 300 a minute; Lambda's own 1,000 per 10 s is faster)
            up = min(ESM_ADD_PER_MIN / 60, SCALE_PER_10S / 10) * step
            conc = min(s.delivery_concurrency, ESM_MAX * 2, conc + up)
        peak = max(peak, conc)
        t += step
    return Burst(mails / sub_rate, t, peak, binding, sub_bind)


# ---------------------------------------------------------------- the report
def report(
    p: Profile, smtp_parallel: float = 1.0, parallel_note: str = "", target: float = 10_000.0
) -> list[str]:
    d = Settings.default(smtp_parallel=smtp_parallel)
    h = Settings.high_volume(smtp_parallel=smtp_parallel)
    L = [
        "### Scale: AWS's documented limits under the measured mix (bench/model/scale.py)",
        "",
        "Per mail of the mix, from the runs' request traces and the table's stream (keys "
        "read from the template's key schemas and the items written: a new layout is "
        "measured, not assumed); SMTP at "
        f"{d.smtp_ms:.0f} ms per transaction to a direct MX, {d.smtp_parallel:.1f} "
        f"transaction(s) at once per invocation {parallel_note}. Each limit's page is cited "
        "in bench/model/scale.py. Per key: the load on each value of a key family (values folded "
        "on their ids, numbers and short suffixes), spread over the values the run saw; families with "
        "a value per mail (the table's M#<id>) do not grow with the rate and are left out. "
        "The sweeper's requests (every 5 minutes, whatever the rate) and reads made once per "
        "container (cached: "
        + (", ".join(f"{t} {f!r}" for t, f in sorted(p.cached_reads)) or "none")
        + ") are left out. "
        f"High-volume settings: {HIGH_VOLUME}.",
        "",
        f"| limit | scope | load per mail/s | limit | max mails/s (default) | at {target:,.0f}/s, "
        "high-volume settings |",
        "|---|---|---:|---:|---:|---:|",
    ]
    lh = {(x.limit, x.scope): x for x in loads(p, h)}
    # a limit whose scope names the setting (API requests: "1 mail(s) per call" by default,
    # 50 with the high-volume settings) is matched on the limit alone
    by_limit: dict[str, list[Load]] = {}
    for x in loads(p, h):
        by_limit.setdefault(x.limit, []).append(x)
    for x in sorted(loads(p, d), key=lambda x: x.max_rate):
        alone = by_limit.get(x.limit, [])
        y = lh.get((x.limit, x.scope)) or (alone[0] if len(alone) == 1 else x)
        ramp = " (from idle: then doubles every 30 min)" if x.limit in RAMP_LIMITS else ""
        L.append(
            f"| {x.limit} | {x.scope} | {x.per_mail:.4g} | {x.capacity:,.0f} | "
            f"{x.max_rate:,.0f}{ramp} | {y.share(target):.0%} |"
        )
    L.append("")
    for s in (d, h):
        r, b = sustainable(p, s)
        L.append(
            f"- **{s.name}: {r:,.0f} mails/s sustainable**; binds first: {b.limit} ({b.scope})."
        )
    L.append("")
    inc = quota_increases(p, h, target)
    L.append(
        f"High-volume settings at {target:,.0f} mails/s, what keeps a limit above 50 %"
        + (":" if inc else ": nothing.")
    )
    L.append("")
    L += [f"- {x}" for x in inc]
    L.append("")
    L.append(
        "| burst: 1 M mails through the batch route in 5 minutes | accepted in | drained in | peak delivery concurrency | delivery bound by |"
    )
    L.append("|---|---:|---:|---:|---|")
    for s in (d, h):
        b = burst(p, replace(s, mails_per_call=HIGH_VOLUME["mails_per_call"]))
        L.append(
            f"| {s.name} | {b.submitted_s / 60:,.1f} min ({b.submit_binding}) | "
            f"{_hm(b.drained_s)} | {b.peak_concurrency:,.0f} | {b.binding} |"
        )
    return L


def _hm(s: float) -> str:
    return f"{s / 3600:.1f} h" if s >= 3600 else f"{s / 60:.1f} min"
