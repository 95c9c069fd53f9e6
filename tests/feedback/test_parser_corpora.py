"""The parser on the held-out corpus (Sympa's bounce-parsing test corpus, its answers as its
test states them) and on the four it is tuned on (Sisimai's set-of-emails, BounceParser's
t/corpus, Crisp's email-bounce-parser fixtures, Dada Mail's and MailBounceDetector's test
corpora); bench.bounce_corpora prints all five corpora's figures. Also the address rules,
the rules file's validation, and the classes of error fixed on the tuning corpora.
Deterministic: no randomness, ~3 s (perl's Sisimai once)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from mailqueue.services.feedback.addresses import clean_address, own_text
from mailqueue.services.feedback.parse import MAX_FAILURES, parse
from mailqueue.services.feedback.rules import BounceRules, BounceRulesError, load_bounce_rules

from bench.bounce_corpora import (
    BP,
    CRISP,
    CRISP_FIXTURES,
    DADA,
    DADA_MESSAGES,
    MBD,
    SYMPA,
    SYMPA_SAMPLES,
    Figures,
    crisp_verdict,
    dada_verdict,
    deanonymise,
    mbd_verdict,
    measure_bounceparser,
    measure_crisp,
    measure_dada_mbd,
    measure_sisimai,
    measure_sympa,
    sympa_answer,
    sympa_verdict,
)

# issue 42's floors on the held-out corpus
FLOOR_PRECISION, FLOOR_RECALL, FLOOR_AGREEMENT = 0.98, 0.93, 0.95
# what the parser measured, per corpus (docs/feedback.md "Five corpora"): a fall below is
# a regression. Each corpus was held out once and moved to the tuning side when its misses
# were read; none is held out now.
MEASURED = {
    # Sympa: 65/65, 65/66, 33/38 held out (measured once, 2026-12-04 21:11 UTC); tuned on
    # since its misses were read
    "sympa": (67, 66 / 66, 66 / 66, 34 / 38),
    # Dada Mail + MailBounceDetector: 19/21, 19/20, 8/11 held out (measured once); tuned on
    # since its misses were read (docs/feedback.md)
    "dada_mbd": (22, 19 / 19, 19 / 20, 11 / 11),
    "crisp": (111, 107 / 107, 107 / 107, 81 / 86),
    "bounceparser": (127, 39 / 39, 39 / 42, 95 / 102),
    # hard/soft 532/552 until Yahoo's dead-address replies were read as Yahoo documents
    # them, where Sisimai 4.25 says filtered or suspend (tests/data/sisimai-disagreements.txt)
    "sisimai": (629, 553 / 560, 553 / 565, 527 / 553),
}


@pytest.fixture(scope="module")
def sympa() -> Figures:
    return measure_sympa()


@pytest.mark.xfail(
    strict=True,
    reason="issue 42's hard/soft floor (95 %) is not met on Sympa's corpus, the last held "
    "out: 33/38 = 86.8 % at its one held-out measurement (precision 65/65, recall 65/66 met "
    "the floors), 34/38 since; the disagreements are replies whose words contradict their "
    "status code (docs/feedback.md); strict: passing fails it, and the mark goes",
)
def test_held_out_floors(sympa: Figures) -> None:
    assert sympa.precision >= FLOOR_PRECISION, sympa.misses
    assert sympa.recall >= FLOOR_RECALL, sympa.misses
    assert sympa.agreement >= FLOOR_AGREEMENT, sympa.misses


def test_sympa_figures_do_not_fall(sympa: Figures) -> None:
    _do_not_fall(sympa, "sympa")


def _do_not_fall(fig: Figures, corpus: str) -> None:
    files, precision, recall, agreement = MEASURED[corpus]
    assert fig.files == files
    assert fig.precision >= precision - 1e-9, fig.misses
    assert fig.recall >= recall - 1e-9, fig.misses
    assert fig.agreement >= agreement - 1e-9, fig.misses


def test_dada_mbd_figures_do_not_fall() -> None:
    _do_not_fall(measure_dada_mbd(), "dada_mbd")


def test_crisp_figures_do_not_fall() -> None:
    _do_not_fall(measure_crisp(), "crisp")


def test_bounceparser_figures_do_not_fall() -> None:
    _do_not_fall(measure_bounceparser(), "bounceparser")


def test_sisimai_figures_do_not_fall() -> None:
    fig = measure_sisimai()
    if fig is None:
        pytest.skip("perl or Sisimai (libsisimai-perl) missing")
    _do_not_fall(fig, "sisimai")


def test_the_tuning_corpus_dada_mbd_travels_with_its_licences_and_origins() -> None:
    assert "GNU GENERAL PUBLIC LICENSE" in (DADA / "LICENSE").read_text()
    readme = (DADA / "README.md").read_text()
    assert "a4e7e65506245ff8620470e61e4e474ab01c5886" in readme
    assert "https://github.com/justingit/dada-mail" in readme
    test = (DADA / "t" / "DADA_App_BounceHandler_MessageParser.t").read_text()
    rules = (DADA / "data" / "bounce_handler_rules.pl").read_text()
    answers = [json.loads(x) for x in (DADA / "expected.jsonl").read_text().splitlines()]
    assert {e["file"] for e in answers} == {p.name for p in DADA_MESSAGES.glob("*.eml")}
    assert len(answers) == 16
    for e in answers:  # each answer is the test's, for the file the test parses
        assert f"email_messages/{e['file']}'" in test, e
        assert f"ok($rule eq '{e['rule']}'" in test, e
        assert re.search(rf"\b{e['rule']}\s*=>\s*{{", rules), e
        if e["email"]:
            assert f"ok($email eq '{e['email']}'" in test, e
    licence = (MBD / "LICENSE.md").read_text()
    assert "MIT License" in licence and "ruilopes.com" in licence
    readme = (MBD / "README.md").read_text()
    assert "05719306a7b903c07294d89386f84caa2912cd38" in readme
    assert "https://github.com/rgl/MailBounceDetector" in readme
    test = (MBD / "BounceDetectorTests.cs").read_text()
    answers = [json.loads(x) for x in (MBD / "expected.jsonl").read_text().splitlines()]
    assert {e["file"] for e in answers} == {p.name for p in (MBD / "Fixtures").glob("*.eml")}
    assert len(answers) == 6
    for e in answers:
        assert f'OpenFixture("{e["file"]}")' in test, e
        for a in e["final_recipients"]:
            assert re.search(rf'"(?:rfc822;)?{re.escape(a)}"', test), a


@pytest.mark.parametrize(
    ("rule", "want"),
    [
        ("yahoo_no_account", True),
        ("user_inactive", True),
        ("secureserver_dot_net_mailbox_full", False),
        ("bounce_4dot4dot1_error", False),
        ("qmail_error_550", None),
        ("permanent_error", None),
        ("amazon_ses_abuse_report", None),
    ],
)
def test_dada_mails_answers_are_read_as_its_readme_says(rule: str, want: bool | None) -> None:
    assert dada_verdict(rule) is want


@pytest.mark.parametrize(
    ("answer", "want"),
    [
        ({"is_hard": True, "is_soft": False, "combined_status": "5.1.1"}, True),
        ({"is_hard": True, "is_soft": False, "combined_status": "5.3.0"}, None),
        ({"is_hard": True, "is_soft": False, "combined_status": "5.7.1"}, None),
        ({"is_hard": False, "is_soft": True, "combined_status": "4.2.2"}, False),
    ],
)
def test_mailbouncedetectors_answers_are_read_as_its_readme_says(
    answer: dict[str, object], want: bool | None
) -> None:
    assert mbd_verdict(answer) is want


def _sympa_hash(test: str, name: str) -> str:
    m = re.search(rf"my %{name} = \((.*?)\n\);", test, re.S)
    assert m, name
    return m.group(1)


def test_the_held_out_corpus_sympa_travels_with_its_licence_origin_and_answers() -> None:
    assert "GNU GENERAL PUBLIC LICENSE" in (SYMPA / "COPYING").read_text()
    assert "Version 2, June 1991" in (SYMPA / "COPYING").read_text()
    readme = (SYMPA / "README.md").read_text()
    assert "0a57d592ebfacbc62d415e3daa6f38691405bc4f" in readme
    assert "https://github.com/sympa-community/historic-sympa" in readme
    test = (SYMPA / "t" / "tools_bounce.t").read_text()
    hashes = {
        k: _sympa_hash(test, n)
        for k, n in (("rfc1891", "tests_rfc1891"), ("notification", "tests"))
    }
    answers = [json.loads(x) for x in (SYMPA / "expected.jsonl").read_text().splitlines()]
    # every answer has its sample and every sample its answer; each hash lists every file
    assert {e["file"] for e in answers} == {p.name for p in SYMPA_SAMPLES.glob("*.eml")}
    assert len(answers) == 67
    for body in hashes.values():
        assert len(re.findall(r"^\t'[^']+\.eml' =>", body, re.M)) == 67
    for e in answers:  # each answer is the test's, in the hash it came from
        for key, body in hashes.items():
            f = re.escape(e["file"])
            if e[key] is None:
                assert re.search(rf"^\t'{f}' => undef,", body, re.M), (e["file"], key)
                continue
            block = re.search(rf"^\t'{f}' => {{\n(.*?)\n\t}},", body, re.M | re.S)
            assert block, (e["file"], key)
            pairs = re.findall(r"'((?:[^'\\]|\\.)*)'\s*=>\s*'((?:[^'\\]|\\.)*)'", block.group(1))
            unescaped = {k: re.sub(r"\\(.)", r"\1", v) for k, v in pairs}
            assert unescaped == e[key], (e["file"], key)
            raw = (SYMPA_SAMPLES / e["file"]).read_bytes().lower()
            assert all(a.lower().encode() in raw for a in e[key]), e["file"]


def test_every_held_out_file_loads_and_parses() -> None:
    """Each listed sample is there and the parser runs on it without raising (what it
    reports is not looked at here: the held-out figures are measured once, by the bench)."""
    for e in (json.loads(x) for x in (SYMPA / "expected.jsonl").read_text().splitlines()):
        raw = (SYMPA_SAMPLES / e["file"]).read_bytes()
        assert raw.startswith(b"Return-Path:") or b"\nFrom:" in raw[:4000], e["file"]
        parse(raw)


@pytest.mark.parametrize(
    ("value", "want"),
    [
        ("5.1.1", True),
        ("5.1.2", True),
        ("4.4.1", False),
        ("4.7.1", False),
        ("5.2.1", False),
        ("5.2.2", False),
        ("5.7.1", False),
        ("5.0.0", None),
        ("5.4.4", None),
        ("5.3.0", None),
        ("user unknown", None),
    ],
)
def test_sympas_answers_are_read_as_its_readme_says(value: str, want: bool | None) -> None:
    assert sympa_verdict(value) is want


def test_sympas_answer_acted_on_is_the_rfc1891_reading_else_the_other() -> None:
    both = {"rfc1891": {"List@x.example": "5.7.1"}, "notification": {"a@y.example": "5.7.1"}}
    assert sympa_answer(both) == ({"list@x.example": "5.7.1"}, {"a@y.example"})
    prose = {"rfc1891": None, "notification": {"b@y.example": "5.1.1"}}
    assert sympa_answer(prose) == ({"b@y.example": "5.1.1"}, set())
    assert sympa_answer({"rfc1891": None, "notification": None}) == (None, set())


def test_the_tuning_corpus_crisp_travels_with_its_licence_and_origin() -> None:
    licence = (CRISP / "LICENSE").read_text()
    assert "MIT License" in licence and "Crisp IM SAS" in licence
    readme = (CRISP / "README.md").read_text()
    assert "c7ffc73a57d345183ce151ec69076b16738f04c9" in readme
    assert "https://github.com/crisp-oss/email-bounce-parser" in readme
    # every answer has its fixture and every fixture its answer, and test/index.js (the
    # project's own check of them) is there
    answers = {p.stem for p in (CRISP_FIXTURES / "expected").glob("*.json")}
    fixtures = {p.stem for p in CRISP_FIXTURES.glob("*.txt")}
    assert answers == fixtures and len(answers) == 111
    assert "readExpected" in (CRISP / "test" / "index.js").read_text()


def test_the_tuning_corpus_bounceparser_travels_with_its_licence_and_origin() -> None:
    assert "Terms of Perl itself" in (BP / "LICENSE").read_text()
    readme = (BP / "README.md").read_text()
    assert "3133a16326c596e0e9fc97469930aee535962bcf" in readme
    # every answer names a file that is there and the .t file it came from
    for name in ("expected-check_report.jsonl", "expected-manual.jsonl"):
        for line in (BP / name).read_text().splitlines():
            e = json.loads(line)
            assert (BP / e["file"]).is_file() and (BP / e["source"]).is_file(), e


@pytest.mark.parametrize(
    ("error", "want"),
    [
        ({"temporary": True, "permanent": False, "data": {"type": "no_such_recipient"}}, False),
        ({"temporary": False, "permanent": True, "data": {"type": "no_such_recipient"}}, True),
        ({"temporary": False, "permanent": True, "data": {"type": "server_unknown"}}, True),
        ({"temporary": False, "permanent": False, "data": {"type": "server_unknown"}}, None),
        ({"temporary": False, "permanent": True, "data": {"type": "mailbox_full"}}, False),
        ({"temporary": False, "permanent": False, "data": {"type": "server_timeout"}}, False),
        ({"temporary": False, "permanent": True, "data": {"type": None}}, None),
        ({"temporary": True, "permanent": False, "data": {"type": None}}, False),
    ],
)
def test_crisps_answers_are_read_as_its_readme_says(
    error: dict[str, object], want: bool | None
) -> None:
    assert crisp_verdict({"bounce": True, "data": {"error": error}}) is want


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("Final-Recipient: rfc822; a@b.c", "Final-Recipient: rfc822; a@b.c.example"),
        ("<john.b@eu.a.b.c>: host a.d.e said", "<john.b@eu.a.b.c.example>: host a.d.e said"),
        ("to a@b.c. Then", "to a@b.c.example. Then"),
        ("a@example.com a@b.co.uk a@b.c1", "a@example.com a@b.co.uk a@b.c1"),
    ],
)
def test_bounceparsers_one_letter_top_labels_are_mapped_in_the_bench_only(
    text: str, want: str
) -> None:
    assert deanonymise(text) == want
    assert clean_address("a@b.c") == ""  # the parser's validation still refuses them


def _dsn(fields: str, prose: str = "Delivery to the following recipients failed.") -> bytes:
    return (
        "From: postmaster@x.example\r\nTo: bounces@sender.example\r\n"
        "Subject: Delivery Status Notification (Failure)\r\nMIME-Version: 1.0\r\n"
        'Content-Type: multipart/report; report-type=delivery-status; boundary="B"\r\n\r\n'
        f"--B\r\nContent-Type: text/plain\r\n\r\n{prose}\r\n"
        "--B\r\nContent-Type: message/delivery-status\r\n\r\n"
        f"Reporting-MTA: dns; x.example\r\n\r\n{fields}\r\n--B--\r\n"
    ).encode()


def test_a_sisimai_userunknown_phrase_in_the_diagnostic_code_is_hard() -> None:
    """BounceParser's badrcptto.msg, user-unknown-bad.msg: the phrase is in the
    Diagnostic-Code; it used to fall back to the clipped prose line ("said: 550 User")."""
    for diag in (
        "smtp; 550 User [gone@x.example] does not exist",
        "smtp; 553 sorry, badrcptto(user mail-box not found) (#5.7.1)",
        "smtp; 550 BAD_RECIPIENT - see http://x.example/undelivered",
        "smtp; 550 ** No mail box available for this user **",
    ):
        raw = _dsn(
            "Final-Recipient: rfc822; gone@x.example\r\nAction: failed\r\n"
            f"Status: 5.0.0\r\nDiagnostic-Code: {diag}",
            "<gone@x.example>: host mx.x.example[192.0.2.1] said: 550 User\r\n"
            "    [gone@x.example] does not exist (in reply to RCPT TO command)",
        )
        (f,) = parse(raw).failures
        assert f.hard, diag


def test_a_disclaimer_in_the_prose_does_not_overrule_the_dsn_status() -> None:
    """BounceParser's warning-1.msg: Status 5.1.1 and no Diagnostic-Code; the prose ends
    in a scanner's banner ("scanned for all viruses")."""
    banner = (
        "Delivery to the following recipients failed.\r\n\r\n       gone@x.example\r\n\r\n"
        "**** This email has been scanned for all viruses by a scanner ****"
    )
    fields = "Final-Recipient: rfc822;gone@x.example\r\nAction: failed\r\nStatus: 5.1.1"
    (f,) = parse(_dsn(fields, banner)).failures
    assert f.hard and f.status == "5.1.1"
    # the same banner under a full-mailbox status stays soft
    (f,) = parse(_dsn(fields.replace("5.1.1", "5.2.2"), banner)).failures
    assert not f.hard


