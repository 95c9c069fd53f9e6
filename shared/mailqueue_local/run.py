"""`make run`: the whole queue on this machine until Ctrl-C.

    .venv/bin/python -m mailqueue_local.run [--port 3000] [--var ./var] [--fast-retries]
        [--relay host:port] [--sweep-interval 60] [--set KEY=VALUE ...] [--strict-limits]
        [--concurrency delivery=5 ...]

Prints where things are and one command to try, then a machine-readable line::

    READY {"api_url": "http://127.0.0.1:3000", "token": "...", "mail_dir": "...", ...}

(one line, JSON after ``READY ``, on stdout, flushed) once every part answers. SIGINT or
SIGTERM stops everything it started and exits 0.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from mailqueue.core.config import ConfigError

from mailqueue_local.sink import SinkRules
from mailqueue_local.stack import FAST_RETRIES, LocalStack, StackOptions, parse_concurrency

log = logging.getLogger("mailqueue_local")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m mailqueue_local.run",
        description="Run the mail queue locally: moto, the real handlers, an SMTP sink.",
    )
    p.add_argument("--host", default="127.0.0.1", help="address every server binds (loopback)")
    p.add_argument("--port", type=int, default=3000, help="API port (0: any free port)")
    p.add_argument("--var", type=Path, default=Path("var"), help="state directory (mail, logs)")
    p.add_argument("--relay", metavar="HOST:PORT", help="deliver to this MTA instead of the sink")
    p.add_argument("--sink-port", type=int, default=0, help="SMTP sink port (0: any free port)")
    p.add_argument("--moto-port", type=int, default=0, help="moto server port (0: any)")
    p.add_argument(
        "--fast-retries",
        action="store_true",
        help="retry after 5 s (doubling, at most 60 s), bounce after 10 min",
    )
    p.add_argument(
        "--sweep-interval", type=float, default=60.0, help="seconds between sweeper runs"
    )
    p.add_argument(
        "--tempfail-attempts",
        type=int,
        default=2,
        help="451 replies the sink gives each @tempfail.demo recipient before accepting",
    )
    p.add_argument("--token", help="development token (default: kept in <var>/dev-token)")
    p.add_argument(
        "--deploy",
        choices=("auto", "cloudformation", "direct"),
        default="auto",
        help="resources from the SAM template in moto's CloudFormation, or created directly",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a function setting, e.g. --set MQ_SMTP_MAX_SESSIONS=4 (repeatable)",
    )
    p.add_argument(
        "--concurrency",
        action="append",
        default=[],
        metavar="[FUNCTION=]N",
        help="concurrent invocations per SQS event source mapping, e.g. delivery=5 or 5 for "
        "every one (repeatable; default: the template's MaximumConcurrency, delivery 20; "
        "also MAILQUEUE_LOCAL_CONCURRENCY)",
    )
    p.add_argument(
        "--strict-limits",
        action="store_true",
        help="refuse, as AWS would, requests over the services' documented limits (moto "
        "does not); each is logged and written to <var>/logs/limit-violations.jsonl",
    )
    p.add_argument("--no-smtpd", action="store_true", help="no SMTP front door")
    p.add_argument(
        "--disable-trigger",
        action="append",
        default=[],
        metavar="FUNCTION",
        help="leave FUNCTION's SQS event source mapping disabled (its queue only fills)",
    )
    p.add_argument(
        "--partition-scale",
        type=float,
        default=100.0,
        metavar="N",
        help="DynamoDB's per-partition-key throughput (1,000 write / 3,000 read units a "
        "second) divided by N for each key value of the table and its index; over it a "
        "request is throttled as in AWS (default 100; 0: off)",
    )
    p.add_argument(
        "--pools",
        default="",
        metavar="local|FILE",
        help="egress pools (outbound/pools.py): 'local' = transactional mail from 127.0.0.2, "
        "bulk from 127.0.0.3 (the sink files each mail's peer address); or a pools file",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging on the console")
    return p


def _settings(pairs: Sequence[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"--set wants KEY=VALUE, not {pair!r}")
        out[key if key.startswith("MQ_") else "MQ_" + key.upper()] = value
    return out


def _short(path: str) -> str:
    """Relative to the working directory when inside it, else as it is."""
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel


def banner(stack: LocalStack) -> str:
    r = stack.readiness()
    mail = _short(r["mail_dir"]) if r["sink"] else None
    lines = [
        "",
        f"mailqueue local stack is up ({len(r['functions'])} functions: "
        f"{', '.join(r['functions'])}; resources: {r['deployment']})",
        f"  API             {r['api_url']}    (Authorization: Bearer {r['token']})",
    ]
    if mail:
        lines.append(
            f"  received mail   {mail}/  (one .eml per SMTP transaction, envelope in the .json)"
        )
        lines.append(
            f"  SMTP sink       {r['sink']}  (@tempfail.demo: 451 first, @nosuch.demo: 550)"
        )
    else:
        lines.append(f"  next hop        {r['next_hop']}  (--relay)")
    lines += [
        f"  function logs   {_short(r['log_dir'])}/<function>.log",
        "  concurrency     "
        + ", ".join(f"{k} {'+'.join(map(str, v))}" for k, v in sorted(r["concurrency"].items()))
        + "  (invocations at once per SQS mapping, each in its own container)",
        f"  AWS (moto)      {r['endpoint_url']}  (table {r['table']}, bucket {r['bucket']})",
        "  sender policy   PERMISSIVE: every caller may send as any domain (local only; a "
        "deployment refuses sender domains no SenderPolicy rule allows)",
    ]
    if r["dkim_txt"]:
        domains = sorted({name.split("._domainkey.", 1)[1] for name in r["dkim_txt"]})
        lines.append(
            f"  DKIM            signs {', '.join(domains)} (keys made at start; records in "
            f"{_short(str(Path(r['mail_dir']).parent / 'dkim-records.txt'))})"
        )
    if r["strict_limits"]:
        lines.append(
            f"  strict limits   requests over AWS limits refused; see "
            f"{_short(r['limit_violations_log'])}"
        )
    if r.get("partition_throttle_scale"):
        scale = float(r["partition_throttle_scale"])
        lines.append(
            f"  partition keys  throttled as DynamoDB does, at 1/{scale:g} of its per-key"
            f" throughput ({1000 / scale:g} write units/s per key value)"
        )
    if r["fast_retries"]:
        lines.append(
            "  fast retries    first retry after "
            f"{FAST_RETRIES['MQ_RETRY_MIN_BACKOFF_SECONDS']} s, bounce after "
            f"{int(FAST_RETRIES['MQ_MAX_QUEUE_LIFETIME_SECONDS']) // 60} min"
        )
    lines += [
        "",
        "Try, in another shell:",
        f"  export MAILQUEUE_API={r['api_url']} MAILQUEUE_TOKEN={r['token']}",
        "  .venv/bin/mailqueue send --from a@example.org --to b@example.net --file message.eml",
        "  .venv/bin/mailqueue list",
    ]
    if r.get("smtp"):
        from mailqueue_local.smtpd import try_lines

        lines += ["", f"Or over SMTP (submission on 127.0.0.1:{r['smtp']['port']}):"]
        lines += try_lines(r["smtp"])
    lines += [
        "",
        "Ctrl-C stops everything.",
        "",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ns = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if ns.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    for noisy in ("botocore", "boto3", "urllib3", "werkzeug", "aiosmtpd", "mail.log"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        concurrency = parse_concurrency(
            [os.environ.get("MAILQUEUE_LOCAL_CONCURRENCY", ""), *ns.concurrency]
        )
    except ValueError as e:
        raise SystemExit(f"--concurrency: {e}") from e
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)

    options = StackOptions(
        var_dir=ns.var,
        host=ns.host,
        api_port=ns.port,
        sink_port=ns.sink_port,
        moto_port=ns.moto_port,
        relay=ns.relay,
        fast_retries=ns.fast_retries,
        sweep_interval=ns.sweep_interval,
        token=ns.token,
        sink_rules=SinkRules.demo(ns.tempfail_attempts),
        settings=_settings(ns.set),
        deploy=ns.deploy,
        strict_limits=ns.strict_limits,
        partition_throttle_scale=ns.partition_scale,
        concurrency=concurrency,
        smtpd=not ns.no_smtpd,
        disabled_triggers=frozenset(ns.disable_trigger),
        pools=ns.pools,
        progress=lambda step: log.info("start %s", step),
    )
    stack = LocalStack(options)
    try:
        stack.start()
    except OSError as e:
        log.error("cannot start: %s%s", e, port_hint(ns.port))
        return 1
    except ConfigError as e:  # a setting a function refuses: say so, never READY
        log.error("cannot start: %s", e)
        return 1
    try:
        print(banner(stack), flush=True)
        print("READY " + json.dumps(stack.readiness()), flush=True)
        while not stop.wait(0.5):
            pass
        log.info("stopping")
    finally:
        stack.stop()
    log.info("stopped")
    return 0


def port_hint(port: int) -> str:
    """What to type when the API port is taken: through make too (RUN_ARGS)."""
    return (
        f" (is port {port} in use? start on a free port: "
        'make run RUN_ARGS="--port 0", or .venv/bin/python -m mailqueue_local.run --port 0;'
        " the READY line and the banner say which port it took)"
    )


if __name__ == "__main__":
    raise SystemExit(main())
