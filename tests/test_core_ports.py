"""The package's import rules (docs/architecture.md), read from the source.

Every import counts, lazy ones inside functions included, and so do the imports under
`if TYPE_CHECKING:`: they never run, but a type named across an arrow is a dependency
all the same, and two modules that name each other's types are one piece to a reader
(and to mypy). Only what a handler loads (`reach`) leaves them out. An edge is an
explicit import of one of our modules; a package's `__init__` is a module like any other.

Contexts and the arrows allowed between them:

    core      -> core
    outbound  -> core, outbound
    services  -> core, outbound, services
    backends  -> core, outbound, services (to implement a service's port), backends
    compose   -> anything in `mailqueue` but the CLI  (the composition roots)
    cli       -> anything in `mailqueue`               (an entry point, like functions/)

boto3 and botocore only in backends, compose and cli; nothing in `mailqueue` imports the
local runtime (`mailqueue_local`, never shipped to Lambda); no import cycles at all, in
the package nor among the benchmark's modules (`bench/`).
"""

from __future__ import annotations

import ast
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO / "shared"
PACKAGES = ("mailqueue", "mailqueue_local")
BENCH = ("bench",)  # under the repository's root: cycles only (it is no context)
CONTEXTS = ("core", "outbound", "services", "backends", "compose", "cli")
ALLOWED: dict[str, frozenset[str]] = {
    "core": frozenset({"core"}),
    "outbound": frozenset({"core", "outbound"}),
    "services": frozenset({"core", "outbound", "services"}),
    "backends": frozenset({"core", "outbound", "services", "backends"}),
    "compose": frozenset({"core", "outbound", "services", "backends", "compose"}),
    "cli": frozenset(CONTEXTS),
}
AWS_SDK = ("boto3", "botocore")
AWS_SDK_OK = frozenset({"backends", "compose", "cli"})
# the services' composition (and only it) names the AWS adapters
COMPOSITION_ROOTS = ("mailqueue.compose",)
# what the delivery, bounce, sweeper, ingress, admin and event services may not reach
SERVICES = (
    "mailqueue.services.delivery",
    "mailqueue.services.bounce",
    "mailqueue.services.sweeper",
    "mailqueue.services.eventlog",
    "mailqueue.services.ingress.service",
    "mailqueue.services.admin.service",
    "mailqueue.services.admin.api",
    "mailqueue.services.admin.jobs",
)

# Known exceptions, each to be removed once it is gone (the test says when): none left.
KNOWN: dict[str, frozenset[str]] = {}

Graph = dict[str, set[str]]


def modules(root: Path = SHARED, packages: Iterable[str] = PACKAGES) -> dict[str, Path]:
    """Every module of `packages` under `root` → its file."""
    out: dict[str, Path] = {}
    for pkg in packages:
        for p in sorted((root / pkg).rglob("*.py")):
            parts = p.relative_to(root).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return out


