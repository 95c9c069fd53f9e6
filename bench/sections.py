"""docs/benchmarks.md is written a section at a time: each bench replaces its own `## ...`
section (up to the next `## ` heading) and leaves the others as they are."""

from __future__ import annotations

import re
from pathlib import Path

DOCS = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"
_NEW = "# Benchmarks\n\nEach section is written by its own `make` target.\n\n"


def write_section(lines: list[str], section: str, path: Path = DOCS) -> None:
    """Replace `section` with `lines` (which start with its heading), or append it."""
    text = path.read_text() if path.exists() else _NEW
    block = "\n".join(lines).rstrip() + "\n\n"
    pattern = re.compile(rf"^{re.escape(section)}\n.*?(?=^## |\Z)", re.S | re.M)
    if pattern.search(text):
        text = pattern.sub(lambda _: block, text)
    else:
        text = text.rstrip() + "\n\n" + block
    path.write_text(text.rstrip() + "\n")
