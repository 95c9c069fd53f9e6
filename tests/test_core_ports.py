"""The core stands on the protocol: the services import no AWS adapter and no boto3.

Read from the source (the import graph, not `sys.modules`: a package's `__init__` is its
composition root and may name AWS, the service module itself may not). Every import
counts, lazy ones in functions included; only `if TYPE_CHECKING:` blocks are exempt.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "shared" / "mailqueue"
FORBIDDEN = ("mailqueue.aws", "boto3", "botocore")
SERVICES = (
    "mailqueue.delivery",
    "mailqueue.bounce",
    "mailqueue.sweeper",
    "mailqueue.ingress.service",
    "mailqueue.admin.service",
    "mailqueue.ports",
    "mailqueue.inprocess",
    "mailqueue.fs",
)
# modules the admin service still reaches that hold an adapter next to their protocol
# (the job store lives with its DynamoDB implementation)
KNOWN: dict[str, frozenset[str]] = {
    "mailqueue.admin.service": frozenset({"mailqueue.admin.jobs"}),
}


def _file(module: str) -> Path | None:
    parts = module.split(".")[1:]
    if not parts:
        return PKG / "__init__.py"
    rel = Path(*parts)
    for p in (PKG / rel.with_suffix(".py"), PKG / rel / "__init__.py"):
        if p.exists():
            return p
    return None


def _type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def imports(module: str) -> set[str]:
    """Absolute names `module` imports (its own file only), type-only imports left out."""
    path = _file(module)
    assert path is not None, module
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    out: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if _type_checking(child):
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
                for a in child.names:  # `from . import x` may name a module
                    if _file(f"{prefix}.{a.name}") is not None and prefix.startswith("mailqueue"):
                        out.add(f"{prefix}.{a.name}")
            visit(child)

    visit(ast.parse(path.read_text()))
    return out


def reach(module: str, stop: frozenset[str] = frozenset()) -> dict[str, str]:
    """Every module `module` reaches through our own modules → the one importing it."""
    seen: dict[str, str] = {}
    todo = [module]
    while todo:
        m = todo.pop()
        for name in imports(m):
            if name in seen or name == module:
                continue
            seen[name] = m
            if name.startswith("mailqueue") and name not in stop and _file(name) is not None:
                if not name.startswith("mailqueue.aws"):
                    todo.append(name)
    return seen


def _forbidden(name: str) -> bool:
    return any(name == f or name.startswith(f + ".") for f in FORBIDDEN)


@pytest.mark.parametrize("module", SERVICES)
def test_a_core_service_reaches_no_aws_adapter_and_no_boto3(module: str) -> None:
    stop = KNOWN.get(module, frozenset())
    found = reach(module, stop)
    bad = sorted(f"{name} (imported by {by})" for name, by in found.items() if _forbidden(name))
    assert bad == []
    # the known exceptions are still what they say (remove them here once they are gone)
    for known in stop:
        assert any(_forbidden(n) for n in reach(known)), f"{known} no longer needs the exception"


def test_the_guard_sees_a_lazy_import_and_a_relative_one() -> None:
    """The guard itself: the AWS composition reaches boto3, lazy imports included."""
    direct = imports("mailqueue.aws.compose")
    assert "mailqueue.aws.backend" in direct  # relative: from .backend import ...
    assert "mailqueue.aws.suspension_store" in direct  # inside a function
    assert "mailqueue.delivery" in direct  # inside a function, two levels up
    assert "mailqueue.routing" not in direct  # only under TYPE_CHECKING
    assert any(_forbidden(n) for n in reach("mailqueue.aws.compose"))
    assert any(_forbidden(n) for n in reach("mailqueue.admin.jobs"))