def _type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def imports(module: str, path: Path, known: Iterable[str], *, typed: bool = True) -> set[str]:
    """Absolute names `module` imports (its own file only); `typed` False leaves out the
    imports under `if TYPE_CHECKING:` (what runs, as `reach` needs)."""
    names = set(known)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    out: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if _type_checking(child) and not typed:
                continue
            if isinstance(child, ast.Import):
                out.update(a.name for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package.split(".")
                    base = base[: len(base) - child.level + 1]
                    prefix = ".".join(base + ([child.module] if child.module else []))
                else:
                    prefix = child.module or ""
                out.add(prefix)
                for a in child.names:  # `from pkg import x` may name a module
                    if f"{prefix}.{a.name}" in names:
                        out.add(f"{prefix}.{a.name}")
            visit(child)

    visit(ast.parse(path.read_text()))
    return out


def graph(
    root: Path = SHARED, packages: Iterable[str] = PACKAGES, *, typed: bool = True
) -> tuple[Graph, Graph]:
    """(edges between our modules, every import of each module); `typed` False: only the
    imports that run (no `if TYPE_CHECKING:` block)."""
    mods = modules(root, packages)
    every = {m: imports(m, p, mods, typed=typed) for m, p in mods.items()}
    return {m: {i for i in names if i in mods} for m, names in every.items()}, every


def cycles(g: Mapping[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(g):
        if start in index:
            continue
        work = [(start, iter(sorted(g[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(g.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    x = stack.pop()
                    on.discard(x)
                    comp.append(x)
                    if x == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def context(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "mailqueue" or len(parts) < 2:
        return None
    return parts[1] if parts[1] in CONTEXTS else None


def _is(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def violations(g: Mapping[str, set[str]], every: Mapping[str, set[str]]) -> list[str]:
    """Every import that breaks a rule of the module docstring, as readable lines."""
    bad: list[str] = []
    for m in sorted(every):
        src = context(m)
        for name in sorted(every[m] - KNOWN.get(m, frozenset())):
            if _is(m, "mailqueue") and _is(name, "mailqueue_local"):
                bad.append(f"{m} -> {name}: the local runtime is not shipped")
            if src is None:
                continue
            dst = context(name)
            if dst is not None and dst not in ALLOWED[src]:
                bad.append(f"{m} -> {name}: {src} may not import {dst}")
            if any(_is(name, sdk) for sdk in AWS_SDK) and src not in AWS_SDK_OK:
                bad.append(f"{m} -> {name}: {src} may not use the AWS SDK")
    for comp in cycles(g):
        bad.append("import cycle: " + " <-> ".join(comp))
    return bad


def reach(g: Mapping[str, set[str]], every: Mapping[str, set[str]], module: str) -> set[str]:
    """Every name `module` reaches through our own modules (itself left out)."""
    seen: set[str] = set()
    todo = [module]
    while todo:
        for name in every[todo.pop()]:
            if name not in seen:
                seen.add(name)
                if name in g:
                    todo.append(name)
    seen.discard(module)
    return seen


# --------------------------------------------------------------------------- the rules


def test_the_package_keeps_the_import_rules() -> None:
    g, every = graph()
    assert violations(g, every) == []


def test_the_benchmark_has_no_import_cycles() -> None:
    g, _ = graph(REPO, BENCH)
    assert len(g) > 10  # the benchmark's modules were found
    assert cycles(g) == []


@pytest.mark.parametrize("module", SERVICES)
def test_a_service_reaches_no_backend_no_composition_and_no_aws_sdk(module: str) -> None:
    g, every = graph(typed=False)  # what the service's function loads
    known = KNOWN.get(module, frozenset())
    every = {m: names - known if m == module else names for m, names in every.items()}
    found = reach(g, every, module)
    bad = sorted(
        n
        for n in found
        if any(_is(n, p) for p in ("mailqueue.backends", "mailqueue.compose", *AWS_SDK))
    )
    assert bad == []


def test_only_the_composition_roots_and_entry_points_name_aws_adapters() -> None:
    g, _ = graph()
    users = sorted(
        m
        for m, names in ((m, names - KNOWN.get(m, frozenset())) for m, names in g.items())
        if any(_is(n, "mailqueue.backends.aws") for n in names)
        and context(m) not in ("backends", "cli")
        and not any(_is(m, r) for r in COMPOSITION_ROOTS)
        and not _is(m, "mailqueue_local")
    )
    assert users == []


def test_the_known_exceptions_are_still_needed() -> None:
    _, every = graph()
    for module, names in KNOWN.items():
        assert names <= every[module], f"{module} no longer imports {names - every[module]}"


def test_every_module_says_what_it_is_for() -> None:
    """A one-line purpose at least; past ~800 lines, why it is one piece."""
    missing, long_unexplained = [], []
    for m, p in modules().items():
        text = p.read_text()
        doc = ast.get_docstring(ast.parse(text))
        if p.name == "__init__.py" and not text.strip():
            continue
        if not doc:
            missing.append(m)
        elif len(text.splitlines()) > 800 and "one piece" not in doc.lower():
            long_unexplained.append(m)
    assert missing == []
    assert long_unexplained == []


# ------------------------------------------------------------------ the checker itself


def _copy(tmp_path: Path) -> Path:
    root = tmp_path / "shared"
    for pkg in PACKAGES:
        shutil.copytree(SHARED / pkg, root / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    return root


def test_the_checker_sees_an_added_cycle(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    model = root / "mailqueue" / "core" / "model.py"
    late = "\n\ndef _late() -> None:\n    from mailqueue.core import policy\n"
    model.write_text(model.read_text() + late)
    g, every = graph(root)
    found = violations(g, every)
    assert any(v.startswith("import cycle:") and "mailqueue.core.model" in v for v in found), found


def test_the_checker_sees_core_importing_aws(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    errors = root / "mailqueue" / "core" / "errors.py"
    errors.write_text(
        errors.read_text() + "\nfrom mailqueue.backends.aws.clients import translate  # noqa\n"
    )
    dkim = root / "mailqueue" / "outbound" / "dkim.py"
    dkim.write_text(dkim.read_text() + "\nimport botocore  # noqa\n")
    g, every = graph(root)
    found = violations(g, every)
    core_aws = (
        "mailqueue.core.errors -> mailqueue.backends.aws.clients: core may not import backends"
    )
    assert core_aws in found
    assert "mailqueue.outbound.dkim -> botocore: outbound may not use the AWS SDK" in found


def test_the_checker_sees_an_added_type_level_cycle(tmp_path: Path) -> None:
    """Two modules naming each other's types only under TYPE_CHECKING: no cycle at run
    time, one cycle to the rules."""
    root = _copy(tmp_path)
    model = root / "mailqueue" / "core" / "model.py"
    typed = "\n\nif TYPE_CHECKING:\n    from mailqueue.core.policy import RetryPolicy  # noqa\n"
    model.write_text("from typing import TYPE_CHECKING\n" + model.read_text() + typed)
    assert "mailqueue.core.model" in graph(root)[1]["mailqueue.core.policy"]  # the other half
    found = violations(*graph(root))
    assert any(v.startswith("import cycle:") and "mailqueue.core.model" in v for v in found), found
    at_run_time = violations(*graph(root, typed=False))
    assert not any(v.startswith("import cycle:") for v in at_run_time), at_run_time


def test_the_checker_sees_a_type_level_arrow(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    errors = root / "mailqueue" / "core" / "errors.py"
    errors.write_text(
        "from typing import TYPE_CHECKING\n"
        + errors.read_text()
        + "\nif TYPE_CHECKING:\n    from mailqueue.outbound.routing import Hop  # noqa\n"
    )
    found = violations(*graph(root))
    assert "mailqueue.core.errors -> mailqueue.outbound.routing: core may not import outbound" in (
        found
    )


def test_the_checker_sees_a_cycle_among_the_benchmarks_modules(tmp_path: Path) -> None:
    bench = tmp_path / "bench"
    shutil.copytree(REPO / "bench", bench, ignore=shutil.ignore_patterns("__pycache__"))
    assert cycles(graph(tmp_path, BENCH)[0]) == []
    assert "bench.model.report" in graph(tmp_path, BENCH)[0]["bench.cost"]
    report = bench / "model" / "report.py"  # cost imports the report: the report naming
    typed = "\nif TYPE_CHECKING:\n    from bench import cost  # noqa\n"  # cost's types closes one
    report.write_text("from typing import TYPE_CHECKING\n" + report.read_text() + typed)
    assert "bench.cost" in graph(tmp_path, BENCH)[0]["bench.model.report"]
    found = cycles(graph(tmp_path, BENCH)[0])
    assert any("bench.cost" in c and "bench.model.report" in c for c in found), found


def test_the_checker_leaves_type_only_imports_out_of_reach_and_sees_lazy_ones() -> None:
    g, every = graph(typed=False)
    direct = every["mailqueue.compose.aws"]
    assert "mailqueue.backends.aws.suspension_store" in direct  # inside a function
    assert "mailqueue.services.delivery" in direct  # inside a function
    assert "mailqueue.outbound.routing" not in direct  # only under TYPE_CHECKING
    assert "mailqueue.outbound.routing" in graph()[1]["mailqueue.compose.aws"]  # typed: counted
    assert "boto3" in reach(g, every, "mailqueue.compose.aws")
