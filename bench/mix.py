"""The cost of the mail people send (issue 25, deliverable 5), and the scale model's mix.

    python -m bench.mix [MAILS]          # `make bench` runs it after bench.run

Four shapes of real text, each measured through the local stack (bench.cost.measure)
and priced by bench.model.bill.model; a mix of 60 / 25 / 10 / 5 % of them; one temporary
failure before success; the same 10 KB mail to 3 domains. The text is real prose that
ships with Python: the docstrings of standard-library modules (PSF licence), a
different stretch per mail from a seeded offset, so no two mails repeat a letter and
zlib sees what it would see in real mail (the ratios are printed). The attachment
stands for a PDF or JPEG: already-compressed octets (seeded), base64-encoded as a mail
client would.
"""

from __future__ import annotations

import inspect
import json
import pickle
import random
import sys
import time
import zlib
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from email.message import EmailMessage
from email.utils import format_datetime
from functools import cache
from pathlib import Path

from bench import cost
from bench.model import autoscale, limits, scale
from bench.model.bill import model, path_requests
from bench.model.prices import SECONDS_PER_MONTH, VOLUMES
from bench.model.run import Run
from bench.model.state_table import state_write_units
from bench.model.template import Template
from bench.scale import measure_parallelism

MIX = {
    "notification 2 KB": 0.60,
    "prose 10 KB": 0.25,
    "newsletter 30 KB (HTML)": 0.10,
    "attachment 120 KB": 0.05,
}
#: the floors ($ per million mails, relay mode, on demand; issue 25, then issue 40's for
#: 10 M and 100 M a month, fixed monthly costs included)
FLOORS = {1_000_000: 22.0, 10_000_000: 12.0, 100_000_000: 9.5}
#: issue 40: with StateTableCapacity=provisioned (auto scaling simulated)
PROVISIONED_FLOORS = {10_000_000: 9.0, 100_000_000: 7.0}
RETRY_FLOOR = 2.0  # one retry of a prose mail adds at most this per million (issue 25)
SOLO_RETRY_FLOOR = 3.0  # one retry of a solo notification, on demand (issue 40)
DOMAIN_FLOOR = 0.8  # a second domain costs at most this share of the first
_MODULES = (
    "email.message",
    "email.policy",
    "json",
    "collections",
    "textwrap",
    "argparse",
    "logging",
    "smtplib",
    "http.client",
    "urllib.request",
    "asyncio.streams",
    "pathlib",
    "dataclasses",
    "functools",
    "itertools",
    "decimal",
    "datetime",
    "zipfile",
    "tarfile",
    "unittest.case",
    "subprocess",
    "socket",
    "ssl",
    "csv",
)


@cache
def corpus() -> str:
    """Real English prose: the docstrings of standard-library modules, classes and
    functions (shipped with Python, PSF licence), one paragraph per docstring."""
    import importlib

    parts: list[str] = []
    for name in _MODULES:
        mod = importlib.import_module(name)
        for _, obj in [(name, mod), *inspect.getmembers(mod)]:
            doc = (
                inspect.getdoc(obj)
                if (inspect.isclass(obj) or inspect.isfunction(obj) or inspect.ismodule(obj))
                else None
            )
            if (
                doc
                and len(doc) > 200
                and not doc.startswith(("Return", "Create"))
                or (doc and len(doc) > 600)
            ):
                parts.append(doc)
    seen: set[str] = set()
    uniq = [p for p in parts if not (p in seen or seen.add(p))]  # type: ignore[func-returns-value]
    return "\n\n".join(uniq)


def prose(i: int, n: int, salt: str = "") -> str:
    """`n` characters of the corpus from a seeded offset (a different stretch per mail)."""
    text = corpus()
    rng = random.Random(f"{salt}{i}")
    start = rng.randrange(0, max(1, len(text) - n - 1))
    return text[start : start + n]


def _headers(msg: EmailMessage, i: int, subject: str) -> None:
    msg["From"] = "Example Shop <news@example.org>"
    msg["To"] = f"Customer {i} <c{i}@example.net>"
    msg["Subject"] = subject
    msg["Date"] = format_datetime(datetime(2026, 11, 27, 12, 0, tzinfo=UTC))
    msg["Message-ID"] = f"<mix-{i}-{time.time_ns()}@example.org>"
    msg["List-Unsubscribe"] = f"<https://example.org/u/{random.Random(i).getrandbits(64):x}>"


