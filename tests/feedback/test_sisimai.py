"""Our report parser against Sisimai, on Sisimai's own corpus (tests/data/sisimai: the
`set-of-emails` repository's maildir/bsd, BSD 2-clause, LICENSE alongside).

Sisimai (Debian's libsisimai-perl; `make test` installs it when root) runs once over all
messages in one perl process; our parser reads each message once. For every bounced
recipient Sisimai classifies (soft or hard; its "onhold"/"undefined" mean it could not
tell, and are left out), our recipient and hard/soft verdict must agree on ≥ 95 %, and
every disagreement must be listed, with its reason, in tests/data/sisimai-disagreements.txt:
a new one fails the test, and so does a listed one that no longer happens. Complaints
(ARF) and auto-replies are compared the same way.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from mailqueue.services.feedback.parse import Report, parse

HERE = Path(__file__).parent
DATA = HERE.parent / "data"
CORPUS = DATA / "sisimai" / "messages"
LISTED = DATA / "sisimai-disagreements.txt"
SCRIPT = HERE / "sisimai_verdicts.pl"
# 0.95 before issue 42; its rules (never an address only the returned message names, a
# valid address or none) cost 4 recipients Sisimai takes from there, each listed; 0.94
# until Yahoo's "doesn't have a ... account" and "[#102] disabled or discontinued" were
# read as dead addresses (Yahoo's own error-code page; BounceParser's and Dada Mail's
# answers), where Sisimai 4.25 says filtered or suspend: 7 recipients, each listed
MIN_AGREEMENT = 0.93
REQUIRE_ENV = "MAILQUEUE_REQUIRE_SISIMAI"  # set by `make test` when it can install Sisimai
UNDECIDED = ("onhold", "undefined")  # Sisimai's "could not tell"


def _sisimai_missing() -> str | None:
    if shutil.which("perl") is None:
        return "perl is not installed"
    got = subprocess.run(["perl", "-MSisimai", "-e", "1"], capture_output=True, check=False)
    if got.returncode != 0:
        return "Sisimai is not installed (apt-get install libsisimai-perl)"
    return None


@pytest.fixture(scope="module")
def verdicts() -> list[dict[str, Any]]:
    missing = _sisimai_missing()
    if missing and os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{missing}, and {REQUIRE_ENV}=1 (make test as root installs it)")
    if missing:
        pytest.skip(missing)
    files = sorted(CORPUS.glob("*.eml"))
    out = subprocess.run(
        ["perl", str(SCRIPT), *map(str, files)],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    ).stdout
    lines = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert lines and "sisimai" in lines[0], "the script names Sisimai's version first"
    return lines[1:]


@pytest.fixture(scope="module")
def ours() -> dict[str, Report]:
    return {p.name: parse(p.read_bytes()) for p in sorted(CORPUS.glob("*.eml"))}


def _listed() -> dict[tuple[str, str, str], str]:
    out: dict[tuple[str, str, str], str] = {}
    for line in LISTED.read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        name, rcpt, kind, reason = line.split("\t", 3)
        assert reason.strip(), f"no reason given for {name} {rcpt}"
        out[(name, rcpt, kind)] = reason
    return out


def _addr(a: str) -> str:
    return a.lower().replace('"', "")  # a quoted local part, as Sisimai keeps it


def compare(
    verdicts: list[dict[str, Any]], ours: dict[str, Report]
) -> tuple[int, int, dict[tuple[str, str, str], str]]:
    """(compared, agreed, disagreements keyed like the listed file)."""
    compared = agreed = 0
    found: dict[tuple[str, str, str], str] = {}
    for v in verdicts:
        name, rcpt = Path(v["file"]).name, _addr(v["recipient"])
        rep = ours[name]
        if v["reason"] == "feedback":
            c = rep.complaint
            if c is None or c.feedback_type != v["feedback"]:
                found[(name, rcpt, "complaint")] = f"ours: {rep.kind}"
            elif rcpt not in c.recipients:
                found[(name, rcpt, "complaint-recipient")] = f"ours: {c.recipients}"
            continue
        if v["reason"] == "vacation":
            if rep.kind != "autoreply":
                found[(name, rcpt, "autoreply")] = f"ours: {rep.kind}"
            continue
        if v["softbounce"] not in (0, 1) or v["reason"] in UNDECIDED:
            continue
        compared += 1
        if rep.kind == "delay":  # a delay we drop (and count): agrees with Sisimai's soft
            if v["softbounce"] == 1:
                agreed += 1
            else:
                found[(name, rcpt, "verdict")] = f"sisimai {v['reason']}, ours: a delay"
            continue
        mine = {_addr(f.address): f for f in rep.failures}
        f = mine.get(rcpt)
        if f is None:
            kind = "recipient" if rep.failures else "unparsed"
            found[(name, rcpt, kind)] = f"ours: {sorted(mine) or rep.kind}"
        elif f.hard != (v["softbounce"] == 0):
            found[(name, rcpt, "verdict")] = f"sisimai {v['reason']}, ours {f.status}"
        else:
            agreed += 1
    return compared, agreed, found


def test_our_verdicts_agree_with_sisimai(
    verdicts: list[dict[str, Any]], ours: dict[str, Report]
) -> None:
    compared, agreed, found = compare(verdicts, ours)
    listed = _listed()
    new = {k: v for k, v in found.items() if k not in listed}
    gone = sorted(k for k in listed if k not in found)
    share = agreed / compared
    print(f"sisimai agreement: {agreed}/{compared} = {share:.2%}; disagreements {len(found)}")
    assert compared > 500, "Sisimai classified fewer messages than the corpus holds"
    assert new == {}, "disagreements not listed in tests/data/sisimai-disagreements.txt"
    assert gone == [], "listed disagreements that no longer happen: remove them"
    assert share >= MIN_AGREEMENT


def test_the_corpus_is_read_whole_without_errors(ours: dict[str, Report]) -> None:
    """Every message parses; bounces name addresses; the licence travels with the data."""
    assert len(ours) == 629
    kinds = {r.kind for r in ours.values()}
    assert kinds <= {"bounce", "delay", "complaint", "autoreply", "unknown"}
    assert sum(r.kind == "bounce" for r in ours.values()) > 550
    for r in ours.values():
        for f in r.failures:
            assert "@" in f.address and len(f.diagnostic) <= 500
    licence = (DATA / "sisimai" / "LICENSE").read_text()
    assert "BSD 2-CLAUSE" in licence.upper() and "azumakuniyuki" in licence
