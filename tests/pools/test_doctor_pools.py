"""`mailqueue doctor` checks each egress pool's forward-confirmed reverse DNS under the
pool's own EHLO name (every address's PTR names it, its A records list the address),
against the loopback DNS server; a pool's NAT addresses come from the stack's output."""

from __future__ import annotations

import json

from mailqueue.outbound.doctor import DoctorSettings, run

from tests.doctor.world import good_zone, keys
from tests.support.dns_peer import dns_server

POOLS = json.dumps({
    "version": 1,
    "pools": {
        "default": {"addresses": "@nat", "ehlo": "@hostname"},
        "bulk": {"addresses": ["192.0.2.20/31"], "ehlo": "bulk.example.com"},
        "cold": {"addresses": "@nat", "ehlo": "cold.example.com"},
    },
})  # fmt: skip


def test_each_pools_addresses_are_checked_under_its_own_ehlo_name() -> None:
    zone = good_zone()
    zone.update(
        {
            "20.2.0.192.in-addr.arpa": {"PTR": ["bulk.example.com."]},
            "21.2.0.192.in-addr.arpa": {"PTR": ["mq.example.com."]},  # the wrong name
            "bulk.example.com": {"A": ["192.0.2.20"], "TXT": ["v=spf1 a -all"]},
            "40.2.0.198.in-addr.arpa": {"PTR": ["cold.example.com."]},
            "cold.example.com": {"A": ["198.0.2.40"], "TXT": ["v=spf1 a -all"]},
        }
    )
    with dns_server(zone) as dns:
        s = DoctorSettings(
            hostname="mq.example.com",
            sending_ips="192.0.2.10",
            dkim_domains=json.dumps({"example.com": ["rsa1", "ed1"]}),
            pools=POOLS,
            pool_sending_ips="cold=198.0.2.40",
            dns_nameservers=f"127.0.0.1:{dns.port}",
        )
        inp = s.input()
        assert [(n, e, ips) for n, e, ips in inp.pools] == [
            ("bulk", "bulk.example.com", ("192.0.2.20", "192.0.2.21")),
            ("cold", "cold.example.com", ("198.0.2.40",)),
        ]
        store = keys()
        fs = run(inp, s.resolver(), lambda ref: store.get(ref.rsplit("/", 1)[1]))
    got = {(f.check, f.subject): f.ok for f in fs}
    assert got[("fcrdns", "192.0.2.20")] and got[("ehlo", "192.0.2.20")]
    assert not got[("fcrdns", "192.0.2.21")]  # its PTR names a host without that address
    assert got[("fcrdns", "198.0.2.40")] and got[("ehlo", "198.0.2.40")]
    assert got[("spf", "bulk.example.com")] is False  # "a" lists .20 only, not .21
    assert got[("spf", "cold.example.com")] is True
