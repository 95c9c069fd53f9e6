"""Issue 28, items 12-13: `mailqueue suppression import` checks the whole file first and
names file lines; operator reasons with control characters are refused at the API and
never printed raw by the CLI."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from mailqueue.outbound.suppression import Entry

from tests.admin.conftest import Admin
from tests.admin.test_cli import local_env
from tests.suppression.test_admin_cli import call, run, store


@pytest.fixture()
def env(admin: Admin, monkeypatch: pytest.MonkeyPatch) -> Admin:
    for k, v in local_env(admin).items():
        monkeypatch.setenv(k, v)
    return admin


def test_non_utf8_file_is_a_clear_refusal_naming_the_line(env: Admin, tmp_path: Path) -> None:
    src = tmp_path / "latin1.csv"
    src.write_bytes(b"a@x.example,fine\nm\xfcller@x.example,umlaut in Latin-1\n")
    code, out, err = run("--local", "suppression", "import", str(src))
    assert code == 1 and out == ""
    assert "line 2: not UTF-8" in err and "Traceback" not in err
    assert store(env).get_many(["a@x.example"]) == {}


def test_a_utf8_bom_is_not_part_of_the_first_address(env: Admin, tmp_path: Path) -> None:
    src = tmp_path / "excel.csv"
    src.write_bytes("\ufefffirst@x.example,exported\nsecond@x.example\n".encode())
    code, out, err = run("--local", "suppression", "import", str(src))
    assert (code, out) == (0, "suppressed 2 address(es)\n"), err
    assert set(store(env).get_many(["first@x.example", "second@x.example"])) == {
        "first@x.example",
        "second@x.example",
    }


def test_a_bad_line_near_the_end_refuses_the_file_before_anything_is_written(
    env: Admin, tmp_path: Path
) -> None:
    lines = [f"user{n}@bulk.example" for n in range(2500)]
    lines[2399] = "not an address"
    src = tmp_path / "big.csv"
    src.write_text("\n".join(lines) + "\n")
    code, out, err = run("--local", "suppression", "import", str(src))
    assert code == 1 and out == ""
    assert "line 2400: invalid_address" in err and "entries[" not in err
    assert store(env).get_many([f"user{n}@bulk.example" for n in range(100)]) == {}


def test_a_control_character_in_an_import_reason_names_its_line(
    env: Admin, tmp_path: Path
) -> None:
    src = tmp_path / "esc.csv"
    src.write_text("a@x.example,ok\nb@x.example,\x1b[31mred\n")
    code, _, err = run("--local", "suppression", "import", str(src))
    assert code == 1 and "line 2: forbidden_character" in err and "\x1b" not in err


@pytest.mark.parametrize("reason", ["\x1b]0;owned\x07", "two\r\nlines", "tab\there", "\x9b31m"])
def test_control_characters_in_reasons_are_refused_at_the_api(env: Admin, reason: str) -> None:
    status, doc, _ = call(
        env, "POST", "/v1/queue/suppressions", {"address": "a@x.example", "reason": reason}
    )
    assert (status, doc["error"]) == (400, "forbidden_character")
    status, doc, _ = call(
        env,
        "POST",
        "/v1/queue/suspensions",
        {"scope": "domain", "target": "x.example", "duration": "1h", "reason": reason},
    )
    assert (status, doc["error"]) == (400, "forbidden_character")
    assert store(env).get_many(["a@x.example"]) == {}


def test_a_stored_control_character_is_never_printed_raw(env: Admin) -> None:
    now = time.time()  # stored before the API refused it (or written by another tool)
    store(env).put_many([Entry("a@x.example", "\x1b[2J\x1b]0;owned\x07\r\nfake", now, now + 99)])
    code, out, err = run("--local", "suppression", "list")
    assert code == 0, err
    assert "a@x.example" in out and "\\x1b[2J\\x1b]0;owned\\x07\\x0d\\x0afake" in out
    assert not any(c in out[:-1] for c in "\x1b\x07\r\n")
