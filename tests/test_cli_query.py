"""`veil query` and `veil explain` end to end on a small Parquet/CSV file, via CliRunner."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

import veil
import veil.cli
import veil.session
from cli_support import invoke
from veil.cli import app

STATES = ["CA", "NY", "TX"]


@pytest.fixture(scope="module")
def people(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """3 000 people, one row each: state, age, income (public-looking synthetic values)."""
    n = 3_000
    table = pa.table(
        {
            "user_id": list(range(n)),
            "state": [STATES[i % 3] for i in range(n)],
            "age": [18 + (i * 7) % 60 for i in range(n)],
            "income": [float((i * 37) % 1000) * 100 for i in range(n)],
        }
    )
    path = tmp_path_factory.mktemp("data") / "people.parquet"
    pq.write_table(table, path)
    pacsv.write_csv(table, path.with_suffix(".csv"))
    return path


GROUPED = "SELECT state, COUNT(*) AS n, AVG(income) AS avg_income FROM people GROUP BY state"


def test_json_output_is_one_object_with_rows_error_bars_and_cost(people: Path) -> None:
    code, out, err = invoke(
        "query", GROUPED, "--table", f"people={people}", "--epsilon", "1", "--delta", "1e-6",
        "--privacy-unit", "user_id", "--bounds", "income=0:100000", "--format", "json",
    )  # fmt: skip
    assert code == 0, err
    payload = json.loads(out)
    assert payload["columns"] == ["state", "n", "avg_income"]
    assert sorted(r[0] for r in payload["rows"]) == STATES
    assert len(payload["error_bars"]) == len(payload["rows"])
    for row, bars in zip(payload["rows"], payload["error_bars"], strict=True):
        assert len(bars) == 3
        assert bars[0] is None  # a group key has no error bar
        assert bars[1] > 0
        assert bars[2] > 0
        assert isinstance(row[1], int)
        assert abs(row[1] - 1000) < 200  # 1 000 people per state, noise at ε = 1 is tiny
    assert payload["cost"]["exact"] == {"epsilon": "1", "delta": "1/1000000"}
    assert payload["cached"] is False
    assert {u["measurement"] for u in payload["usage"]} >= {"partition selection"}


def test_a_csv_file_works_too_and_csv_output_adds_error_columns(people: Path) -> None:
    code, out, err = invoke(
        "query", "SELECT COUNT(*) AS n, MEDIAN(age) AS med FROM people",
        "--table", f"people={people.with_suffix('.csv')}", "-e", "0.5",
        "--bounds", "age=0:100", "--format", "csv", "--column", "age:INTEGER",
    )  # fmt: skip
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "n,med,n_error95"
    assert len(lines) == 2


def test_the_table_format_shows_error_bars_and_the_cost(people: Path) -> None:
    code, out, _ = invoke(
        "query", "SELECT COUNT(*) AS n FROM people WHERE age >= 30",
        "--table", f"people={people}", "--epsilon", "0.5", "--privacy-unit", "user_id",
    )  # fmt: skip
    assert code == 0
    assert "±" in out
    assert "cost ε=0.5" in out


def test_an_ungrouped_row_level_count_with_a_filter_is_answered(people: Path) -> None:
    code, out, err = invoke(
        "query", "SELECT COUNT(*) AS n FROM people WHERE age >= 30",
        "--table", f"people={people}", "--epsilon", "0.5", "-f", "json",
    )  # fmt: skip
    assert code == 0, err
    (count,) = json.loads(out)["rows"][0]
    # ages 18…77, 50 people each: 2 400 are ≥ 30; Laplace scale 2, P(|noise| ≥ 30) ≈ 3e-7
    assert abs(count - 2400) < 30


def test_a_ledger_is_charged_and_the_remaining_budget_is_reported(
    people: Path, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with veil.Ledger(url) as ledger:
        ledger.grant("alice", "people", veil.Budget(epsilon=1))
    args = [
        "query", "SELECT COUNT(*) FROM people", "--table", f"people={people}", "-e", "0.25",
        "--ledger", url, "--analyst", "alice", "-f", "json", "--privacy-unit", "user_id",
    ]  # fmt: skip
    code, out, _ = invoke(*args)
    assert code == 0
    assert json.loads(out)["remaining"]["exact"]["epsilon"] == "3/4"
    # the same question again is answered from the ledger's cache at no cost
    code, out, _ = invoke(*args)
    again = json.loads(out)
    assert again["cached"] is True
    assert again["remaining"]["exact"]["epsilon"] == "3/4"
    with veil.Ledger(url) as ledger:
        assert ledger.remaining("alice", "people") == veil.Budget(epsilon="3/4")


def test_budget_exhaustion_is_a_user_error_and_charges_nothing(
    people: Path, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with veil.Ledger(url) as ledger:
        ledger.grant("alice", "people", veil.Budget(epsilon=0.1))
    code, out, err = invoke(
        "query", "SELECT COUNT(*) FROM people", "--table", f"people={people}", "-e", "0.5",
        "--ledger", url, "-a", "alice",
    )  # fmt: skip
    assert code == 2
    assert out == ""
    assert "privacy budget exhausted" in err
    assert "Traceback" not in err
    with veil.Ledger(url) as ledger:
        assert ledger.remaining("alice", "people") == veil.Budget(epsilon="0.1")


@pytest.mark.parametrize(
    ("sql", "extra", "message"),
    [
        (
            "SELECT * FROM people",
            (),
            r"error: SELECT \* is not supported: list the group keys and aggregates to release "
            r"\(at line 1, column 8\)",
        ),
        (
            "SELECT COUNT(*) FROM peple",
            (),
            r"error: unknown table 'peple'; did you mean 'people'\?",
        ),
        (
            "SELECT SUM(income) FROM people",
            (),
            r"error: .*bounds.*income",
        ),
        (
            "SELECT state, COUNT(*) FROM people JOIN x ON 1 = 1 GROUP BY state",
            (),
            r"error: joins are not supported.*\(at line 1, column 36\)",
        ),
        (
            "SELECT COUNT(*) FROM people",
            ("--bounds", "income"),
            r"error: --bounds expects COLUMN=LOWER:UPPER",
        ),
        (
            "SELECT COUNT(*) FROM people",
            ("--epsilon", "0"),
            r"error: --epsilon must be > 0",
        ),
    ],
)
def test_user_errors_exit_2_with_one_clean_line(
    people: Path, sql: str, extra: tuple[str, ...], message: str
) -> None:
    args = ["query", sql, "--table", f"people={people}", "-e", "1", *extra]
    code, out, err = invoke(*args)
    assert code == 2
    assert out == ""
    assert len(err.strip().splitlines()) == 1
    assert "Traceback" not in err
    import re

    assert re.search(message, err), err


def test_a_missing_file_is_a_user_error(tmp_path: Path) -> None:
    code, _, err = invoke(
        "query", "SELECT COUNT(*) FROM t", "--table", f"t={tmp_path / 'nope.parquet'}", "-e", "1"
    )
    assert code == 2
    assert "nope.parquet" in err


def test_a_missing_required_option_is_a_usage_error(people: Path) -> None:
    code, _, err = invoke("query", "SELECT COUNT(*) FROM people", "--table", f"people={people}")
    assert code == 2
    assert "--epsilon" in err


def test_an_unexpected_failure_is_reported_as_a_bug_without_a_traceback(
    people: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(veil.session.Session, "local", broken)
    code, out, err = invoke(
        "query", "SELECT COUNT(*) FROM people", "--table", f"people={people}", "-e", "1"
    )
    assert code == 1
    assert out == ""
    assert "internal error: unexpected RuntimeError: disk on fire" in err
    assert "this is a bug in veil" in err
    assert "Traceback" not in err


def test_explain_reads_nothing_and_charges_nothing(people: Path, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with veil.Ledger(url) as ledger:
        ledger.grant("alice", "people", veil.Budget(epsilon=1, delta=1e-6))
    code, out, err = invoke(
        "explain", GROUPED, "--table", f"people={people}", "-e", "0.5", "--delta", "1e-7",
        "--privacy-unit", "user_id", "--bounds", "income=0:100000", "--ledger", url,
        "-a", "alice", "-f", "json",
    )  # fmt: skip
    assert code == 0, err
    payload = json.loads(out)
    assert payload["cost"]["exact"] == {"epsilon": "1/2", "delta": "1/10000000"}
    assert "SELECT" in payload["sql"]
    assert set(payload["expected_error_bars"]) == {"n", "avg_income"}
    assert payload["plan"]["root"]["node"] == "aggregate"
    with veil.Ledger(url) as ledger:
        assert ledger.remaining("alice", "people") == veil.Budget(epsilon=1, delta=1e-6)


def test_explain_as_a_table_shows_the_sql_and_the_budget_use(people: Path) -> None:
    code, out, _ = invoke(
        "explain", "SELECT COUNT(*) AS n FROM people", "--table", f"people={people}", "-e", "1"
    )
    assert code == 0
    assert "SQL sent to the engine" in out
    assert "budget use" in out
    assert "discrete" in out


def test_the_query_can_come_from_standard_input(people: Path) -> None:
    result = CliRunner().invoke(
        app,
        ["query", "-", "--table", f"people={people}", "-e", "1", "-u", "user_id", "-f", "json"],
        input="SELECT state, COUNT(*) AS n\nFROM people\nWHERE state IN ('CA', 'NY')\n"
        "GROUP BY state ORDER BY state",
    )
    assert result.exit_code == 0, result.stderr
    payload = json.loads(result.stdout)
    assert [row[0] for row in payload["rows"]] == ["CA", "NY"]


def test_errors_in_a_multi_line_query_from_stdin_point_at_the_line(people: Path) -> None:
    result = CliRunner().invoke(
        app,
        ["query", "-", "--table", f"people={people}", "-e", "1"],
        input="SELECT state,\n       age\nFROM people\nGROUP BY state",
    )
    assert result.exit_code == 2
    assert "column 'age' is neither grouped nor aggregated" in result.stderr
    assert "(at line 2, column 8)" in result.stderr


def test_the_readme_null_rule_holds(tmp_path: Path) -> None:
    """README: a row with NULL in a column an aggregate reads leaves the whole aggregation."""
    n = 2_000
    path = tmp_path / "t.parquet"
    pq.write_table(
        pa.table({"uid": list(range(n)), "x": [None if i % 2 else 1.0 for i in range(n)]}),
        path,
    )
    code, out, err = invoke(
        "query", "SELECT COUNT(*) AS rows_all, COUNT(x) AS rows_x FROM t", "--table",
        f"t={path}", "-e", "2", "-u", "uid", "-f", "json",
    )  # fmt: skip
    assert code == 0, err
    (rows_all, rows_x) = json.loads(out)["rows"][0]
    # COUNT(x) reads x, so the half of the rows with a NULL x leave COUNT(*) too
    assert abs(rows_all - 1000) < 40
    assert abs(rows_x - 1000) < 40


def test_an_unknown_engine_is_a_user_error(people: Path) -> None:
    code, out, err = invoke(
        "query", "SELECT COUNT(*) FROM people", "--table", f"people={people}", "-e", "1",
        "--engine", "oracle",
    )  # fmt: skip
    assert code == 2
    assert out == ""
    assert "--engine must be duckdb, spark or postgres, got 'oracle'" in err


def test_with_json_output_errors_are_json_too_with_the_position(people: Path) -> None:
    code, out, err = invoke(
        "query", "SELECT state, age, COUNT(*) FROM people GROUP BY state",
        "--table", f"people={people}", "-e", "1", "-f", "json",
    )  # fmt: skip
    assert code == 2
    assert out == ""
    error = json.loads(err)["error"]
    assert error["type"] == "UnsupportedQueryError"
    assert error["position"] == [1, 15]
    assert error["user_error"] is True
    assert error["message"].startswith("column 'age' is neither grouped nor aggregated")


def test_json_errors_without_a_position_say_null(people: Path) -> None:
    code, _, err = invoke(
        "query", "SELECT COUNT(*) FROM peple", "--table", f"people={people}", "-e", "1",
        "-f", "json",
    )  # fmt: skip
    assert code == 2
    error = json.loads(err)["error"]
    assert (error["type"], error["position"]) == ("SchemaError", None)
