"""Seeded submissions for `POST /v1/messages`: valid, near-valid and adversarial.

`cases(seed, n)` yields the same `n` requests for the same seed (one `random.Random`, no
other source of randomness), so a failure found by `make fuzz` is replayed by its seed
and index. A third of the requests are valid mails, a third are valid ones with one to
three mutations (a field dropped, retyped, overlong, ...), a third are hostile to the
parser (deep nesting, huge arrays, lone surrogates, raw invalid UTF-8, duplicate keys...).
Idempotency keys are drawn from a small pool, so keys are reused with the same body (a
replay) and with another (a conflict).
"""

from __future__ import annotations

import base64
import json
import random
import string
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

LOCALS = ["a", "bob", "first.last", "x+tag", "o'brien", "_", "u1", "a.b.c", "Z9", "q=1"]
DOMAINS = [
    "example.net",
    "example.com",
    "mail.example.org",
    "EXAMPLE.net",
    "x-y.example",
    "sub.domain.example",
    "[192.0.2.1]",
    "xn--bcher-kva.example",
]
UTF8_LOCALS = ["jörg", "δοκιμή", "用户", "ñandú"]
UTF8_DOMAINS = ["bücher.example", "例え.example"]
HEADER_NAMES = ["Subject", "X-Fuzz", "Message-ID", "Reply-To", "X-Ünïcode", "Received"]
STRING_FIELDS = ["sender", "envid", "ret", "not_before", "upload_id", "content"]


@dataclass(frozen=True)
class Case:
    """One request: what it is meant to test, and the bytes and headers sent."""

    index: int
    kind: str  # valid | near:<mutation>+ | adv:<attack>
    body: bytes
    key: str | None = None  # Idempotency-Key
    content_type: str = "application/json"
    method: str = "POST"  # the admin fuzz (tests/fuzz/admin_gen.py) sends every route
    path: str = "/v1/messages"  # the request target: path and query string, as sent


def _addr(rng: random.Random, utf8: bool = False) -> str:
    if utf8 and rng.random() < 0.5:
        return f"{rng.choice(UTF8_LOCALS)}@{rng.choice(UTF8_DOMAINS + DOMAINS[:3])}"
    local = rng.choice(LOCALS)
    if rng.random() < 0.2:
        local += str(rng.randrange(10_000))
    return f"{local}@{rng.choice(DOMAINS)}"


