"""The CLI's progress line: on stderr when it is a terminal, never in the JSON/CSV on stdout.

CliRunner's streams are not terminals; ``TTY_COMPATIBLE=1`` (rich's switch) makes stderr count
as one, as a user's terminal would.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import duckdb
import pytest
from typer.testing import CliRunner

from veil.cli import app

QUERY = "SELECT state, COUNT(*) AS n, AVG(income) AS avg_income FROM people GROUP BY state"
ROWS = 3_000_000


@pytest.fixture(scope="module")
def people(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A few million synthetic rows in Parquet, written by DuckDB (a scan worth a bar)."""
    path = tmp_path_factory.mktemp("data") / "people.parquet"
    duckdb.sql(
        "COPY (SELECT range AS user_id, ['CA', 'NY', 'TX'][1 + range % 3] AS state, "
        f"(range * 37 % 100000)::DOUBLE AS income FROM range({ROWS})) "
        f"TO '{path}' (FORMAT parquet)"
    )
    return path


def invoke(people: Path, fmt: str, *, terminal: bool) -> tuple[int, str, str]:
    env = {"TTY_COMPATIBLE": "1" if terminal else "0"}
    args = [
        "query", QUERY, "--table", f"people={people}", "--epsilon", "1", "--delta", "1e-6",
        "--privacy-unit", "user_id", "--bounds", "income=0:100000", "--format", fmt,
    ]  # fmt: skip
    result = CliRunner(env=env).invoke(app, args)
    return result.exit_code, result.stdout, result.stderr


def test_json_on_stdout_stays_one_valid_object_while_stderr_shows_progress(
    people: Path,
) -> None:
    code, out, err = invoke(people, "json", terminal=True)
    assert code == 0, err
    payload = json.loads(out)
    assert payload["columns"] == ["state", "n", "avg_income"]
    assert sorted(row[0] for row in payload["rows"]) == ["CA", "NY", "TX"]
    assert "scanning the private table" in err
    assert "100%" in err  # the session's fractions reached the bar
    assert "\x1b[" not in out


def test_csv_on_stdout_is_clean_while_stderr_shows_progress(people: Path) -> None:
    code, out, err = invoke(people, "csv", terminal=True)
    assert code == 0, err
    rows = list(csv.reader(io.StringIO(out)))
    assert rows[0][:3] == ["state", "n", "avg_income"]
    assert len(rows) == 4
    assert "100%" in err


def test_no_progress_is_drawn_when_stderr_is_not_a_terminal(people: Path) -> None:
    code, out, err = invoke(people, "json", terminal=False)
    assert code == 0, err
    json.loads(out)
    assert "scanning" not in err
    assert "%" not in err


def test_demo_json_lines_stay_valid_with_progress_on_a_terminal() -> None:
    result = CliRunner(env={"TTY_COMPATIBLE": "1"}).invoke(
        app, ["demo", "--patients", "2000", "--format", "json"]
    )
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) >= 2
    for line in lines:
        assert "columns" in json.loads(line)
    assert "%" in result.stderr