def test_a_challenge_response_notice_is_not_a_bounce() -> None:
    """BounceParser's boxbe-cr.msg and whitelist.msg (its t/non-bounce.t)."""
    boxbe = _dsn(
        "Final-Recipient: rfc822; friend@x.example\r\nAction: failed\r\nStatus: 4.7.0\r\n"
        "Diagnostic-Code: X-Boxbe-Notice; Sender not pre-approved.  Follow instructions",
        "Your message has been waitlisted. Please add yourself to my Boxbe Guest List.",
    )
    assert parse(boxbe).kind == "autoreply"
    confirm = _prose_bounce(
        b"<friend@x.example>: host mx.x.example[192.0.2.1]\r\n"
        b"    said: 550 Your server requires confirmation. Visit\r\n"
        b"    http://x.example/Whitelist.aspx to confirm this mail server. (in reply to\r\n"
        b"    RCPT TO command)\r\n"
    )
    assert parse(confirm).kind == "autoreply"
    # a spam rejection that mentions a whitelist is still a bounce
    spam = _prose_bounce(
        b"<friend@x.example>: host mx.x.example[192.0.2.1] said: 500 Mail appears to be\r\n"
        b"    unsolicited -- ask them to add you to our whitelist (in reply to end of DATA\r\n"
        b"    command)\r\n"
    )
    (f,) = parse(spam).failures
    assert f.address == "friend@x.example" and not f.hard


