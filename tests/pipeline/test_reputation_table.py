"""The report's reputation table (issue 42, deliverable 5) counts what the reputation
guards count: per principal (the mail's `mailqueue:principal` tag) and per sender domain,
sends = delivery's final results, hard bounces (Permanent: remote 5xx and late) toward the
bounce rate, soft ones and unsubscribes apart, complaints; rates against SES's review /
pause bands. The same scenario is fed to the real guard (outbound/reputation.py:
counts_of, feedback_counts) and to the real Spark job's functions (local mode), built
with the real producer (core/events, services/unsubscribe), and the two must agree."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from mailqueue.backends.inprocess import InProcess
from mailqueue.core.events import MailInfo, QueueEvent, dumps
from mailqueue.core.model import PRINCIPAL_TAG, Result
from mailqueue.core.trace import principal_tag
from mailqueue.outbound.reputation import (
    REP_SCOPES,
    Counts,
    FeedbackKind,
    MemoryReputationStore,
    Origin,
    ReputationGuard,
    Thresholds,
    counts_of,
    feedback_counts,
)
from mailqueue.outbound.unsubscribe import Unsubscription
from mailqueue.services.unsubscribe import subscription_event
from mq_pipeline import consts, render
from mq_pipeline import report as R
from mq_pipeline import transforms as T
from mq_pipeline.schema import REPUTATION_SCHEMA
from pyspark.sql import SparkSession

from tests.pipeline import factory as fx
from tests.pipeline.factory import at

NEWS = principal_tag("arn:aws:sts::123456789012:assumed-role/news/app")
BANK = principal_tag("arn:aws:sts::123456789012:assumed-role/billing/app")
LATE = {"report": "ses-1", "late": True}
OK = Result(250, "2.0.0", "2.0.0 ok", "203.0.113.9")
HARD = Result(550, "5.1.1", "5.1.1 user unknown", "203.0.113.9")  # Permanent / NoEmail
SOFT = Result(552, "5.2.2", "5.2.2 mailbox full", "203.0.113.9")  # Transient (SES)
NO_ROUTE = Result(0, "5.4.4", "no route to the domain")  # our verdict: a send, no bounce
EXPIRED = Result(0, "4.4.7", "message expired")  # our verdict: no send at all


@dataclass
class Scenario:
    """Events as the queue writes them, and the guard's counts of the same happenings."""

    events: list[QueueEvent] = field(default_factory=list)
    guard: ReputationGuard = field(
        default_factory=lambda: ReputationGuard(
            MemoryReputationStore(),
            InProcess.new().suspensions,
            Thresholds(window_sends=100_000, min_sends=200, evaluate_seconds=3600),
        )
    )

    def mail(self, mid: str, n: int, sender: str, principal: str | None) -> MailInfo:
        rcpts = tuple(f"r{i}@d{i % 7}.example" for i in range(n))
        tags = {PRINCIPAL_TAG: (principal,)} if principal else {}
        m = replace(fx.mail(mid, rcpts, at(0)), source=sender, tags=tags)
        self.events.append(fx.send(m))
        return m

    def deliver(self, m: MailInfo, results: dict[str, Result]) -> None:
        """Delivery's final results: one event each, and one note to the guard, as
        services/delivery does per group."""
        for i, (rcpt, r) in enumerate(results.items()):
            a = fx.attempt(1, at(1), 0.5, 1.0, r.code, r.status, r.text)
            a = replace(a, result=r)
            if r.success:
                self.events.append(fx.delivery(m, rcpt, a))
            else:
                self.events.append(fx.bounce(m, rcpt, at(2 + i / 1000), r, a))
        self.guard.note(self._p(m), m.source, counts_of(results))
        self.guard.flush()

    def late(self, m: MailInfo, rcpt: str, kind: FeedbackKind) -> None:
        """A receiver's report about a delivered mail, as services/feedback writes it (its
        `mail` from the origin) and counts it; an unsubscribe as services/unsubscribe."""
        ts = at(60)
        if kind == "complaint":
            extra = {"feedback_type": "abuse", "feedback": LATE}
            self.events.append(QueueEvent("Complaint", m, rcpt, ts, "fb:c-" + rcpt, extra=extra))
        elif kind == "unsubscribe":
            u = Unsubscription(m.message_id, rcpt, "sender_domain", "x", 1, "k1")
            origin = Origin(m.message_id, self._p(m), m.source, m.timestamp.timestamp())
            self.events.append(
                subscription_event(u, ts.timestamp(), method="one-click", origin=origin)
            )
        else:
            r, cls = (
                (HARD, ("Permanent", "NoEmail"))
                if kind == "bounce"
                else (SOFT, ("Transient", "MailboxFull"))
            )
            self.events.append(
                QueueEvent(
                    "Bounce",
                    m,
                    rcpt,
                    ts,
                    "fb:b-" + rcpt,
                    result=r,
                    extra={"bounce_class": cls, "feedback": LATE},
                )
            )
        self.guard.note(self._p(m), m.source, feedback_counts([kind]))
        self.guard.flush()

    @staticmethod
    def _p(m: MailInfo) -> str:
        got = m.tags.get(PRINCIPAL_TAG)
        return got[0] if got else ""


