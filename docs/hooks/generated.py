"""MkDocs hook: the pages generated from the code at build time.

- ``reference/cli.md`` from the ``veil`` command's typer app (every command's usage, help,
  arguments and options);
- ``reference/http.md`` from the service's OpenAPI document (``src/veil/service/openapi.json``,
  which a test keeps equal to the app's);
- ``reference/php.md`` from the PHP client's ``ClientInterface`` and its exceptions;
- ``benchmarks.md`` from ``benchmarks/results/*.json`` and the benchmark scripts' docstrings;
- ``contributing.md`` from ``CONTRIBUTING.md``.

It also renders the Sphinx roles of veil's docstrings (``:class:`Budget```), which the API
reference shows as code, without the role's name.

Nothing generated is committed: each build writes it afresh, so it cannot drift from the code.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[2]


def on_files(files: Files, config: MkDocsConfig) -> Files:
    pages = {
        "reference/cli.md": cli_page,
        "reference/http.md": http_page,
        "reference/php.md": php_page,
        "benchmarks.md": benchmarks_page,
        "contributing.md": contributing_page,
    }
    for uri, make in pages.items():
        files.append(File.generated(config, uri, content=make()))
    return files


_ROLE = re.compile(r":(?:py:)?(?:class|meth|func|mod|data|attr|exc|obj|const):(<code>)~?")


def on_page_content(html: str, **_: Any) -> str:
    return _ROLE.sub(r"\1", html)


# --- the command line ---------------------------------------------------------------------


def cli_page() -> str:
    from typer.main import get_command

    from veil.cli import app

    out = [
        "# Command line",
        "",
        "Generated from the `veil` command itself: each command's usage, what it does, its",
        "arguments and options. `veil COMMAND --help` prints the same.",
        "",
    ]
    for path, command, ctx in _commands(get_command(app), ["veil"]):
        out += _command_section(path, command, ctx)
    return "\n".join(out) + "\n"


def _commands(command: Any, path: list[str], parent: Any = None) -> Iterator[Any]:
    ctx = command.context_class(command, info_name=path[-1], parent=parent)
    yield path, command, ctx
    if hasattr(command, "list_commands"):
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is not None and not getattr(sub, "hidden", False):
                yield from _commands(sub, [*path, name], ctx)


def _command_section(path: list[str], command: Any, ctx: Any) -> list[str]:
    level = "#" * min(len(path) + 1, 4)
    usage = " ".join(command.collect_usage_pieces(ctx))
    lines = [f"{level} `{' '.join(path)}`", "", "```text", f"{' '.join(path)} {usage}", "```", ""]
    if command.help:
        lines += [_plain(command.help), ""]
    rows = []
    for param in command.params:
        if getattr(param, "hidden", False) or param.name == "help":
            continue
        names = ", ".join(f"`{o}`" for o in [*param.opts, *param.secondary_opts])
        if param.param_type_name == "argument":
            names = f"`{param.name.upper()}`"
        kind = "" if getattr(param, "is_flag", False) else _type_name(param)
        default = param.default
        shown = (
            f"`{default}`"
            if default not in (None, (), [], False) and not callable(default)
            else ("required" if param.required else "")
        )
        rows.append(f"| {names} | {kind} | {shown} | {_cell(getattr(param, 'help', '') or '')} |")
    if rows:
        head = ["| argument or option | type | default | meaning |", "|---|---|---|---|"]
        lines += [*head, *rows, ""]
    return lines


def _type_name(param: Any) -> str:
    """The parameter's type as typer declares it: choices, a number range, or a name."""
    import enum
    import typing

    descriptor = getattr(param, "type_descriptor", None)
    kind = getattr(descriptor, "annotation", None) or getattr(param, "type", None)
    repeat = ""
    if typing.get_origin(kind) in (list, tuple):
        kind, repeat = typing.get_args(kind)[0], " (repeatable)"
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return " \\| ".join(f"`{m.value}`" for m in kind) + repeat
    name = {str: "TEXT", int: "INTEGER", float: "NUMBER", bool: "BOOLEAN"}.get(
        kind, getattr(kind, "__name__", str(kind)).upper()
    )
    low, high = getattr(param, "min", None), getattr(param, "max", None)
    if low is not None and high is not None:
        name += f" in [{low}, {high}]"
    elif low is not None:
        name += f" ≥ {low}"
    elif high is not None:
        name += f" ≤ {high}"
    return f"`{name}`{repeat}"


def _plain(text: str) -> str:
    """Typer's help text as Markdown: one paragraph per blank-line-separated block."""
    return "\n\n".join(" ".join(block.split()) for block in re.split(r"\n\s*\n", text.strip()))


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


# --- the HTTP API -------------------------------------------------------------------------

_METHODS = ("get", "post", "put", "patch", "delete")


