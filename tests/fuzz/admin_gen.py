"""Seeded requests for every admin route (`/v1/queue/...`): valid, near-valid and hostile.

`admin_cases(seed, n, mail_ids)` yields the same `n` requests for the same seed and ids
(one `random.Random`, no other source of randomness), so a failure found by `make fuzz` is
replayed by its seed and index. Each request picks a route from `ROUTES` (the table in
mailqueue.services.admin.api, plus unknown routes and wrong methods), then spoils it: odd
path parameters (percent-encoded slashes, NUL, invalid UTF-8, 4 KiB long), bad query
strings (unknown, repeated, empty, huge or negative numbers, junk cursors, invalid
percent-encoding), and for the routes that read a body: malformed JSON, non-UTF-8 bytes,
wrong types, huge values, deep nesting, unknown fields. The ids are real mails the test
put in the queue first, so the one-mail routes reach past "not found".
"""

from __future__ import annotations

import json
import random
import string
from collections.abc import Callable, Iterator, Sequence
from typing import Any
from urllib.parse import quote

from tests.fuzz.gen import Case

# (method, template): the routes of mailqueue.services.admin.api._ROUTES
ROUTES: tuple[tuple[str, str], ...] = (
    ("GET", "/v1/queue/mails"),
    ("GET", "/v1/queue/mails/{mail_id}"),
    ("DELETE", "/v1/queue/mails/{mail_id}"),
    ("POST", "/v1/queue/mails/{mail_id}/{action}"),
    ("GET", "/v1/queue/size"),
    ("GET", "/v1/queue/shape"),
    ("POST", "/v1/queue/jobs"),
    ("GET", "/v1/queue/jobs/{job_id}"),
    ("POST", "/v1/queue/jobs/{job_id}/cancel"),
    ("GET", "/v1/queue/doctor"),
    ("GET", "/v1/queue/suspensions"),
    ("POST", "/v1/queue/suspensions"),
    ("DELETE", "/v1/queue/suspensions/{scope}/{target}"),
    ("GET", "/v1/queue/pools"),
    ("GET", "/v1/queue/pools/{pool}"),
    ("GET", "/v1/queue/reputation/{scope}/{target}"),
    ("POST", "/v1/queue/reputation/{scope}/{target}/resume"),
    ("GET", "/v1/queue/suppressions"),
    ("POST", "/v1/queue/suppressions"),
    ("GET", "/v1/queue/suppressions/{address}"),
    ("DELETE", "/v1/queue/suppressions/{address}"),
)
# reads that query every shard (issue 43 item 15: seconds each on moto): drawn less often
SLOW = frozenset({"/v1/queue/mails", "/v1/queue/size", "/v1/queue/shape"})
BODY_ROUTES = frozenset(
    {
        ("POST", "/v1/queue/jobs"),
        ("POST", "/v1/queue/suspensions"),
        ("POST", "/v1/queue/suppressions"),
    }
)

ACTIONS = ["hold", "release", "retry", "bounce", "delete"]
SCOPES = ["site", "domain", "sender_domain", "principal", "pool", "recipient", "Site", ""]
STATES = ["queued", "inflight", "held", "dsn", "done", "QUEUED", "bogus", ""]
FILTER_KEYS = ["state", "sender", "recipient", "domain", "age_min", "age_max", "attempts_min"]
FILTER_KEYS += ["status"]
ODD = [
    "%2F",  # an encoded slash
    "%00",
    "%ff%fe",  # not UTF-8 once decoded
    "%ed%a0%80",  # a lone surrogate, UTF-8 encoded
    "%",  # a bad escape
    "%zz",
    "..",
    ".",
    "%2E%2E%2F%2E%2E",
    "%20",
    "+",
    "%0d%0aX-Injected:%201",
    "%E2%80%AE",  # right-to-left override
    "%F0%9F%92%A9",
    "a%40b",
    "*",
    "'%22%3C%3E",
    "%25",
    "~",
]
HUGE_INTS = ["0", "-1", "1e400", "NaN", "inf", "99999999999999999999999999", "1.5", "0x10", "%207"]
HUGE_INTS += ["%D9%A3", "10_000", "-0", "2147483648", "9" * 400]