def test_the_reader_a_report_greets_and_the_sender_exim_names_are_not_recipients() -> None:
    """BounceParser's aol-senderblock.msg ("Sorry a@b. Your mail to the following
    recipients ...", naming them without a domain) and misidentified-recipient.msg (Exim's
    "A message sent by <a@b>")."""
    aol = _prose_bounce(
        b"Sorry someone@sender.example. Your mail to the following recipients could not be\r\n"
        b"delivered because they are not accepting mail with attachments:\r\n\tfriend\r\n"
    )
    assert parse(aol).failures == ()
    exim = _prose_bounce(
        b"A message sent by\r\n\r\n  <someone@sender.example>\r\n\r\n"
        b"could not be delivered to one or more of its recipients. The following\r\n"
        b"address(es) failed:\r\n\r\n  friend@x.example\r\n    unknown user\r\n"
    )
    assert [f.address for f in parse(exim).failures] == ["friend@x.example"]


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


# ------------------------------------------------------------------ issue 42, deliverable 3:
# the classes of error found on Crisp's fixtures (then held out, now tuned on), fixed as
# classes; each test is a report of the class, not a corpus file


def test_the_return_path_in_office365s_original_message_details_is_not_a_recipient() -> None:
    raw = _prose_bounce(
        b"Your message to gone@x.example couldn't be delivered.\r\n"
        b"gone wasn't found at x.example.\r\n\r\n"
        b"Original Message Details\r\n"
        b"Sender Address: bounces+abc123@mail.sender.example\r\n"
        b"Recipient Address:      gone@x.example\r\n\r\n"
        b"Error Details\r\n"
        b"Error:  550 5.1.10 RESOLVER.ADR.RecipientNotFound; Recipient gone@x.example not found\r\n"
    )
    assert [f.address for f in parse(raw).failures] == ["gone@x.example"]