def http_page() -> str:
    doc = json.loads((ROOT / "src/veil/service/openapi.json").read_text(encoding="utf-8"))
    out = [
        "# HTTP API",
        "",
        f"Generated from the service's OpenAPI document ({doc['info']['title']} "
        f"{doc['info']['version']}): `veil serve` also serves it at `/openapi.json`, and a test",
        "keeps the committed copy (`src/veil/service/openapi.json`) equal to the app's. Errors",
        "are RFC 9457 problem documents (`application/problem+json`) whose `type` names the",
        "problem; `GET /problems` lists them.",
        "",
    ]
    for path, item in doc["paths"].items():
        for method in _METHODS:
            op = item.get(method)
            if op is None:
                continue
            out += [f"## `{method.upper()} {path}`", ""]
            if op.get("summary"):
                out += [f"**{_cell(op['summary'])}**", ""]
            if op.get("description"):
                out += [_escape_text(op["description"].strip()), ""]
            params = op.get("parameters", [])
            if params:
                out += ["| parameter | in | required | type | meaning |", "|---|---|---|---|---|"]
                for p in params:
                    out.append(
                        f"| `{p['name']}` | {p['in']} | {'yes' if p.get('required') else 'no'} "
                        f"| {_schema_name(p.get('schema', {}))} "
                        f"| {_cell(p.get('description', ''))} |"
                    )
                out.append("")
            body = op.get("requestBody", {}).get("content", {})
            for media, spec in body.items():
                out += [f"Request body (`{media}`): {_schema_name(spec.get('schema', {}))}", ""]
            responses = op.get("responses", {})
            if responses:
                out += ["| status | meaning | body |", "|---|---|---|"]
                for status, resp in responses.items():
                    content = resp.get("content", {})
                    kinds = ", ".join(
                        f"{_schema_name(c.get('schema', {}))} (`{m}`)" for m, c in content.items()
                    )
                    out.append(f"| {status} | {_cell(resp.get('description', ''))} | {kinds} |")
                out.append("")
    schemas = doc.get("components", {}).get("schemas", {})
    if schemas:
        out += ["## Schemas", ""]
        for name, schema in schemas.items():
            out += [f"### {name}", ""]
            if schema.get("description"):
                out += [_escape_text(schema["description"].strip()), ""]
            props = schema.get("properties", {})
            if props:
                required = set(schema.get("required", []))
                out += ["| field | type | required | meaning |", "|---|---|---|---|"]
                for field, spec in props.items():
                    out.append(
                        f"| `{field}` | {_schema_name(spec)} | {'yes' if field in required else ''}"
                        f" | {_cell(spec.get('description', ''))} |"
                    )
                out.append("")
    return "\n".join(out) + "\n"


def _schema_name(schema: dict[str, Any]) -> str:
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{name.lower()})"
    for key in ("anyOf", "oneOf", "allOf"):
        if key in schema:
            return " or ".join(_schema_name(s) for s in schema[key])
    kind = schema.get("type")
    if kind == "array":
        return f"array of {_schema_name(schema.get('items', {}))}"
    if kind == "object" and "additionalProperties" in schema:
        extra = schema["additionalProperties"]
        inner = _schema_name(extra) if isinstance(extra, dict) else "any"
        return f"object of {inner}"
    if "enum" in schema:
        return " \\| ".join(f"`{v}`" for v in schema["enum"])
    if "const" in schema:
        return f"`{schema['const']}`"
    return f"`{kind}`" if kind else "any"


def _escape_text(text: str) -> str:
    """A description as Markdown, with bare `<…>` kept as text."""
    return text.replace("<", "&lt;")


# --- the PHP client -----------------------------------------------------------------------

_DOCBLOCK = re.compile(r"/\*\*(?P<doc>.*?)\*/\s*(?P<decl>[^;{]*)", re.S)


def php_page() -> str:
    php = ROOT / "clients/php"
    composer = json.loads((php / "composer.json").read_text(encoding="utf-8"))
    out = [
        "# PHP client",
        "",
        f"`{composer['name']}` {composer.get('version', '')} — generated from the client's",
        "interface, `Veil\\ClientInterface`, which `Veil\\Client` implements: type-hint the",
        "interface in your application and give your tests a fake of it. Install it with",
        f"`composer require {composer['name']}` (PHP {composer['require']['php']}, the curl and",
        "json extensions) or require `clients/php/autoload.php` from a checkout. The tutorial",
        "[A PHP developer adds private statistics to a page](../tutorials/php-developer.md)",
        "shows it at work.",
        "",
    ]
    interface = (php / "src/ClientInterface.php").read_text(encoding="utf-8")
    blocks = list(_DOCBLOCK.finditer(interface))
    head, *methods = blocks
    out += [_docblock(head.group("doc")), ""]
    for m in methods:
        decl = " ".join(m.group("decl").split())
        name = re.search(r"function (\w+)", decl)
        if name is None:
            continue
        out += [f"## `{name.group(1)}()`", "", "```php", decl + ";", "```", ""]
        out += [_docblock(m.group("doc")), ""]
    out += [
        "## Exceptions",
        "",
        "Every error the client raises is a `Veil\\Exception\\VeilException`, mapped from the",
        "service's problem types:",
        "",
        "| exception | when |",
        "|---|---|",
    ]
    for path in sorted((php / "src/Exception").glob("*.php")):
        text = path.read_text(encoding="utf-8")
        doc = _DOCBLOCK.search(text)
        summary = _docblock(doc.group("doc")).split("\n\n")[0] if doc else ""
        out.append(f"| `{path.stem}` | {_cell(summary)} |")
    return "\n".join(out) + "\n"


