"""The CLI as an operator meets it (issue 15, item 6): a group listed once while a delivery
moves it, a `mailq`-style total and an empty queue said so, the raw header block, job
progress totals that add up, a conflict that is not "busy", a hint when the token is
missing, and every submission option on `send`. Real service and storage on moto."""

from __future__ import annotations

import argparse
import io
import json
import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from mailqueue.cli import main as cli
from mailqueue.core.authz import PERMISSIVE_SENDER_POLICY
from mailqueue.core.model import MailRef, utcnow
from mailqueue.core.storage import ClaimRefused
from mailqueue.services.ingress import IngressSettings

from functions.admin import app as admin_app
from functions.ingress import app as ingress_app
from tests.admin.conftest import Admin
from tests.admin.http import serve
from tests.admin.test_cli import local_env, run
from tests.support.aws import session
from tests.support.factories import content


@pytest.fixture()
def admin(aws_admin: Admin) -> Admin:
    """These bodies read DynamoDB items or SQS queues themselves: AWS only."""
    return aws_admin


@pytest.fixture()
def cli_env(admin: Admin, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    values = local_env(admin)
    for k, v in values.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("MAILQUEUE_API", raising=False)
    return values


def test_empty_queue_says_so(admin: Admin, cli_env: dict[str, str]) -> None:
    code, out, err = run("--local", "list")
    assert code == 0, err
    assert out == "Mail queue is empty\n"


def test_list_ends_with_a_mailq_total(admin: Admin, cli_env: dict[str, str]) -> None:
    admin.enqueue("bob@example.net", "carol@example.com", body=content(3000))
    admin.enqueue("dave@example.net", body=content(1500))
    code, out, err = run("--local", "list")
    assert code == 0, err
    # 3,000 + 1,500 bytes over two mails (the two-group mail counted once): 5 Kbytes
    assert out.splitlines()[-1] == "-- 5 Kbytes in 2 Requests, 3 group(s), 3 recipient(s)."
    code, out, err = run("--local", "list", "--limit", "1")
    assert out.splitlines()[-1].endswith("shown (more follow)")
    assert err.startswith("more: --cursor ")


class MovingClient(cli.LocalClient):
    """The real local client; after the first page a delivery claims the listed group, so
    the walk meets it again under `inflight` (as an eventually consistent index can show
    a group under two states at once)."""

    def __init__(self, base: cli.LocalClient, admin: Admin) -> None:
        self.__dict__.update(base.__dict__)
        self.admin = admin
        self.pages = 0

    def request(
        self,
        method: str,
        path: str,
        query: Mapping[str, str] | None = None,
        body: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> cli.Answer:
        answer = super().request(method, path, query, body, headers)
        self.pages += 1
        if self.pages == 1:
            for g in answer[1]["items"]:
                claim = self.admin.storage.send_start(
                    MailRef(g["mail_id"], g["group"]), utcnow(), lease_seconds=300
                )
                assert not isinstance(claim, ClaimRefused)
        return answer


def test_a_group_moved_by_a_delivery_is_listed_once(
    admin: Admin, cli_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    a = admin.enqueue("bob@example.net")
    b = admin.enqueue("carol@example.com")
    real = cli.make_client
    made: list[MovingClient] = []

    def moving(ns: argparse.Namespace, environ: Mapping[str, str]) -> cli.Client:
        base = real(ns, environ)
        assert isinstance(base, cli.LocalClient)
        made.append(MovingClient(base, admin))
        return made[-1]

    monkeypatch.setattr(cli, "make_client", moving)
    code, out, err = run("--local", "list", "--json", "--limit", "1", "--all")
    assert code == 0, err
    keys = [(d["mail_id"], d["group"]) for d in map(json.loads, out.splitlines())]
    assert made[0].pages >= 3  # the walk did reach the inflight state after the claim
    assert sorted(keys) == sorted([(a.mail_id, "example.net"), (b.mail_id, "example.com")])


def test_show_prints_the_raw_header_block(admin: Admin, cli_env: dict[str, str]) -> None:
    raw = (
        b"Received: from app (app.example.org [192.0.2.1])\r\n"
        b"\tby mx.example.org; Sat, 21 Nov 2026 06:00:00 +0000\r\n"
        b"From: Alice <alice@example.org>\r\nSubject: =?utf-8?q?caf=C3=A9?=\r\n"
        b"X-Dup: one\r\nX-Dup: two\r\n\r\nbody\r\n"
    )
    q = admin.enqueue("bob@example.net", body=raw)
    code, out, err = run("--local", "show", q.mail_id)
    assert code == 0, err
    block = out.split("*** HEADER RECORDS ***\n", 1)[1]
    assert block == raw.split(b"\r\n\r\n")[0].decode().replace("\r\n", "\n") + "\n"


def test_progress_total_never_below_what_was_examined() -> None:
    err = io.StringIO()
    progress = cli.Progress(err)
    base = {"estimate": 3, "busy": 0, "counts": {"applied": 4, "recipients": 4}}
    progress({**base, "state": "running", "counts": {**base["counts"], "examined": 5}})
    progress({**base, "state": "done", "counts": {**base["counts"], "examined": 7}})
    running, done = err.getvalue().splitlines()
    assert " 5/~6 groups" in running and " 83%" in running
    assert " 7/7 groups" in done and "100%" in done
    for line in (running, done):
        m = re.search(r"(\d+)/~?(\d+) groups", line)
        assert m and int(m.group(1)) <= int(m.group(2))


def _ingress_routes(admin: Admin) -> dict[str, Any]:
    ingress = ingress_app.build_service(
        IngressSettings(storage=admin.aws.settings, sender_policy=PERMISSIVE_SENDER_POLICY),
        admin.aws.clients,
        None,
        session(),
    )
    return {
        "/v1/queue": lambda ev, ctx: admin_app.handle(ev, ctx, admin.api),
        "/v1/messages": lambda ev, ctx: ingress_app.handle(ev, ctx, ingress),
    }


def test_send_exposes_every_submission_option_and_a_conflict_has_its_own_code(
    admin: Admin, cli_env: dict[str, str], tmp_path: Path
) -> None:
    msg = tmp_path / "m.eml"
    msg.write_bytes(content(800))
    with serve(_ingress_routes(admin)) as url:
        argv = ["send", "--api", url, "--from", "alice@example.org", "--file", str(msg)]
        code, out, err = run(
            *argv, "--to", "bob@example.net", "--to", "carol@example.net",
            "--notify", "success,failure", "--orcpt", "rfc822;bob@old.example",
            "--ret", "hdrs", "--envid", "ENV-42", "--not-before", "2h",
            "--idempotency-key", "k-7", "--priority", "bulk",
        )  # fmt: skip
        assert code == 0, err
        mail_id = out.split()[1]
        mail, groups = admin.storage.get_mail(mail_id)
        g = groups[0]
        assert g.ret is not None and g.ret.value == "HDRS" and g.envid == "ENV-42"
        assert g.priority.value == "bulk"
        by_addr = {r.address: r for r in g.recipients}
        assert {n.value for n in by_addr["bob@example.net"].notify} == {"SUCCESS", "FAILURE"}
        assert by_addr["bob@example.net"].orcpt == "rfc822;bob@old.example"
        assert by_addr["carol@example.net"].orcpt is None
        later = g.next_attempt_at - datetime.now(UTC)
        assert timedelta(minutes=115) < later <= timedelta(hours=2)

        # the same key with other recipients: 409 conflict, not "busy, try again"
        code, _, err = run(*argv, "--to", "dave@example.net", "--idempotency-key", "k-7")
        assert code == cli.EXIT_CONFLICT != cli.EXIT_BUSY
        assert "idempotency" in err

        code, _, err = run(*argv, "--to", "bob@example.net", "--tag", "novalue")
        assert code == cli.EXIT_USAGE and "NAME=VALUE" in err


def test_a_missing_token_gets_a_hint(
    admin: Admin, cli_env: dict[str, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.delenv("MAILQUEUE_TOKEN", raising=False)
    code, _, err = run("--api", "http://127.0.0.1:9/", "--region", "us-east-1", "size")
    assert code == cli.EXIT_USAGE
    assert "MAILQUEUE_TOKEN" in err and "no AWS credentials" in err


def test_aws_region_is_honoured_for_signing(
    admin: Admin, cli_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 28, item 2: AWS_REGION is documented as a source of the region (boto3 itself
    reads only AWS_DEFAULT_REGION)."""
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    monkeypatch.delenv("MAILQUEUE_TOKEN", raising=False)
    monkeypatch.setenv("AWS_REGION", cli_env["AWS_DEFAULT_REGION"])
    with serve({"/v1/queue": lambda ev, ctx: admin_app.handle(ev, ctx, admin.api)}) as url:
        code, out, err = run("--api", url, "size")
    assert code == 0, err
    assert "no AWS region" not in err


def test_the_local_stack_without_a_token_says_token_first(
    admin: Admin, cli_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 28, item 2: a loopback API (the local stack) without a token: the token is
    the likelier problem, so it is said before the region."""
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION", "MAILQUEUE_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    code, _, err = run("--api", "http://127.0.0.1:9/", "size")
    assert code == cli.EXIT_USAGE
    assert err.splitlines()[0].startswith("mailqueue: no token") or err.startswith("no token"), err
    assert err.index("MAILQUEUE_TOKEN") < err.index("no AWS region")


def test_show_of_a_finished_mail_says_so_and_no_next_attempt(
    admin: Admin, cli_env: dict[str, str]
) -> None:
    """Issue 28, item 4: a delivered mail is finished: no "next attempt", the content
    cleaned up, where its events are."""
    from mailqueue.core.model import Result

    q = admin.enqueue("bob@example.net")
    claim = admin.storage.send_start(MailRef(q.mail_id, q.groups[0]), utcnow(), lease_seconds=60)
    assert not isinstance(claim, ClaimRefused)
    admin.storage.send_done(claim, ["r0"], Result(250, "2.0.0", "ok"))
    code, out, err = run("--local", "show", q.mail_id)
    assert code == 0, err
    assert "status: finished" in out and "event log" in out
    assert "next attempt" not in out
    assert "finished at: 20" in out and "(content cleaned up)" in out
    code, out, err = run("--local", "show", q.mail_id, "--json")
    doc = json.loads(out)
    assert doc["finished"] is True and doc["groups"][0]["next_attempt_at"] is None


def test_show_of_a_mail_no_longer_in_the_queue_says_what_happened(
    admin: Admin, cli_env: dict[str, str]
) -> None:
    """Issue 28, item 4: a bounced-and-cleaned mail is gone: say so, and where to look."""
    code, out, err = run("--local", "show", "01JZZZZZZZZZZZZZZZZZZZZZZZ")
    assert code == cli.EXIT_REFUSED and out == ""
    assert "not in the queue" in err and "cleaned up" in err and "event log" in err
