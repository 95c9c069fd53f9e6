"""Every link delivery writes survives the way to the recipient's client and verifies.

Why: the one-click POST in the demo and in test_feedback_e2e intermittently answered 400
(issue 44's demo). Before the cause was found (a stale service cached across stacks:
tests/local/test_unsubscribe_containers.py), each other suspect on the mail's path was
ruled out here, over many tokens of every length: the field as delivery writes it (CRLF
and LF heads, with and without the mailto), a DKIM-Signature prepended (signing never
refolds our fields), Python's email parser reading the delivered bytes, and the demo's
extractor (mailqueue_local.demo._one_click_link, the same pattern test_feedback_e2e
uses) taking the path back out: no folding inside the URL, no character of the token's
alphabet dropped.
"""

from __future__ import annotations

import base64
import json
import random
import string

from mailqueue.outbound import dkim
from mailqueue.outbound import unsubscribe as unsub
from mailqueue_local import demo

KEYS = unsub.UnsubscribeKeys.parse(json.dumps({"k1": base64.b64encode(b"z" * 32).decode()}), "k1")
TODAY = 20_424


def _address(rng: random.Random) -> str:
    local = "".join(
        rng.choices(string.ascii_letters + string.digits + "._+-", k=rng.randint(1, 64))
    )
    if rng.random() < 0.1:
        local += "é"  # SMTPUTF8 local parts: the JSON is UTF-8 before base64
    domain = ".".join(
        "".join(rng.choices(string.ascii_lowercase, k=rng.randint(1, 20)))
        for _ in range(rng.randint(2, 4))
    )
    return f"{local.strip('.') or 'x'}@{domain}"


def test_every_delivered_link_is_extracted_whole_and_verifies() -> None:
    rng = random.Random(44)
    key = dkim.generate_key("ed25519-sha256")
    for i in range(1500):
        rcpt = _address(rng)
        scope: unsub.UnsubScope = "list" if i % 3 == 0 else "sender_domain"
        target = (
            f"news-{rng.randint(0, 10 ** rng.randint(1, 30))}" if scope == "list" else "example.org"
        )
        mail_id = "".join(
            rng.choices(string.ascii_uppercase + string.digits, k=rng.choice((26, 36)))
        )
        u = unsub.Unsubscription(mail_id, rcpt, scope, target, TODAY, "k1")
        token = unsub.make_token(KEYS, u)
        eol = b"\r\n" if i % 2 else b"\n"
        mailto = "unsubscribe@example.org" if i % 4 < 2 else ""
        url = f"{demo.UNSUBSCRIBE_URL}/u/{token}"
        head = (
            f"From: Demo <demo@example.org>{eol.decode()}To: <{rcpt}>{eol.decode()}"
            f"Subject: roundtrip {i}{eol.decode()}"
        ).encode()
        mail = unsub.header_fields(url, mailto, eol) + head + eol + b"hello" + eol
        if eol == b"\r\n" and i % 10 == 1:  # signed as delivery signs: a field on top
            mail = dkim.sign_one(mail, "example.org", "s1", "ed25519-sha256", key) + mail
        path = demo._one_click_link(mail)
        assert path == f"/u/{token}", (i, mail[:400])
        got = unsub.verify_token(KEYS, path[len("/u/") :], today=TODAY, max_age_days=180)
        assert (got.mail_id, got.recipient, got.target) == (mail_id, rcpt, target)
