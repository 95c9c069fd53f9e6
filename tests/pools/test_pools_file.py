"""The pools file: the packaged default is today's behaviour; bad input is refused at
start with the file, the place and the reason; the routing policy is a pure choice."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from mailqueue.core.errors import InvalidInput
from mailqueue.core.model import Priority, Result
from mailqueue.outbound.pools import (
    DEFAULT_POOL,
    PoolsError,
    load_pools,
    parse_pools,
    pool_backoff,
    pool_rules,
    shaping_key,
)
from mailqueue.outbound.shaping import load_rules
from mailqueue.outbound.suspensions import Suspension, matching, parse_target

GOOD: dict[str, Any] = {
    "version": 1,
    "ramps": {"r": {"steps": [{"step": 1, "total": 100, "per_site": 20},
                              {"step": 3, "total": 400, "per_site": 80}]}},
    "pools": {
        "tx": {"addresses": ["198.51.100.0/30"], "ehlo": "tx.mail.example.org",
               "max_per_second": 50,
               "limits": {"default": {"rates": [{"messages": 20, "per": "1s"}]},
                          "sites": {"google": {"rates": [{"messages": 40, "per": "1s"}]}}}},
        "bulk": {"addresses": ["203.0.113.8/29", "2001:db8::/126"],
                 "ehlo": "bulk.mail.example.org", "warmup": {"ramp": "r", "overflow": "tx"}},
    },
    "routing": {
        "default": "tx",
        "rules": [
            {"priority": "bulk", "pool": "bulk"},
            {"sender_domain": "News.Example.org", "pool": "bulk"},
            {"principal": "arn:aws:iam::1:role/campaigns", "pool": "bulk"},
            {"tag": {"name": "stream", "value": "marketing"}, "pool": "bulk"},
        ],
    },
}  # fmt: skip


def _with(path: str, value: Any) -> str:
    doc = copy.deepcopy(GOOD)
    *parents, last = path.split(".")
    node = doc
    for p in parents:
        node = node[int(p)] if isinstance(node, list) else node[p]
    if isinstance(node, list):
        node[int(last)] = value
    elif value is None:
        del node[last]
    else:
        node[last] = value
    return json.dumps(doc)


def test_the_packaged_file_is_one_default_pool_todays_behaviour() -> None:
    c = load_pools("")
    assert list(c.pools) == [DEFAULT_POOL] and c.single and c.default == DEFAULT_POOL
    p = c.pools[DEFAULT_POOL]
    assert p.ehlo_name("mq.example.org") == "mq.example.org" and p.bind is None
    assert p.warmup is None
    assert shaping_key(DEFAULT_POOL, "google") == "google"  # the limiter's keys unchanged


def test_a_good_file_parses_and_routes_by_class_domain_principal_and_tag() -> None:
    c = parse_pools(json.dumps(GOOD), "pools.json")
    assert c.pools["bulk"].address_count() == 8 + 4
    choose = c.choose
    kw: dict[str, Any] = {"principal": "arn:aws:iam::1:role/app", "sender": "a@shop.example"}
    assert choose(priority=Priority.TRANSACTIONAL, **kw) == "tx"
    assert choose(priority=Priority.BULK, **kw) == "bulk"
    assert (
        choose(priority=Priority.TRANSACTIONAL, principal="x", sender="b@news.example.org")
        == "bulk"
    )
    assert (
        choose(
            priority=Priority.TRANSACTIONAL,
            principal="arn:aws:iam::1:role/campaigns",
            sender="a@shop.example",
        )
        == "bulk"
    )
    assert choose(priority=Priority.TRANSACTIONAL, tags={"stream": "marketing"}, **kw) == "bulk"
    assert choose(priority=Priority.TRANSACTIONAL, tags={"stream": "receipts"}, **kw) == "tx"
    w = c.pools["bulk"].warmup
    assert w is not None and w.overflow == "tx"
    assert [w.budget(i) and w.budget(i).total for i in (1, 2, 3, 4)] == [100, 100, 400, None]  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("path", "value", "place", "reason"),
    [
        ("routing.rules.0.pool", "nosuch", "pools.json.routing.rules[0].pool", "unknown pool"),
        ("routing.default", "nosuch", "pools.json.routing.default", "unknown pool"),
        ("pools.tx.addresses", [], "pools.json.pools.tx.addresses", "needs its sending"),
        ("pools.tx.addresses", None, "pools.json.pools.tx.addresses", "needs its sending"),
        ("pools.tx.ehlo", None, "pools.json.pools.tx.ehlo", "needs its EHLO/PTR name"),
        ("pools.tx.ehlo", "not a host", "pools.json.pools.tx.ehlo", "needs its EHLO/PTR name"),
        ("pools.tx.addresses", ["203.0.113.12/32"], "pools.json.pools.bulk.addresses",
         "203.0.113.8/29 overlaps 203.0.113.12/32 of pool 'tx'"),
        ("pools.tx.addresses", ["10.0.0.1/24"], "pools.json.pools.tx.addresses[0]", "host bits"),
        ("ramps.r.steps.1", {"step": 3, "total": 90, "per_site": 80}, "ramps.r.steps[1]",
         "not increasing"),
        ("ramps.r.steps.1", {"step": 1, "total": 400, "per_site": 80}, "ramps.r.steps[1]",
         "not increasing"),
        ("ramps.r.steps.0", {"step": 1, "total": 10, "per_site": 20}, "ramps.r.steps[0].per_site",
         "above the step's total"),
        ("pools.tx.limits", {"sites": {"google": {"rates": [{"messages": 60, "per": "1s"}]}}},
         "pools.json.pools.tx.limits.sites.google", "60/s is above the pool's max_per_second 50"),
        ("pools.bulk.warmup", {"ramp": "r", "overflow": "gone"},
         "pools.json.pools.bulk.warmup.overflow", "unknown pool"),
        ("pools.bulk.warmup", {"ramp": "nosuch"}, "pools.json.pools.bulk.warmup.ramp", "no ramp"),
        ("pools.tx.bind", "192.0.2.1", "pools.json.pools.tx.bind", "not one of the pool's"),
        ("pools.tx.colour", "red", "pools.json.pools.tx", "unknown field 'colour'"),
        ("routing.rules.0", {"pool": "tx"}, "pools.json.routing.rules[0]", "needs a condition"),
    ],
)  # fmt: skip
def test_bad_input_is_refused_with_the_file_the_place_and_the_reason(
    path: str, value: Any, place: str, reason: str
) -> None:
    with pytest.raises(PoolsError) as e:
        parse_pools(_with(path, value), "pools.json")
    assert place in str(e.value) and reason in str(e.value), str(e.value)


def test_delivery_and_ingress_refuse_to_start_on_a_bad_file() -> None:
    from mailqueue.core.config import ConfigError
    from mailqueue.services.delivery import DeliverySettings

    with pytest.raises(ConfigError, match="routing.rules.0..pool: names an unknown pool"):
        DeliverySettings(pools=_with("routing.rules.0.pool", "nosuch"))
    with pytest.raises(ConfigError, match="pool 'bulk2' is not in the pools file"):
        DeliverySettings(pools=json.dumps(GOOD), pool="bulk2")


def test_limits_and_backoff_are_kept_per_pool_and_site() -> None:
    c = parse_pools(json.dumps(GOOD), "pools.json")
    rules, backoff = load_rules()
    pr = pool_rules(rules, c)
    # the tx pool's own limits at google and elsewhere; the bulk pool (none) the sites'
    assert pr.limits_for("tx|google").rates[0].messages == 40
    assert pr.limits_for("tx|mx:mx.example.net").rates[0].messages == 20
    assert pr.limits_for("bulk|google") == rules.limits_for("google")
    assert pr.limits_for("google") == rules.limits_for("google")  # the default pool
    site_rules = [r for r in backoff.rules if r.sites]
    assert site_rules, "the packaged backoff rules name sites"
    rule = site_rules[0]
    pb = pool_backoff(backoff)
    mine = next(r for r in pb.rules if r.id == rule.id)
    site = rule.sites[0].replace("*", "x")
    reply = Result(421, "4.7.0", "try later")
    assert mine.matches(f"bulk|{site}", reply) == rule.matches(site, reply)


def test_suspensions_gain_a_pool_scope() -> None:
    assert parse_target("bulk|google", "site") == "bulk|google"
    assert parse_target("bulk", "pool") == "bulk"
    with pytest.raises(InvalidInput):
        parse_target("Bulk Pool", "pool")
    now = 1000.0
    items = [Suspension("site", "bulk|google", now + 60), Suspension("pool", "cold", now + 60)]
    kw: dict[str, Any] = {"domain": "gmail.com", "sender_domain": "a.example", "site": "google"}
    assert matching(items, now, pool="bulk", **kw) is items[0]
    assert matching(items, now, pool="tx", **kw) is None  # another pool still sends there
    assert matching(items, now, pool="cold", **{**kw, "site": None}) is items[1]
