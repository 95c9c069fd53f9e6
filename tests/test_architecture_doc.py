"""docs/architecture.md matches the tree: every file, folder and dotted name it shows in
`code` exists; every folder under shared/ is described; every command module of cli/ is
named; "Large modules" lists exactly the modules past 800 lines.

(tests/test_core_ports.py holds the import rules the same page draws, and that a module
past ~850 lines says in its docstring why it is one piece.)
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO / "shared"
DOC = REPO / "docs" / "architecture.md"
LARGE = 800  # lines (`wc -l`)


def _text() -> str:
    return re.sub(r"^```.*?^```", "", DOC.read_text(), flags=re.M | re.S)  # no code blocks


def _section(title: str) -> str:
    text = _text()
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def _names(text: str) -> list[str]:
    return re.findall(r"`([^`\n]+)`", text)


def _bullet(section: str, head: str) -> str:
    """The bullet of `section` that starts with `head`, continuation lines included."""
    m = re.search(rf"^- `{re.escape(head)}`.*?(?=^- |^\n|\Z)", section, re.M | re.S)
    assert m, f"no bullet for {head} in docs/architecture.md"
    return m.group(0)


def _resolve(name: str) -> bool:
    """A path as the page writes it: from the repo, from shared/ or shared/mailqueue/,
    or a bare file name that some folder of shared/ holds."""
    name = name.rstrip("/")
    for base in (REPO, SHARED, SHARED / "mailqueue"):
        if (base / name).exists():
            return True
    return "/" not in name and any(SHARED.rglob(name))


def _resolve_dotted(name: str) -> bool:
    """`mailqueue.compose.ingress.build_service`: a module, then names defined in it."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        base = SHARED.joinpath(*parts[:cut])
        for module in (base.with_suffix(".py"), base / "__init__.py"):
            if module.exists():
                rest = parts[cut:]
                if not rest:
                    return True
                source = module.read_text()
                return len(rest) == 1 and bool(
                    re.search(rf"^(def|class) {rest[0]}\b|^{rest[0]}\b.*=", source, re.M)
                )
    return False


def _line_count(path: Path) -> int:
    return path.read_bytes().count(b"\n")


def test_every_path_and_dotted_name_on_the_page_exists() -> None:
    missing = []
    for name in set(_names(_text())):
        if any(c in name for c in "<>{} ") or name.startswith(("-", "/")):
            continue  # placeholders, routes, flags, code
        if name.startswith("mailqueue.") and "/" not in name:
            if not _resolve_dotted(name):
                missing.append(name)
        elif ("/" in name or name.endswith(".py")) and not _resolve(name):
            missing.append(name)
    assert sorted(missing) == []


def test_every_folder_under_shared_is_described() -> None:
    folders = _section("Folders")
    undescribed = []
    for d in sorted(
        p
        for p in SHARED.rglob("*")
        if p.is_dir()
        # what tools write beside the sources (`pip install -e`, caches), not the tree
        and not any(
            part == "__pycache__" or part.endswith(".egg-info") or part.startswith(".")
            for part in p.relative_to(SHARED).parts
        )
    ):
        rel = d.relative_to(SHARED).as_posix()
        if f"`shared/{rel}/`" in _text():  # a bullet, or (the package) the page's opening
            continue
        # a subfolder named in its parent's bullet, e.g. `ingress/` under services
        parent = d.parent.relative_to(SHARED).as_posix()
        head = f"shared/{parent}/"
        if f"`{head}`" in folders and f"`{d.name}/`" in _bullet(folders, head):
            continue
        undescribed.append(rel)
    assert undescribed == []


def test_every_cli_module_is_named() -> None:
    bullet = _bullet(_section("Folders"), "shared/mailqueue/cli/")
    named = {n.removesuffix(".py") for n in _names(bullet)}
    modules = {p.stem for p in (SHARED / "mailqueue" / "cli").glob("*.py")} - {"__init__"}
    assert sorted(modules - named) == []


def test_large_modules_lists_exactly_the_modules_past_800_lines() -> None:
    listed = set()
    for bullet in re.findall(r"^- `([^`]+\.py)`", _section("Large modules"), re.M):
        listed.add(bullet)
    large = set()
    for path in SHARED.rglob("*.py"):
        if _line_count(path) > LARGE:
            rel = path.relative_to(SHARED).as_posix()
            large.add(rel.removeprefix("mailqueue/"))
    assert sorted(large - listed) == [], "past 800 lines, not in 'Large modules'"
    assert sorted(listed - large) == [], "in 'Large modules', not past 800 lines (or gone)"
