"""The parser on the held-out corpus (Mail::DeliveryStatus::BounceParser's t/corpus, its
answers as its .t files write them; bench.bounce_corpora prints both corpora's figures),
the address rules, and the rules file's validation. Deterministic: no randomness, ~1 s."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mailqueue.services.feedback.addresses import clean_address, own_text
from mailqueue.services.feedback.parse import MAX_FAILURES, parse
from mailqueue.services.feedback.rules import BounceRules, BounceRulesError, load_bounce_rules

from bench.bounce_corpora import BP, measure_bounceparser

# issue 42's floors on the held-out corpus
FLOOR_PRECISION, FLOOR_RECALL, FLOOR_AGREEMENT = 0.98, 0.93, 0.95
# what the parser measured when this was written (not tuned on this corpus): a fall below
# is a regression
MEASURED_PRECISION, MEASURED_RECALL, MEASURED_AGREEMENT = 37 / 45, 37 / 42, 74 / 102


@pytest.fixture(scope="module")
def held_out():  # type: ignore[no-untyped-def]
    return measure_bounceparser()


@pytest.mark.xfail(
    strict=True,
    reason="issue 42's floors are not met on the held-out corpus: precision 82.2 %, "
    "recall 88.1 %, hard/soft 72.5 % (docs/feedback.md); strict: passing fails it",
)
def test_held_out_floors(held_out) -> None:  # type: ignore[no-untyped-def]
    assert held_out.precision >= FLOOR_PRECISION, held_out.misses
    assert held_out.recall >= FLOOR_RECALL
    assert held_out.agreement >= FLOOR_AGREEMENT


def test_held_out_figures_do_not_fall(held_out) -> None:  # type: ignore[no-untyped-def]
    assert held_out.files == 127
    assert held_out.precision >= MEASURED_PRECISION - 1e-9, held_out.misses
    assert held_out.recall >= MEASURED_RECALL - 1e-9, held_out.misses
    assert held_out.agreement >= MEASURED_AGREEMENT - 1e-9, held_out.misses


def test_the_held_out_corpus_travels_with_its_licence_and_origin() -> None:
    assert "Terms of Perl itself" in (BP / "LICENSE").read_text()
    readme = (BP / "README.md").read_text()
    assert "3133a16326c596e0e9fc97469930aee535962bcf" in readme
    # every answer names a file that is there and the .t file it came from
    for name in ("expected-check_report.jsonl", "expected-manual.jsonl"):
        for line in (BP / name).read_text().splitlines():
            e = json.loads(line)
            assert (BP / e["file"]).is_file() and (BP / e["source"]).is_file(), e


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        ("rfc822; <User@Example.COM>", "user@example.com"),
        ("dda:SMTP=user@example.net", "user@example.net"),
        ("smtp=user@example.net", "user@example.net"),
        ("'user@example.net'", "user@example.net"),
        ("'user@example.net", "user@example.net"),
        ("user@example.net...User unknown", "user@example.net"),
        ("<user@example.net>:", "user@example.net"),
        ("mailto:user@example.net", "user@example.net"),
        ("neko....nyaan....@example.org", ""),  # empty dot-atoms
        ("user@localhost", ""),  # no dotted domain
        ("user@example.123", ""),  # numeric top label
        ("a@b@example.net", ""),
        ("x" * 65 + "@example.net", ""),  # RFC 5321 local part limit
        ("user@-bad.example", ""),
    ],
)
def test_addresses_are_normalised_or_refused(raw: str, want: str) -> None:
    assert clean_address(raw) == want


def test_the_returned_messages_header_fields_are_not_the_bounce_speaking() -> None:
    text = (
        "<gone@x.example>: user unknown\n"
        "List-Post: <mailto:list@lists.example>\n"
        "From: Alice <alice@example.org>\n"
        "Authentication-Results: mx; spf=pass\n"
        " smtp.mailfrom=alice@example.org\n"
        "> quoted@example.org wrote\n"
        ">>> RCPT TO:<gone@x.example>\n"
    )
    own = own_text(text)
    assert "gone@x.example" in own and ">>> RCPT TO" in own
    for a in ("list@lists.example", "alice@example.org", "quoted@example.org"):
        assert a not in own


def test_the_packaged_rules_load() -> None:
    r = load_bounce_rules()
    assert "5.1.1" in r.hard_status and r.patterns["hard_text"].search("User unknown")


def _rules(**change: object) -> str:
    doc = json.loads(
        (Path(__file__).parents[2] / "shared/mailqueue/data/bounce-rules.json").read_text()
    )
    for path, value in change.items():
        *head, last = path.split("__")
        node = doc
        for k in head:
            node = node[k] if not k.isdigit() else node[int(k)]
        if value is None:
            del node[last]
        else:
            node[last] = value
    return json.dumps(doc)


@pytest.mark.parametrize(
    ("change", "place"),
    [
        ({"groups__hard_text__patterns": ["(unclosed"]}, "groups.hard_text.patterns[0]"),
        ({"groups__soft_text__source": None}, "groups.soft_text.source"),
        ({"hard_status__codes": ["4.1.1"]}, "hard_status.codes[0]"),
        ({"groups__spam_words": {"source": "x", "patterns": ["x"]}}, "groups.spam_words"),
        ({"groups__host_text": None}, "groups.host_text"),
    ],
)
def test_a_bad_rules_file_is_refused_with_file_place_and_reason(
    change: dict[str, object], place: str
) -> None:
    with pytest.raises(BounceRulesError) as e:
        BounceRules.from_json(_rules(**change), "test.json")
    assert f"bounce rules test.json: {place}: " in str(e.value)
    with pytest.raises(BounceRulesError, match="not JSON"):
        BounceRules.from_json("{", "test.json")


def _prose_bounce(body: bytes) -> bytes:
    return b"From: MAILER-DAEMON@x.example\r\nSubject: Undelivered Mail\r\n\r\n" + body


def test_a_local_part_past_64_octets_is_no_address_not_its_tail() -> None:
    """The address pattern is bounded (linear time on a long run of address characters);
    a match that starts inside a longer local part would be a made-up address."""
    (f,) = parse(
        _prose_bounce(
            b"<" + b"a" * 100 + b"@x.example>: user unknown\r\n<ok@x.example>: user unknown\r\n"
        )
    ).failures
    assert f.address == "ok@x.example"


def test_one_report_yields_at_most_max_failures() -> None:
    body = b"".join(b"<u%d@x.example>: user unknown\r\n" % i for i in range(MAX_FAILURES + 50))
    rep = parse(_prose_bounce(body))
    assert len(rep.failures) == MAX_FAILURES and rep.failures[0].address == "u0@x.example"
