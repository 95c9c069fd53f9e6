"""Issue 43, item 10: checkov on template.yaml with every Condition stripped.

checkov skips a resource whose Condition it cannot resolve true, so the SMTP front door
(SmtpFrontDoor=off by default), the direct-egress network and the other optional parts
went unchecked. Here each resource's and output's Condition is removed and checkov
(pinned in mk/checkov.mk, its own .venv-checkov) runs offline on the result. Every
finding is triaged: the front door's skips are in its resources' `Metadata: checkov`
(each with a comment), the rest in tests/template/checkov_triage.py with a reason.
"""

from __future__ import annotations

import fcntl
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from mailqueue_local.cfn import load_template

from tests.template.checkov_triage import TRIAGE
from tests.template.conftest import ROOT, TEMPLATE, offline_env

CHECKOV_VENV = ROOT / ".venv-checkov"


@pytest.fixture(scope="session")
def checkov() -> Path:
    """.venv-checkov, made by `make checkov-venv` when missing or stale (once)."""
    lock = ROOT / "var" / "checkov-venv.lock"
    lock.parent.mkdir(exist_ok=True)
    with lock.open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        proc = subprocess.run(
            ["make", "-s", "checkov-venv"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
    assert proc.returncode == 0, f"make checkov-venv failed:\n{proc.stdout}\n{proc.stderr}"
    exe = CHECKOV_VENV / "bin" / "checkov"
    assert exe.exists()
    return exe


def stripped(template: dict[str, Any]) -> tuple[dict[str, Any], set[str]]:
    """The template with no Condition on any resource or output; the ids that had one."""
    out = json.loads(json.dumps(template, default=str))
    conditional = set()
    for section in ("Resources", "Outputs"):
        for lid, body in out.get(section, {}).items():
            if isinstance(body, dict) and body.pop("Condition", None) is not None:
                conditional.add(lid)
    return out, conditional


@pytest.fixture(scope="module")
def report(checkov: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    doc, conditional = stripped(load_template(TEMPLATE))
    assert {"SmtpService", "SmtpLoadBalancer", "SmtpTaskRole"} <= conditional
    path = tmp_path_factory.mktemp("checkov") / "template.json"
    path.write_text(json.dumps(doc))
    proc = subprocess.run(
        [str(checkov), "-f", str(path), "--framework", "cloudformation"]
        + ["-o", "json", "--skip-download"],
        cwd=path.parent,
        env=offline_env(BC_SKIP_MAPPING="TRUE"),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode in (0, 1), proc.stderr[-3000:]  # 1: findings
    out = json.loads(proc.stdout)
    (result,) = out if isinstance(out, list) else [out]
    assert result["check_type"] == "cloudformation"
    res: dict[str, Any] = result["results"]
    return res


def _lid(check: dict[str, Any]) -> str:
    return str(check["resource"]).rsplit(".", 1)[1]


def test_the_conditional_resources_are_checked(report: dict[str, Any]) -> None:
    seen = {
        _lid(c)
        for kind in ("passed_checks", "failed_checks", "skipped_checks")
        for c in report[kind]
    }
    # (checkov has no check for an ECS service: the task definition, roles, network are)
    for lid in (
        "SmtpTaskDefinition",
        "SmtpLoadBalancer",
        "SmtpSecurityGroup",
        "SmtpLoadBalancerSecurityGroup",
        "SmtpTaskRole",
        "SmtpListener",
        "SmtpTlsListener",
    ):
        assert lid in seen, f"checkov did not check {lid}"


def test_every_finding_is_fixed_or_triaged(report: dict[str, Any]) -> None:
    failed = sorted({(c["check_id"], _lid(c)) for c in report["failed_checks"]})
    front_door = [f for f in failed if f[1].startswith("Smtp")]
    assert not front_door, (
        f"checkov findings on the SMTP front door: {front_door}; fix them, or skip each "
        "in the resource's Metadata (checkov: skip: - id, comment) with the reason"
    )
    untriaged = [f for f in failed if f[1] not in TRIAGE.get(f[0], ((), ""))[0]]
    assert not untriaged, (
        f"checkov findings nobody triaged: {untriaged}; fix them, or skip each in the "
        "resource's Metadata with the reason (or tests/template/checkov_triage.py)"
    )
    stale = sorted(
        (check, lid)
        for check, (lids, _) in TRIAGE.items()
        for lid in lids
        if (check, lid) not in set(failed)
    )
    assert not stale, (
        f"tests/template/checkov_triage.py lists {stale}: checkov no longer finds them"
    )
    assert all(reason.strip() for _, reason in TRIAGE.values())


def test_every_skip_in_the_template_says_why(report: dict[str, Any]) -> None:
    skipped = report["skipped_checks"]
    assert any(_lid(c).startswith("Smtp") for c in skipped)
    for c in skipped:
        comment = (c.get("check_result") or {}).get("suppress_comment") or ""
        assert len(comment.strip()) > 20, (c["check_id"], c["resource"], comment)
