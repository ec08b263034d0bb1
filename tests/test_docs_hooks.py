"""The docs' generated pages (``docs/hooks/generated.py``) cover what they are generated from:
every command of the ``veil`` app, every operation of the OpenAPI document, every method of the
PHP client's interface, every benchmark result file."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def hooks() -> ModuleType:
    pytest.importorskip("mkdocs", reason="the docs extra: pip install -e '.[docs]'")
    spec = importlib.util.spec_from_file_location("generated", ROOT / "docs/hooks/generated.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_cli_page_has_every_command_and_option(hooks: ModuleType) -> None:
    from typer.main import get_command

    from veil.cli import app

    page = hooks.cli_page()
    for path, command, _ in hooks._commands(get_command(app), ["veil"]):
        assert f"`{' '.join(path)}`" in page
        for param in command.params:
            if param.param_type_name == "option" and param.name != "help":
                assert f"`{param.opts[0]}`" in page, (path, param.opts)


def test_the_http_page_has_every_operation(hooks: ModuleType) -> None:
    doc = json.loads((ROOT / "src/veil/service/openapi.json").read_text(encoding="utf-8"))
    page = hooks.http_page()
    for path, item in doc["paths"].items():
        for method in item:
            if method in hooks._METHODS:
                assert f"## `{method.upper()} {path}`" in page


def test_the_php_page_has_every_method_of_the_interface(hooks: ModuleType) -> None:
    source = (ROOT / "clients/php/src/ClientInterface.php").read_text(encoding="utf-8")
    methods = re.findall(r"public function (\w+)\(", source)
    page = hooks.php_page()
    assert len(methods) >= 15
    for name in methods:
        assert f"## `{name}()`" in page
    assert "`BudgetExhaustedException`" in page


def test_the_benchmarks_page_has_every_result_file(hooks: ModuleType) -> None:
    page = hooks.benchmarks_page()
    results = sorted((ROOT / "benchmarks/results").glob("*.json"))
    assert results
    for path in results:
        assert f"## `{path.name}`" in page
    assert "### `bench_query.py`" in page


def test_the_sphinx_roles_of_docstrings_render_as_code(hooks: ModuleType) -> None:
    html = "see :class:<code>veil.Budget</code> and :meth:<code>~Session.sql</code>"
    plain = "see <code>veil.Budget</code> and <code>Session.sql</code>"
    assert hooks.on_page_content(html) == plain
