"""The docs' code runs as written: every ``python`` and ``sh`` block of ``README.md`` and of
``docs/**/*.md``, as a new user would paste it, in a fresh process, on the embedded DuckDB
engine, in a fresh directory holding the tour's ``people.parquet`` (``veil demo --write``, made
once per module: the table is deterministic, and each directory gets its own copy), with
ledgers that are files in that directory.

- By default each block runs alone, in its own directory.
- A page that starts with ``<!-- blocks run in order -->`` (a tutorial) runs as one test: its
  blocks in the page's order, in one directory, the ``python`` blocks in one interpreter
  namespace (a block may use what an earlier block defined), the ``sh`` blocks in ``bash``,
  the ``php`` blocks with ``php`` (``VEIL_CLIENT`` naming the client's ``autoload.php``). A
  service such a page starts on ``127.0.0.1:8000`` is moved to a free port, so that tests
  running side by side do not meet.
- A block preceded by ``<!-- not run: reason -->`` is skipped: it needs a cluster, a server or
  a file the suite does not have; the reason says which test covers it instead.

A test also checks that the pages mkdocs builds are the ones ``mkdocs.yml`` lists (a page left
out of the navigation is a page no one finds).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
FENCE = re.compile(
    r"(?P<skip><!-- not run:[^>]*-->\n)?```(?P<lang>python|sh|php)\n(?P<code>.*?)\n```", re.S
)
PHP_CLIENT = ROOT / "clients" / "php" / "autoload.php"
SERVICE = ("127.0.0.1:8000", "--port 8000")
"""How a page names its service's address; its test moves it to a free port."""
IN_ORDER = "<!-- blocks run in order -->"


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted(p for p in DOCS.rglob("*.md") if "hooks" not in p.parts)]


def blocks(page: Path) -> list[tuple[str, str, int]]:
    text = page.read_text(encoding="utf-8")
    found = []
    for m in FENCE.finditer(text):
        if m.group("skip"):
            continue
        line = text.count("\n", 0, m.start("code")) + 1
        found.append((m.group("lang"), m.group("code"), line))
    return found