def _odd_segment(rng: random.Random) -> str:
    """A path parameter (already percent-encoded, as it goes on the wire)."""
    r = rng.random()
    if r < 0.45:
        return "".join(rng.choice(ODD + list("abcXYZ019-_")) for _ in range(rng.randint(1, 6)))
    if r < 0.55:
        return rng.choice(["x", "%41"]) * rng.choice([300, 1024, 4096])
    if r < 0.7:
        raw = "".join(chr(rng.randrange(0x20, 0x2FFF)) for _ in range(rng.randint(1, 12)))
        return quote(raw.encode("utf-8", "surrogatepass"), safe="")
    if r < 0.85:
        return quote(_address(rng), safe="@")
    return rng.choice(["01JBOGUS", "M#x", "G#y", "null", "undefined", "0", "-1", "true"])


def _address(rng: random.Random) -> str:
    local = rng.choice(["a", "bob", "x+tag", "o'brien", "jörg", "", "a" * 70, "a..b", '"q"'])
    domain = rng.choice(
        ["example.net", "EXAMPLE.com", "bücher.example", "[192.0.2.1]", "", "x", "a." * 130]
    )
    return rng.choice([f"{local}@{domain}", local, f"@{domain}", f"{local}@@{domain}"])


def _value(rng: random.Random, depth: int = 0) -> Any:
    """A JSON value of any type, some of them huge."""
    r = rng.random()
    if r < 0.15:
        return None
    if r < 0.3:
        return rng.choice([True, False])
    if r < 0.45:
        return rng.choice([0, -1, 1, 2**31, 2**63, 10**400 if rng.random() < 0.2 else 7, 1.5])
    if r < 0.6:
        return rng.choice(["", "x" * rng.choice([1, 1000, 70_000]), "\u0000", "\ud800", "é"])
    if r < 0.75 and depth < 3:
        return [_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    if r < 0.9 and depth < 3:
        return {rng.choice(["a", "scope", "action", ""]): _value(rng, depth + 1)}
    return rng.choice(["1h", "15m", "3d", "-5m", "99999999d", "0s"])


def _valid_body(rng: random.Random, route: str, mail_ids: Sequence[str]) -> dict[str, Any]:
    if route == "/v1/queue/jobs":
        doc: dict[str, Any] = {"action": rng.choice(ACTIONS)}
        if rng.random() < 0.5:
            doc["all"] = True
        else:
            doc["filter"] = rng.choice(
                [
                    {"state": rng.choice(STATES[:5])},
                    {"domain": "example.net"},
                    {"sender": "bob@example.com", "age_min": "1h"},
                    {"recipient": "a@example.net", "attempts_min": 2},
                ]
            )
        return doc
    if route == "/v1/queue/suspensions":
        scope = rng.choice(SCOPES[:5])
        target = {
            "site": "",
            "domain": "example.net",
            "sender_domain": "example.com",
            "principal": "arn:aws:iam::123456789012:user/fuzz",
            "pool": "default",
        }[scope]
        doc = {"scope": scope, "target": target, "duration": rng.choice(["15m", "1h", 60])}
        if rng.random() < 0.5:
            doc["reason"] = "fuzz"
        return doc
    if rng.random() < 0.3:  # suppressions: a batch
        return {"entries": [{"address": f"u{rng.randrange(99)}@example.net"} for _ in range(3)]}
    return {"address": f"u{rng.randrange(99)}@example.net", "reason": "fuzz", "ttl_days": 30}


def _spoil(rng: random.Random, doc: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """One to three changes: a field dropped, retyped, hugely valued, or unknown."""
    done = []
    for _ in range(rng.randint(1, 3)):
        r = rng.random()
        keys = list(doc)
        if r < 0.25 and keys:
            k = rng.choice(keys)
            del doc[k]
            done.append(f"drop_{k}")
        elif r < 0.6 and keys:
            k = rng.choice(keys)
            doc[k] = _value(rng)
            done.append(f"retype_{k}")
        elif r < 0.8:
            k = rng.choice(["bogus", "Action", "ALL", "filter ", "\u0000", "ttl_days", "entries"])
            doc[k] = _value(rng)
            done.append("field")
        else:
            doc["entries"] = [_value(rng) for _ in range(rng.choice([0, 1, 50, 5000]))]
            done.append("entries")
    return "+".join(done), doc


def _hostile_body(rng: random.Random) -> tuple[str, bytes]:
    attacks: list[tuple[str, Callable[[], bytes]]] = [
        ("not_utf8", lambda: b"\xff{}"),
        ("bad_utf8_in_string", lambda: b'{"address": "a\xc3@example.net"}'),
        ("surrogate", lambda: b'{"action": "\xed\xa0\x80"}'),
        ("escaped_surrogate", lambda: b'{"action": "\\ud800", "all": true}'),
        ("truncated", lambda: b'{"action": "hold", "all": tr'),
        ("empty", lambda: b""),
        ("whitespace", lambda: b"   \n\t"),
        ("array", lambda: b"[1, 2, 3]"),
        ("string", lambda: b'"hello"'),
        ("number", lambda: b"1e999999"),
        ("deep", lambda: b"[" * 20_000 + b"]" * 20_000),
        ("deep_obj", lambda: b'{"a":' * 5_000 + b"1" + b"}" * 5_000),
        ("dup_keys", lambda: b'{"action": "hold", "action": "delete", "all": true}'),
        ("nul_key", lambda: b'{"\\u0000": 1}'),
        ("bom", lambda: b'\xef\xbb\xbf{"action": "hold", "all": true}'),
        ("utf16", lambda: '{"action": "hold", "all": true}'.encode("utf-16")),
        ("nan", lambda: b'{"ttl_days": NaN, "address": "a@example.net"}'),
        ("big_int", lambda: b'{"ttl_days": ' + b"9" * 5000 + b', "address": "a@example.net"}'),
        ("huge_string", lambda: b'{"address": "' + b"a" * 2_000_000 + b'"}'),
        ("many_keys", lambda: json.dumps({f"k{i}": i for i in range(20_000)}).encode()),
        ("binary", lambda: bytes(rng.randrange(256) for _ in range(rng.randint(1, 300)))),
        ("trailing", lambda: b'{"action": "hold", "all": true} {}'),
        ("comment", lambda: b'{"action": "hold" /* x */}'),
    ]
    name, make = rng.choice(attacks)
    return name, make()


def _query(rng: random.Random, route: str) -> str:
    """A query string: mostly plausible parameters, some of them spoiled."""
    if rng.random() < 0.35:
        return ""
    names = {
        "/v1/queue/mails": ["sort", "limit", "cursor", *FILTER_KEYS],
        "/v1/queue/shape": ["bucket_minutes", "buckets", "by", "top", *FILTER_KEYS],
        "/v1/queue/suppressions": ["limit", "cursor", "all"],
        "/v1/queue/mails/{mail_id}": ["body", "group"],
        "/v1/queue/mails/{mail_id}/{action}": ["group"],
    }.get(route, ["x", "limit"])
    parts = []
    for _ in range(rng.randint(1, 4)):
        if rng.random() < 0.8:  # mostly the route's own names, so values are judged
            name = rng.choice(names)
        else:
            name = rng.choice(["bogus", "", "%ff", "limit[]", "a%00b", "LIMIT"])
        r = rng.random()
        if r < 0.3:
            value = rng.choice(HUGE_INTS)
        elif r < 0.45:
            value = rng.choice(STATES + ["next", "age", "recipient", "sender", "-1h", "15m"])
        elif r < 0.6:  # a cursor: junk, base64 of junk, JSON
            value = rng.choice(
                ["abc", "eyJwayI6ICJ4In0", "eyJ", "%7B%7D", "AAAA", "////", "x" * 3000, "null"]
            )
        elif r < 0.7:
            value = rng.choice(["true", "false", "yes", "maybe", "TRUE", ""])
        else:
            value = _odd_segment(rng)
        parts.append(rng.choice([f"{name}={value}", name, f"{name}=", f"={value}"]))
    return "?" + rng.choice(["&", "&&", ";"]).join(parts)


def _path(rng: random.Random, template: str, mail_ids: Sequence[str], jobs: Sequence[str]) -> str:
    def seg(kind: str) -> str:
        odd = rng.random() < 0.4
        if kind == "mail_id":
            return _odd_segment(rng) if odd or not mail_ids else rng.choice(mail_ids)
        if kind == "job_id":
            return _odd_segment(rng) if odd or not jobs else rng.choice(jobs)
        if kind == "action":
            return _odd_segment(rng) if odd else rng.choice(ACTIONS + ["HOLD", "frobnicate"])
        if kind == "scope":
            return _odd_segment(rng) if odd else rng.choice(SCOPES)
        if kind == "pool":
            return _odd_segment(rng) if odd else rng.choice(["default", "warm", "bulk"])
        if kind == "address":
            return _odd_segment(rng) if odd else quote(f"u{rng.randrange(99)}@example.net", "@")
        return _odd_segment(rng) if odd else rng.choice(["example.net", "example.com", "default"])

    out = template
    for kind in ("mail_id", "job_id", "action", "scope", "target", "pool", "address"):
        while "{" + kind + "}" in out:
            out = out.replace("{" + kind + "}", seg(kind), 1)
    return out


def _stray(rng: random.Random) -> tuple[str, str, str]:
    """A request no route takes: unknown path, wrong method, extra segments."""
    method, template = rng.choice(ROUTES)
    r = rng.random()
    if r < 0.4:
        other = rng.choice(["PUT", "PATCH", "DELETE", "POST", "GET", "OPTIONS", "HEAD"])
        return "wrong_method", other, template
    if r < 0.7:
        return "extra_segment", method, template + "/" + rng.choice(["x", "", "%2F", ".."])
    unknown = ["/v1/queue", "/v1/queue/", "/v1/queue/unknown", "/v1/queue//mails", "/v1/QUEUE/size"]
    return "unknown_path", method, rng.choice(unknown)


def admin_cases(seed: int, n: int, mail_ids: Sequence[str] = ()) -> Iterator[Case]:
    """`n` requests over every admin route, the same for the same seed and `mail_ids`."""
    rng = random.Random(seed)
    jobs = ["01J" + "".join(rng.choices(string.ascii_uppercase + string.digits, k=23))]
    for i in range(n):
        if i < len(ROUTES):  # every route at least once, whatever n
            method, template = ROUTES[i]
            kind = "route"
        elif rng.random() < 0.08:
            kind, method, template = _stray(rng)
        elif rng.random() < 0.3:  # the routes that read a body take most hostile input
            method, template = rng.choice(sorted(BODY_ROUTES))
            kind = "route"
        else:
            method, template = rng.choice(ROUTES)
            if template in SLOW and rng.random() < 0.6:
                method, template = rng.choice(ROUTES)  # fewer shard-wide reads
            kind = "route"
        path = _path(rng, template, mail_ids, jobs) + _query(rng, template)
        body, ctype = b"", ""
        r = rng.random()
        if (method, template) in BODY_ROUTES:
            route = template.rsplit("/", 1)[-1]
            doc = _valid_body(rng, "/v1/queue/" + route, mail_ids)
            ctype = "application/json"
            if r < 0.3:
                kind = "valid"
                body = json.dumps(doc).encode()
            elif r < 0.65:
                how, doc = _spoil(rng, doc)
                kind = "near:" + how
                body = json.dumps(doc, ensure_ascii=rng.random() < 0.5).encode(
                    "utf-8", "surrogatepass"
                )
            else:
                how, body = _hostile_body(rng)
                kind = "adv:" + how
                ctype = rng.choice(["application/json", "text/plain", "", "application/x-binary"])
        elif r < 0.1:  # a body where none is read
            how, body = _hostile_body(rng)
            kind = f"{kind}+body:{how}"
            ctype = "application/json"
        yield Case(i, f"{method} {template} {kind}", body, None, ctype, method=method, path=path)
