"""Queue filters: parsed from query parameters (API) or flags (CLI), one validation path.

A filter selects destination groups. Group-level criteria (state, sender, age) test the
group; recipient-level criteria (recipient, domain, attempts, status) select a group when
ONE of its recipients meets all of them — among its pending recipients, or among all of
them when browsing finished groups (dsn, done). Operations act on whole groups (the unit
of a claim), as `postsuper` acts on whole queue files.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from mailqueue.core.errors import InvalidInput
from mailqueue.core.model import Group, GroupState, Recipient

FILTER_KEYS = (
    "state",
    "sender",
    "recipient",
    "domain",
    "age_min",
    "age_max",
    "attempts_min",
    "status",
)
# the order in which browse lists states (each state sorted by its index key)
STATE_ORDER = (
    GroupState.QUEUED,
    GroupState.INFLIGHT,
    GroupState.HELD,
    GroupState.DSN,
    GroupState.DONE,
)
DEFAULT_STATES = (GroupState.QUEUED, GroupState.INFLIGHT, GroupState.HELD)
PENDING_STATES = frozenset(DEFAULT_STATES)
RECIPIENT_STATES = ("delivered", "bounced", "deleted")
_DURATION_RE = re.compile(r"^(\d{1,9})([smhd]?)$")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
_STATUS_RE = re.compile(r"^(?:[245]\d{0,2}|[245](?:\.\d{1,3}){1,2})$")
_DOMAIN_RE = re.compile(r"^[^\s@]{1,255}$")


@dataclass(frozen=True, slots=True)
class QueueFilter:
    states: tuple[GroupState, ...] = DEFAULT_STATES
    sender: str | None = None  # "" is the null sender (written "<>")
    recipient: str | None = None
    domain: str | None = None
    age_min: int | None = None  # seconds since arrival
    age_max: int | None = None
    attempts_min: int | None = None
    status: str | None = None  # "4", "45", "451", "4.4", "4.4.1"
    explicit_states: bool = False

    @property
    def empty(self) -> bool:
        """No criterion at all (states left at their default): selects the whole queue."""
        return not self.explicit_states and all(
            getattr(self, k) is None
            for k in ("sender", "recipient", "domain", "age_min", "age_max")
            + ("attempts_min", "status")
        )

    @property
    def recipient_level(self) -> bool:
        return any(
            v is not None for v in (self.recipient, self.domain, self.attempts_min, self.status)
        )

    def to_params(self) -> dict[str, str]:
        """The query parameters that parse back to this filter."""
        out: dict[str, str] = {}
        if self.explicit_states:
            out["state"] = ",".join(s.value for s in self.states)
        if self.sender is not None:
            out["sender"] = self.sender or "<>"
        for k in ("recipient", "domain", "status"):
            v = getattr(self, k)
            if v is not None:
                out[k] = v
        for k in ("age_min", "age_max", "attempts_min"):
            v = getattr(self, k)
            if v is not None:
                out[k] = str(v)
        return out

    def fingerprint(self, *extra: str) -> str:
        doc = json.dumps([self.to_params(), [s.value for s in self.states], *extra])
        return hashlib.sha256(doc.encode()).hexdigest()[:12]

    # ------------------------------------------------------------------ matching
    def matches(self, group: Group, now: datetime) -> bool:
        if group.state not in self.states:
            return False
        if self.sender is not None and group.sender.lower() != self.sender:
            return False
        if self.age_min is not None or self.age_max is not None:
            age = (now - group.arrival).total_seconds()
            if self.age_min is not None and age < self.age_min:
                return False
            if self.age_max is not None and age > self.age_max:
                return False
        if not self.recipient_level:
            return True
        finished = group.state in (GroupState.DSN, GroupState.DONE)
        candidates = (
            group.recipients if finished else [r for r in group.recipients if not r.state.final]
        )
        return any(self.recipient_matches(r) for r in candidates)

    def recipient_matches(self, r: Recipient) -> bool:
        if self.recipient is not None and r.address.lower() != self.recipient:
            return False
        if self.domain is not None and r.domain != self.domain:
            return False
        if self.attempts_min is not None and r.attempts < self.attempts_min:
            return False
        if self.status is not None:
            res = r.last_result
            if res is None:
                return False
            if "." in self.status:
                parts = self.status.split(".")
                if res.status.split(".")[: len(parts)] != parts:
                    return False
            elif not str(res.code).startswith(self.status):
                return False
        return True


def parse_duration(value: str, field: str) -> int:
    """Seconds from "90", "90s", "15m", "2h" or "3d"."""
    m = _DURATION_RE.match(value.strip().lower())
    if not m:
        raise InvalidInput(
            "invalid_duration",
            f"{field} must be a whole number of seconds, or with a unit: 90s, 15m, 2h, 3d",
            field,
        )
    return int(m.group(1)) * _UNITS[m.group(2)]


def parse_int(value: str, field: str, *, low: int, high: int) -> int:
    try:
        n = int(value)
    except ValueError:
        raise InvalidInput("invalid_number", f"{field} must be a whole number", field) from None
    if not low <= n <= high:
        raise InvalidInput("out_of_range", f"{field} must be within {low}..{high}", field)
    return n


def parse_states(value: str) -> tuple[GroupState, ...]:
    out: list[GroupState] = []
    for raw in value.split(","):
        name = raw.strip().lower()
        if not name:
            continue
        if name in RECIPIENT_STATES:
            raise InvalidInput(
                "invalid_state",
                f"{name!r} is a recipient state; groups are "
                + "|".join(s.value for s in STATE_ORDER)
                + " (finished recipients are listed with state=dsn,done)",
                "state",
            )
        try:
            st = GroupState(name)
        except ValueError:
            raise InvalidInput(
                "invalid_state",
                f"unknown state {name!r}; one of " + "|".join(s.value for s in STATE_ORDER),
                "state",
            ) from None
        if st not in out:
            out.append(st)
    if not out:
        raise InvalidInput("invalid_state", "state must name at least one state", "state")
    return tuple(s for s in STATE_ORDER if s in out)


def _text(value: str, field: str, limit: int = 320) -> str:
    v = value.strip()
    if len(v) > limit or any(ord(c) < 32 or ord(c) == 127 for c in v):
        raise InvalidInput("invalid_value", f"{field} is too long or has control characters", field)
    return v


def parse_filter(
    params: Mapping[str, str | None], *, allowed: frozenset[str] = frozenset()
) -> QueueFilter:
    """A filter from query parameters; unknown keys are refused (a typo must never widen
    a delete). `allowed` names the other parameters of the calling endpoint."""
    for key in params:
        if key not in FILTER_KEYS and key not in allowed:
            raise InvalidInput("unknown_parameter", f"unknown parameter {key!r}", key)
    p = {k: v for k, v in params.items() if k in FILTER_KEYS and v is not None}
    kw: dict[str, Any] = {}
    if "state" in p:
        kw["states"] = parse_states(p["state"])
        kw["explicit_states"] = True
    if "sender" in p:
        s = _text(p["sender"], "sender").lower()
        kw["sender"] = "" if s in ("<>", "") else s
    if "recipient" in p:
        r = _text(p["recipient"], "recipient").lower()
        if "@" not in r or r.endswith("@"):
            raise InvalidInput("invalid_recipient", "recipient must be an address", "recipient")
        kw["recipient"] = r
    if "domain" in p:
        d = _text(p["domain"], "domain", 255).lower().rstrip(".")
        if not d or not _DOMAIN_RE.match(d):
            raise InvalidInput("invalid_domain", "domain must be a domain name", "domain")
        kw["domain"] = d
    for key in ("age_min", "age_max"):
        if key in p:
            kw[key] = parse_duration(p[key], key)
    if "attempts_min" in p:
        kw["attempts_min"] = parse_int(p["attempts_min"], "attempts_min", low=0, high=100000)
    if "status" in p:
        st = p["status"].strip()
        if not _STATUS_RE.match(st):
            raise InvalidInput(
                "invalid_status",
                "status must be an SMTP code or its prefix (4, 45, 451) or an enhanced "
                "status or its prefix (4.4, 4.4.1)",
                "status",
            )
        kw["status"] = st
    flt = QueueFilter(**kw)
    _check_consistent(flt)
    return flt


def _check_consistent(f: QueueFilter) -> None:
    """Filters that can select nothing are refused: the operator meant something else."""
    if f.age_min is not None and f.age_max is not None and f.age_min > f.age_max:
        raise InvalidInput("contradictory_filter", "age_min is greater than age_max", "age_min")
    if f.recipient is not None and f.domain is not None:
        if f.recipient.rpartition("@")[2] != f.domain:
            raise InvalidInput(
                "contradictory_filter", "recipient is not in the given domain", "domain"
            )
    only_pending = all(s in PENDING_STATES for s in f.states)
    if f.status is not None and f.status.startswith("2") and only_pending:
        raise InvalidInput(
            "contradictory_filter",
            "a pending recipient never has a success status; add state=dsn,done",
            "status",
        )
