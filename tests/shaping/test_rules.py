"""The shaping and backoff rules files: the packaged ones load, bad ones fail clearly."""

from __future__ import annotations

import json

import pytest
from mailqueue.core.config import ConfigError
from mailqueue.core.model import Result
from mailqueue.outbound.shaping import (
    BackoffRules,
    RulesError,
    ShapingRules,
    check_transaction_limits,
    load_rules,
    reclassified,
)
from mailqueue.services.delivery import DeliverySettings


def test_packaged_rules_load_and_roll_up_providers_by_mx() -> None:
    s, _ = load_rules()
    assert s.site_of(["alt1.aspmx.l.google.com.", "aspmx.l.google.com"]) == "google"
    assert s.site_of(["example-com.mail.protection.outlook.com"]) == "microsoft"
    assert s.site_of(["mta6.am0.yahoodns.net"]) == "yahoo"
    # same MX set, same site, whatever the order or case
    a = s.site_of(["MX2.hoster.example.", "mx1.hoster.example"])
    assert (
        a
        == s.site_of(["mx1.hoster.example", "mx2.hoster.example"])
        == ("mx:mx1.hoster.example,mx2.hoster.example")
    )
    assert a != s.site_of(["mx1.hoster.example"])
    assert s.limits_for("google").max_connections == 20
    assert s.limits_for("mx:unknown").max_connections == s.default.max_connections


def test_a_long_mx_set_gets_a_short_stable_site_name() -> None:
    s, _ = load_rules()
    hosts = [f"mx{i}.a-rather-long-hosting-provider-name.example" for i in range(10)]
    name = s.site_of(hosts)
    assert name.startswith("mx:") and len(name) == 27 and name == s.site_of(reversed(hosts))


@pytest.mark.parametrize(
    ("reply", "site", "rule"),
    [
        (
            Result(421, "4.7.28", "4.7.28 ... has been temporarily rate limited"),
            "google",
            "gmail-rate-limited",
        ),
        (
            Result(421, "4.7.0", "4.7.0 Try again later, closing connection."),
            "google",
            "gmail-unusual-rate",
        ),
        (
            Result(451, "4.7.500", "4.7.500 Server busy. Please try again later from [1.2.3.4]"),
            "microsoft",
            "microsoft-throttled",
        ),
        (
            Result(
                451,
                "4.7.650",
                "4.7.650 The mail server [1.2.3.4] has been temporarily rate "
                "limited due to IP reputation.",
            ),
            "microsoft",
            "microsoft-throttled",
        ),
        (
            Result(
                421,
                "4.7.0",
                "[TSS04] Messages from 1.2.3.4 temporarily deferred due to "
                "unexpected volume or user complaints",
            ),
            "yahoo",
            "yahoo-deferred",
        ),
        (
            Result(
                550,
                "5.7.1",
                "5.7.1 Our system has detected an unusual rate of unsolicited "
                "mail originating from your IP address.",
            ),
            "google",
            "gmail-550-unusual-rate",
        ),
        (
            Result(421, "4.7.0", "Too many concurrent connections from your IP"),
            "mx:a",
            "any-too-many-connections",
        ),
    ],
)
def test_shipped_backoff_rules_match_documented_provider_replies(
    reply: Result, site: str, rule: str
) -> None:
    _, b = load_rules()
    got = b.match(site, reply)
    assert got is not None and got.id == rule


def test_backoff_rules_do_not_match_elsewhere_or_on_ordinary_replies() -> None:
    _, b = load_rules()
    assert b.match("google", Result(550, "5.1.1", "5.1.1 The email account does not exist")) is None
    assert b.match("google", Result(451, "4.7.500", "Server busy")) is None  # Microsoft's
    assert b.match("yahoo", Result(0, "4.4.1", "connect failed [TSS04]")) is None  # ours


def test_reclassify_turns_a_known_temporary_5xx_into_a_deferral() -> None:
    _, b = load_rules()
    r = Result(550, "5.7.1", "5.7.1 ... unusual rate of unsolicited mail ...", "mx.google.com")
    rule = b.match("google", r)
    assert rule is not None
    d = reclassified(r, rule)
    assert not d.permanent and d.status == "4.7.1" and d.text == r.text and d.code == 550


BASE = {"version": 1, "default": {"rates": [{"messages": 5, "per": "1s", "burst": 2}]}}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"version": 2}, "version: must be 1"),
        ({"default": {"rates": [{"messages": 0, "per": "1s"}]}}, "default.rates[0].messages"),
        ({"default": {"rates": [{"messages": 5, "per": "soon"}]}}, "is not a duration"),
        ({"default": {"max_conections": 3}}, "unknown field(s) max_conections"),
        ({"providers": [{"site": "Google", "mx": ["*.google.com"]}]}, "providers[0].site"),
        ({"providers": [{"site": "g", "mx": []}]}, "providers[0].mx"),
        ({"sites": {"g": {"max_connections": -1}}}, "sites.g.max_connections"),
    ],
)
def test_a_bad_shaping_file_fails_with_where_and_why(
    change: dict[str, object], message: str
) -> None:
    with pytest.raises(RulesError) as e:
        ShapingRules.from_json(json.dumps({**BASE, **change}), "shaping.json")
    assert message in str(e.value) and str(e.value).startswith("shaping.json")


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        ({"id": "x", "code": 421}, "rules[0].action: expected an object"),
        ({"id": "x", "action": {"suspend": "1m"}}, "match on at least one"),
        ({"id": "x", "status": "4\\.7\\.(", "action": {"suspend": "1m"}}, "bad regular"),
        ({"id": "x", "code": 421, "action": {"slowdown": 2}}, "slowdown"),
        ({"id": "x", "code": 550, "action": {"reclassify": "5.7.1"}}, "temporary status"),
        ({"id": "x", "code": 421, "action": {"explode": True}}, "unknown field(s) explode"),
    ],
)
def test_a_bad_backoff_file_fails_with_where_and_why(rule: dict[str, object], message: str) -> None:
    with pytest.raises(RulesError) as e:
        BackoffRules.from_json(json.dumps({"version": 1, "rules": [rule]}), "backoff.json")
    assert message in str(e.value)


def test_delivery_settings_refuse_to_start_on_bad_rules(tmp_path) -> None:  # type: ignore[no-untyped-def]
    bad = tmp_path / "shaping.json"
    bad.write_text('{"version": 1, "default": {"block": 0}}')
    with pytest.raises(ConfigError, match="default.block"):
        DeliverySettings(shaping=True, shaping_rules=str(bad))
    with pytest.raises(ConfigError, match="cannot read"):
        DeliverySettings(shaping=True, backoff_rules=str(tmp_path / "missing.json"))
    DeliverySettings(shaping=False, shaping_rules=str(bad))  # off: not read
    ok = DeliverySettings(shaping=True, shaping_rules=json.dumps(BASE))
    assert ok.shaping


def test_a_transaction_limit_below_the_group_size_is_refused_at_start() -> None:
    r = ShapingRules.from_json(
        json.dumps({"version": 1, "sites": {"g": {"max_recipients_per_transaction": 20}}})
    )
    check_transaction_limits(r, 20)
    with pytest.raises(RulesError, match="g.max_recipients_per_transaction is 20"):
        check_transaction_limits(r, 50)
    check_transaction_limits(load_rules()[0], 50)  # the packaged rules fit the default