def _name(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


def _in_order(page: Path) -> bool:
    return page.read_text(encoding="utf-8").startswith(IN_ORDER)


ALONE = [
    (_name(page), lang, code, line)
    for page in pages()
    if not _in_order(page)
    for lang, code, line in blocks(page)
]
ORDERED = [_name(page) for page in pages() if _in_order(page) and blocks(page)]


def test_the_docs_have_runnable_blocks_in_both_languages() -> None:
    langs = {lang for _, lang, _, _ in ALONE}
    assert langs == {"python", "sh"}, "a php block runs only on a page run in order"
    assert len(ALONE) >= 30
    assert "docs/tutorials/python-analyst.md" in ORDERED
    assert "docs/tutorials/php-developer.md" in ORDERED


def test_every_page_is_in_the_navigation() -> None:
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    listed = set(re.findall(r":\s*([\w/.-]+\.md)\s*$", nav, re.M))
    written = {p.relative_to(DOCS).as_posix() for p in pages()[1:]}
    generated = {"reference/cli.md", "reference/http.md", "reference/php.md", "benchmarks.md"}
    generated |= {"contributing.md"}
    assert written - listed == set(), "add these pages to mkdocs.yml's nav"
    assert listed - written - generated == set(), "mkdocs.yml lists pages that do not exist"


DATA = re.compile(r"```(?P<lang>toml|json)\n(?P<code>.*?)\n```", re.S)


@pytest.mark.parametrize("page", [_name(p) for p in pages() if DATA.search(p.read_text())])
def test_every_toml_and_json_block_parses(page: str) -> None:
    """Config files and request bodies are examples too: each one parses as written."""
    import json
    import tomllib

    text = (ROOT / page).read_text(encoding="utf-8")
    for m in DATA.finditer(text):
        line = text.count("\n", 0, m.start("code")) + 1
        try:
            if m.group("lang") == "toml":
                tomllib.loads(m.group("code"))
            else:
                json.loads(m.group("code"))
        except ValueError as err:
            pytest.fail(f"{page} line {line} ({m.group('lang')}): {err}")


def _env() -> dict[str, str]:
    bin_dir = str(Path(sys.executable).parent)
    return {**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", "")}


@pytest.fixture(scope="module")
def tour_people(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tour's ``people.parquet``, written once by ``veil demo --write`` (3,000 users)."""
    where = tmp_path_factory.mktemp("tour")
    made = subprocess.run(
        [sys.executable, "-m", "veil.cli", "demo", "--write", "people.parquet", "--users", "3000"],
        cwd=where,
        capture_output=True,
        text=True,
        env=_env(),
        check=False,
    )
    assert made.returncode == 0, made.stderr
    return where / "people.parquet"


def _run(cmd: list[str], where: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=where, capture_output=True, text=True, env=_env(), check=False)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("page", "lang", "code", "line"), ALONE, ids=[f"{b[0]}:{b[3]}" for b in ALONE]
)
def test_a_block_runs_as_written(
    page: str, lang: str, code: str, line: int, tmp_path: Path, tour_people: Path
) -> None:
    shutil.copy(tour_people, tmp_path / "people.parquet")
    if lang == "python":
        done = _run([sys.executable, "-c", code], tmp_path)
    else:
        done = _run(["bash", "-euo", "pipefail", "-c", code], tmp_path)
    assert done.returncode == 0, f"{page} line {line} ({lang}) failed:\n{done.stderr[-3000:]}"
    assert "Traceback" not in done.stderr


# Runs a page's blocks in order: python blocks exec'd in one namespace, sh blocks in bash,
# php blocks with php. Stops at the first block that fails.
_DRIVER = textwrap.dedent(
    """
    import json, subprocess, sys
    namespace = {"__name__": "__main__"}
    for lang, code, line in json.load(open(sys.argv[1], encoding="utf-8")):
        print(f"--- block at line {line} ({lang})", file=sys.stderr, flush=True)
        if lang == "python":
            exec(compile(code, f"<line {line}>", "exec"), namespace)
            sys.stdout.flush()
        elif lang == "sh":
            subprocess.run(["bash", "-euo", "pipefail", "-c", code], check=True)
        else:
            with open(f"block-{line}.php", "w", encoding="utf-8") as f:
                f.write(code)
            subprocess.run(["php", "-d", "error_reporting=-1", f"block-{line}.php"], check=True)
    """
)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
@pytest.mark.parametrize("page", ORDERED)
def test_a_page_runs_in_order(page: str, tmp_path: Path, tour_people: Path) -> None:
    import json

    found = blocks(ROOT / page)
    if any(lang == "php" for lang, _, _ in found) and shutil.which("php") is None:
        pytest.skip(f"{page} needs php (make test installs php-cli from Debian)")
    port = _free_port()
    address, flag = SERVICE
    found = [
        (lang, code.replace(address, f"127.0.0.1:{port}").replace(flag, f"--port {port}"), line)
        for lang, code, line in found
    ]
    shutil.copy(tour_people, tmp_path / "people.parquet")
    (tmp_path / "blocks.json").write_text(json.dumps(found), encoding="utf-8")
    (tmp_path / "driver.py").write_text(_DRIVER, encoding="utf-8")
    env = {**_env(), "VEIL_CLIENT": str(PHP_CLIENT)}
    try:
        done = subprocess.run(
            [sys.executable, "driver.py", "blocks.json"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            env=env,
            check=False,
            timeout=600,
        )
    finally:
        _stop_services(tmp_path)
    assert done.returncode == 0, f"{page} failed:\n{done.stderr[-3000:]}"
    assert "Traceback" not in done.stderr


def _stop_services(where: Path) -> None:
    """End a service a page started and failed to stop (its pid in ``*.pid``)."""
    import signal

    for pid_file in where.glob("*.pid"):
        with contextlib.suppress(ValueError, ProcessLookupError):
            os.kill(int(pid_file.read_text().strip()), signal.SIGTERM)
