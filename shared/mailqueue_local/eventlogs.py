"""Which local event log `make report` reads, said out loud (issue 28, item 1).

`make run` writes its event log to ``var/events``, `make demo` to ``var/demo/events``;
`make report` reads ``var/events`` unless told ``EVENTS=...``. After a demo that silently
reported an older `make run`. The report target runs this first: when the default log is
read and the demo's is newer (or the only one), it says so and prints the command.

    python -m mailqueue_local.eventlogs EVENTS [DEMO_EVENTS]
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

DEFAULT_EVENTS = Path("var/events")
DEMO_EVENTS = Path("var/demo/events")


def newest(path: Path) -> float | None:
    """The newest file's modification time under ``path`` (None: no file there)."""
    times = [p.stat().st_mtime for p in path.rglob("*") if p.is_file()] if path.is_dir() else []
    return max(times, default=None)


def note(events: Path, demo: Path = DEMO_EVENTS) -> str | None:
    """A line for the user when the demo's log is newer than the log being reported."""
    if events.resolve() == demo.resolve():
        return None
    theirs = newest(demo)
    if theirs is None:
        return None
    ours = newest(events)
    if ours is not None and ours >= theirs:
        return None
    when = datetime.fromtimestamp(theirs, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    what = "is empty" if ours is None else "is older"
    return (
        f"note: reporting {events} (make run's event log), which {what}; make demo's log "
        f"{demo} was written {when}: make report EVENTS={demo}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        print(__doc__, file=sys.stderr)
        return 2
    if "://" in args[0]:  # a remote log (s3a://...): nothing local to compare
        return 0
    line = note(Path(args[0]), Path(args[1]) if len(args) > 1 else DEMO_EVENTS)
    if line:
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
