"""bench.sections.write_section: one section replaced, the others left as they are."""

from __future__ import annotations

from pathlib import Path

from bench.sections import write_section


def test_a_section_is_replaced_alone_or_appended(tmp_path: Path) -> None:
    doc = tmp_path / "benchmarks.md"
    doc.write_text("# Benchmarks\n\n## A\n\nold a\n\n## B\n\nb stays\n")
    write_section(["## A", "", "new a"], "## A", doc)
    assert doc.read_text() == "# Benchmarks\n\n## A\n\nnew a\n\n## B\n\nb stays\n"
    write_section(["## C", "", "c"], "## C", doc)
    assert doc.read_text().endswith("## B\n\nb stays\n\n## C\n\nc\n")
    fresh = tmp_path / "new.md"
    write_section(["## A", "", "a"], "## A", fresh)
    text = fresh.read_text()
    assert text.startswith("# Benchmarks\n") and text.endswith("## A\n\na\n")