def test_an_address_quoted_in_another_recipients_reply_is_not_a_recipient() -> None:
    """Postfix's "<a@b>: host x said: 550 <c@d>: ..." names the failed recipient first;
    the reply's address (the return path it refused, another spelling) is the reply's."""
    raw = _prose_bounce(
        b"<friend@x.example>: host mx.x.example[192.0.2.1] said: 550 5.1.1\r\n"
        b"    <bounces+abc123@mail.sender.example>: unauthorized sender (in\r\n"
        b"    reply to RCPT TO command)\r\n\r\n"
        b"<ron@y.example>: host mx.y.example[192.0.2.2] said: 550\r\n"
        b"    5.2.1 <ronc6t@y.example>... Addressee unknown (in reply to RCPT TO command)\r\n"
    )
    assert [f.address for f in parse(raw).failures] == ["friend@x.example", "ron@y.example"]
    # the same in fields written out as prose: the address a Diagnostic-Code quotes
    fields = _prose_bounce(
        b"An error occurred while trying to deliver the mail to the following recipients:\r\n"
        b"friend@x.example\r\n\r\nTechnical report:\r\n\r\nAction: failed\r\n"
        b"Final-Recipient: rfc822; friend@x.example\r\n"
        b"Diagnostic-Code: smtp; 550 5.1.1 <other@x.example>... User Unknown\r\n"
    )
    assert [f.address for f in parse(fields).failures] == ["friend@x.example"]