def build() -> Scenario:
    s = Scenario()
    # the newsletter: 1000 sends; 50 hard and 20 soft bounces at delivery, 10 hard and 5
    # soft late ones: 60 hard in 1000 = 6 % (review); 2 complaints = 0.2 % (review)
    news = s.mail("NEWS", 1000, "news@Shop.Example", NEWS)
    rc = list(news.destination)
    res = {r: OK for r in rc[:930]} | {r: HARD for r in rc[930:980]}
    res |= {r: SOFT for r in rc[980:]}
    s.deliver(news, res)
    for r in rc[:10]:
        s.late(news, r, "bounce")
    for r in rc[10:15]:
        s.late(news, r, "soft_bounce")
    for r in rc[15:17]:
        s.late(news, r, "complaint")
    for r in rc[17:20]:
        s.late(news, r, "unsubscribe")
    # billing: 299 delivered and one our own 5.4.4 (a send, no bounce) = 300 sends, one
    # expiry (no send); 2 complaints in 300 = 0.67 % >= 0.5 %: pause
    bank = s.mail("BANK", 301, "bills@bank.example", BANK)
    rb = list(bank.destination)
    s.deliver(bank, {r: OK for r in rb[:299]} | {rb[299]: NO_ROUTE, rb[300]: EXPIRED})
    for r in rb[:2]:
        s.late(bank, r, "complaint")
    # mail with no principal tag (received, not submitted): its sender domain only; and
    # the same sender domain as the newsletter's from another mail of the newsletter
    relay = s.mail("RELAY", 3, "x@tiny.example", None)
    s.deliver(relay, {r: OK for r in relay.destination})
    s.late(relay, relay.destination[0], "complaint")  # 1 in 3: too few to judge
    more = s.mail("MORE", 5, "promo@shop.example", NEWS)
    s.deliver(more, {r: OK for r in more.destination})
    # a DSN (null sender, no principal): counted under neither
    dsn = s.mail("DSN", 1, "", None)
    s.deliver(dsn, {dsn.destination[0]: OK})
    return s


def table(spark: SparkSession, s: Scenario) -> dict[tuple[str, str], dict[str, object]]:
    docs = [("2026-05-04", "10", dumps(e)) for e in s.events]
    docs.append(docs[-3])  # a record read twice (an at-least-once retry): counted once
    events = T.dedupe(T.normalise(fx.raw_df(spark, docs)), 2)
    df = R.reputation(events)
    assert [(f.name, f.dataType) for f in df.schema.fields] == [
        (f.name, f.dataType) for f in REPUTATION_SCHEMA.fields
    ]
    return {(r["scope"], r["target"]): r.asDict() for r in df.collect()}


