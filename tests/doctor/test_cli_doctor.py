"""`mailqueue doctor` end to end: the CLI (--here and through the admin API in process)
and the admin route, with keys in Secrets Manager (moto) and the loopback DNS server."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator

import pytest
from mailqueue.cli import main as cli
from mailqueue.cli.doctor import default_doctor
from mailqueue.services.admin import AdminApi

from functions.admin import app
from tests.admin.conftest import ACTOR, Admin
from tests.admin.http import answer, context, v2_event
from tests.doctor.world import EHLO, IP4, IP6, good_zone, keys
from tests.support.aws import REGION, AwsEnv, session
from tests.support.dns_peer import DnsPeer, dns_server

DKIM = json.dumps({"example.com": ["rsa1", "ed1"]})


@pytest.fixture()
def dns() -> Iterator[DnsPeer]:
    with dns_server(good_zone()) as peer:
        yield peer


@pytest.fixture()
def stored(aws: AwsEnv, monkeypatch: pytest.MonkeyPatch) -> AwsEnv:
    """The keys in moto's Secrets Manager, under the contract's names."""
    sm = session().client("secretsmanager", endpoint_url=aws.endpoint)
    for sel, value in keys().items():
        sm.create_secret(Name=f"mailqueue/dkim/example.com/{sel}", SecretString=value)
    for k, v in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": REGION,
    }.items():
        monkeypatch.setenv(k, v)
    return aws


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(list(argv), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def here(aws: AwsEnv, dns: DnsPeer, *extra: str) -> tuple[int, str, str]:
    return run(
        "doctor",
        "--here",
        "--endpoint-url",
        aws.endpoint,
        "--dns-server",
        f"127.0.0.1:{dns.port}",
        "--ehlo",
        EHLO,
        "--ip",
        IP4,
        "--ip",
        IP6,
        "--dkim-domains",
        DKIM,
        *extra,
    )


def test_here_all_ok_exits_0(stored: AwsEnv, dns: DnsPeer) -> None:
    code, out, err = here(stored, dns)
    assert (code, err) == (0, "")
    assert "9 ok, 0 failing" in out and "FAIL" not in out
    assert "ok   dkim   rsa1._domainkey.example.com" in out


def test_here_prints_what_to_publish_and_exits_1(stored: AwsEnv, dns: DnsPeer) -> None:
    dns.set("_dmarc.example.com", "TXT", [])
    dns.set("ed1._domainkey.example.com", "TXT", [])
    code, out, _ = here(stored, dns)
    assert code == 1
    assert "7 ok, 2 failing" in out
    todo = out.split("Records to publish:\n", 1)[1].splitlines()
    assert [line.split()[0] for line in todo] == [
        "ed1._domainkey.example.com.",
        "_dmarc.example.com.",
    ]


def test_here_json_and_a_key_missing_from_the_store(stored: AwsEnv, dns: DnsPeer) -> None:
    sm = session().client("secretsmanager", endpoint_url=stored.endpoint)
    sm.delete_secret(SecretId="mailqueue/dkim/example.com/ed1", ForceDeleteWithoutRecovery=True)
    code, out, _ = here(stored, dns, "--json")
    doc = json.loads(out)
    assert code == 1 and doc["ok"] is False
    [bad] = [f for f in doc["findings"] if not f["ok"]]
    assert bad["subject"] == "ed1._domainkey.example.com" and "no stored key" in bad["detail"]


def test_here_bad_setting_is_a_usage_error(stored: AwsEnv, dns: DnsPeer) -> None:
    code, _, err = here(stored, dns, "--ip", "not-an-ip")
    assert code == 2 and "not-an-ip" in err


def test_admin_route_for_an_operator(admin: Admin, stored: AwsEnv, dns: DnsPeer) -> None:
    env = {
        "MQ_HOSTNAME": EHLO,
        "MQ_SENDING_IPS": json.dumps([IP4, IP6]),
        "MQ_DKIM_DOMAINS": DKIM,
        "MQ_DNS_NAMESERVERS": f"127.0.0.1:{dns.port}",
        "MQ_ENDPOINT_URL": stored.endpoint,
        "AWS_DEFAULT_REGION": REGION,
    }
    dns.set("_dmarc.example.com", "TXT", [])
    api = AdminApi(admin.service, admin.api.launcher, doctor=lambda: default_doctor(env))
    status, body, _ = answer(
        app.handle(v2_event("GET", "/v1/queue/doctor", principal=ACTOR), context(), api)
    )
    assert status == 200 and body["ok"] is False
    assert body["publish"] == [
        '_dmarc.example.com. IN TXT "v=DMARC1; p=none; rua=mailto:postmaster@example.com"'
    ]
    assert len(body["findings"]) == 9


def test_admin_route_misconfigured_is_named(admin: Admin) -> None:
    api = AdminApi(
        admin.service, admin.api.launcher, doctor=lambda: default_doctor({"MQ_SENDING_IPS": "x"})
    )
    status, body, _ = answer(
        app.handle(v2_event("GET", "/v1/queue/doctor", principal=ACTOR), context(), api)
    )
    assert (status, body["error"]) == (500, "misconfigured") and "sending_ips" in body["message"]


def test_admin_route_refuses_parameters(admin: Admin) -> None:
    status, body, _ = answer(
        app.handle(
            v2_event("GET", "/v1/queue/doctor", principal=ACTOR, query={"x": "1"}),
            context(),
            admin.api,
        )
    )
    assert (status, body["error"]) == (400, "unknown_parameter")


def test_cli_through_the_api_in_process(
    admin: Admin, stored: AwsEnv, dns: DnsPeer, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = stored.settings
    for k, v in {
        "MQ_TABLE": s.table,
        "MQ_BUCKET": s.bucket,
        "MQ_DELIVERY_QUEUE_URL": s.delivery_queue_url,
        "MQ_BOUNCE_QUEUE_URL": s.bounce_queue_url,
        "MQ_ENDPOINT_URL": stored.endpoint,
        "MQ_HOSTNAME": EHLO,
        "MQ_SENDING_IPS": f"{IP4},{IP6}",
        "MQ_DKIM_DOMAINS": DKIM,
        "MQ_DNS_NAMESERVERS": f"127.0.0.1:{dns.port}",
    }.items():
        monkeypatch.setenv(k, v)
    code, out, err = run("doctor", "--local")
    assert (code, err) == (0, ""), err
    assert "9 ok, 0 failing" in out


def test_on_the_local_stack_the_doctor_says_its_checks_are_for_a_deployment(
    admin: Admin, stored: AwsEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 28, item 6: the local stack (MQ_LOCAL_STACK, set by it) publishes no DNS: not
    "0 ok, 10 failing" against the machine's resolver, but a plain word and exit 0."""
    s = stored.settings
    for k, v in {
        "MQ_TABLE": s.table,
        "MQ_BUCKET": s.bucket,
        "MQ_DELIVERY_QUEUE_URL": s.delivery_queue_url,
        "MQ_BOUNCE_QUEUE_URL": s.bounce_queue_url,
        "MQ_ENDPOINT_URL": stored.endpoint,
        "MQ_HOSTNAME": "localhost",
        "MQ_DKIM_DOMAINS": DKIM,
        "MQ_LOCAL_STACK": "true",
    }.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("MQ_DNS_NAMESERVERS", raising=False)
    code, out, err = run("doctor", "--local")
    assert (code, err) == (0, ""), err
    assert out.startswith("not checked: ") and "for a deployment" in out
    assert "dkim-records.txt" in out and "FAIL" not in out


def test_the_same_finding_is_listed_once() -> None:
    """Issue 28, item 6: the EHLO name is a sender domain too and no sending IP is set: the
    SPF line ("no sending IPs configured") was printed twice."""
    from mailqueue.outbound.doctor import DoctorSettings
    from mailqueue.outbound.doctor import run as run_checks

    settings = DoctorSettings(
        hostname="mq.example.com",
        sender_domains="mq.example.com",
        dns_nameservers="127.0.0.1:9",
        dns_timeout_seconds=0.2,
    )
    found = run_checks(settings.input(), settings.resolver(), lambda ref: None)
    lines = [(f.check, f.subject, f.detail) for f in found]
    assert len(lines) == len(set(lines)), lines
    assert ("spf", "mq.example.com", "no sending IPs configured") in lines
