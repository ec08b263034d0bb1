"""The stages import each other in one direction only: no import cycle between packages.

Read from the source (``ast``), not from ``sys.modules``: every ``import`` counts, at module
level or inside a function (a lazy import is still a dependency), except those under
``if TYPE_CHECKING:``. A module at the package root (``veil/session.py``) is its own node.
"""

from __future__ import annotations

import ast
from pathlib import Path

import veil

ROOT = Path(veil.__file__).parent


def _node(module: str) -> str:
    """``veil.compile.lower`` → ``veil.compile``; ``veil.session`` → ``veil.session``."""
    parts = module.split(".")
    if len(parts) >= 2 and (ROOT / parts[1]).is_dir():
        return ".".join(parts[:2])
    return ".".join(parts[:2]) if len(parts) >= 2 else module


def _module_of(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, package: str) -> set[str]:
    found: set[str] = set()

    def walk(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _type_checking(child):
                for sub in child.orelse:
                    walk(sub)
                continue
            if isinstance(child, ast.Import):
                found.update(a.name for a in child.names if a.name.startswith("veil"))
            elif isinstance(child, ast.ImportFrom):
                if child.level:  # relative: resolve against the importing package
                    base = package.split(".")[: len(package.split(".")) - child.level + 1]
                    name = ".".join([*base, child.module] if child.module else base)
                else:
                    name = child.module or ""
                if name.startswith("veil"):
                    found.add(name)
                    if name == "veil":  # from veil import noise → the submodule
                        found.update(f"veil.{a.name}" for a in child.names)
            walk(child)

    walk(tree)
    return found


def graph() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {}
    for path in ROOT.rglob("*.py"):
        module = _module_of(path)
        package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
        src = _node(module)
        for target in _imports(ast.parse(path.read_text()), package):
            dst = _node(target)
            if dst != src and dst != "veil":
                edges.setdefault(src, set()).add(dst)
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    out: list[list[str]] = []
    seen: set[str] = set()

    def visit(node: str, path: list[str]) -> None:
        if node in path:
            cycle = path[path.index(node) :]
            key = min(cycle)
            i = cycle.index(key)
            canon = cycle[i:] + cycle[:i]
            if canon not in out:
                out.append(canon)
            return
        if node in seen:
            return
        for nxt in sorted(edges.get(node, ())):
            visit(nxt, [*path, node])
        seen.add(node)

    for start in sorted(edges):
        visit(start, [])
    return out


def test_no_two_packages_import_each_other() -> None:
    assert _cycles(graph()) == []


def test_the_lower_stages_never_import_the_higher_ones() -> None:
    """noise < aggregates < plan < sql < compile < release < session: a stage may import
    the ones before it, never one after it."""
    order = [
        "veil.noise",
        "veil.aggregates",
        "veil.plan",
        "veil.sql",
        "veil.compile",
        "veil.release",
        "veil.session",
    ]
    edges = graph()
    for i, low in enumerate(order):
        later = set(order[i + 1 :])
        assert not (edges.get(low, set()) & later), (low, edges.get(low, set()) & later)
