"""Queue size counted on demand from the `by_state` index (no counters to keep).

Why not counters kept from the stream: they cost a transaction per stream batch, ~0.8
counter items written per stream record at volume (about $4.25 per million mails at
100 M/month, the largest line after the state writes), and a stream consumer that must
apply every record exactly once. `size` is an operator's occasional question; reading
the index when it is asked (keys only) and the groups behind it (BatchGetItem, strongly
consistent: 1 read unit per group item up to 4 KB, $0.125 per million units) costs ~1
unit per group: a backlog of 100,000 groups is ~100,000 units, about $0.013 a count, in
~1,000 BatchGetItem requests of 100 keys.

What is counted: the groups the index holds (`st` present: queued, inflight, held, dsn,
and done groups awaiting cleanup) and their recipients —

* a recipient whose state is final (delivered, bounced, deleted) counts under that state;
* a queued recipient of a claimed group (``inflight``) counts as ``inflight``;
* any other pending recipient under its stored state (``queued`` or ``held``).

A claimed group keeps its `queued` entry (its lease is on the item, not in the index
key), so the `inflight` walk reads the queued entries a second time and keeps the leased
ones: twice the reads of the queued backlog, ~$0.026 a count of 100,000 groups.

A finished group of a mail whose other groups are still pending leaves the index (its
`st` is removed) and is not counted. The index is read eventually consistently: a group
a delivery is moving can be read under two states at once; it is counted once, under the
first state read (the order of `STATES`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from mailqueue.core.model import Group, GroupState

__all__ = ["FINAL_STATES", "PENDING_STATES", "STATES", "Counts", "count_groups"]

FINAL_STATES = frozenset({"delivered", "bounced", "deleted"})
PENDING_STATES = frozenset({"queued", "inflight", "held"})
#: the index partitions read, in this order
STATES = (
    GroupState.QUEUED,
    GroupState.INFLIGHT,
    GroupState.HELD,
    GroupState.DSN,
    GroupState.DONE,
)


@dataclass(frozen=True, slots=True)
class Counts:
    """Recipients by state, groups by state, recipients by domain and state."""

    recipients: dict[str, int]
    groups: dict[str, int]
    domains: dict[str, dict[str, int]]
    evaluated: int = 0  # group items read from the index

    def pending(self) -> int:
        return sum(self.recipients.get(s, 0) for s in PENDING_STATES)

    def to_json(self) -> dict[str, Any]:
        return {
            "recipients": dict(sorted(self.recipients.items())),
            "groups": dict(sorted(self.groups.items())),
            "domains": {d: dict(sorted(v.items())) for d, v in sorted(self.domains.items())},
            "pending": self.pending(),
            "source": "index",
            "evaluated": self.evaluated,
        }


def count_groups(groups: Iterable[Group]) -> Counts:
    """The counts of `groups` (pure); a group seen twice (same mail and key) counts once."""
    seen: set[tuple[str, str]] = set()
    recipients: dict[str, int] = {}
    by_state: dict[str, int] = {}
    domains: dict[str, dict[str, int]] = {}
    n = 0
    for g in groups:
        n += 1
        if (g.mail_id, g.key) in seen:
            continue
        seen.add((g.mail_id, g.key))
        by_state[g.state.value] = by_state.get(g.state.value, 0) + 1
        for r in g.recipients:
            b = r.state.value  # a claimed group's queued recipients read as inflight
            recipients[b] = recipients.get(b, 0) + 1
            dom = r.address.rpartition("@")[2].lower() or "-"
            per = domains.setdefault(dom, {})
            per[b] = per.get(b, 0) + 1
    return Counts(recipients, by_state, domains, n)
