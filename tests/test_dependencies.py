"""veil imports at module level only what a base install (`pip install veil`) provides.

Optional extras (pyspark, pandas, polars, psycopg) and test-only packages (scipy, hypothesis…)
may be imported inside functions, where a missing one raises MissingDependencyError with an
install hint; a module-level import of one would break `import veil` (and `make demo`) on a
base install.
"""

from __future__ import annotations

import ast
import sys
import tomllib
from pathlib import Path

import veil

SRC = Path(veil.__file__).resolve().parent
PYPROJECT = SRC.parents[1] / "pyproject.toml"
IMPORT_NAMES = {"sqlalchemy": "sqlalchemy"}  # distribution name (lowercased) → import name
# The HTTP service is an extra of its own (`pip install 'veil[service]'`): its modules import
# the extra's packages at module level, and nothing a base install imports loads them
# (`veil admin` and `veil serve` live in service/commands.py, which imports none).
SERVICE_EXTRA = {"fastapi", "starlette", "pydantic", "uvicorn", "prometheus_client"}
SERVICE_MODULES = {"app.py", "admin.py", "analyst.py", "mechanism_api.py", "models.py"}
SERVICE_MODULES |= {"problems.py", "state.py", "openapi.py", "dashboard.py", "responses.py"}
SERVICE_MODULES |= {"hotroute.py", "metrics.py"}


def _runtime_imports() -> set[str]:
    deps = tomllib.loads(PYPROJECT.read_text())["project"]["dependencies"]
    names = set()
    for dep in deps:
        name = dep.split(">")[0].split("=")[0].split("[")[0].split("<")[0].strip().lower()
        names.add(IMPORT_NAMES.get(name, name.replace("-", "_")))
    return names


def _module_level_imports(tree: ast.Module) -> list[tuple[str, int]]:
    found: list[tuple[str, int]] = []

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.Import):
                found.extend((a.name.split(".")[0], node.lineno) for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.append((node.module.split(".")[0], node.lineno))
            elif isinstance(node, ast.If):
                test = node.test
                is_type_checking = (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
                    isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
                )
                if not is_type_checking:
                    visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)

    visit(tree.body)
    return found


def test_module_level_imports_are_stdlib_or_runtime_dependencies() -> None:
    allowed = set(sys.stdlib_module_names) | _runtime_imports() | {"veil", "__future__"}
    offenders = {}
    for path in sorted(SRC.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        extra = (
            SERVICE_EXTRA
            if path.parent.name == "service" and path.name in SERVICE_MODULES
            else set()
        )
        bad = [
            f"{m} (line {line})"
            for m, line in _module_level_imports(tree)
            if m not in allowed and m not in extra
        ]
        if bad:
            offenders[str(path.relative_to(SRC))] = bad
    assert offenders == {}


def test_the_check_sees_a_module_level_extra(tmp_path: Path) -> None:
    probe = ast.parse(
        "import numpy\nfrom scipy.signal import fftconvolve\nif TYPE_CHECKING:\n"
        "    import pandas\ndef f():\n    import pyspark\n"
    )
    assert [m for m, _ in _module_level_imports(probe)] == ["numpy", "scipy"]
