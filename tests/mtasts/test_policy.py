"""MTA-STS grammar (RFC 8461 §3.1, §3.2) and MX matching (§4.1): pure functions."""

from __future__ import annotations

import pytest
from mailqueue.outbound.mtasts import (
    MAX_AGE_LIMIT,
    Mode,
    PolicyError,
    mx_matches,
    parse_policy,
    parse_txt,
)


def test_txt_record_gives_the_id() -> None:
    assert parse_txt(["v=STSv1; id=20160831085700Z;"]) == "20160831085700Z"
    assert parse_txt(["v=STSv1;id=abc; ext=1"]) == "abc"


@pytest.mark.parametrize(
    "records",
    [
        [],
        ["v=STSv1; id=1", "v=STSv1; id=2"],  # two records: no policy
        ["v=STSv2; id=1"],
        ["id=1; v=STSv1"],  # v= must come first
        ["v=STSv1"],  # no id
        ["v=STSv1; id=has-dash"],
        ["v=STSv1; id=" + "a" * 33],
    ],
)
def test_bad_txt_records(records: list[str]) -> None:
    with pytest.raises(PolicyError):
        parse_txt(records)


def test_policy_file_crlf_and_lf() -> None:
    text = (
        "version: STSv1\r\nmode: enforce\r\nmx: mail.example.com\n"
        "mx: *.example.net\nmax_age: 604800\r\n"
    )
    p = parse_policy(text)
    assert p.mode is Mode.ENFORCE
    assert p.mx == ("mail.example.com", "*.example.net")
    assert p.max_age == 604800


def test_policy_max_age_is_capped_and_unknown_keys_ignored() -> None:
    p = parse_policy(
        "version: STSv1\nmode: testing\nmx: a.example\nfoo: bar\nmax_age: 9999999999\n"
    )
    assert p.mode is Mode.TESTING and p.max_age == MAX_AGE_LIMIT


def test_mode_none_needs_no_mx() -> None:
    assert parse_policy("version: STSv1\nmode: none\nmax_age: 86400\n").mx == ()


@pytest.mark.parametrize(
    "text",
    [
        "mode: enforce\nmx: a.example\nmax_age: 1\n",  # no version
        "version: STSv1\nmode: strict\nmx: a.example\nmax_age: 1\n",
        "version: STSv1\nmode: enforce\nmax_age: 1\n",  # enforce without mx
        "version: STSv1\nmode: enforce\nmx: a.example\nmax_age: -1\n",
        "version: STSv1\nmode: enforce\nmx: a.example\n",  # no max_age
        "version: STSv1\nmode: enforce\nmx: a.*.example\nmax_age: 1\n",
        "version: STSv1\nmode enforce\n",
    ],
)
def test_bad_policies(text: str) -> None:
    with pytest.raises(PolicyError):
        parse_policy(text)


@pytest.mark.parametrize(
    ("pattern", "host", "ok"),
    [
        ("mail.example.com", "mail.example.com", True),
        ("mail.example.com", "MAIL.Example.com.", True),
        ("mail.example.com", "mail2.example.com", False),
        ("*.example.com", "mx1.example.com", True),
        ("*.example.com", "example.com", False),  # the wildcard needs a label
        ("*.example.com", "a.b.example.com", False),  # and only one
        ("*.example.com", "mx1.example.net", False),
    ],
)
def test_mx_matching(pattern: str, host: str, ok: bool) -> None:
    assert mx_matches(pattern, host) is ok
