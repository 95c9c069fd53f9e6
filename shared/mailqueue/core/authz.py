"""Who may do what: IAM principal patterns, the sender policy, the operator allow-list.

Principals are the ARNs API Gateway's IAM authorizer verified (`requestContext.authorizer
.iam.userArn`). Patterns are `fnmatch`-style and case-sensitive, as ARNs are
(`arn:aws:sts::123456789012:assumed-role/app-*/*`, or `*` for every principal).

The sender policy is data, validated at start (a bad rule stops the cold start with the
rule's position): a JSON list of `{"principal": <pattern>, "domains": [<domain> | "*.<domain>"
| "*"]}`. A submission's sender domain must be allowed by some rule whose pattern matches the
caller. No rule allows nothing: a new deployment refuses every sender domain until the
operator says which application may send as which domain (one application must not send as
another's domain, nor make the queue backscatter DSNs to forged senders).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase

from mailqueue.core.config import ConfigError

_DOMAIN_RE = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)(?:\.(?!-)[a-z0-9-]{1,63}(?<!-))+$")
_PATTERN_RE = re.compile(r"^(\*|arn:[\x21-\x7e]+)$")


def check_pattern(pattern: str, what: str) -> str:
    if not isinstance(pattern, str) or not _PATTERN_RE.match(pattern):
        raise ConfigError(f"{what}: {pattern!r} is not an IAM principal ARN pattern or '*'")
    return pattern


def principal_matches(principal: str, patterns: Iterable[str]) -> bool:
    return bool(principal) and any(fnmatchcase(principal, p) for p in patterns)


def parse_principals(text: str | Sequence[str], what: str) -> tuple[str, ...]:
    """A comma-separated (or listed) set of principal patterns, each checked."""
    items = text.split(",") if isinstance(text, str) else list(text)
    return tuple(check_pattern(p.strip(), what) for p in items if p.strip())


@dataclass(frozen=True, slots=True)
class SenderRule:
    principal: str
    domains: tuple[str, ...]  # "example.com", "*.example.com" (subdomains only) or "*"

    def allows(self, principal: str, domain: str) -> bool:
        if not fnmatchcase(principal, self.principal):
            return False
        for d in self.domains:
            if d == "*" or d == domain:
                return True
            if d.startswith("*.") and domain.endswith(d[1:]):
                return True
        return False


@dataclass(frozen=True, slots=True)
class SenderPolicy:
    rules: tuple[SenderRule, ...] = ()

    @classmethod
    def parse(cls, text: str) -> SenderPolicy:
        """The policy from its JSON text ("" or "[]": no rule, nothing allowed)."""
        if not text.strip():
            return cls()
        try:
            doc = json.loads(text)
        except ValueError as e:
            raise ConfigError(f"sender_policy: not JSON ({e})") from e
        if not isinstance(doc, list):
            raise ConfigError("sender_policy: must be a JSON list of rules")
        rules = []
        for i, raw in enumerate(doc):
            where = f"sender_policy[{i}]"
            if not isinstance(raw, dict) or set(raw) != {"principal", "domains"}:
                raise ConfigError(f"{where}: a rule is {{'principal': ..., 'domains': [...]}}")
            principal = check_pattern(raw["principal"], f"{where}.principal")
            domains = raw["domains"]
            if not isinstance(domains, list) or not domains:
                raise ConfigError(f"{where}.domains: a non-empty list")
            out = []
            for d in domains:
                if not isinstance(d, str):
                    raise ConfigError(f"{where}.domains: {d!r} is not a string")
                d = d.strip().lower().rstrip(".")
                bare = d[2:] if d.startswith("*.") else d
                if d != "*" and not _DOMAIN_RE.match(bare):
                    raise ConfigError(f"{where}.domains: {d!r} is not a domain or *.domain")
                out.append(d)
            rules.append(SenderRule(principal, tuple(out)))
        return cls(tuple(rules))

    @classmethod
    def for_domains(cls, domains: Iterable[str]) -> SenderPolicy:
        """The older `allowed_sender_domains` setting: those domains, for every caller."""
        ds = tuple(domains)
        return cls((SenderRule("*", ds),)) if ds else cls()

    def __add__(self, other: SenderPolicy) -> SenderPolicy:
        return SenderPolicy(self.rules + other.rules)

    def allows(self, principal: str, domain: str) -> bool:
        d = domain.lower().rstrip(".")
        return any(rule.allows(principal, d) for rule in self.rules)

    @property
    def permissive(self) -> bool:
        return any(r.principal == "*" and "*" in r.domains for r in self.rules)


# Every caller may send as any domain: the local stack's explicit choice (its banner says
# so), never a deployment's default.
PERMISSIVE_SENDER_POLICY = '[{"principal": "*", "domains": ["*"]}]'
