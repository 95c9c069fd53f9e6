"""Synthetic queue events with a realistic mix, fast enough for 50 M-event benchmarks.

Events are written in the SES format of `mailqueue.core.events.QueueEvent.to_json` (tests validate
every type against the SES schema and the producer's rules), as gzip JSON lines under
`<root>/events/dt=YYYY-MM-DD/hr=HH/part-sNNN.json.gz`, where dt/hr is the *write* time.

What makes it realistic enough to exercise every code path:
- recipient domains follow a Zipf-like skew over a few big providers and many small ones;
- each domain has a profile: normal, greylisting, throttling, high bounce, or dead (every
  attempt times out until the lifetime expires with a 4.4.7 bounce);
- retries back off exponentially; scheduler lag has a heavy tail;
- a share of mails is rejected at ingress (no recipient, the destination is the list);
- operators hold, release, retry, delete and bounce some deferred recipients;
- ~1 % of events are written twice (same eventId), some copies hours later; ~2 % of events
  are written late, into a later hour partition than their event time;
- events after the simulation horizon are never written: those recipients stay pending.

Speed comes from string templates (no json.dumps), cached timestamp prefixes, gzip level 1
and one process per core, each writing its own shard files.
"""

from __future__ import annotations

import argparse
import bisect
import gzip
import hashlib
import json
import multiprocessing
import os
import random
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from .consts import ses_bounce_class, ses_delay_type

# Bump when the generated data changes, so cached benchmark data is regenerated.
SYNTH_VERSION = 3  # 3: one eventId per complaint (issue 44)
HOUR_MS = 3_600_000
MIN_MS = 60_000
BIG_DOMAINS = (
    "gmail.com",
    "outlook.com",
    "yahoo.com",
    "hotmail.com",
    "icloud.com",
    "gmx.de",
    "web.de",
    "aol.com",
    "orange.fr",
    "comcast.net",
    "mail.ru",
    "yandex.ru",
)
SOURCES = (
    "news@shop.example",
    "no-reply@app.example",
    "alerts@bank.example",
    "billing@saas.example",
    "",  # null sender: bounces/DSNs
)
PERM_REASONS = (
    ("550", "5.1.1", "<{addr}>: Recipient address rejected: User unknown in virtual mailbox table"),
    ("550", "5.1.1", "The email account that you tried to reach does not exist. {id} - gsmtp"),
    ("552", "5.2.2", "Mailbox full (quota exceeded) id={id}"),
    ("554", "5.7.1", "Service unavailable; Client host [{ip}] blocked using zen.spamhaus.org"),
    ("550", "5.7.26", "Unauthenticated email is not accepted due to domain's DMARC policy"),
)
TEMP_REASONS = {
    "greylist": ("451", "4.7.1", "Greylisted, please try again in 300 seconds"),
    "throttle": ("421", "4.7.0", "[TSS04] Messages from {ip} temporarily deferred, {id}"),
    "rate": ("450", "4.2.1", "The user you are trying to contact is receiving mail too quickly"),
    "full": ("452", "4.2.2", "Mailbox full, try again later"),
    "dead": ("0", "4.4.1", "Connection timed out to mx{n}.{domain}"),
    "busy": ("421", "4.3.2", "Service shutting down, closing transmission channel"),
}
REJECT_REASONS = (
    ("invalid_recipient", "destination"),
    ("too_large", "size"),
    ("sender_not_allowed", "source"),
    ("rate_limited", None),
)


@dataclass(frozen=True)
class SynthConfig:
    """Knobs of one data set; stored next to the data so a cache can be validated."""

    events: int
    start: str = "2026-05-04T00:00:00Z"
    hours: int = 24
    domains: int = 3000
    seed: int = 1
    shards: int = 8
    dup_rate: float = 0.01
    late_rate: float = 0.02
    reject_rate: float = 0.01
    operator_rate: float = 0.004
    complaint_rate: float = 0.0  # of delivered mails (0: none; tests/pipeline/pyref has none)
    lifetime_hours: float = 12.0

    @property
    def start_ms(self) -> int:
        return int(datetime.fromisoformat(self.start.replace("Z", "+00:00")).timestamp() * 1000)


@dataclass(frozen=True, slots=True)
class Profile:
    """How a domain answers: per-attempt failure chances and the wording it uses."""

    kind: str
    p_perm: float
    p_temp_first: float
    p_temp_retry: float
    temp_reason: str