def _docblock(doc: str) -> str:
    """A PHP docblock as Markdown: `@param`/`@return`/`@throws` as a list, `{@see X}` as `X`."""
    lines = [re.sub(r"^\s*\* ?", "", line) for line in doc.strip().splitlines()]
    text = "\n".join(lines).strip()
    text = re.sub(r"\{@see ([^}]+)\}", r"`\1`", text)
    parts = re.split(r"\n(?=@)", text)
    prose, tags = parts[0], parts[1:]
    if prose.startswith("@"):
        prose, tags = "", parts
    items = []
    for tag in tags:
        flat = " ".join(tag.split())
        m = re.match(r"@(\w+)\s*(.*)", flat)
        if m is None or m.group(1) in ("var", "phpstan-type", "psalm-type"):
            continue
        items.append(f"- **{m.group(1)}** {_code_types(m.group(2))}")
    return "\n".join([prose, "", *items]).strip() if items else prose


def _code_types(text: str) -> str:
    """``@param array{…} $x rest`` with the type and the name in code spans."""
    depth = 0
    for i, ch in enumerate(text):
        depth += ch in "{<("
        depth -= ch in "}>)"
        if ch == " " and depth == 0:
            kind, rest = text[:i], text[i + 1 :]
            name = re.match(r"(\$\w+)\s*(.*)", rest)
            if name:
                return f"`{kind}` `{name.group(1)}` {name.group(2)}"
            return f"`{kind}` {rest}"
    return f"`{text}`"


# --- benchmarks ---------------------------------------------------------------------------


def benchmarks_page() -> str:
    bench = ROOT / "benchmarks"
    out = [
        "# Benchmarks",
        "",
        "Generated from the result files in `benchmarks/results/` (written by the scripts'",
        "`--results` option) and the scripts' own descriptions. The figures are the last run",
        "committed; rerun a script to measure your own machine.",
        "",
    ]
    for path in sorted((bench / "results").glob("*.json")):
        out += _result_section(path.stem, json.loads(path.read_text(encoding="utf-8")))
    out += [
        "## The scripts",
        "",
        "Each script times veil against a baseline run in the same process or the same run, "
        "so that the machine's load meets both.",
        "",
    ]
    for path in sorted(bench.glob("bench_*.py")):
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
        summary = " ".join(doc.split("\n\n")[0].split())
        out += [f"### `{path.name}`", "", _escape_text(summary.replace("``", "`")), ""]
    return "\n".join(out) + "\n"


def _result_section(name: str, data: dict[str, Any]) -> list[str]:
    out = [f"## `{name}.json`", ""]
    if "when" in data:
        out += [f"Measured on {data['when']}.", ""]
    q1 = data.get("q1")
    if q1:
        out += [
            f"**Q1**: `COUNT(*)`, `SUM(income)` and `AVG(income)` per state over the 50 public "
            f"states at ε = {q1['epsilon']}, {q1['users']:,} users (one row each), the median "
            f"relative error over states × {q1['reps']} runs (lower is better; veil's ratio is "
            "veil's error over the library's):",
            "",
            "| library | COUNT | SUM | AVG | veil ÷ library (COUNT, SUM, AVG) |",
            "|---|---|---|---|---|",
        ]
        errors = q1["median_relative_error"]
        ours = errors.get("veil")
        for library, figures in errors.items():
            ratio = (
                ", ".join(f"{a / b:.2f}" if b else "—" for a, b in zip(ours, figures, strict=True))
                if ours and library != "veil"
                else ""
            )
            cells = " | ".join(f"{x:.2%}" for x in figures)
            out.append(f"| {_cell(library)} | {cells} | {ratio} |")
        out.append("")
    split = data.get("q1_split")
    if split:
        best = min(split["grid"], key=lambda row: row["mean"])
        out += [
            "**Where veil's optimum is**: the same errors computed from the noise laws alone as "
            "the share of ε the noisy count takes varies; veil's own count share is "
            f"{split['veil_count_share']:.3f}, the grid's best mean error "
            f"{best['mean']:.2%} at share {best['count_share']} (sum centre {best['centre']:,}).",
            "",
            "| count share | sum centre | COUNT | SUM | AVG |",
            "|---|---|---|---|---|",
        ]
        for row in split["grid"]:
            out.append(
                f"| {row['count_share']} | {row['centre']:,} | {row['count']:.2%} "
                f"| {row['sum']:.2%} | {row['mean']:.2%} |"
            )
        out.append("")
    installed = data.get("peers_installed")
    if installed:
        present = ", ".join(k for k, v in installed.items() if v) or "none"
        out += [f"Libraries installed for this run: {present}.", ""]
    known = {"q1", "q1_split", "peers_installed", "when"}
    for key, value in data.items():
        if key not in known:
            out += [f"**{key}**", "", "```json", json.dumps(value, indent=2), "```", ""]
    return out


# --- contributing -------------------------------------------------------------------------


def contributing_page() -> str:
    return (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
