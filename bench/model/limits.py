"""The limits that bind first at 10,000 mails/s (issue 40, deliverables 3 and 4).

    python -m bench.mix            # `make bench`: prints this table after the scale model's

bench/model/scale.py models what the measured runs put on AWS's per-request limits (DynamoDB
per key value and per table, Lambda, SQS, API Gateway, S3, Secrets Manager, SSM, NAT
connections per destination). This module adds every other limit on the path of a mail
at 10,000 mails/s, each with its documentation page (title and URL below), and evaluates
all of them for four deployments: the default template (relay mode, its default, and
EgressMode=direct) and the settings docs/deploy.md names for 10,000 mails/s (relay and
direct). For each: the use of each limit at the target rate of the measured mix, the one
that binds first, and the quota increases to request.

What no one publishes is an assumption, named in ASSUMPTIONS with its source: the
top sites' shares of the recipients, what a big receiver accepts per sending IP, packets
and bytes per SMTP transaction, the share of mail submitted over SMTP.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from bench.model import assumptions as cost_model
from bench.model import scale
from bench.model.awslambda import FULL_VCPU_MB, cpu_factor, lambda_seconds
from bench.model.run import Run
from bench.model.state_table import state_write_units
from bench.model.template import Template

TARGET = 10_000.0
HEADROOM = 0.5  # the named settings keep every limit at or under this use
ROOT = Path(__file__).resolve().parent.parent.parent

# ---------------------------------------------------------------- documented limits
#: The events function's stream: Lambda reads each shard with one batch at a time by
#: default; ParallelizationFactor 1-10 batches at once per shard, "Lambda still ensures
#: in-order processing at the item (partition and sort key) level". "Using AWS Lambda
#: with Amazon DynamoDB", Polling and batching streams:
#: https://docs.aws.amazon.com/lambda/latest/dg/with-ddb.html
#: BatchSize up to 10,000, MaximumBatchingWindowInSeconds up to 300: "Lambda parameters
#: for Amazon DynamoDB event source mappings":
#: https://docs.aws.amazon.com/lambda/latest/dg/services-ddb-params.html
PARALLELIZATION_MAX = 10
#: A stream shard per table partition (an assumption AWS does not state as a rule: "each
#: DynamoDB partition maps to a single stream shard", AWS Database Blog, "Build scalable,
#: event-driven architectures with Amazon DynamoDB and AWS Lambda", 2024); a partition
#: serves 1,000 WCU and 3,000 RCU (bench.model.scale.PARTITION_WCU/RCU) and a new on-demand
#: table starts with 4,000 WRU/s: 4 partitions (bench.model.assumptions.ASSUMPTIONS["stream_shards"]).
NEW_TABLE_PARTITIONS = float(cost_model.ASSUMPTIONS["stream_shards"])  # type: ignore[arg-type]
#: The VPC resolver: "Each EC2 instance can send 1024 packets per second per network
#: interface to Route 53 Resolver (specifically the .2 address ...). This quota cannot
#: be increased." "Amazon VPC quotas", DNS:
#: https://docs.aws.amazon.com/vpc/latest/userguide/amazon-vpc-limits.html#vpc-limits-dns
#: Lambda in a VPC sends through a Hyperplane ENI per subnet (and security-group set) it
#: is configured with ("Giving Lambda functions access to resources in an Amazon VPC":
#: https://docs.aws.amazon.com/lambda/latest/dg/configuration-vpc.html): the template's
#: delivery function has one per private subnet, one subnet per NAT gateway.
RESOLVER_PPS_PER_ENI = 1_024.0
#: Uncached delivery resolves MX, A and AAAA per mail (outbound/routing.py before the
#: DNS cache of issue 40 deliverable 1); the cache's measured figure, when its bench has
#: written it, replaces this (bench/measured/dns.json, key warm_queries_per_mail).
UNCACHED_QUERIES_PER_MAIL = 3.0
DNS_MEASURED = ROOT / "bench" / "measured" / "dns.json"
#: NAT gateway: "supports 5 Gbps of bandwidth and automatically scales up to 100 Gbps";
#: "can process one million packets per second and automatically scales up to ten
#: million packets per second. Beyond this limit, a NAT gateway will drop packets";
#: "Each IPv4 address can support up to 55,000 simultaneous connections to each unique
#: destination ... associating up to 8 IPv4 addresses to your NAT Gateways (1 primary
#: and 7 secondary)"; "limited to associating 2 Elastic IP addresses to your public NAT
#: gateway by default" (quota up to 8). "NAT gateway basics":
#: https://docs.aws.amazon.com/vpc/latest/userguide/nat-gateway-basics.html and "Amazon
#: VPC quotas", Elastic IP addresses per public NAT gateway (2, adjustable up to 8):
#: https://docs.aws.amazon.com/vpc/latest/userguide/amazon-vpc-limits.html#vpc-limits-eips
NAT_GBPS_MAX = 100.0
NAT_PPS_MAX = 10_000_000.0
NAT_ADDRESSES_MAX = 8
NAT_EIPS_DEFAULT = 2
#: SES: "Quotas are based on the number of recipients, rather than on the number of
#: messages"; sandbox 1 email/s and 200 a day; out of the sandbox the sending rate "varies
#: based on your specific use case" (adjustable). "Service quotas in Amazon SES":
#: https://docs.aws.amazon.com/ses/latest/dg/quotas.html
SES_SANDBOX_RATE = 1.0
#: SMTP front door: Fargate tasks of 0.25 vCPU (template SmtpTaskDefinition Cpu 256,
#: SmtpDesiredCount, at most 50); the capacity of a task is its vCPU over the CPU a mail
#: costs there, measured by `make bench-smtp` (docs/benchmarks.md, "SMTP front door":
#: 9.9 ms a 1 KB mail, 20.8 ms a 100 KB mail, smtpd and the ingress service together).
SMTP_TASK_VCPU = 0.25
SMTP_TASKS_MAX = 50
SMTP_CPU_MS = {1: 9.9, 100: 20.8}  # KB -> ms
#: Lambda: 1,000 concurrent executions per Region (adjustable); each function scales by
#: 1,000 environments every 10 s (bench.model.scale.ACCOUNT_CONCURRENCY, SCALE_PER_10S).

# ---------------------------------------------------------------- the site limiter
#: The shaping state of a site spread over N items (issue 40, deliverable 2: another
#: helper's branch; `mailqueue.outbound.shaping.site_shards` where it is merged): each
#: shard item takes at most SITE_SHARD_MAX_RATE grants/s, N = min(64, max(1,
#: ceil(rate / 200))) from the site's configured rate.
try:  # the limiter's own constants once it is merged
    from mailqueue.outbound import shaping as _shaping

    SITE_SHARD_MAX_RATE = float(_shaping.SITE_SHARD_MAX_RATE)  # type: ignore[attr-defined]
    SITE_SHARDS_MAX = int(_shaping.SITE_SHARDS_MAX)  # type: ignore[attr-defined]
except (ImportError, AttributeError):  # not merged yet: the design it follows
    SITE_SHARD_MAX_RATE = 200.0
    SITE_SHARDS_MAX = 64
#: limiter writes per delivered mail on the site's items: one conditional write per grant
#: (issue 40's figure; bench.shaping measures 0.42-0.57 requests a mail warm at a
#: 10-connection site, docs/benchmarks.md "Traffic shaping", so 1.0 is the upper side)
LIMITER_WRITES_PER_MAIL = 1.0
PACKAGED_SHAPING = ROOT / "shared" / "mailqueue" / "data" / "shaping.json"

#: What is assumed, not measured or documented, with where it comes from.
ASSUMPTIONS: dict[str, Any] = {
    # the top sites' shares of recipients: a 2.3 M-address US-centric sample, 2019:
    # Google 39 %, Microsoft 35 %, Yahoo 18 % (Daniel Lange, "Google GMail continues to
    # own the email market, Microsoft is catching up", http://daniel-lange.com/plugin/tag/email);
    # Mapp's Global Provider Report gives Gmail 50.1 % of US addresses (as reported by
    # devicedaily.com, "Gmail Is Top Webmail Service — Except In Some Countries"). The
    # packaged synthetic traffic (pipeline/mq_pipeline/synth.py: Zipf s=1.1 over 3,000
    # domains) gives gmail.com 16 %, outlook.com + hotmail.com 11 %: far less skewed.
    "site_shares": {"google": 0.39, "microsoft": 0.35, "yahoo": 0.18},
    "site_shares_source": "Lange 2019 (US sample of 2.3 M addresses)",
    # what a big receiver accepts from one sending IP: none publishes a figure (Gmail
    # throttles per IP against the IP's history: 421-4.7.28, Zoho Campaigns' guide "Why
    # Gmail rate limits your marketing emails"); assumed: the project's packaged per-site
    # rate (shaping.json default and google: 50 mails/s) per warmed IP
    "receiver_mails_per_s_per_ip": 50.0,
    # a warm-up doubles a site's rate every two days ("start with hundreds of messages a
    # day and roughly double every few days over 2-4 weeks": simplefastwebsites.com,
    # "Gmail 421-4.7.28 ... (IP rate limited)")
    "warmup_days_per_doubling": 2.0,
    # packets through the NAT per SMTP transaction: the TCP and TLS handshakes and the
    # SMTP dialogue (~30 packets both ways) plus the message in 1,448-byte segments, each
    # acknowledged; bytes: the message plus ~6 KB of TLS and SMTP overhead
    "packets_per_transaction_fixed": 30.0,
    "transaction_overhead_bytes": 6_000.0,
    # SES: a production account's sending rate before any increase is granted per use
    # case; 50/s is the starter quota one user reports (re:Post, "max number of sending
    # emails of ses"); AWS publishes none outside the sandbox
    "ses_rate_granted": 50.0,
    # mail submitted over the SMTP front door (the rest through the HTTP API)
    "smtp_share": 1.0,
}


# ---------------------------------------------------------------- deployments
@dataclass(frozen=True)
class Deployment:
    """What a deployment allows, beyond bench.model.scale.Settings."""

    name: str
    scale: scale.Settings
    egress: str = "relay"
    events_parallelization: int = 1
    events_batch: int = 1000
    events_window_s: float = 60.0
    events_memory_mb: int = 128
    delivery_memory_mb: int = 512
    warm_partitions: float = NEW_TABLE_PARTITIONS
    nat_gateways: int = 2
    eips_per_nat: int = 1
    smtp_tasks: int = 2
    smtp_share: float = 1.0
    ses_rate: float = 50.0
    shaping: bool = False
    site_rates: Mapping[str, float] = field(default_factory=dict)  # configured mails/s
    dns_queries_per_mail: float = UNCACHED_QUERIES_PER_MAIL
    dns_source: str = ""
    dns_steady: Mapping[float, float] = field(default_factory=dict)

    @property
    def sending_ips(self) -> int:
        return self.nat_gateways * self.eips_per_nat


@functools.cache
def packaged_site_rates(path: Path = PACKAGED_SHAPING) -> dict[str, float]:
    """Each packaged site's long-run rate (its slowest rate, mails/s): google 50/s,
    microsoft 30,000/h = 8.3/s, yahoo 20/s, every other site the default's 50/s."""
    doc = json.loads(path.read_text())

    def slowest(rule: Mapping[str, Any]) -> float:
        return min(float(r["messages"]) / _seconds(r["per"]) for r in rule["rates"])

    out = {"default": slowest(doc["default"])}
    for site, rule in doc.get("sites", {}).items():
        out[site] = slowest({**doc["default"], **rule})
    return out