def _content(rng: random.Random, big: bool = False) -> bytes:
    nl = b"\r\n" if rng.random() < 0.8 else b"\n"
    headers = [b"From: a@example.org", b"Subject: fuzz %d" % rng.randrange(1_000_000)]
    for _ in range(rng.randrange(4)):
        name = rng.choice(HEADER_NAMES)
        value = "".join(rng.choice(string.printable[:94] + " äé€") for _ in range(30))
        headers.append(f"{name}: {value}".encode())
    size = rng.randrange(200_000, 1_000_000) if big else rng.randrange(0, 3000)
    body = bytes(rng.randrange(32, 127) for _ in range(min(size, 2000)))
    lines = [body[i : i + 76] for i in range(0, len(body), 76)]
    if big:
        lines += [b"x" * 76] * (size // 78)
    return nl.join(headers) + nl + nl + nl.join(lines) + nl


def valid_doc(rng: random.Random, now: datetime) -> dict[str, Any]:
    utf8 = rng.random() < 0.1
    n = rng.choice([1, 1, 1, 2, 3, 5]) if rng.random() < 0.97 else rng.randrange(20, 80)
    one_domain = rng.random() < 0.3
    dom = rng.choice(DOMAINS)
    rcpts: list[Any] = []
    for i in range(n):
        a = f"user{i}@{dom}" if one_domain else _addr(rng, utf8)
        if rng.random() < 0.3:
            r: dict[str, Any] = {"address": a}
            if rng.random() < 0.5:
                r["notify"] = rng.choice([["NEVER"], ["SUCCESS", "FAILURE"], ["delay"]])
            if rng.random() < 0.5:
                r["orcpt"] = f"rfc822;{a}" if a.isascii() else f"utf-8;{a}"
            rcpts.append(r)
        else:
            rcpts.append(a)
    doc: dict[str, Any] = {
        "sender": "" if rng.random() < 0.02 else _addr(rng, utf8),
        "recipients": rcpts,
        "content": base64.b64encode(_content(rng, big=rng.random() < 0.01)).decode(),
    }
    if utf8:
        doc["smtputf8"] = True
    if rng.random() < 0.2:
        doc["ret"] = rng.choice(["FULL", "HDRS", "hdrs"])
    if rng.random() < 0.2:
        doc["envid"] = "".join(rng.choice(string.ascii_letters + "-_.+") for _ in range(12))
    if rng.random() < 0.1:
        ahead = timedelta(seconds=rng.randrange(-86400, 20 * 86400))
        doc["not_before"] = (now + ahead).isoformat().replace("+00:00", rng.choice(["Z", "+00:00"]))
    return doc


def _deep(depth: int, rng: random.Random) -> str:
    if rng.random() < 0.5:
        return "[" * depth + "]" * depth
    return '{"a":' * depth + "1" + "}" * depth


Mutation = Callable[[random.Random, dict[str, Any]], None]


def _set(field: str, values: list[Any]) -> Mutation:
    def m(rng: random.Random, doc: dict[str, Any]) -> None:
        doc[field] = rng.choice(values)

    return m


def _drop(field: str) -> Mutation:
    return lambda rng, doc: doc.pop(field, None)


def _rcpt(values: list[Any]) -> Mutation:
    def m(rng: random.Random, doc: dict[str, Any]) -> None:
        doc["recipients"] = list(doc["recipients"]) + [rng.choice(values)]

    return m


def _mail(content: bytes) -> str:
    return base64.b64encode(content).decode()


MUTATIONS: dict[str, Mutation] = {
    "drop_sender": _drop("sender"),
    "drop_recipients": _drop("recipients"),
    "drop_content": _drop("content"),
    "sender_type": _set("sender", [None, 1, [], {}, True, 1.5]),
    "recipients_type": _set("recipients", ["b@example.net", 1, {}, None]),
    "recipients_empty": _set("recipients", [[]]),
    "recipients_1001": _set("recipients", [[f"u{i}@example.net" for i in range(1001)]]),
    "recipient_type": _rcpt([1, None, [], True, {"notify": ["NEVER"]}]),
    "recipient_unknown_field": _rcpt([{"address": "b@example.net", "x": 1}]),
    "duplicate_recipient": lambda rng, doc: doc["recipients"].extend(doc["recipients"][:1]),
    "local_65": _rcpt(["x" * 65 + "@example.net"]),
    "domain_256": _rcpt(["b@" + ("a" * 62 + ".") * 4 + "example"]),
    "address_syntax": _rcpt(
        [
            "no-at",
            "@example.net",
            "b@",
            "b@-x.example",
            "a b@example.net",
            '"a<b>"@example.net',
            "b@localhost",
            "b@[300.1.1.1]",
            "b@@x.net",
            "b@example..net",
            ".b@example.net",
            "b@" + "x" * 64 + ".net",
        ]
    ),
    "address_ctl": _rcpt(
        [
            "b\r\n@example.net",
            "b\x00@example.net",
            "b\t@example.net",
            "b\x1b@example.net",
            "b\x7f@example.net",
            "b\u0085@example.net",
        ]
    ),
    "address_utf8_undeclared": _rcpt(["jörg@example.net", "b@bücher.example"]),
    "notify_bad": _rcpt(
        [
            {"address": "b@example.net", "notify": v}
            for v in (["SOMETIMES"], [], ["NEVER", "SUCCESS"], "NEVER", [1], [None])
        ]
    ),
    "orcpt_bad": _rcpt(
        [
            {"address": "b@example.net", "orcpt": v}
            for v in (
                "b@example.net",
                ";x",
                "rfc822;",
                "rfc822;" + "b" * 600,
                5,
                "rfc822;b\x01@x.net",
                "rfc822;b\r\n@x.net",
                "utf-8;b\u2028@x.net",
            )
        ]
    ),
    "ret_bad": _set("ret", ["BODY", "", 1, "full\x00", "FULL "]),
    "envid_bad": _set("envid", ["", "e" * 101, "é", "a b\n", 7, "\x7f", "e" * 100]),
    "not_before_bad": _set(
        "not_before",
        [
            "tomorrow",
            "2030-01-01T00:00:00",
            "2999-01-01T00:00Z",
            "",
            5,
            "2030-13-45T99:99:99Z",
            "0001-01-01T00:00Z",
            "9999-12-31T23:59:59+14:00",
            "2030-01-01T00:00:00Z\x00",
        ],
    ),
    "smtputf8_type": _set("smtputf8", ["yes", 1, None, "true"]),
    "unknown_field": lambda rng, doc: doc.__setitem__(rng.choice(["x", "Sender", "", "é"]), 1),
    "base64_bad": _set("content", ["not base64!", "eA=", "eA===", "e A==", "-_-_", "=", "\x00"]),
    "content_empty": _set("content", ["", "AA=="]),
    "content_no_header": _set("content", [_mail(b"just a body\r\n"), _mail(b"\r\nbody\r\n")]),
    "content_long_line": _set("content", [_mail(b"Subject: x\r\n\r\n" + b"y" * 999 + b"\r\n")]),
    "content_binary": _set("content", [_mail(b"Subject: x\r\n\r\n\x00\xff\xfe\x80\r\n")]),
    "upload_and_content": _set("upload_id", ["0123456789abcdef0123456789abcdef"]),
    "upload_unknown": lambda rng, doc: (
        doc.pop("content", None),
        doc.__setitem__(
            "upload_id", rng.choice(["0123456789abcdef0123456789abcdef", "../x", "", "A" * 32, 7])
        ),
    ),
    "null_sender": _set("sender", [""]),
}


def near_doc(rng: random.Random, now: datetime) -> tuple[str, dict[str, Any]]:
    doc = valid_doc(rng, now)
    names = rng.sample(sorted(MUTATIONS), rng.choice([1, 1, 1, 2, 3]))
    for name in names:
        if name == "duplicate_recipient" and not isinstance(doc.get("recipients"), list):
            continue
        if name.startswith(
            ("recipient_", "local_", "domain_", "address", "notify", "orcpt")
        ) and not isinstance(doc.get("recipients"), list):
            continue
        MUTATIONS[name](rng, doc)
    return "near:" + "+".join(names), doc


def _surrogate_field(rng: random.Random, doc: dict[str, Any]) -> str:
    lone = rng.choice(["\ud800", "\udfff", "\udbff", "\udc00"])
    where = rng.choice(STRING_FIELDS + ["recipient", "orcpt", "notify", "key_name"])
    if where == "recipient":
        doc["recipients"] = [f"b{lone}@example.net"]
    elif where == "orcpt":
        doc["recipients"] = [{"address": "b@example.net", "orcpt": f"rfc822;b{lone}@x.net"}]
    elif where == "notify":
        doc["recipients"] = [{"address": "b@example.net", "notify": [f"NEVER{lone}"]}]
    elif where == "key_name":
        doc[f"x{lone}"] = 1
    else:
        doc[where] = f"x{lone}y"
    if rng.random() < 0.3:
        doc["smtputf8"] = True
    return where


def adversarial(rng: random.Random, now: datetime, i: int) -> Case:
    """Requests aimed at the parser and at storage encodings, not at the envelope rules."""
    base = valid_doc(rng, now)
    attack = rng.choice(
        [
            "deep",
            "deep_field",
            "deep_33",
            "huge_array",
            "surrogate",
            "surrogate_raw",
            "invalid_utf8",
            "duplicate_keys",
            "constants",
            "big_number",
            "not_object",
            "truncated",
            "random_bytes",
            "big_string",
            "bom",
            "content_type",
            "empty",
            "nul_in_json",
            "unicode_everywhere",
            "escaped_ctl",
        ]
    )
    ctype = "application/json"
    if attack == "deep":
        body = _deep(rng.choice([40, 500, 1000, 3000, 100_000]), rng).encode()
    elif attack == "deep_field":
        body = json.dumps(base)[:-1].encode() + b', "x": ' + _deep(1000, rng).encode() + b"}"
    elif attack == "deep_33":
        body = json.dumps({**base, "x": json.loads(_deep(32, rng))}).encode()
    elif attack == "huge_array":
        n = rng.choice([5000, 50_000, 300_000])
        item = rng.choice(['"b@example.net"', "1", "{}", "[]", "null"])
        body = (json.dumps(base)[:-1] + ', "recipients": [' + ",".join([item] * n) + "]}").encode()
        # the later "recipients" is a duplicate key unless the base had none: both are fine
    elif attack == "surrogate":
        where = _surrogate_field(rng, base)
        attack += ":" + where
        body = json.dumps(base).encode()
    elif attack == "surrogate_raw":
        body = json.dumps(base).encode()[:-1] + b', "x": "\xed\xa0\x80"}'  # CESU surrogate
    elif attack == "invalid_utf8":
        body = json.dumps(base).encode().replace(b"@", b"\xff@", 1)
        ctype = rng.choice(["application/json", "application/octet-stream"])
    elif attack == "duplicate_keys":
        body = json.dumps(base)[:-1].encode() + b', "sender": "dup@example.org"}'
    elif attack == "constants":
        body = (
            json.dumps(base)[:-1].encode()
            + b', "smtputf8": '
            + rng.choice([b"NaN", b"Infinity", b"-Infinity"])
            + b"}"
        )
    elif attack == "big_number":
        body = (
            json.dumps(base)[:-1].encode()
            + b', "smtputf8": '
            + rng.choice([b"1" * 5000, b"1e999", b"-0", b"1.0e-400"])
            + b"}"
        )
    elif attack == "not_object":
        body = rng.choice([b"[]", b"null", b"1", b'"x"', b"true", b"[{}]"])
    elif attack == "truncated":
        raw = json.dumps(base).encode()
        body = raw[: rng.randrange(1, len(raw))]
    elif attack == "random_bytes":
        body = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 400)))
        ctype = rng.choice(["application/json", "application/octet-stream", "text/plain"])
    elif attack == "big_string":
        base["x"] = "A" * rng.choice([100_000, 2_000_000, 5_000_000])
        body = json.dumps(base).encode()
    elif attack == "bom":
        body = b"\xef\xbb\xbf" + json.dumps(base).encode()
    elif attack == "content_type":
        body = json.dumps(base).encode()
        ctype = rng.choice(
            [
                "text/plain",
                "application/octet-stream",
                "",
                "multipart/form-data",
                "application/json; charset=latin-1",
                "application/x-www-form-urlencoded",
            ]
        )
    elif attack == "empty":
        body = rng.choice([b"", b" ", b"\n", b"{}", b'{"":""}'])
    elif attack == "nul_in_json":
        body = json.dumps(base).encode().replace(b"{", b"{\x00", 1)
    elif attack == "unicode_everywhere":
        base["sender"] = "".join(chr(rng.randrange(0x80, 0x2FFFF)) for _ in range(8))
        base["sender"] = base["sender"].encode("utf-8", "replace").decode("utf-8", "replace")
        base["sender"] += "@example.org"
        base["smtputf8"] = rng.random() < 0.5
        body = json.dumps(base, ensure_ascii=rng.random() < 0.5).encode("utf-8", "replace")
    else:  # escaped_ctl
        base["envid"] = "".join(chr(rng.randrange(0, 32)) for _ in range(5))
        body = json.dumps(base).encode()
    return Case(i, "adv:" + attack, body, None, ctype)