class Clock:
    """ISO-8601 formatting with a per-minute prefix cache (the hot path of the generator)."""

    def __init__(self) -> None:
        self._minute: dict[int, str] = {}
        self._part: dict[int, str] = {}

    def iso(self, ms: int) -> str:
        m, rest = divmod(ms, MIN_MS)
        p = self._minute.get(m)
        if p is None:
            p = datetime.fromtimestamp(m * 60, UTC).strftime("%Y-%m-%dT%H:%M:")
            self._minute[m] = p
        s, milli = divmod(rest, 1000)
        return f"{p}{s:02d}.{milli:03d}Z"

    def partition(self, ms: int) -> str:
        h = ms // HOUR_MS
        p = self._part.get(h)
        if p is None:
            p = datetime.fromtimestamp(h * 3600, UTC).strftime("dt=%Y-%m-%d/hr=%H")
            self._part[h] = p
        return p


def domain_table(n: int, seed: int) -> tuple[list[str], list[float], list[Profile]]:
    """Domain names, cumulative Zipf weights (s=1.1) and a behaviour profile per domain."""
    rnd = random.Random(seed * 7919 + 1)
    small = max(0, n - len(BIG_DOMAINS))
    names = list(BIG_DOMAINS[:n]) + [f"corp{i:05d}.example" for i in range(small)]
    cum: list[float] = []
    total = 0.0
    for rank in range(1, len(names) + 1):
        total += 1.0 / rank**1.1
        cum.append(total)
    profiles: list[Profile] = []
    for i, name in enumerate(names):
        u = rnd.random()
        if name in ("gmx.de", "web.de") or (i >= len(BIG_DOMAINS) and u < 0.12):
            prof = Profile("greylist", 0.01, 0.7, 0.03, "greylist")
        elif name == "yahoo.com":
            prof = Profile("throttle", 0.012, 0.12, 0.12, "throttle")
        elif i >= len(BIG_DOMAINS) and u < 0.16:
            prof = Profile("bad-list", 0.06 + 0.12 * rnd.random(), 0.02, 0.1, "full")
        elif i >= len(BIG_DOMAINS) and u < 0.17:
            prof = Profile("dead", 0.0, 1.0, 1.0, "dead")
        elif name == "gmail.com":
            prof = Profile("normal", 0.008, 0.02, 0.15, "rate")
        else:
            prof = Profile("normal", 0.012, 0.03, 0.2, "busy")
        profiles.append(prof)
    return names, cum, profiles


class ShardWriter:
    """One gzip file per (shard, write-hour) partition, buffered to keep syscalls rare."""

    def __init__(self, root: Path, shard: int, clock: Clock) -> None:
        self.root = root
        self.shard = shard
        self.clock = clock
        self.buffers: dict[str, list[str]] = {}
        self.sizes: dict[str, int] = {}
        self.files: dict[str, gzip.GzipFile] = {}
        self.count = 0

    def add(self, write_ms: int, line: str) -> None:
        part = self.clock.partition(write_ms)
        buf = self.buffers.get(part)
        if buf is None:
            buf = self.buffers[part] = []
            self.sizes[part] = 0
        buf.append(line)
        self.count += 1
        if len(buf) >= 20_000:
            self._flush(part)

    def _flush(self, part: str) -> None:
        buf = self.buffers[part]
        if not buf:
            return
        f = self.files.get(part)
        if f is None:
            d = self.root / "events" / part
            d.mkdir(parents=True, exist_ok=True)
            f = gzip.GzipFile(d / f"part-s{self.shard:03d}.json.gz", "wb", 1)
            self.files[part] = f
        f.write(("\n".join(buf) + "\n").encode())
        buf.clear()

    def close(self) -> None:
        for part in list(self.buffers):
            self._flush(part)
        for f in self.files.values():
            f.close()


def _mail_count(cfg: SynthConfig) -> int:
    """Mails needed for ~cfg.events events, from a calibration run of the same model."""
    probe_cfg = SynthConfig(**{**asdict(cfg), "events": 0})
    sink = _CountingSink()
    _simulate(probe_cfg, shard=0, mails=4000, sink=sink, seed_offset=10_000)
    per_mail = max(sink.count / 4000, 1.0)
    return max(1, round(cfg.events / per_mail))


class _CountingSink:
    def __init__(self) -> None:
        self.count = 0

    def add(self, write_ms: int, line: str) -> None:
        self.count += 1