def _seconds(per: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    return float(per[:-1] or 1) * units[per[-1]]


def dns_queries_per_mail(path: Path = DNS_MEASURED) -> tuple[float, str]:
    """The measured warm figure of the delivery DNS cache, else the uncached 3 a mail."""
    try:
        v = float(json.loads(path.read_text())["warm_queries_per_mail"])
        shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        return v, f"measured warm, {shown}"
    except (OSError, KeyError, ValueError, TypeError):
        return UNCACHED_QUERIES_PER_MAIL, "uncached MX+A+AAAA (bench/measured/dns.json not written)"


@functools.cache
def _template(tpl_path: Path) -> tuple[dict[str, Any], Template]:
    from mailqueue_local.cfn import load_template

    params = load_template(tpl_path).get("Parameters", {})
    return {k: v.get("Default") for k, v in params.items()}, Template.load(tpl_path)


def dns_steady(path: Path = DNS_MEASURED) -> dict[float, float]:
    """Queries a mail in the steady state past the TTLs, by mails/s a container (the DNS
    bench's `steady_queries_per_mail_by_container_rate`; empty when not written)."""
    try:
        doc = json.loads(path.read_text())["steady_queries_per_mail_by_container_rate"]
        return {float(k): float(v) for k, v in doc.items()}
    except (OSError, KeyError, ValueError, TypeError, AttributeError):
        return {}


def steady_at(table: Mapping[float, float], per_container: float) -> float:
    """The steady queries a mail at a container's rate (log-linear between the points,
    the end points beyond them)."""
    xs = sorted(table)
    if per_container <= xs[0]:
        return table[xs[0]]
    for a, b in zip(xs, xs[1:], strict=False):
        if per_container <= b:
            t = math.log(per_container / a) / math.log(b / a)
            return table[a] + (table[b] - table[a]) * t
    return table[xs[-1]]


def template_params(tpl_path: Path = ROOT / "template.yaml") -> dict[str, Any]:
    return dict(_template(tpl_path)[0])


def default_deployment(
    params: Mapping[str, Any] | None = None, egress: str | None = None, smtp_parallel: float = 1.0
) -> Deployment:
    """The template's defaults (EgressMode relay unless `egress` says direct)."""
    p = dict(params or template_params())
    s = scale.Settings.default(smtp_parallel=smtp_parallel)
    eg = egress or str(p.get("EgressMode", "relay"))
    q, src = dns_queries_per_mail()
    tpl = _template(ROOT / "template.yaml")[1]
    return Deployment(
        name=f"default template ({eg})",
        scale=replace(s, egress=eg, smtp_ms=_smtp_ms(eg)),
        egress=eg,
        events_parallelization=int(p.get("EventsParallelizationFactor", 1) or 1),
        events_batch=int(p.get("EventsBatchSize", 1000)),
        events_window_s=float(p.get("EventsBatchingWindowSeconds", 60)),
        events_memory_mb=tpl.memory_mb.get("events", 128),
        delivery_memory_mb=tpl.memory_mb.get("delivery", 512),
        nat_gateways=int(p.get("NatGateways", 2)),
        smtp_tasks=int(p.get("SmtpDesiredCount", 2)),
        smtp_share=float(ASSUMPTIONS["smtp_share"]),
        ses_rate=float(ASSUMPTIONS["ses_rate_granted"]),
        shaping=str(p.get("Shaping", "false")) == "true",
        site_rates=packaged_site_rates(),
        dns_queries_per_mail=q,
        dns_source=src,
        dns_steady=dns_steady(),
    )


#: the settings docs/deploy.md names for 10,000 mails/s (section "10,000 mails a second");
#: beyond bench.model.scale.HIGH_VOLUME (concurrency, batch submission, Lambda and DynamoDB
#: quotas, the table's warm throughput)
NAMED = {
    "EventsParallelizationFactor": 1,  # the model: 1 suffices at one vCPU (the stream row)
    # direct: the operator's own network (SubnetIds, Pool2SubnetIds), each private subnet
    # routed through a NAT gateway of its own: 20 gateways, one subnet (one Hyperplane ENI)
    # each, split over two egress pools (the default and Pool2: a Lambda function's
    # VpcConfig takes at most 16 subnets, "Giving Lambda functions access to resources in
    # an Amazon VPC"), 160 sending IPs; relay: the template's own three
    "NatGateways": {"relay": 3, "direct": 20},
    "eips_per_nat": 8,  # quota increase: Elastic IP addresses per public NAT gateway 2 -> 8
    "smtp_share": 0.05,  # submission by the batch API; the SMTP door for up to 5 %
    "SmtpDesiredCount": 50,
    "ses_rate": 2 * TARGET,  # quota increase: SES sending rate (recipients/s)
    "Shaping": True,
    "DeliveryMemorySize": {"relay": 512, "direct": 1024},  # the SQS event source row
}


def named_deployment(egress: str, smtp_parallel: float = 1.0) -> Deployment:
    """docs/deploy.md's settings for 10,000 mails/s, in relay or direct mode: shaping on,
    each big site's rate raised to carry its share at half its limit (a cap raised by
    the operator, after the warm-up `warmup_days` gives)."""
    d = default_deployment(egress=egress, smtp_parallel=smtp_parallel)
    h = scale.Settings.high_volume(smtp_parallel=smtp_parallel)
    raised = dict(d.site_rates)
    for site, share in ASSUMPTIONS["site_shares"].items():
        raised[site] = max(raised.get(site, 0.0), share * TARGET / HEADROOM)
    return replace(
        d,
        name=f"named for 10,000/s ({egress})",
        scale=replace(h, egress=egress, smtp_ms=_smtp_ms(egress)),
        events_parallelization=int(NAMED["EventsParallelizationFactor"]),
        delivery_memory_mb=int(NAMED["DeliveryMemorySize"][egress]),  # type: ignore[index]
        warm_partitions=float(scale.HIGH_VOLUME["warm_units"]) / scale.PARTITION_WCU,
        nat_gateways=int(NAMED["NatGateways"][egress]),  # type: ignore[index]
        eips_per_nat=int(NAMED["eips_per_nat"]),
        smtp_tasks=int(NAMED["SmtpDesiredCount"]),
        smtp_share=float(NAMED["smtp_share"]),
        ses_rate=float(NAMED["ses_rate"]),
        shaping=bool(NAMED["Shaping"]),
        site_rates=raised,
    )


def _smtp_ms(egress: str) -> float:
    key = "smtp_ms_per_mail_direct" if egress == "direct" else "smtp_ms_per_mail_relay"
    return float(cost_model.ASSUMPTIONS[key])  # type: ignore[arg-type]


# ---------------------------------------------------------------- the stream
@dataclass(frozen=True)
class StreamCost:
    """The events function's work, measured: per stream record (CPU on a whole core) and
    per invocation (AWS's answer times of its requests, Lambda's own 0.5 ms)."""

    records_per_mail: float
    cpu_s_per_record: float
    fixed_s_per_batch: float
    table_wru_per_mail: float
    table_rru_per_mail: float

    def seconds_per_mail(self, memory_mb: int, batch: float) -> float:
        per_record = self.cpu_s_per_record * cpu_factor(memory_mb)
        return self.records_per_mail * (per_record + self.fixed_s_per_batch / max(1.0, batch))


def stream_cost(runs: Mapping[str, Run], weights: Mapping[str, float], tpl: Template) -> StreamCost:
    """The events function's cost per mail of a weighted mix of measured runs."""
    rec = cpu = fixed = wru = rru = 0.0
    for name, w in weights.items():
        r = runs[name]
        n = max(1, r.mails)
        records = max(1, r.records_in.get("events", 0) or len(r.records))
        inv = max(1, r.invocations.get("events", 1))
        c = r.cpu_s.get("events", 0.0)
        total = lambda_seconds(r, "events", FULL_VCPU_MB, smtp=False)
        rec += w * records / n
        cpu += w * c / records * (records / n)
        fixed += w * max(0.0, total - c) / inv * (records / n)
        table_w, _ = state_write_units(r, tpl)
        wru += w * table_w / n
        rru += w * sum(r.rru.values()) / n
    return StreamCost(
        records_per_mail=rec,
        cpu_s_per_record=cpu / max(rec, 1e-9),
        fixed_s_per_batch=fixed / max(rec, 1e-9),
        table_wru_per_mail=wru,
        table_rru_per_mail=rru,
    )


def partitions(sc: StreamCost, d: Deployment, rate: float) -> float:
    """Table partitions (= stream shards) at a rate: what its warm throughput set up, or
    what its traffic has split it into (1,000 WCU / 3,000 RCU a partition)."""
    return max(
        d.warm_partitions,
        NEW_TABLE_PARTITIONS,
        sc.table_wru_per_mail * rate / scale.PARTITION_WCU,
        sc.table_rru_per_mail * rate / scale.PARTITION_RCU,
    )


def stream_batch(sc: StreamCost, d: Deployment, rate: float) -> float:
    """Records in one events batch: what one of a shard's concurrent batches gathers in
    the window, at most BatchSize (the records spread over the shards and their
    parallel batches)."""
    per_slot = sc.records_per_mail * rate / (partitions(sc, d, rate) * d.events_parallelization)
    return max(1.0, min(float(d.events_batch), per_slot * max(d.events_window_s, 0.2)))


def stream_concurrency(sc: StreamCost, d: Deployment, rate: float) -> tuple[float, float]:
    """(concurrent events invocations needed, concurrent batches the stream allows)."""
    need = sc.seconds_per_mail(d.events_memory_mb, stream_batch(sc, d, rate)) * rate
    return need, partitions(sc, d, rate) * d.events_parallelization


def parallelization_needed(sc: StreamCost, d: Deployment, rate: float = TARGET) -> int:
    """The least ParallelizationFactor keeping the stream at or under HEADROOM at `rate`
    (PARALLELIZATION_MAX when none does)."""
    for f in range(1, PARALLELIZATION_MAX + 1):
        need, cap = stream_concurrency(sc, replace(d, events_parallelization=f), rate)
        if need <= HEADROOM * cap:
            return f
    return PARALLELIZATION_MAX


# ---------------------------------------------------------------- the limits
@dataclass(frozen=True)
class Row:
    limit: str
    scope: str
    need: float  # at the rate
    capacity: float
    doc: str
    adjustable: bool
    note: str = ""
    # what to change when over: a setting and the capacity one unit of it gives
    setting: str = ""
    per_unit: float = 0.0

    @property
    def use(self) -> float:
        if self.capacity <= 0:
            return math.inf if self.need > 0 else 0.0
        return self.need / self.capacity


DOCS = {
    **scale.DOCS,
    "stream": "Using AWS Lambda with Amazon DynamoDB (with-ddb)",
    "resolver": "Amazon VPC quotas, DNS (amazon-vpc-limits#vpc-limits-dns)",
    "nat_basics": "NAT gateway basics (nat-gateway-basics)",
    "ses": "Service quotas in Amazon SES (ses/latest/dg/quotas)",
    "smtp": "measured: docs/benchmarks.md 'SMTP front door'; template SmtpDesiredCount",
    "site": "DynamoDB 1,000 WCU per key value (warm-throughput-scenarios); limiter shards",
    "shaping": "shared/mailqueue/data/shaping.json (the project's caps)",
    "per_ip": "assumption: ASSUMPTIONS['receiver_mails_per_s_per_ip']",
}


def mix_bytes(sizes: Mapping[str, float], weights: Mapping[str, float]) -> float:
    """The mix's average message size in bytes."""
    return sum(w * sizes[n] for n, w in weights.items())


def smtp_cpu_s(size_bytes: float) -> float:
    """CPU per mail at the SMTP front door, interpolated on the measured sizes."""
    (k1, v1), (k2, v2) = sorted(SMTP_CPU_MS.items())
    kb = size_bytes / 1024
    return (v1 + (v2 - v1) * (kb - k1) / (k2 - k1)) / 1000


def rows(
    p: scale.Profile, sc: StreamCost, d: Deployment, size_bytes: float, rate: float = TARGET
) -> list[Row]:
    """Every limit's need and capacity at `rate` mails/s of the mix under `d`."""
    batch = stream_batch(sc, d, rate)
    ev_s = sc.seconds_per_mail(d.events_memory_mb, batch)
    deliv = p.fn_seconds.get("delivery", 0.0)
    tpl_mem = _template(ROOT / "template.yaml")[1].memory_mb.get("delivery", 512)
    if d.delivery_memory_mb != tpl_mem:  # its CPU at the deployment's memory
        cpu = p.fn_cpu.get("delivery", 0.0)
        deliv += cpu * (cpu_factor(d.delivery_memory_mb) - cpu_factor(tpl_mem))
    prof = replace(p, fn_seconds={**p.fn_seconds, "events": ev_s, "delivery": deliv})
    out = [
        Row(x.limit, x.scope, x.at(rate), x.capacity, x.doc, x.adjustable)
        for x in scale.loads(prof, d.scale)
        if x.limit not in scale.RAMP_LIMITS
    ]
    if d.egress == "direct":  # more addresses per gateway: 55,000 each per destination
        out = [
            replace(r, capacity=r.capacity * d.eips_per_nat)
            if r.limit.startswith("NAT gateway connections")
            else r
            for r in out
        ]
    need, cap = stream_concurrency(sc, d, rate)
    out.append(
        Row(
            "DynamoDB stream: concurrent events batches (shards x ParallelizationFactor)",
            f"{partitions(sc, d, rate):,.0f} shards x {d.events_parallelization}, "
            f"batches of {batch:,.0f}",
            need,
            cap,
            DOCS["stream"],
            d.events_parallelization < PARALLELIZATION_MAX,
            f"events {ev_s * 1000:.1f} ms a mail at {d.events_memory_mb} MB",
            "StateTable WarmThroughput (write units / 1,000 = shards)",
            float(d.events_parallelization),
        )
    )
    rcpts = 1.0  # the mix: one recipient a mail (SES counts recipients)
    if d.egress == "relay":
        out.append(
            Row(
                "SES sending rate (recipients/s)",
                "account, Region",
                rcpts * rate,
                d.ses_rate,
                DOCS["ses"],
                True,
            )
        )
    out.append(
        Row(
            "SMTP front door (Fargate task CPU)",
            f"{d.smtp_tasks} tasks x {SMTP_TASK_VCPU} vCPU, {d.smtp_share:.0%} of mail by SMTP",
            d.smtp_share * rate * smtp_cpu_s(size_bytes),
            d.smtp_tasks * SMTP_TASK_VCPU,
            DOCS["smtp"],
            d.smtp_tasks < SMTP_TASKS_MAX,
            "",
            "SmtpDesiredCount (0.25 vCPU tasks; at most 50: beyond, submit by the batch API)",
            SMTP_TASK_VCPU,
        )
    )
    shares: Mapping[str, float] = ASSUMPTIONS["site_shares"]
    top, top_share = max(shares.items(), key=lambda kv: kv[1])
    if d.egress == "direct":
        out.append(
            Row(
                "VPC resolver packets/s per network interface",
                f"{d.nat_gateways} ENIs, {d.dns_queries_per_mail:g} queries a mail ({d.dns_source})",
                d.dns_queries_per_mail * rate / d.nat_gateways,
                RESOLVER_PPS_PER_ENI,
                DOCS["resolver"],
                False,
            )
        )
        if d.dns_steady:
            # past the TTLs each container renews the names it sends to: the DNS bench's
            # steady state at this deployment's mails/s a delivery container
            conc = next((r.need for r in out if r.limit.startswith("SQS event source")), 1.0)
            per_c = rate / max(1.0, conc)
            q = steady_at(d.dns_steady, per_c)
            out.append(
                Row(
                    "VPC resolver packets/s per network interface, steady state past the TTLs",
                    f"{d.nat_gateways} ENIs, {q:.2f} queries a mail at {per_c:.0f} mails/s a container",
                    q * rate / d.nat_gateways,
                    RESOLVER_PPS_PER_ENI,
                    DOCS["resolver"],
                    False,
                )
            )
        tx_bytes = size_bytes + float(ASSUMPTIONS["transaction_overhead_bytes"])
        out.append(
            Row(
                "NAT gateway bandwidth (Gbps per gateway)",
                f"{d.nat_gateways} gateways",
                rate * tx_bytes * 8 / 1e9 / d.nat_gateways,
                NAT_GBPS_MAX,
                DOCS["nat_basics"],
                False,
                "from 5 Gbps, scales by itself",
            )
        )
        pk = float(ASSUMPTIONS["packets_per_transaction_fixed"]) + 2 * math.ceil(tx_bytes / 1448)
        out.append(
            Row(
                "NAT gateway packets/s per gateway",
                f"{d.nat_gateways} gateways, {pk:.0f} packets a mail",
                rate * pk / d.nat_gateways,
                NAT_PPS_MAX,
                DOCS["nat_basics"],
                False,
                "from 1 M/s, scales by itself",
            )
        )
        out.append(
            Row(
                f"receivers' acceptance per sending IP (busiest: {top})",
                f"{d.sending_ips} sending IPs, {top} {top_share:.0%} of mail",
                top_share * rate,
                float(ASSUMPTIONS["receiver_mails_per_s_per_ip"]) * d.sending_ips,
                DOCS["per_ip"],
                True,
                "",
                "sending IPs (NAT gateways x Elastic IPs, at most 8 each; egress pools)",
                float(ASSUMPTIONS["receiver_mails_per_s_per_ip"]),
            )
        )
    for site, share in sorted(shares.items(), key=lambda kv: -kv[1]):
        configured = d.site_rates.get(site, d.site_rates.get("default", 50.0))
        n = site_shards(configured)
        writes = share * rate * LIMITER_WRITES_PER_MAIL
        on = d.shaping
        out.append(
            Row(
                "site limiter writes per shard item (SITE)",
                f"{site} {share:.0%}: {n} shard(s) of its {configured:,.0f}/s"
                + ("" if on else " (shaping off: no limiter writes)"),
                writes / n if on else 0.0,
                scale.PARTITION_WCU,
                DOCS["site"],
                False,
            )
        )
        out.append(
            Row(
                "shaping cap per site (the operator raises it)",
                f"{site}: {configured:,.0f}/s configured"
                + ("" if on else " (shaping off: not applied)"),
                share * rate if on else 0.0,
                configured,
                DOCS["shaping"],
                True,
                warmup_note(site, share * rate / HEADROOM),
            )
        )
    return out


def site_shards(rate: float) -> int:
    """N = min(64, max(1, ceil(rate / 200))): the limiter's shard items for a site."""
    if rate <= 0:
        return 1
    return min(SITE_SHARDS_MAX, max(1, math.ceil(rate / SITE_SHARD_MAX_RATE - 1e-9)))


def warmup_note(site: str, rate: float) -> str:
    """The warm-up a raised site rate needs from the packaged one."""
    base = packaged_site_rates().get(site, packaged_site_rates()["default"])
    if rate <= base:
        return "within the packaged rate"
    doublings = math.ceil(math.log2(rate / base))
    days = doublings * float(ASSUMPTIONS["warmup_days_per_doubling"])
    return (
        f"{base:g}/s packaged -> {rate:,.0f}/s: {doublings} doublings, ~{days:.0f} days of warm-up"
    )


def binding(rs: Sequence[Row]) -> Row:
    return max(rs, key=lambda r: r.use)


def over(rs: Sequence[Row], headroom: float = HEADROOM) -> list[Row]:
    return [r for r in rs if r.use > headroom]


def increases(rs: Sequence[Row], headroom: float = HEADROOM) -> list[str]:
    """What to raise so every adjustable limit is at or under `headroom`, and the ones
    that are no quota."""
    out = []
    for r in over(rs, headroom):
        want = r.need / headroom
        if r.setting and r.per_unit > 0:
            have, need = r.capacity / r.per_unit, math.ceil(want / r.per_unit)
            out.append(f"{r.limit}: {r.setting} {_num(have)} -> {need:,}")
        elif r.adjustable:
            out.append(f"{r.limit} ({r.scope}): {_num(r.capacity)} -> {_num(want)}")
        else:
            out.append(f"{r.limit} ({r.scope}): {r.use:.0%} — not a quota ({r.doc})")
    return out


# ---------------------------------------------------------------- the report
def report(
    p: scale.Profile,
    sc: StreamCost,
    size_bytes: float,
    deployments: Sequence[Deployment],
    rate: float = TARGET,
) -> list[str]:
    per = [rows(p, sc, d, size_bytes, rate) for d in deployments]
    keys: list[tuple[str, str]] = []
    for rs in per:
        for r in rs:
            if (r.limit, _scope_key(r)) not in keys:
                keys.append((r.limit, _scope_key(r)))
    index = [{(r.limit, _scope_key(r)): r for r in rs} for rs in per]
    f_need = parallelization_needed(sc, deployments[-1], rate)
    L = [
        f"Per mail of the measured mix ({size_bytes / 1024:.1f} KB on average), at "
        f"{rate:,.0f} mails/s: each limit's need, capacity and use under four deployments. "
        "Each limit's page is cited in bench/model/limits.py (title and URL) and bench/model/scale.py; "
        "what no one publishes is an assumption (bench.model.limits.ASSUMPTIONS, with its "
        f"source): top sites' shares {ASSUMPTIONS['site_shares']} "
        f"({ASSUMPTIONS['site_shares_source']}), {ASSUMPTIONS['receiver_mails_per_s_per_ip']:g} "
        "mails/s accepted per sending IP by a big receiver. Stream: "
        f"{sc.records_per_mail:.2f} records a mail, {sc.cpu_s_per_record * 1000:.2f} ms CPU "
        f"a record on a whole core, {sc.fixed_s_per_batch * 1000:.1f} ms per batch "
        f"(its requests); ParallelizationFactor needed at {rate:,.0f}/s for "
        f"≤ {HEADROOM:.0%}: {f_need}.",
        "",
        "| limit | scope ("
        + deployments[-1].name
        + ") | "
        + " | ".join(f"use: {d.name}" for d in deployments)
        + " | page |",
        "|---|---|" + "---:|" * len(deployments) + "---|",
    ]

    def cell(r: Row | None) -> str:
        if r is None:
            return "–"
        u = r.use
        s = "∞" if math.isinf(u) else f"{u:.0%}"
        return f"**{s}**" if u > HEADROOM else s

    for k in sorted(keys, key=lambda k: -max((ix[k].use for ix in index if k in ix), default=0)):
        first = next(ix[k] for ix in index if k in ix)
        scope = next((ix[k].scope for ix in reversed(index) if k in ix), first.scope)
        L.append(
            f"| {k[0]} | {scope} | "
            + " | ".join(cell(ix.get(k)) for ix in index)
            + f" | {first.doc} |"
        )
    L.append("")
    for d, rs in zip(deployments, per, strict=True):
        b = binding(rs)
        L.append(
            f"- **{d.name}**: binds first: {b.limit} ({b.scope}) at {b.use:.0%}"
            + (f"; {b.note}" if b.note else "")
            + f"; {len(over(rs))} limit(s) above {HEADROOM:.0%}."
        )
    L.append("")
    L.append(
        f"Quota increases and changes for ≤ {HEADROOM:.0%} at {rate:,.0f} mails/s, from the default template:"
    )
    L.append("")
    for d, rs in zip(deployments, per, strict=True):
        if not d.name.startswith("default"):
            continue
        inc = increases(rs)
        L.append(f"- {d.name}:" + ("" if inc else " nothing"))
        L += [f"  - {x}" for x in inc]
    L.append("")
    named = [
        (d, rs) for d, rs in zip(deployments, per, strict=True) if not d.name.startswith("default")
    ]
    for d, rs in named:
        left = over(rs)
        L.append(
            f"- {d.name}: "
            + (
                "nothing above 50 %."
                if not left
                else "above 50 %: " + "; ".join(f"{r.limit} ({r.scope}) {r.use:.0%}" for r in left)
            )
        )
    warm = [
        r
        for d, rs in named
        for r in rs
        if r.limit.startswith("shaping cap") and "doublings" in r.note
    ]
    if warm:
        L.append("")
        L.append("Warm-up of the raised site rates (named settings):")
        L.append("")
        seen: set[str] = set()
        for r in warm:
            if r.scope not in seen:
                seen.add(r.scope)
                L.append(f"- {r.scope.split(':')[0]}: {r.note}")
    return L


def _num(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 10 else f"{x:.2g}"


def _scope_key(r: Row) -> str:
    """A row's identity across deployments (its scope names figures that differ)."""
    if r.limit.startswith(("site limiter", "shaping cap")):
        return r.scope.split(" ")[0]
    if r.limit.startswith(
        (
            "DynamoDB writes per",
            "DynamoDB reads per",
            "S3",
            "Lambda concurrency of",
            "SQS in-flight",
            "DynamoDB table quota",
        )
    ):
        return r.scope
    return ""