def test_an_alias_expansion_is_one_failure_of_the_final_address_sent_as_the_alias() -> None:
    """Postfix's "(expanded from <alias>)", Exim's "(generated from alias)": the failure is
    the final address's, its original recipient (what the queue sent to, matched by the
    service as a DSN's Original-Recipient) the alias; the alias is no failure of its own."""
    postfix = _prose_bounce(
        b"<lena@dead.example> (expanded from <lena@alias.example>): Host or domain\r\n"
        b"    name not found. Name service error for name=dead.example type=A: Host not\r\n"
        b"    found\r\n"
    )
    exim = _prose_bounce(
        b"A message that you sent could not be delivered to one or more of its\r\n"
        b"recipients. This is a permanent error. The following address(es) failed:\r\n\r\n"
        b"  box@host.example\r\n    (generated from john@alias.example)\r\n"
        b"    LMTP error after RCPT TO:<box@host.example>:\r\n"
        b"    550 5.1.1 <box@host.example> User doesn't exist: box@host.example\r\n"
    )
    for raw, final, alias in (
        (postfix, "lena@dead.example", "lena@alias.example"),
        (exim, "box@host.example", "john@alias.example"),
    ):
        (f,) = parse(raw).failures
        assert (f.address, f.original_recipient, f.hard) == (final, alias, True)