def notification(i: int, size: int = 2048) -> bytes:
    msg = EmailMessage()
    _headers(msg, i, f"Your order {100000 + i} has shipped")
    msg.set_content(prose(i, max(200, size - 400), "n"))
    return msg.as_bytes()


def letter(i: int, size: int = 10 * 1024) -> bytes:
    msg = EmailMessage()
    _headers(msg, i, "Notes from this week")
    msg.set_content(prose(i, size - 700, "p"))
    return msg.as_bytes()


def newsletter(i: int, size: int = 30 * 1024) -> bytes:
    """multipart/alternative: a text part and an HTML part with inline styles, links
    (a tracking token each) and paragraphs of the same prose."""
    rng = random.Random(f"h{i}")
    text = prose(i, size // 4, "h")
    paras = [p for p in text.split("\n\n") if p.strip()]
    html = [
        '<!DOCTYPE html><html><head><meta charset="utf-8"><title>Newsletter</title></head>',
        '<body style="margin:0;padding:0;background:#f4f4f4;font-family:Arial,sans-serif">',
        '<table role="presentation" width="100%" cellpadding="0" cellspacing="0">',
    ]
    k = 0
    while sum(len(h) for h in html) < size * 0.62:
        p = paras[k % len(paras)]
        k += 1
        tok = f"{rng.getrandbits(80):x}"
        html.append(
            '<tr><td style="padding:16px 24px;color:#333333;font-size:15px;line-height:22px">'
            f'<h2 style="margin:0 0 8px;font-size:18px;color:#111111">{p[:48]}</h2>'
            f'<p style="margin:0">{p}</p>'
            f'<p><a href="https://example.org/r/{tok}?utm_source=news&amp;utm_medium=email" '
            'style="color:#0b63ce;text-decoration:underline">Read more</a></p></td></tr>'
        )
    html.append("</table></body></html>")
    msg = EmailMessage()
    _headers(msg, i, "This month's newsletter")
    msg.set_content(text)
    msg.add_alternative("\n".join(html), subtype="html")
    return msg.as_bytes()


def with_attachment(i: int, size: int = 120 * 1024) -> bytes:
    msg = EmailMessage()
    _headers(msg, i, "Your invoice")
    msg.set_content(prose(i, 3000, "a"))
    data = random.Random(f"att{i}").randbytes(int(size * 0.72))  # compressed octets
    msg.add_attachment(data, maintype="application", subtype="pdf", filename=f"invoice-{i}.pdf")
    return msg.as_bytes()


SHAPES: dict[str, Callable[[int], bytes]] = {
    "notification 2 KB": notification,
    "prose 10 KB": letter,
    "newsletter 30 KB (HTML)": newsletter,
    "attachment 120 KB": with_attachment,
}


def ratios() -> dict[str, tuple[int, float]]:
    """Each shape's size and zlib ratio (level 6), for the record."""
    out = {}
    for name, make in SHAPES.items():
        b = make(0)
        out[name] = (len(b), len(b) / len(zlib.compress(b, 6)))
    return out


def runs(mails: int) -> dict[str, Run]:
    """The measured runs: each shape, the retry and the 3-domain cases."""
    out: dict[str, Run] = {}
    for name, make in SHAPES.items():
        out[name] = cost.measure(mails, body=lambda i, _s, m=make: m(i))
    out["prose 10 KB, one temporary failure"] = cost.measure(
        mails,
        body=lambda i, _s: letter(i),
        recipients=lambda i: [f"c{i}@retry.cost.example"],
        tempfail={"retry.cost.example": 1},
    )
    # the same for the commonest mail, a solo notification (issue 40: its retry costs
    # more than prose's, every write of a one-item mail billing the item's whole size)
    out["notification 2 KB, one temporary failure"] = cost.measure(
        mails,
        body=lambda i, _s: notification(i),
        recipients=lambda i: [f"c{i}@retry.cost.example"],
        tempfail={"retry.cost.example": 1},
    )
    out["prose 10 KB to 3 domains"] = cost.measure(
        mails,
        body=lambda i, _s: letter(i),
        recipients=lambda i: [
            f"c{i}@a{i % 7}.cost.example",
            f"c{i}@b{i % 7}.cost.example",
            f"c{i}@c{i % 7}.cost.example",
        ],
    )
    return out


def per_million(run: Run, tpl: Template, egress: str = "relay") -> list[float]:
    return [sum(x.per_month for x in model(run, v, tpl, egress)) / v * 1e6 for v in VOLUMES]


def _table_units_per_s(rs: dict[str, Run], tpl: Template, volume: int) -> float:
    """The mix's write units per second on the state table at `volume` mails a month."""
    per_mail = sum(
        w * state_write_units(rs[n], tpl)[0] / max(1, rs[n].mails) for n, w in MIX.items()
    )
    return per_mail * volume / SECONDS_PER_MONTH


def report(rs: dict[str, Run], tpl: Template) -> list[str]:
    rat = ratios()
    L = [
        "_`make bench` (its last step: `python -m bench.mix $(BENCH_MIX_MAILS)`, 20 mails per "
        "run by default; `python -m bench.mix --from var/cost-mix.pkl` prices saved runs "
        "again). Floors and figures: issue 25._",
        "",
        "### Cost of the mail people send (bench/mix.py)",
        "",
    ]
    mails = next(iter(rs.values())).mails
    L.append(
        f"Measured: {mails} mails per shape through the local stack, one per API call, "
        "accepted → delivered → cleaned, priced by the cost model, bench/model/ (relay mode; "
        "SMTP 30 ms per transaction to the relay, assumed; direct: 400 ms, issue 25's "
        "figure, not measured here). Text: standard-library docstrings (real prose, a "
        "different stretch per mail); the attachment: compressed octets in base64. "
        "Model fixes of issue 25 (finding 4): delivery batches filled from the volume "
        f"(the template's batching window: {tpl.delivery_window_s:g} s), the sweeper's "
        "log and EMF metrics priced, the event log stored for "
        f"{tpl.events_retention_days} days (steady state), failed conditional writes "
        "counted, SMTP time per egress mode."
    )
    L.append("")
    L.append(
        "| shape | size | zlib ratio | AWS requests per mail | "
        + " | ".join(f"$/M at {v // 1_000_000} M" for v in VOLUMES)
        + " |"
    )
    L.append("|---|---:|---:|---:|" + "---:|" * len(VOLUMES))
    prices = {n: per_million(r, tpl) for n, r in rs.items()}
    for name, r in rs.items():
        size, ratio = rat.get(name, (0, 0.0))
        req = sum(path_requests(r, tpl, VOLUMES[-1]).values())
        L.append(
            f"| {name} | {size / 1024:.0f} KB | {ratio:.1f} | {req:.2f} | "
            if size
            else f"| {name} | | | {req:.2f} | "
        )
        L[-1] += " | ".join(f"{x:.2f}" for x in prices[name]) + " |"
    mix_relay = [sum(w * prices[n][k] for n, w in MIX.items()) for k in range(len(VOLUMES))]

    def mix_of(t: Template, egress: str = "relay") -> list[float]:
        """The mix's $/M at each volume (each shape priced once)."""
        each = {n: per_million(rs[n], t, egress) for n in MIX}
        return [sum(w * each[n][k] for n, w in MIX.items()) for k in range(len(VOLUMES))]

    mix_direct = mix_of(tpl, "direct")
    L.append(
        "| **mix 60/25/10/5 %, relay** | | | | "
        + " | ".join(f"**{x:.2f}**" for x in mix_relay)
        + " |"
    )
    L.append(
        "| mix, direct egress (NAT, 400 ms SMTP) | | | | "
        + " | ".join(f"{x:.2f}" for x in mix_direct)
        + " |"
    )
    # the deployment choice docs/deploy.md names for steady volume: provisioned capacity
    # with auto scaling (StateTableCapacity=provisioned), at the use bench/model/autoscale.py
    # simulates for the named traffic profile (and at the former assumption, 50 %)
    prov = replace(tpl, state_capacity="provisioned")  # its minimum units: the template's
    mix_prov = mix_of(prov)
    uses = [
        autoscale.average_use(
            _table_units_per_s(rs, tpl, v),
            target=prov.state_target,
            minimum=max(1, prov.state_min_units[0]),
        )
        for v in VOLUMES
    ]
    L.append(
        f"| mix, relay, `StateTableCapacity=provisioned` (auto scaling simulated, "
        f"'{autoscale.PRICED_PROFILE}' profile: table writes at "
        + " / ".join(f"{u:.0%}" for u in uses)
        + " use) | | | | "
        + " | ".join(f"{x:.2f}" for x in mix_prov)
        + " |"
    )
    mix_half = mix_of(replace(prov, state_use=0.5))
    L.append(
        "| mix, relay, provisioned at 50 % use (the former assumption) | | | | "
        + " | ".join(f"{x:.2f}" for x in mix_half)
        + " |"
    )
    L.append("")
    base = prices["prose 10 KB"]
    retry = prices["prose 10 KB, one temporary failure"]
    three = prices["prose 10 KB to 3 domains"]
    L.append("| floor (issue 25) | measured | met |")
    L.append("|---|---:|:---:|")
    for k, v in enumerate(VOLUMES):
        fl = FLOORS[v]
        L.append(
            f"| mix ≤ ${fl:g}/M at {v // 1_000_000} M/month | ${mix_relay[k]:.2f} | "
            f"{'yes' if mix_relay[k] <= fl else '**no**'} |"
        )
    # the floors of provisioned capacity, docs/deploy.md's choice from ~10 M a month
    for k, vol in enumerate(VOLUMES[1:], start=1):
        fl = PROVISIONED_FLOORS[vol]
        L.append(
            f"| mix ≤ ${fl:g}/M at {vol // 1_000_000} M/month, `StateTableCapacity="
            f"provisioned` (simulated use) | ${mix_prov[k]:.2f} | "
            f"{'yes' if mix_prov[k] <= fl else '**no**'} |"
        )
    extra = retry[-1] - base[-1]
    L.append(
        f"| one retry adds ≤ ${RETRY_FLOOR:.0f}/M (100 M) | +${extra:.2f} | "
        f"{'yes' if extra <= RETRY_FLOOR else '**no**'} |"
    )
    retry_prov = (
        per_million(rs["prose 10 KB, one temporary failure"], prov)[-1]
        - per_million(rs["prose 10 KB"], prov)[-1]
    )
    L.append(
        f"| one retry adds ≤ ${RETRY_FLOOR:.0f}/M (100 M), `StateTableCapacity=provisioned` "
        f"(simulated use) | +${retry_prov:.2f} | "
        f"{'yes' if retry_prov <= RETRY_FLOOR else '**no**'} |"
    )
    if "notification 2 KB, one temporary failure" in prices:
        solo = (
            prices["notification 2 KB, one temporary failure"][-1] - prices["notification 2 KB"][-1]
        )
        L.append(
            f"| one retry of a solo 2 KB notification adds ≤ ${SOLO_RETRY_FLOOR:.0f}/M "
            f"(100 M, on demand; issue 40) | +${solo:.2f} | "
            f"{'yes' if solo <= SOLO_RETRY_FLOOR else '**no**'} |"
        )
    second = (three[-1] - base[-1]) / 2
    share = second / base[-1] if base[-1] else 0.0
    L.append(
        f"| a further domain ≤ {DOMAIN_FLOOR}× the first (100 M) | {share:.2f}× "
        f"(${second:.2f} vs ${base[-1]:.2f}) | {'yes' if share <= DOMAIN_FLOOR else '**no**'} |"
    )
    L.append("")
    even = []
    for vol in VOLUMES[1:]:
        k = VOLUMES.index(vol)
        met = next(
            (
                u / 100
                for u in range(20, 91)
                if mix_of(replace(prov, state_use=u / 100))[k] <= PROVISIONED_FLOORS[vol]
            ),
            None,
        )
        even.append(
            f"at {vol // 1_000_000} M/month from {met:.0%} average use"
            if met is not None
            else f"at {vol // 1_000_000} M/month at no use up to 90 %"
        )
    L.append(
        "With provisioned capacity the mix meets its floor "
        + "; ".join(even)
        + f" (bench/model/autoscale.py simulates {uses[-1]:.0%} for the table's writes at 100 M on "
        f"the '{autoscale.PRICED_PROFILE}' profile)."
    )
    L.append("")
    fixed = fixed_lines(rs["notification 2 KB"], tpl)
    L.append(
        "Fixed monthly costs (in every figure above; the lines of the model whose $/month "
        "does not change from 10 M to 100 M mails a month): "
        + "; ".join(f"{item} ${usd:.2f}" for item, usd in fixed)
        + f" — ${sum(u for _, u in fixed):.2f} a month."
    )
    L.append("")
    L.append("Per shape at 100 M/month, the lines that move ($ per million):")
    L.append("")
    L.append("| shape | " + " | ".join(_LINES) + " |")
    L.append("|---|" + "---:|" * len(_LINES))
    for name, r in rs.items():
        lines = model(r, VOLUMES[-1], tpl)
        cells = []
        for key in _LINES:
            v = sum(x.per_month for x in lines if x.item.startswith(_LINES[key]))
            cells.append(f"{v / VOLUMES[-1] * 1e6:.2f}")
        L.append(f"| {name} | " + " | ".join(cells) + " |")
    return L


def fixed_lines(run: Run, tpl: Template) -> list[tuple[str, float]]:
    """The model's lines that cost the same each month at 10 M and 100 M mails."""
    a = {x.item: x.per_month for x in model(run, VOLUMES[1], tpl)}
    b = {x.item: x.per_month for x in model(run, VOLUMES[2], tpl)}
    return [
        (k, v) for k, v in a.items() if v >= 0.005 and abs(b.get(k, 0.0) - v) < 1e-6 * max(1.0, v)
    ]


_LINES = {
    "DDB table writes": "state writes, table",
    "DDB index writes": "state writes, by_state",
    "DDB reads": "reads",
    "failed cond. writes": "failed conditional",
    "S3 content PUT": "content PUT",
    "event log storage": "event-log storage",
    "delivery GB-s": "delivery: GB-s",
    "SQS ESM": "event source receive",
}


def scale_profile(rs: dict[str, Run], tpl: Template) -> scale.Profile:
    """The scale model's profile of the mix (the shapes' profiles weighted)."""
    return scale.mix(((w, scale.profile(rs[n], tpl, n)) for n, w in MIX.items()), "mix")


LIMITS_SECTION = "## The limits that bind first at 10,000 mails/s (issue 40)"


def limits_section(
    rs: dict[str, Run], tpl: Template, par: float, note: str, mails: int
) -> list[str]:
    """bench/model/limits.py's table for the mix: the default template and docs/deploy.md's
    settings for 10,000 mails/s, relay and direct."""
    sizes = {n: float(s) for n, (s, _) in ratios().items()}
    size = limits.mix_bytes(sizes, MIX)
    sc = limits.stream_cost(rs, MIX, tpl)
    p = scale_profile(rs, tpl)
    ds = [
        limits.default_deployment(egress="relay", smtp_parallel=par),
        limits.default_deployment(egress="direct", smtp_parallel=par),
        limits.named_deployment("relay", smtp_parallel=par),
        limits.named_deployment("direct", smtp_parallel=par),
    ]
    return [
        LIMITS_SECTION,
        "",
        f"_`make bench` (bench.mix's last table: `python -m bench.mix {mails}`; bench/model/limits.py). "
        f"SMTP transactions at once per delivery invocation: {par:.1f} {note}._",
        "",
        *limits.report(p, sc, size, ds),
    ]


def main() -> None:
    """`python -m bench.mix [MAILS]`, or `--from var/cost-mix.pkl` to price saved runs
    again (the parallelism is measured again either way)."""
    t0 = time.monotonic()
    if len(sys.argv) > 2 and sys.argv[1] == "--from":
        rs = pickle.loads(Path(sys.argv[2]).read_bytes())  # our own file
        mails = next(iter(rs.values())).mails
    else:
        mails = int(sys.argv[1]) if len(sys.argv) > 1 else 20
        rs = runs(mails)
        Path("var").mkdir(exist_ok=True)
        Path("var/cost-mix.pkl").write_bytes(pickle.dumps(rs))
    tpl = Template.load()
    par, note = measure_parallelism()
    for r in rs.values():
        r.smtp_parallel = par
    lines = report(rs, tpl)
    lines.append("")
    lines += scale.report(scale_profile(rs, tpl), smtp_parallel=par, parallel_note=note)
    lines.append("")
    took = f"{time.monotonic() - t0:.0f} s"
    lines.append(
        f"_`python -m bench.mix {mails}` took {took}._"
        if sys.argv[1:2] != ["--from"]
        else f"_Priced again from {sys.argv[2]} (saved runs of {mails} mails) in {took}._"
    )
    from bench.run import write_section

    write_section(
        ["## Fourth round: scale and real mail", "", *lines], "## Fourth round: scale and real mail"
    )
    print("\n".join(lines))
    lim = limits_section(rs, tpl, par, note, mails)
    write_section(lim, LIMITS_SECTION)
    print("\n".join(lim))
    print(json.dumps({n: (s, round(r, 2)) for n, (s, r) in ratios().items()}))


if __name__ == "__main__":
    main()