def _key(rng: random.Random, pool: list[str]) -> str | None:
    r = rng.random()
    if r < 0.6:
        return None
    if r < 0.75 and pool:
        return rng.choice(pool)  # reused: a replay if the body is the same, else a conflict
    if r < 0.8:
        return rng.choice(["", "a b", "k" * 256, "é", "k\x7f", "k,k"])  # invalid
    key = f"fuzz-{rng.randrange(10**12):012d}"
    pool.append(key)
    return key


def cases(seed: int, n: int, now: datetime | None = None) -> Iterator[Case]:
    """`n` requests, the same for the same seed (and `now`, which only moves not_before)."""
    rng = random.Random(seed)
    now = now or datetime.now(UTC)
    pool: list[str] = []
    sent: dict[str, bytes] = {}  # key -> the first body sent with it, for replays
    for i in range(n):
        r = rng.random()
        if r < 0.34:
            kind, doc = "valid", valid_doc(rng, now)
        elif r < 0.68:
            kind, doc = near_doc(rng, now)
        else:
            yield adversarial(rng, now, i)
            continue
        key = _key(rng, pool)
        if key in sent and rng.random() < 0.6:
            yield Case(i, kind + ":replay", sent[key], key)
            continue
        body = json.dumps(doc, ensure_ascii=rng.random() < 0.8).encode("utf-8", "surrogatepass")
        if key is not None:
            sent.setdefault(key, body)
        yield Case(i, kind, body, key)