def test_a_reply_folded_over_lines_is_read_whole() -> None:
    """ "552 5.2.2 <a@b>: Recipient address rejected:" / "Mailbox quota exceeded": the
    second line says why; read from the first only, it looked like a dead address."""
    raw = _prose_bounce(
        b"<full@x.example>: host mx.x.example[192.0.2.1] said:\r\n"
        b"    552 5.2.2 <full@x.example>: Recipient address rejected:\r\n"
        b"    Mailbox quota exceeded (in reply to RCPT TO command)\r\n"
    )
    (f,) = parse(raw).failures
    assert not f.hard
    assert f.diagnostic.endswith("Mailbox quota exceeded (in reply to RCPT TO command)")
    assert f.diagnostic_code.startswith("smtp; 552 5.2.2") and "quota" in f.diagnostic_code


def test_an_address_in_the_reply_is_no_phrase_of_it() -> None:
    """`dmarc@...` is no DMARC failure; "mailbox a@b unavailable" is "mailbox unavailable"."""
    dmarc = _prose_bounce(
        b"<dmarc@reports.x.example>: host mx.x.example[192.0.2.1] said: 550 5.1.1 No such\r\n"
        b"    user (in reply to RCPT TO command)\r\n"
    )
    assert parse(dmarc).failures[0].hard
    named = _prose_bounce(
        b"<carol@x.example>: host mx.x.example[192.0.2.1] said: 550\r\n"
        b"    mailbox carol@x.example unavailable (in reply to RCPT TO command)\r\n"
    )
    assert parse(named).failures[0].hard


