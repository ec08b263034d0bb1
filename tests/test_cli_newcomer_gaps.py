"""The command line's remaining rough edges (issue 9, the audit's gaps), each pinned by a test.

Help for a bare group and the import guard run the real ``veil`` entry point in a subprocess
(typer's runner has its own standalone handling); the rest go through typer's runner.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from cli_support import invoke, veil_cli


@pytest.mark.system
@pytest.mark.parametrize("group", [(), ("budget",), ("catalog",), ("admin",)])
def test_a_group_without_a_command_prints_its_help_and_no_empty_error(group: tuple[str]) -> None:
    done = veil_cli(*group)
    assert done.returncode == 2  # as typer (and click) exit for a missing command
    assert f"Usage: veil {' '.join(group)}".strip() in done.stdout
    assert "error" not in done.stderr
    assert done.stderr.strip() == ""


@pytest.mark.parametrize("delta", ["0.6", "0.5", "3/5"])
def test_budget_grant_refuses_delta_one_half_or_more_before_creating_the_ledger(
    tmp_path: Path, delta: str
) -> None:
    path = tmp_path / "ledger.db"
    code, out, err = invoke(
        "budget", "grant", "--ledger", f"sqlite:///{path}", "-a", "a", "--dataset", "t",
        "-e", "1", "-d", delta,
    )  # fmt: skip
    assert code == 2
    assert out == ""
    assert f"error: --delta {delta} protects nothing" in err
    assert "e.g. --delta 1e-6" in err
    assert not path.exists()


@pytest.mark.parametrize("command", ["query", "explain"])
def test_values_are_quoted_as_written_and_fixes_name_the_flags(people: Path, command: str) -> None:
    def error(*extra: str) -> str:
        code, _, err = invoke(command, "SELECT SUM(income) FROM t", "-t", f"t={people}", *extra)
        assert code == 2, err
        assert "={" not in err  # no Python syntax
        assert "=(" not in err
        return err

    err = error("-e", "1", "-b", "income=10:0")
    assert "--bounds income=10:0 is empty" in err
    assert "pass --bounds income=0:10" in err
    assert "bounds={" not in err
    err = error("-e", "1e-300", "-b", "income=0:10")
    assert "--epsilon 1e-300 is outside the range one query may spend, [1e-12, 1e4]" in err
    assert "below 1e-12 the noise is too large" in err
    assert "pass e.g. --epsilon 0.1" in err
    assert "epsilon=" not in err
    err = error("-e", "1e5", "-b", "income=0:10")
    assert "--epsilon 1e5 is outside the range" in err
    assert "above 1e4 the noise is negligible" in err
    assert "below" not in err
    err = error("-e", "1", "-d", "0.6", "-b", "income=0:10")
    assert "--delta 0.6 protects nothing" in err
    assert "e.g. --delta 1e-6" in err
    assert "delta=" not in err
    err = error("-e", "1", "-d", "3/2", "-b", "income=0:10")
    assert "--delta 3/2 protects nothing" in err  # as written, not 1.5
    assert "1.5" not in err


HEAVY = ("sqlalchemy", "pyarrow", "sqlglot", "duckdb", "pyspark", "numpy", "pandas", "fastapi")


@pytest.mark.system
def test_the_cli_and_its_help_import_no_heavy_package() -> None:
    """``veil --help`` starts in a blink only while none of these load: the engines, the
    ledger's database layer, the SQL parser and Spark come in when a command needs them."""
    probe = (
        "import sys\n"
        "sys.argv = ['veil', '--help']\n"
        "import veil.cli\n"
        "try:\n"
        "    veil.cli.main()\n"
        "except SystemExit:\n"
        "    pass\n"
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & {set(HEAVY)!r}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    assert "Usage: veil" in done.stdout
    assert done.stdout.strip().splitlines()[-1] == "[]"