def test_the_report_counts_what_the_guard_counts(spark: SparkSession) -> None:
    s = build()
    rows = table(spark, s)
    keys = {
        ("principal", NEWS),
        ("principal", BANK),
        ("sender_domain", "shop.example"),
        ("sender_domain", "bank.example"),
        ("sender_domain", "tiny.example"),
    }
    assert set(rows) == keys  # no null sender, no empty principal
    for scope, target in keys:
        assert scope in REP_SCOPES
        g = s.guard.standing(scope, target)  # type: ignore[arg-type]
        r = rows[scope, target]
        got = Counts(
            int(r["sends"]),
            int(r["hard_bounces"]),
            int(r["complaints"]),  # type: ignore[call-overload]
            int(r["soft_bounces"]),
            int(r["unsubscribes"]),  # type: ignore[call-overload]
        )
        want = Counts(g.sends, g.bounces, g.complaints, g.soft_bounces, g.unsubscribes)
        assert got == want, (scope, target)
        assert r["verdict"] == g.verdict, (scope, target, r, g)

    news = rows["principal", NEWS]
    assert (news["sends"], news["hard_bounces"], news["soft_bounces"]) == (1005, 60, 25)
    assert (news["complaints"], news["unsubscribes"]) == (2, 3)
    assert news["bounce_rate"] == 60 / 1005 and news["bounce_band"] == "review"
    assert news["complaint_band"] == "review" and news["verdict"] == "review"
    assert rows["sender_domain", "shop.example"]["sends"] == 1005  # lower-cased, both mails
    bank = rows["principal", BANK]
    assert (bank["sends"], bank["hard_bounces"], bank["complaints"]) == (300, 0, 2)
    assert (bank["bounce_band"], bank["complaint_band"], bank["verdict"]) == (
        "ok",
        "pause",
        "pause",
    )
    tiny = rows["sender_domain", "tiny.example"]
    assert (tiny["sends"], tiny["complaints"], tiny["complaint_band"]) == (3, 1, "pause")
    assert tiny["verdict"] == "too_few"  # under the guard's min_sends (200)


def test_the_bands_are_the_guards() -> None:
    """The report's bands are the guard's defaults (SES's; consts cites the page)."""
    t = Thresholds()
    assert consts.REPUTATION_BOUNCE_BANDS == (
        (t.bounce_pause, "pause"),
        (t.bounce_review, "review"),
    )
    assert consts.REPUTATION_COMPLAINT_BANDS == (
        (t.complaint_pause, "pause"),
        (t.complaint_review, "review"),
    )
    assert consts.REPUTATION_MIN_SENDS == t.min_sends
    assert consts.PRINCIPAL_TAG == PRINCIPAL_TAG


def test_band_edges(spark: SparkSession) -> None:
    """At a band's edge the band applies (SES: "at or above"), just under it not."""
    s = Scenario()
    for mid, hard, complaints in (("E1", 50, 1), ("E2", 49, 0), ("E3", 100, 5), ("E4", 99, 4)):
        who = principal_tag(mid)
        m = s.mail(mid, 1000, f"a@{mid.lower()}.example", who)
        rc = list(m.destination)
        s.deliver(m, {r: OK for r in rc[hard:]} | {r: HARD for r in rc[:hard]})
        for r in rc[hard : hard + complaints]:
            s.late(m, r, "complaint")
    rows = table(spark, s)
    bands = {
        mid: (
            rows["principal", principal_tag(mid)]["bounce_band"],
            rows["principal", principal_tag(mid)]["complaint_band"],
        )
        for mid in ("E1", "E2", "E3", "E4")
    }
    assert bands == {
        "E1": ("review", "review"),  # 5 %, 0.1 %
        "E2": ("ok", "ok"),  # 4.9 %, 0
        "E3": ("pause", "pause"),  # 10 %, 0.5 %
        "E4": ("review", "review"),  # 9.9 %, 0.4 %
    }
    for mid in bands:
        assert (
            rows["principal", principal_tag(mid)]["verdict"]
            == s.guard.standing("principal", principal_tag(mid)).verdict
        )


def test_the_html_table_shows_worst_first_per_scope() -> None:
    def row(scope: str, target: str, verdict: str, sends: int) -> dict[str, str]:
        return {
            "scope": scope,
            "target": target,
            "sends": str(sends),
            "hard_bounces": "6",
            "soft_bounces": "2",
            "complaints": "1",
            "unsubscribes": "3",
            "bounce_rate": "0.06",
            "complaint_rate": "0.001",
            "bounce_band": "review",
            "complaint_band": "review",
            "verdict": verdict,
        }

    html = render.reputation_table(
        [row("principal", NEWS, "review", 1000), row("sender_domain", "shop.example", "ok", 9)]
    )
    cells = re.findall(r"<td[^>]*>([^<]*)</td>", html)
    assert cells[:3] == ["principal", NEWS, "1,000"] and "review" in cells[:12]
    assert cells[12:14] == ["sender domain", "shop.example"]
    assert "No sends" in render.reputation_table([])
