"""The `mailqueue` CLI through its real entry point: --local on moto, and over HTTP
(SigV4-signed) through the admin and ingress handlers served on 127.0.0.1."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
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
from tests.support.aws import REGION, session


@pytest.fixture()
def admin(aws_admin: Admin) -> Admin:
    """These bodies read DynamoDB items or SQS queues themselves: AWS only."""
    return aws_admin


def local_env(admin: Admin) -> dict[str, str]:
    s = admin.aws.settings
    return {
        "MQ_TABLE": s.table,
        "MQ_BUCKET": s.bucket,
        "MQ_DELIVERY_QUEUE_URL": s.delivery_queue_url,
        "MQ_BOUNCE_QUEUE_URL": s.bounce_queue_url,
        "MQ_ENDPOINT_URL": admin.aws.endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": REGION,
    }


@pytest.fixture()
def env(admin: Admin, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    values = local_env(admin)
    for k, v in values.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("MAILQUEUE_API", raising=False)
    yield values


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(list(argv), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def test_local_list_show_hold_release(admin: Admin, env: dict[str, str]) -> None:
    a = admin.enqueue("bob@example.net", "carol@example.com")
    b = admin.enqueue("dave@example.net", sender="")
    code, out, err = run("--local", "list")
    assert code == 0, err
    assert out.splitlines()[0].split()[:3] == ["MAIL", "ID", "GROUP"]
    assert a.mail_id in out and b.mail_id in out and "    bob@example.net  queued" in out
    code, out, _ = run("list", "--local", "--json", "--domain", "example.net")
    docs = [json.loads(line) for line in out.splitlines()]
    assert {(d["mail_id"], d["group"]) for d in docs} == {
        (a.mail_id, "example.net"),
        (b.mail_id, "example.net"),
    }
    assert {"state", "sender", "arrival", "next_attempt_at", "recipients"} <= set(docs[0])
    code, out, err = run("--local", "list", "--json", "--limit", "1")
    assert code == 0 and len(out.splitlines()) == 1 and err.startswith("more: --cursor ")
    code, out, _ = run("--local", "list", "--json", "--limit", "1", "--all")
    assert len(out.splitlines()) == 3

    code, out, _ = run("--local", "show", a.mail_id, "--body")
    assert code == 0
    assert "*** ENVELOPE RECORDS ***" in out and "sender: alice@example.org" in out
    assert "Subject: hello" in out and "*** MESSAGE CONTENTS ***" in out
    assert "The quick brown fox" in out
    code, out, _ = run("--local", "show", a.mail_id)
    assert "*** MESSAGE CONTENTS ***" not in out

    code, out, _ = run("--local", "hold", a.mail_id, b.mail_id)
    assert code == 0
    assert out.splitlines() == [
        f"{a.mail_id}: hold: 2 recipient(s)",
        f"{b.mail_id}: hold: 1 recipient(s)",
    ]
    op = admin.item(a.mail_id, "example.net")["op"]["M"]
    assert op["actor"]["S"].startswith("cli:")
    code, out, _ = run("--local", "release", a.mail_id, "--group", "example.com", "--json")
    assert json.loads(out)["groups"] == [
        {"group": "example.com", "outcome": "applied", "recipients": 1}
    ]


def test_local_purge_runs_the_job_with_progress(admin: Admin, env: dict[str, str]) -> None:
    for i in range(5):
        admin.enqueue(f"u{i}@a.example", f"v{i}@b.example")
    code, out, err = run("--local", "delete", "--all")
    assert code == 0, err
    assert err.startswith("job ") and " started: delete" in err
    progress = [line for line in err.splitlines() if "groups" in line]
    assert progress and progress[-1].endswith("(done)")
    assert "10 recipients" in progress[-1]
    assert " done: delete 10 group(s), 10 recipient(s)" in out
    code, out, _ = run("--local", "list", "--json")
    assert out == ""


def test_local_size_and_shape(admin: Admin, env: dict[str, str]) -> None:
    admin.enqueue("bob@example.net", "carol@example.net", "dave@example.com")
    code, out, _ = run("--local", "size", "--json")
    doc = json.loads(out)
    assert doc["recipients"] == {"queued": 3} and doc["pending"] == 3
    code, out, _ = run("--local", "size")
    assert out.splitlines()[1].split() == ["queued", "3", "2"]
    assert any(
        line.startswith("example.net") and line.split()[1] == "2" for line in out.splitlines()
    )
    code, out, _ = run("--local", "shape")
    assert code == 0
    assert out.splitlines()[1].split()[:3] == ["TOTAL", "3", "3"]


def test_bad_input_and_busy_exit_codes(admin: Admin, env: dict[str, str]) -> None:
    q = admin.enqueue("bob@example.net")
    code, _, err = run("--local", "list", "--state", "delivered")
    assert code == 1 and "invalid_state" in err and "(field: state)" in err
    code, _, err = run("--local", "list", "--age-min", "2h", "--age-max", "1h")
    assert code == 1 and "contradictory_filter" in err
    code, _, err = run("--local", "show", "not-an-id")
    assert code == 1 and "invalid_mail_id" in err
    code, _, err = run("--local", "hold", "01KAAAAAAAAAAAAAAAAAAAAAAA")
    assert code == 1 and "not_found" in err
    code, _, err = run("--local", "delete")
    assert code == 2 and "--all" in err
    code, _, err = run("--local", "delete", q.mail_id, "--domain", "example.net")
    assert code == 2
    code, _, err = run("list")
    assert code == 2 and "MAILQUEUE_API" in err
    code, _, err = run("--local", "list", "--sort", "size")
    assert code == 2  # argparse refuses
    claim = admin.storage.send_start(MailRef(q.mail_id, "example.net"), utcnow(), lease_seconds=300)
    assert not isinstance(claim, ClaimRefused)
    code, _, err = run("--local", "delete", q.mail_id)
    assert code == 3 and "busy" in err and "example.net" in err
    assert admin.storage.get_group(MailRef(q.mail_id, "example.net")).state.value == "inflight"


def test_http_mode_is_signed_and_drives_jobs(
    admin: Admin, env: dict[str, str], tmp_path: Path
) -> None:
    ingress = ingress_app.build_service(
        IngressSettings(storage=admin.aws.settings, sender_policy=PERMISSIVE_SENDER_POLICY),
        admin.aws.clients,
        None,
        session(),
    )
    routes = {
        "/v1/queue": lambda ev, ctx: admin_app.handle(ev, ctx, admin.api),
        "/v1/messages": lambda ev, ctx: ingress_app.handle(ev, ctx, ingress),
    }
    msg = tmp_path / "message.eml"
    msg.write_bytes(b"From: a@example.org\r\nTo: b@example.net\r\nSubject: hi\r\n\r\nhello\r\n")
    with serve(routes) as url:
        code, out, err = run(
            "send", "--api", url, "--from", "a@example.org", "--to", "b@example.net",
            "--to", "c@example.com", "--file", str(msg), "--idempotency-key", "k-1",
        )  # fmt: skip
        assert code == 0, err
        assert out.startswith("queued ") and out.endswith("for 2 recipient(s)\n")
        mail_id = out.split()[1]
        _, groups = admin.storage.get_mail(mail_id)
        assert {g.key for g in groups} == {"example.net", "example.com"}
        code, out, _ = run(
            "send", "--api", url, "--from", "a@example.org", "--to", "b@example.net",
            "--to", "c@example.com", "--file", str(msg), "--idempotency-key", "k-1",
        )  # fmt: skip
        assert out.split()[1] == mail_id and "(already queued)" in out

        code, out, err = run("--api", url, "list", "--json")
        assert code == 0, err
        assert {json.loads(line)["mail_id"] for line in out.splitlines()} == {mail_id}
        code, out, err = run("--api", url, "hold", "--domain", "example.com")
        assert code == 0, err
        assert " done: hold 1 group(s), 1 recipient(s)" in out
        code, out, _ = run("--api", url, "show", mail_id, "--json")
        assert {g["group"]: g["state"] for g in json.loads(out)["groups"]} == {
            "example.net": "queued",
            "example.com": "held",
        }
        code, _, err = run("--api", url, "list", "--state", "bogus")
        assert code == 1 and "invalid_state" in err
        code, _, err = run("--api", url, "--no-sign", "size")
        assert code == cli.EXIT_UNAUTHORISED and "Forbidden" in err  # IAM auth: unsigned
        assert "MAILQUEUE_TOKEN" in err  # the hint


def test_dev_token_instead_of_signing(admin: Admin, env: dict[str, str]) -> None:
    """The local stack's development mode: unsigned, with a bearer token."""
    seen: list[dict[str, Any]] = []

    def handler(ev: dict[str, Any], ctx: Any) -> dict[str, Any]:
        seen.append(ev)
        return admin_app.handle(ev, ctx, admin.api)

    with serve({"/v1/queue": handler}, require_signature=False) as url:
        code = cli.main(
            ["size", "--json", "--no-sign"],
            env={"MAILQUEUE_API": url, "MAILQUEUE_TOKEN": "dev-123"},
            stdout=io.StringIO(),
            stderr=io.StringIO(),
        )
        assert code == 0
    assert seen[0]["headers"]["authorization"] == "Bearer dev-123"
    assert "x-amz-date" not in seen[0]["headers"]


def test_console_script_runs(admin: Admin, env: dict[str, str]) -> None:
    admin.enqueue("bob@example.net")
    script = Path(sys.executable).with_name("mailqueue")
    proc = subprocess.run(
        [str(script), "--local", "list", "--json"],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["group"] == "example.net"


def test_parser_flags_before_and_after_the_command() -> None:
    ns: Any = cli.build_parser().parse_args(["--api", "http://x", "list", "--json"])
    assert ns.api == "http://x" and ns.json is True