def _simulate(
    cfg: SynthConfig,
    shard: int,
    mails: int,
    sink: ShardWriter | _CountingSink,
    seed_offset: int = 0,
) -> None:
    """Generate `mails` mails for one shard; every event goes through `sink.add`."""
    rnd = random.Random(cfg.seed * 1_000_003 + shard + seed_offset)
    rand = rnd.random
    expo = rnd.expovariate
    bits = rnd.getrandbits
    clock = Clock()
    iso = clock.iso
    names, cum, profiles = domain_table(cfg.domains, cfg.seed)
    total_w = cum[-1]
    start = cfg.start_ms
    span = cfg.hours * HOUR_MS
    horizon = start + span
    lifetime = int(cfg.lifetime_hours * HOUR_MS)
    add = sink.add

    def emit(ts: int, line: str) -> None:
        write = ts + int(rand() * 2000)  # the writer batches for up to 2 s
        if rand() < cfg.late_rate:
            write = ts + int(5 * MIN_MS + rand() * 175 * MIN_MS)
        add(write, line)
        if rand() < cfg.dup_rate:  # an at-least-once retry of the writer
            add(write + int(rand() * 60 * MIN_MS), line)

    for _ in range(mails):
        # Diurnal arrivals: busier in the (UTC) day than at night.
        while True:
            acc = start + int(rand() * span)
            hod = ((acc - start) // HOUR_MS) % 24
            if rand() < 0.55 + 0.45 * (1 - abs(hod - 13) / 13):
                break
        mid = f"{acc:011X}{bits(60):015X}"
        source = SOURCES[int(rand() * len(SOURCES))]
        # octets, from the arrival time: no draw from the generator, so every other
        # value of a seed stays what it was before sizes existed
        size = 800 + (acc * 2_654_435_761) % 40_000
        nrcpt = 1 if rand() < 0.8 else 2 + int(rand() * 4)
        rcpts: list[tuple[str, int]] = []
        for _r in range(nrcpt):
            di = min(bisect.bisect_left(cum, rand() * total_w), len(names) - 1)
            rcpts.append((f"user{bits(24)}@{names[di]}", di))
        acc_iso = iso(acc)
        dests = ",".join(f'"{a}"' for a, _ in rcpts)
        src_dom = source.rpartition("@")[2] or "null-sender"
        mail = (
            f'"mail":{{"timestamp":"{acc_iso}","messageId":"{mid}","source":"{source}",'
            f'"sourceArn":"arn:aws:ses:us-east-1:123456789012:identity/{src_dom}",'
            f'"sendingAccountId":"123456789012","destination":[{dests}],'
            f'"headersTruncated":false,"headers":[],"commonHeaders":{{"from":['
            f'{chr(34) + source + chr(34) if source else ""}],"to":[{dests}]}},'
            f'"tags":{{"mailqueue:from-domain":["{src_dom}"]}}}}'
        )
        mq = f'"mailqueue":{{"size":{size},'  # opens our object, with the mail's size
        if rand() < cfg.reject_rate:
            reason, fld = REJECT_REASONS[int(rand() * len(REJECT_REASONS))]
            fld_json = f'"{fld}"' if fld else "null"
            emit(
                acc,
                f'{{"eventType":"Reject",{mail},"reject":{{"reason":"mailqueue:{reason}"}},'
                f'{mq}"eventId":"{bits(128):032x}",'
                f'"reject":{{"timestamp":"{acc_iso}",'
                f'"reason":"{reason}","field":{fld_json},"recipient":null}}}}}}',
            )
            continue
        emit(acc, f'{{"eventType":"Send",{mail},"send":{{}},'
                  f'{mq}"eventId":"{bits(128):032x}"}}}}')
        mta = f"mq-worker-{shard % 4}"
        for ri, (addr, di) in enumerate(rcpts):
            prof = profiles[di]
            domain = names[di]
            expires = acc + lifetime
            sched = acc
            n = 0
            while True:
                n += 1
                u = rand()
                lag = expo(2.0) if u < 0.9 else (expo(0.2) if u < 0.99 else expo(1 / 120))
                started = sched + int(lag * 1000)
                finished = started + 100 + int(expo(1 / 1200))
                if finished >= horizon:
                    break
                ip = f"203.0.{di % 256}.{(di // 256) % 250 + 1}"
                tls = "true" if rand() < 0.93 else "false"
                att = (
                    f'"attempt":{{"number":{n},"scheduledAt":"{iso(sched)}",'
                    f'"startedAt":"{iso(started)}","finishedAt":"{iso(finished)}",'
                    f'"remoteMta":"{ip}","tls":{tls}}}'
                )
                fin_iso = iso(finished)
                u = rand()
                p_temp = prof.p_temp_first if n == 1 else prof.p_temp_retry
                if u < prof.p_perm:
                    code, status, text = PERM_REASONS[int(rand() * len(PERM_REASONS))]
                    text = text.format(addr=addr, id=f"{bits(48):012x}", ip=ip)
                    btype, bsub = ses_bounce_class(status)
                    eid = bits(128)
                    emit(
                        finished,
                        f'{{"eventType":"Bounce",{mail},"bounce":{{'
                        f'"bounceType":"{btype}","bounceSubType":"{bsub}",'
                        f'"bouncedRecipients":[{{"emailAddress":"{addr}","action":"failed",'
                        f'"status":"{status}","diagnosticCode":"smtp; {code} {status} {text}"}}],'
                        f'"timestamp":"{fin_iso}","feedbackId":"{eid ^ 1:032x}",'
                        f'"reportingMTA":"dns; {mta}","remoteMtaIp":"{ip}"}},'
                        f'{mq}"eventId":"{eid:032x}","remoteMta":"{ip}",{att}}}}}',
                    )
                    break
                if u < prof.p_perm + p_temp:
                    code, status, text = TEMP_REASONS[prof.temp_reason]
                    text = text.format(ip=ip, id=f"{bits(40):010x}", n=n % 3, domain=domain)
                    backoff = min(300_000 * 2 ** (n - 1), HOUR_MS)
                    nxt = finished + int(backoff * (0.9 + 0.2 * rand()))
                    c = int(code)
                    diag = f"smtp; {c} {status} {text}" if c else f"x-mailqueue; {status} {text}"
                    emit(
                        finished,
                        f'{{"eventType":"DeliveryDelay",{mail},'
                        f'"deliveryDelay":{{"timestamp":"{fin_iso}","delayType":'
                        f'"{ses_delay_type(c, status, text)}","expirationTime":"{iso(expires)}",'
                        f'"delayedRecipients":[{{"emailAddress":'
                        f'"{addr}","status":"{status}","diagnosticCode":"{diag}"}}],'
                        f'"reportingMTA":"dns; {mta}"}},{mq}"eventId":'
                        f'"{bits(128):032x}","nextAttemptAt":"{iso(nxt)}","remoteMta":"{ip}",'
                        f'{att}}}}}',
                    )
                    if rand() < cfg.operator_rate * 10:
                        op_ts = finished + int(30_000 + rand() * 600_000)
                        if op_ts >= horizon:
                            break
                        v = rand()
                        action = (
                            "deleted" if v < 0.3 else "bounced" if v < 0.45 else
                            "retried" if v < 0.7 else "held"
                        )
                        emit(op_ts, _operator(bits(128), mail, addr, iso(op_ts), action, bits(20),
                                              mq))
                        if action == "bounced":  # the forced expiry's Bounce, as the queue
                            emit(op_ts, _expiry(bits(128), mail, addr, iso(op_ts), mta,
                                                "message expired by operator", mq))
                        if action in ("deleted", "bounced"):
                            break
                        if action == "held":  # released some minutes later, then retried
                            rel = op_ts + int(60_000 + rand() * 1_800_000)
                            if rel >= horizon:
                                break
                            emit(rel, _operator(bits(128), mail, addr, iso(rel), "released",
                                                bits(20), mq))
                            nxt = max(nxt, rel)
                        else:
                            nxt = op_ts
                    if nxt >= expires:
                        if expires < horizon:
                            emit(expires, _expiry(
                                bits(128), mail, addr, iso(expires), mta,
                                f"Message expired after {n} attempts, last error: "
                                f"{status} {text}", mq,
                            ))
                        break
                    sched = nxt
                    continue
                emit(
                    finished,
                    f'{{"eventType":"Delivery",{mail},"delivery":{{'
                    f'"timestamp":"{fin_iso}","processingTimeMillis":{finished - acc},'
                    f'"recipients":["{addr}"],"smtpResponse":'
                    f'"250 2.0.0 Ok: queued as {bits(40):010X}","reportingMTA":"{mta}",'
                    f'"remoteMtaIp":"{ip}"}},{mq}"eventId":"{bits(128):032x}",'
                    f'"remoteMta":"{ip}",{att}}}}}',
                )
                # a feedback-loop complaint for some delivered mail, an hour on; decided from
                # the mail id (no draw: every other value of a seed stays what it was)
                tag = int(mid, 16)
                if cfg.complaint_rate and (tag >> 8) % 10_000 < cfg.complaint_rate * 10_000:
                    c_ts = finished + HOUR_MS
                    if c_ts < horizon:
                        # one id per recipient's complaint (issue 44: the domain's index
                        # gave two recipients of one domain one eventId), still no draw
                        eid = int.from_bytes(
                            hashlib.blake2b(f"{mid}/{ri}".encode(), digest_size=16).digest(), "big"
                        )
                        emit(c_ts, _complaint(eid, mail, addr, iso(c_ts), iso(finished), mq))
                break


def _complaint(eid: int, mail: str, addr: str, ts: str, arrival: str, mq: str) -> str:
    """An ARF complaint (services/feedback writes it so): SES's complaint object."""
    return (
        f'{{"eventType":"Complaint",{mail},"complaint":{{"feedbackId":"{eid ^ 1:032x}",'
        f'"complaintSubType":null,"complainedRecipients":[{{"emailAddress":"{addr}"}}],'
        f'"timestamp":"{ts}","userAgent":"synth-fbl/1","complaintFeedbackType":"abuse",'
        f'"arrivalDate":"{arrival}"}},{mq}"eventId":"{eid:032x}",'
        f'"feedback":{{"report":"synth","late":true}}}}}}'
    )


def _expiry(eid: int, mail: str, addr: str, ts: str, mta: str, text: str, mq: str) -> str:
    """A lifetime-expiry (4.4.7) Bounce: Transient/General, our own diagnostic type."""
    btype, bsub = ses_bounce_class("4.4.7")
    return (
        f'{{"eventType":"Bounce",{mail},"bounce":{{"bounceType":"{btype}",'
        f'"bounceSubType":"{bsub}","bouncedRecipients":[{{"emailAddress":"{addr}",'
        f'"action":"failed","status":"4.4.7","diagnosticCode":"x-mailqueue; 4.4.7 {text}"}}],'
        f'"timestamp":"{ts}","feedbackId":"{eid ^ 1:032x}","reportingMTA":"dns; {mta}"}},'
        f'{mq}"eventId":"{eid:032x}"}}}}'
    )


def _operator(eid: int, mail: str, addr: str, ts: str, action: str, job: int, mq: str) -> str:
    return (
        f'{{"eventType":"mailqueue:Operator",{mail},{mq}"eventId":"{eid:032x}",'
        f'"operator":{{"timestamp":"{ts}","action":"{action}","actor":"ops@mailqueue.example",'
        f'"job":"job-{job:05x}","recipients":["{addr}"]}}}}}}'
    )


def _run_shard(args: tuple[SynthConfig, str, int, int]) -> int:
    cfg, root, shard, mails = args
    writer = ShardWriter(Path(root), shard, Clock())
    _simulate(cfg, shard, mails, writer)
    writer.close()
    return writer.count


def generate(cfg: SynthConfig, root: Path, processes: int | None = None) -> int:
    """Write the data set under `root` (events/ plus synth.json); returns lines written."""
    mails = _mail_count(cfg)
    per = [mails // cfg.shards + (1 if i < mails % cfg.shards else 0) for i in range(cfg.shards)]
    jobs = [(cfg, str(root), i, per[i]) for i in range(cfg.shards)]
    procs = max(1, min(processes or os.cpu_count() or 1, cfg.shards))
    if procs == 1:
        counts = [_run_shard(j) for j in jobs]
    else:
        with multiprocessing.get_context("spawn").Pool(procs) as pool:
            counts = pool.map(_run_shard, jobs, chunksize=1)
    lines = sum(counts)
    meta = {**asdict(cfg), "version": SYNTH_VERSION, "mails": mails, "lines": lines}
    (root / "synth.json").write_text(json.dumps(meta, indent=2) + "\n")
    return lines


def end_of(cfg: SynthConfig) -> datetime:
    """The simulation horizon: no event is at or after it."""
    return datetime.fromtimestamp(cfg.start_ms / 1000, UTC) + timedelta(hours=cfg.hours)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--events", type=int, required=True, help="approximate number of events")
    ap.add_argument("--out", type=Path, required=True, help="root; events go to OUT/events/")
    ap.add_argument("--start", default=SynthConfig.start)
    ap.add_argument("--hours", type=int, default=SynthConfig.hours)
    ap.add_argument("--domains", type=int, default=SynthConfig.domains)
    ap.add_argument("--seed", type=int, default=SynthConfig.seed)
    ap.add_argument("--shards", type=int, default=SynthConfig.shards)
    ap.add_argument("--processes", type=int, default=None)
    a = ap.parse_args(argv)
    cfg = SynthConfig(
        events=a.events, start=a.start, hours=a.hours, domains=a.domains, seed=a.seed,
        shards=a.shards,
    )
    t0 = time.perf_counter()
    lines = generate(cfg, a.out, a.processes)
    print(f"wrote {lines} lines under {a.out}/events in {time.perf_counter() - t0:.1f}s")


if __name__ == "__main__":
    main()
