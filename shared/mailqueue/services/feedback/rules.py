"""The hard/soft rules for bounces whose status code does not decide, and the phrases of a
challenge-response notice, which is not a bounce (data/bounce-rules.json).

Why data: like the delivery backoff rules, what counts as a dead address is policy that
grows with the receivers met; each group names its source. The file is validated when it
is read (at import of parse.py, so a function with a bad packaged file refuses to start),
and a bad one is refused naming the file, the place and the reason.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

from mailqueue.core.config import ConfigError

GROUPS = (
    "dead_first",
    "soft_text",
    "host_text",
    "user_strong",
    "hard_text",
    "challenge_text",
)
_STATUS_RE = re.compile(r"^[245]\.\d{1,3}\.\d{1,3}$")


class BounceRulesError(ConfigError):
    """data/bounce-rules.json (or the file given) is not valid."""


@dataclass(frozen=True, slots=True)
class BounceRules:
    hard_status: frozenset[str]
    patterns: dict[str, re.Pattern[str]]  # group -> one alternation, case-insensitive

    @classmethod
    def from_json(cls, text: str, source: str) -> BounceRules:
        def bad(place: str, reason: str) -> BounceRulesError:
            return BounceRulesError(f"bounce rules {source}: {place}: {reason}")

        try:
            doc: Any = json.loads(text)
        except ValueError as e:
            raise bad("(whole file)", f"not JSON ({e})") from None
        if not isinstance(doc, dict):
            raise bad("(top level)", "not an object")
        hs = doc.get("hard_status")
        if not isinstance(hs, dict) or not isinstance(hs.get("codes"), list):
            raise bad("hard_status", "needs an object with a list 'codes'")
        if not str(hs.get("source") or "").strip():
            raise bad("hard_status.source", "missing: every rule names where it comes from")
        for i, c in enumerate(hs["codes"]):
            if not isinstance(c, str) or not _STATUS_RE.match(c) or not c.startswith("5."):
                raise bad(f"hard_status.codes[{i}]", f"{c!r} is not a 5.x.y enhanced status")
        groups = doc.get("groups")
        if not isinstance(groups, dict):
            raise bad("groups", "needs an object")
        unknown = sorted(set(groups) - set(GROUPS))
        if unknown:
            raise bad(f"groups.{unknown[0]}", f"unknown group (known: {', '.join(GROUPS)})")
        compiled: dict[str, re.Pattern[str]] = {}
        for g in GROUPS:
            grp = groups.get(g)
            if not isinstance(grp, dict) or not isinstance(grp.get("patterns"), list):
                raise bad(f"groups.{g}", "missing, or without a list 'patterns'")
            if not str(grp.get("source") or "").strip():
                raise bad(f"groups.{g}.source", "missing: every rule names where it comes from")
            pats = grp["patterns"]
            if not pats:
                raise bad(f"groups.{g}.patterns", "empty")
            for i, pat in enumerate(pats):
                if not isinstance(pat, str) or not pat.strip():
                    raise bad(f"groups.{g}.patterns[{i}]", "not a non-empty string")
                try:
                    re.compile(pat)
                except re.error as e:
                    raise bad(
                        f"groups.{g}.patterns[{i}]", f"not a regular expression ({e})"
                    ) from None
            compiled[g] = re.compile("|".join(f"(?:{p})" for p in pats), re.I)
        return cls(frozenset(hs["codes"]), compiled)


def load_bounce_rules() -> BounceRules:
    """The packaged rules (data/bounce-rules.json), validated."""
    text = resources.files("mailqueue").joinpath("data", "bounce-rules.json").read_text()
    return BounceRules.from_json(text, "bounce-rules.json")
