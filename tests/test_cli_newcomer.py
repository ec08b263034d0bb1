"""The command line's rough edges a new user hit (issue 9), each pinned by a test.

Usage errors are raised by the parser before any command runs, so they are checked on the
real ``veil`` entry point in a subprocess; the rest through typer's runner.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import veil
from cli_support import invoke, veil_cli


@pytest.mark.system
def test_a_usage_error_is_one_line_like_every_other_error(people: Path) -> None:
    done = veil_cli("query", "SELECT COUNT(*) FROM t", "--table", f"t={people}")
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("error: Missing option '--epsilon'")
    assert "veil query --help" in lines[0]
    assert "╭" not in done.stderr  # no box


@pytest.mark.system
def test_a_usage_error_is_a_json_object_with_format_json(people: Path) -> None:
    done = veil_cli("query", "SELECT 1", "--table", f"t={people}", "--format", "json")
    assert done.returncode == 2
    error = json.loads(done.stderr)["error"]
    assert error["user_error"] is True
    assert error["message"].startswith("Missing option '--epsilon'")


def test_a_repeated_bounds_option_is_refused_not_silently_replaced(people: Path) -> None:
    code, _, err = invoke(
        "query", "SELECT SUM(income) FROM t", "-t", f"t={people}", "-e", "1",
        "-b", "income=0:10", "-b", "income=0:20",
    )  # fmt: skip
    assert code == 2
    assert "--bounds for 'income' is given twice" in err


def test_errors_suggest_the_fix_in_the_cli_s_own_syntax(people: Path) -> None:
    code, _, err = invoke("query", "SELECT SUM(income) FROM t", "-t", f"t={people}", "-e", "1")
    assert code == 2
    assert "--bounds income=LOWER:UPPER" in err
    assert "bounds={" not in err
    code, _, err = invoke(
        "query", "SELECT state, COUNT(*) FROM t GROUP BY state", "-t", f"t={people}", "-e", "1"
    )
    assert "--delta 1e-6" in err
    assert "delta=1e-6" not in err
    code, _, err = invoke("query", "SELECT COUNT(*) FROM t", "-t", f"t={people}", "-e", "1",
                          "--max-groups", "0", "-u", "uid")  # fmt: skip
    assert code == 2
    assert "--max-groups must be a positive integer, got 0" in err


def test_a_mistyped_ledger_path_is_an_error_not_a_new_empty_ledger(
    people: Path, tmp_path: Path
) -> None:
    missing = tmp_path / "ledgr.db"
    url = f"sqlite:///{missing}"
    for args in (
        ("query", "SELECT COUNT(*) FROM t", "-t", f"t={people}", "-e", "1", "--ledger", url),
        ("budget", "show", "--ledger", url),
        ("budget", "history", "--ledger", url, "-a", "a", "--dataset", "t"),
    ):
        code, _, err = invoke(*args)
        assert code == 2, args
        assert "no ledger at" in err
        assert "veil budget grant" in err
    assert not missing.exists()
    code, _, _ = invoke("budget", "grant", "--ledger", url, "-a", "a", "--dataset", "t", "-e", "1")
    assert code == 0
    assert missing.exists()  # the one command that creates a ledger


def test_budget_show_and_the_alerts_agree_on_what_is_spent(people: Path, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with veil.Ledger(url) as ledger:
        ledger.grant("cli", "t", veil.Budget(epsilon=2, delta=1e-6))
    code, _, err = invoke(
        "query", "SELECT state, COUNT(*) FROM t GROUP BY state", "-t", f"t={people}",
        "-e", "1", "-d", "1e-6", "--ledger", url, "-u", "uid",
    )  # fmt: skip
    assert code == 0, err
    assert "100% spent" in err  # δ is all spent: the alert says so
    code, out, _ = invoke("budget", "show", "--ledger", url, "--format", "json")
    assert json.loads(out)["budgets"][0]["used"] == 1.0  # and so does budget show


def test_veil_warnings_print_as_one_warning_line(people: Path) -> None:
    code, _, err = invoke("query", "SELECT COUNT(*) FROM t", "-t", f"t={people}", "-e", "20")
    assert code == 0
    assert "warning: epsilon=20 for one query protects little" in err


def test_history_shows_the_text_of_each_charged_query(people: Path, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with veil.Ledger(url) as ledger:
        ledger.grant("cli", "t", veil.Budget(epsilon=2))
    sql = "SELECT COUNT(*) AS n FROM t"
    assert invoke("query", sql, "-t", f"t={people}", "-e", "1", "--ledger", url)[0] == 0
    _, out, _ = invoke("budget", "history", "--ledger", url, "-a", "cli", "--dataset", "t",
                       "--format", "json")  # fmt: skip
    charges = [r for r in json.loads(out)["history"] if r["event"] == "charge"]
    assert [c["query"] for c in charges] == [sql]


def test_demo_writes_the_tour_s_people_table(tmp_path: Path) -> None:
    path = tmp_path / "people.parquet"
    code, _, err = invoke("demo", "--write", str(path), "--users", "500")
    assert code == 0, err
    table = pq.read_table(path)
    assert table.column_names == ["user_id", "year", "state", "sex", "age", "income"]
    assert 500 <= table.num_rows <= 1500
    code, _, err = invoke("demo", "--write", str(tmp_path / "people.txt"))
    assert code == 2
    assert "end it in .parquet or .csv" in err
