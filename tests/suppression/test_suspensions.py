"""Operator suspensions: through the admin handler and the CLI (--local), and their effect
on delivery (real SMTP peer, moto): a held group is re-armed with no connection and no
attempt, for queued mail and mail that arrives later, until it expires or is resumed."""

from __future__ import annotations

import io
import json
import time

import pytest
from mailqueue.backends.aws.suspension_store import DynamoSuspensionStore
from mailqueue.cli import main as cli
from mailqueue.core.model import utcnow
from mailqueue.outbound.suspensions import Suspension
from mailqueue.services.admin.service import Action, OpContext

from functions.admin import app as admin_app
from tests.admin.conftest import ACTOR, Admin, make_admin
from tests.admin.http import answer, context, v2_event
from tests.admin.test_cli import local_env
from tests.support import factories as f
from tests.support.rigs import RigFactory, relay_to
from tests.support.smtp_peers import smtp_sink


def call(admin: Admin, method: str, path: str, body: object = None, **kw: object) -> tuple:
    return answer(admin_app.handle(v2_event(method, path, body=body, **kw), context(), admin.api))


def test_suspend_list_resume_through_the_handler(admin: Admin) -> None:
    body = {"scope": "domain", "target": "Example.NET", "duration": "2h", "reason": "abuse desk"}
    status, s, _ = call(admin, "POST", "/v1/queue/suspensions", body)
    assert status == 200, s
    assert (s["scope"], s["target"], s["actor"], s["reason"]) == (
        "domain",
        "example.net",
        ACTOR,
        "abuse desk",
    )
    left = time.mktime(time.strptime(s["until"], "%Y-%m-%dT%H:%M:%SZ")) - time.mktime(time.gmtime())
    assert 7190 < left <= 7200
    _, page, _ = call(admin, "GET", "/v1/queue/suspensions")
    assert [(x["scope"], x["target"]) for x in page["items"]] == [("domain", "example.net")]
    status, doc, _ = call(admin, "DELETE", "/v1/queue/suspensions/domain/example.net")
    assert status == 200 and doc["resumed"]["target"] == "example.net"
    assert call(admin, "DELETE", "/v1/queue/suspensions/domain/example.net")[0] == 404
    assert call(admin, "GET", "/v1/queue/suspensions")[1]["items"] == []


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ({"scope": "planet", "target": "x.example", "duration": "1h"}, "invalid_scope"),
        ({"scope": "domain", "target": "no spaces", "duration": "1h"}, "invalid_target"),
        ({"scope": "domain", "target": "x.example", "duration": "soon"}, "invalid_duration"),
        ({"scope": "domain", "target": "x.example", "duration": "31d"}, "invalid_duration"),
        # past a float's range: was an OverflowError, a 500 (found by tests/fuzz/test_fuzz_admin)
        ({"scope": "domain", "target": "x.example", "duration": 10**400}, "invalid_duration"),
        ({"scope": "domain", "target": "x.example", "duration": "9" * 400}, "invalid_duration"),
        ({"scope": "domain", "target": "x.example"}, "missing_field"),
        ({"scope": "site", "target": "google", "duration": "1h", "x": 1}, "unknown_field"),
    ],
)
def test_bad_suspensions_are_a_4xx(admin: Admin, body: object, error: str) -> None:
    status, doc, _ = call(admin, "POST", "/v1/queue/suspensions", body)
    assert (status, doc["error"]) == (400, error)


def test_expired_suspensions_are_not_listed(admin: Admin) -> None:
    now = time.time()
    DynamoSuspensionStore(admin.aws.clients.dynamodb, admin.aws.resources.table).put(
        Suspension("site", "google", now - 5, "r", "ops", now - 100)
    )
    assert call(admin, "GET", "/v1/queue/suspensions")[1]["items"] == []
    _, page, _ = call(admin, "GET", "/v1/queue/suspensions", query={"all": "true"})
    assert [x["target"] for x in page["items"]] == ["google"]


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(list(argv), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def test_cli_suspend_suspensions_resume(admin: Admin, monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in local_env(admin).items():
        monkeypatch.setenv(k, v)
    code, out, err = run("--local", "suspend", "--sender-domain", "shop.example", "--for", "30m")
    assert code == 0 and out.startswith("suspended sender_domain"), err
    code, out, _ = run("--local", "suspensions", "--json")
    [doc] = [json.loads(x) for x in out.splitlines()]
    assert doc["target"] == "shop.example" and doc["actor"].startswith("cli:")
    code, out, _ = run("--local", "resume", "--sender-domain", "shop.example")
    assert code == 0 and out.startswith("resumed sender_domain")
    assert run("--local", "suspensions")[1] == ""


def test_a_suspended_domain_is_held_without_an_attempt_then_resumes(rig: RigFactory) -> None:
    with smtp_sink() as peer:
        r = rig(routes=relay_to(peer.port), suspension_refresh_seconds=0)
        store = DynamoSuspensionStore(r.aws.clients.dynamodb, r.aws.resources.table)
        queued = r.aws.storage().enqueue(f.envelope("a@x.example"), f.content())
        now = time.time()
        store.put(Suspension("domain", "x.example", now + 3600, "test", "ops", now))
        r.poll()
        g = r.group(queued.mail_id, "x.example")
        assert peer.messages == [] and g.recipients[0].attempts == 0  # not an attempt
        assert g.state.value == "queued"
        assert 250 < (g.next_attempt_at - utcnow()).total_seconds() <= 300  # recheck cap
        # mail that arrives later is held too; another domain is not
        later = r.aws.storage().enqueue(f.envelope("b@x.example", "c@y.example"), f.content())
        r.poll()
        assert [m.rcpt_tos for m in peer.messages] == [["c@y.example"]]
        assert r.group(later.mail_id, "x.example").state.value == "queued"
        assert r.service.suspensions.store.requests >= 2  # read again (refresh 0)
        store.delete("domain", "x.example")  # resume: `mailqueue retry` makes them due now
        ops = make_admin(r.aws)
        for mail in (queued, later):
            ops.service.act(mail.mail_id, Action.RETRY, OpContext(actor=ACTOR))
        r.poll()
        r.poll()
    assert sorted(x for m in peer.messages for x in m.rcpt_tos) == [
        "a@x.example",
        "b@x.example",
        "c@y.example",
    ]


def test_matching_by_site_domain_and_sender_domain_picks_the_longest() -> None:
    from mailqueue.outbound.suspensions import matching

    now = 1000.0
    items = [
        Suspension("site", "google", now + 10),
        Suspension("sender_domain", "shop.example", now + 50),
        Suspension("domain", "gmail.com", now - 1),  # expired
    ]
    at = {"domain": "gmail.com", "sender_domain": "other.example"}
    assert matching(items, now, site=None, **at) is None
    assert matching(items, now, site="google", **at) == items[0]
    both = matching(items, now, site="google", domain="gmail.com", sender_domain="shop.example")
    assert both == items[1]
    assert matching(items, now + 20, site="google", **at) is None
