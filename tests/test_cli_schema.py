"""`--schema` and `--column`: declared column types on the command line (issue 18)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_support import invoke
from veil.cli import merge_schemas, parse_columns, parse_schema_files
from veil.errors import InvalidArgumentError

SUM = "SELECT SUM(income) AS s FROM people"


@pytest.fixture
def people(tmp_path: Path) -> Path:
    path = tmp_path / "people.csv"
    rows = "".join(f"{i},{i % 50},2001-02-0{1 + i % 9}\n" for i in range(200))
    path.write_text("uid,income,born\n" + rows)
    return path


def ask(
    people: Path, *extra: str, command: str = "query", fmt: str = "json"
) -> tuple[int, str, str]:
    return invoke(
        command, SUM, "--table", f"people={people}", "--epsilon", "1",
        "--privacy-unit", "uid", "--bounds", "income=0:100", "--format", fmt, *extra,
    )  # fmt: skip


def test_an_undeclared_csv_column_is_text_and_summing_it_is_refused(people: Path) -> None:
    code, _, err = ask(people)
    assert code == 2
    assert "SUM(income) needs a numeric column, but 'income' is string" in err


def test_column_declares_a_type_and_the_sum_is_answered(people: Path) -> None:
    code, out, err = ask(people, "--column", "income:DOUBLE")
    assert code == 0, err
    assert json.loads(out)["columns"] == ["s"]
    code, out, err = ask(people, "--column", "people.income:DECIMAL(10, 2)", command="explain")
    assert code == 0, err


def test_schema_reads_a_json_object_of_column_types(people: Path, tmp_path: Path) -> None:
    schema = tmp_path / "people.schema.json"
    schema.write_text('{"income": "DOUBLE", "born": "DATE"}')
    for spec in (f"people={schema}", str(schema)):  # TABLE= may be left out with one table
        code, _, err = ask(people, "--schema", spec)
        assert code == 0, err


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (
            ["--column", "income"],
            "--column expects [TABLE.]COLUMN:TYPE, got 'income'; e.g. --column income:DOUBLE",
        ),
        (
            ["--column", "income:MONEY"],
            "--column income:MONEY: 'MONEY' is not a type veil reads; use one of BOOLEAN, "
            "TINYINT, SMALLINT, INTEGER, BIGINT, FLOAT (REAL), DOUBLE, DECIMAL(p, s) with p <= "
            "38, VARCHAR (TEXT, STRING), DATE, TIMESTAMP",
        ),
        (
            ["--column", "income:DOUBLE", "--column", "income:INTEGER"],
            "--column income:INTEGER: column 'income' of table 'people' is already declared "
            "DOUBLE; declare it once",
        ),
        (
            ["--column", "salary:DOUBLE"],
            "table 'people': the declared column 'salary' is not in the header of",
        ),
        (
            ["--schema", "nobody=x.json"],
            "--schema 'nobody=x.json': 'nobody' is not a --table (tables: people); pass "
            "--schema TABLE=FILE.json",
        ),
        (["--schema", "missing.json"], "--schema: cannot read 'missing.json': No such file"),
    ],
)
def test_bad_declarations_get_one_line_in_the_clis_own_syntax(
    people: Path, option: list[str], message: str
) -> None:
    code, _, err = ask(people, *option, fmt="table")
    assert code == 2
    assert err.startswith("error: ")
    assert message in err
    assert len(err.strip().splitlines()) == 1


def test_schema_files_must_hold_a_json_object_of_type_names(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(InvalidArgumentError, match=r"--schema: '.*bad.json' is not JSON"):
        parse_schema_files([str(bad)], ["people"])
    bad.write_text('["income", "DOUBLE"]')
    with pytest.raises(InvalidArgumentError, match=r"--schema expects a JSON object mapping"):
        parse_schema_files([str(bad)], ["people"])
    good = tmp_path / "good.json"
    good.write_text('{"income": "DOUBLE"}')
    with pytest.raises(InvalidArgumentError, match=r"must name its table when there are several"):
        parse_schema_files([str(good)], ["people", "visits"])
    assert parse_schema_files([f"visits={good}"], ["people", "visits"]) == {
        "visits": {"income": "DOUBLE"}
    }


def test_columns_name_their_table_when_there_are_several() -> None:
    assert parse_columns(["people.income:DOUBLE", "visits.day:DATE"], ["people", "visits"]) == {
        "people": {"income": "DOUBLE"},
        "visits": {"day": "DATE"},
    }
    assert parse_columns(["a.b:DOUBLE"], ["people"]) == {"people": {"a.b": "DOUBLE"}}
    with pytest.raises(
        InvalidArgumentError,
        match=r"--column 'income:DOUBLE' must name its table when there are several \(tables: "
        r"people, visits\); e.g. --column people.income:DOUBLE",
    ):
        parse_columns(["income:DOUBLE"], ["people", "visits"])
    merged = merge_schemas({"people": {"income": "DOUBLE"}}, {"people": {"born": "DATE"}})
    assert merged == {"people": {"income": "DOUBLE", "born": "DATE"}}


def test_explain_prints_its_notes_in_the_table_output_too(people: Path) -> None:
    code, out, err = ask(people, "--column", "income:DOUBLE", command="explain", fmt="table")
    assert code == 0, err
    text = " ".join(out.split())  # the console wraps long lines
    assert "note: table 'people' is a CSV: the undeclared columns 'uid', 'born' are text" in text
    assert "--column uid:DOUBLE (CLI)" in text
    code, out, err = ask(people, "--column", "income:DOUBLE", command="explain")
    notes = json.loads(out)["notes"]
    assert notes
    for note in notes:
        assert f"note: {' '.join(note.split())}" in text


def test_a_where_on_an_undeclared_column_says_how_to_declare_it_in_the_clis_syntax(
    people: Path,
) -> None:
    code, _, err = invoke(
        "query", "SELECT COUNT(*) AS n FROM people WHERE income > 15", "--table",
        f"people={people}", "--epsilon", "1", "--privacy-unit", "uid",
    )  # fmt: skip
    assert code == 2
    line = " ".join(err.split())
    assert "an explicit cast is required; 'income' is text" in line
    assert "--column income:DOUBLE in the CLI" in line
