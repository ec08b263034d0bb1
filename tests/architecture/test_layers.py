"""The stages import each other in one direction only: no import cycle between packages.

Read from the source (``ast``), not from ``sys.modules``: every ``import`` counts, at module
level or inside a function (a lazy import is still a dependency), except those under
``if TYPE_CHECKING:``. A module at the package root (``veil/session.py``) is its own node.

A module that moved keeps its old path for one release as a deprecated re-export (``SHIMS``,
old → new home). A shim points at its new home, which may lie above it (``noise/mechanisms.py``
→ ``veil.mechanisms``), so the graph leaves shims out; in exchange a shim may do nothing but
re-export its new home, and no module of veil imports one.
"""

from __future__ import annotations

import ast
from pathlib import Path

import veil

ROOT = Path(veil.__file__).parent
SHIMS = {
    "veil.client_answers": "veil.client.answers",
    "veil.client_errors": "veil.client.errors",
    "veil.client_plan": "veil.client.plan",
    "veil.geo": "veil.local.geo",
    "veil.noise.mechanisms": "veil.mechanisms",
    "veil.perturbation": "veil.local.perturb",
}


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
        if module in SHIMS:
            continue
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


def test_noise_is_pure() -> None:
    """``noise/`` is the bottom stage: samplers, grid, calibration, error bars. It imports
    nothing of veil but the errors and the randomness — no accounting, no ledger, no
    mechanism that charges one (those are :mod:`veil.mechanisms`)."""
    allowed = {"veil.errors", "veil.random"}
    assert graph().get("veil.noise", set()) - allowed == set()


def _named(tree: ast.AST, package: str) -> set[str]:
    """Every module an import statement names, ``from a import b`` giving ``a`` and ``a.b``."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                name = ".".join([*base, node.module] if node.module else base)
            else:
                name = node.module or ""
            found.add(name)
            found.update(f"{name}.{a.name}" for a in node.names)
    return found


def test_no_module_imports_a_deprecated_shim() -> None:
    users = {}
    for path in ROOT.rglob("*.py"):
        module = _module_of(path)
        package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
        used = _named(ast.parse(path.read_text()), package) & set(SHIMS)
        if used and module not in SHIMS:
            users[module] = sorted(used)
    assert users == {}


def test_a_shim_only_re_exports_its_new_home() -> None:
    for shim, home in SHIMS.items():
        path = ROOT.parent.joinpath(*shim.split(".")).with_suffix(".py")
        tree = ast.parse(path.read_text())
        assert "Deprecated" in (ast.get_docstring(tree) or ""), shim
        for node in tree.body[1:]:
            assert isinstance(node, ast.ImportFrom), (shim, ast.dump(node)[:80])
            assert node.module in ("__future__", home), (shim, node.module)


def test_the_checks_see_a_shim_import() -> None:
    tree = ast.parse("from veil.noise import mechanisms\nimport veil.geo\n")
    assert {"veil.noise.mechanisms", "veil.geo"} <= _named(tree, "veil.audit")