def test_a_bounce_of_a_bounce_reports_its_own_recipients_not_the_returned_reports() -> None:
    inner = (
        "From: MAILER-DAEMON@y.example\r\nTo: someone@x.example\r\nMIME-Version: 1.0\r\n"
        'Content-Type: multipart/report; report-type=delivery-status; boundary="I"\r\n\r\n'
        "--I\r\nContent-Type: text/plain\r\n\r\nfailed\r\n"
        "--I\r\nContent-Type: message/delivery-status\r\n\r\nReporting-MTA: dns; y.example\r\n\r\n"
        "Final-Recipient: rfc822; first@y.example\r\nAction: failed\r\nStatus: 5.1.1\r\n"
        "--I--\r\n"
    )
    outer = _dsn(
        "Final-Recipient: rfc822; someone@x.example\r\nAction: failed\r\nStatus: 5.1.1\r\n"
        "Diagnostic-Code: smtp; 550 5.1.1 user unknown"
    ).replace(b"--B--\r\n", b"")
    outer += b"--B\r\nContent-Type: message/rfc822\r\n\r\n" + inner.encode() + b"\r\n--B--\r\n"
    assert [f.address for f in parse(outer).failures] == ["someone@x.example"]
    # a gateway passing a report on whole (no delivery-status of its own): read by it
    wrapper = (
        b"From: MAILER-DAEMON@x.example\r\nSubject: Returned mail\r\nMIME-Version: 1.0\r\n"
        b'Content-Type: multipart/mixed; boundary="W"\r\n\r\n'
        b"--W\r\nContent-Type: text/plain\r\n\r\nThe following addresses had permanent errors\r\n"
        b"--W\r\nContent-Type: message/rfc822\r\n\r\n" + inner.encode() + b"\r\n--W--\r\n"
    )
    assert [f.address for f in parse(wrapper).failures] == ["first@y.example"]


def test_exchanges_administrators_section_does_not_add_another_spelling() -> None:
    raw = _prose_bounce(
        b"mx.x.example rejected your message to the following email addresses:\r\n\r\n"
        b"mam@x.example<mailto:mam@x.example> A communication failure occurred.\r\n\r\n"
        b"Diagnostic information for administrators:\r\n\r\n"
        b"mama@x.example mx.x.example Remote Server returned '550 5.4.1 Recipient address"
        b" rejected: Access denied.'\r\n"
    )
    assert [f.address for f in parse(raw).failures] == ["mam@x.example"]
