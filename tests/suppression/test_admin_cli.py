"""The suppression list through the admin handler (API Gateway events), and the CLI over
signed HTTP (served on 127.0.0.1) and --local; moto underneath."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

import pytest
from mailqueue.backends.aws.suppression_store import DynamoSuppressionStore
from mailqueue.cli import main as cli
from mailqueue.outbound.suppression import Entry
from mailqueue.services.admin import AdminApi

from functions.admin import app as admin_app
from tests.admin.conftest import ACTOR, Admin
from tests.admin.http import answer, context, serve, v2_event
from tests.admin.test_cli import local_env

OUTSIDER = "arn:aws:iam::123456789012:user/submitter"


def call(admin: Admin, method: str, path: str, body: object = None, **kw: object) -> tuple:
    return answer(admin_app.handle(v2_event(method, path, body=body, **kw), context(), admin.api))


def store(admin: Admin) -> DynamoSuppressionStore:
    return DynamoSuppressionStore(admin.aws.clients.dynamodb, admin.aws.resources.table)


def test_add_get_list_remove_through_the_handler(admin: Admin) -> None:
    status, body, _ = call(
        admin, "POST", "/v1/queue/suppressions", {"address": "Bob@Example.NET", "reason": "asked"}
    )
    assert (status, body) == (200, {"added": 1})
    status, e, _ = call(admin, "GET", "/v1/queue/suppressions/bob%40example.net")
    assert status == 200
    assert (e["address"], e["reason"], e["actor"], e["source"]) == (
        "bob@example.net",
        "asked",
        ACTOR,
        None,
    )
    days = (time.mktime(time.strptime(e["expires_at"], "%Y-%m-%dT%H:%M:%SZ")) - time.time()) / 86400
    assert 364 < days < 366  # the default lifetime
    status, page, _ = call(admin, "GET", "/v1/queue/suppressions")
    assert status == 200 and [x["address"] for x in page["items"]] == ["bob@example.net"]
    status, body, _ = call(admin, "DELETE", "/v1/queue/suppressions/bob@example.net")
    assert status == 200 and body["removed"]["address"] == "bob@example.net"
    status, body, _ = call(admin, "DELETE", "/v1/queue/suppressions/bob@example.net")
    assert (status, body["error"]) == (404, "not_found")
    assert call(admin, "GET", "/v1/queue/suppressions/bob@example.net")[0] == 404


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ({"address": "not an address"}, "invalid_address"),
        ({"address": "a@b.example", "ttl_days": 0}, "invalid_value"),
        ({"address": "a@b.example", "colour": "red"}, "unknown_field"),
        ({"entries": []}, "invalid_type"),
        ({"entries": [{"address": "x@y.example"}] * 1001}, "too_many_entries"),
        ("[1]", "invalid_json"),
    ],
)
def test_bad_input_is_a_4xx_with_a_reason(admin: Admin, body: object, error: str) -> None:
    status, doc, _ = call(admin, "POST", "/v1/queue/suppressions", body)
    assert (status, doc["error"]) == (400, error)


def test_expired_entries_are_hidden_and_a_bad_cursor_refused(admin: Admin) -> None:
    now = time.time()
    store(admin).put_many(
        [
            Entry("old@x.example", "r", now - 100, now - 10),
            Entry("new@x.example", "r", now, now + 100),
        ]
    )
    _, page, _ = call(admin, "GET", "/v1/queue/suppressions")
    assert [x["address"] for x in page["items"]] == ["new@x.example"]
    _, page, _ = call(admin, "GET", "/v1/queue/suppressions", query={"all": "true"})
    assert sorted(x["address"] for x in page["items"]) == ["new@x.example", "old@x.example"]
    assert call(admin, "GET", "/v1/queue/suppressions/old@x.example")[0] == 404
    status, doc, _ = call(admin, "GET", "/v1/queue/suppressions", query={"cursor": "zz"})
    assert (status, doc["error"]) == (400, "invalid_cursor")


def test_only_operators_reach_the_list(admin: Admin) -> None:
    status, doc, _ = call(admin, "GET", "/v1/queue/suppressions", principal=OUTSIDER)
    assert (status, doc["error"]) == (403, "not_an_operator")


def run(*argv: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(list(argv), env=env, stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def test_cli_import_export_list_remove_over_signed_http(
    admin: Admin, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for k, v in local_env(admin).items():
        monkeypatch.setenv(k, v)
    lines = [f"user{n}@bulk.example,imported from the old MTA" for n in range(1203)]
    src = tmp_path / "list.csv"
    src.write_text("# address,reason\n" + "\n".join(lines) + '\n{"address": "j@x.example"}\n')
    api = AdminApi(admin.service, admin.api.launcher)
    with serve({"/v1/queue": lambda ev, ctx: admin_app.handle(ev, ctx, api)}) as url:
        code, out, err = run("suppression", "import", str(src), "--ttl-days", "30", "--api", url)
        assert (code, out) == (0, "suppressed 1204 address(es)\n"), err
        code, out, err = run("suppression", "export", "--api", url)
        assert code == 0, err
        docs = [json.loads(x) for x in out.splitlines()]
        assert len(docs) == 1204 and len({d["address"] for d in docs}) == 1204
        assert docs[0]["reason"] in ("imported from the old MTA", "imported")
        code, out, err = run("suppression", "list", "--api", url, "--limit", "5")
        assert code == 0 and len(out.splitlines()) == 5 and err.startswith("more: --cursor")
        code, out, _ = run("suppression", "remove", "j@x.example", "--api", url)
        assert (code, out) == (0, "removed j@x.example\n")
        code, _, err = run("suppression", "show", "j@x.example", "--api", url)
        assert code != 0 and "not_found" in err
    assert len(store(admin).get_many([f"user{n}@bulk.example" for n in range(150)])) == 150


def test_cli_local_add_and_show(admin: Admin, monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in local_env(admin).items():
        monkeypatch.setenv(k, v)
    code, out, err = run("--local", "suppression", "add", "a@x.example", "b@x.example")
    assert (code, out) == (0, "suppressed 2 address(es)\n"), err
    code, out, _ = run("--local", "suppression", "show", "A@x.example", "--json")
    doc = json.loads(out)
    assert doc["address"] == "a@x.example" and doc["actor"].startswith("cli:")


def test_pages_hold_at_most_limit_and_cover_every_entry_once(admin: Admin) -> None:
    now = time.time()
    addresses = [f"p{n}@x.example" for n in range(23)]  # spread over the 16 buckets
    store(admin).put_many([Entry(a, "r", now, now + 100) for a in addresses])
    seen: list[str] = []
    query = {"limit": "3"}
    while True:
        status, page, _ = call(admin, "GET", "/v1/queue/suppressions", query=query)
        assert status == 200 and len(page["items"]) <= 3
        seen += [x["address"] for x in page["items"]]
        if not page["cursor"]:
            break
        query = {"limit": "3", "cursor": page["cursor"]}
    assert sorted(seen) == sorted(addresses)
