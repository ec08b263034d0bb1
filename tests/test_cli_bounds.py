"""``veil bounds TABLE COLUMN…`` and ``--bounds COLUMN=auto`` in ``veil query`` / ``explain``,
end to end on a small Parquet file through typer's runner."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import veil
from cli_support import invoke
from veil.cli_bounds import split_auto
from veil.errors import InvalidArgumentError


@pytest.fixture(scope="module")
def people(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """2 000 rows: age 18–77, income 0–99 900 (synthetic)."""
    n = 2_000
    table = pa.table(
        {
            "age": [18 + (i * 7) % 60 for i in range(n)],
            "income": [float((i * 37) % 1000) * 100 for i in range(n)],
            "name": [f"p{i}" for i in range(n)],
        }
    )
    path = tmp_path_factory.mktemp("data") / "people.parquet"
    pq.write_table(table, path)
    return path


def test_veil_bounds_prints_a_table_of_bounds_and_clamped_shares(people: Path) -> None:
    code, out, err = invoke(
        "bounds", "people", "income", "age", "--table", f"people={people}", "--epsilon", "1",
    )  # fmt: skip
    assert code == 0, err
    assert "clamping bounds found under DP" in out
    assert "clamped" in out
    assert "income" in out
    assert "--bounds income=" in out
    assert "cost ε=1" in out


def test_veil_bounds_json_charges_the_ledger_and_a_repeat_is_cached(
    people: Path, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    ledger = veil.Ledger(url, create=True)
    ledger.grant("cli", "people", veil.Budget(epsilon=3))
    ledger.close()
    args = (
        "bounds", "people", "age", "--table", f"people={people}", "--epsilon", "1",
        "--ledger", url, "--format", "json", "--where", "age > 20",
    )  # fmt: skip
    code, out, err = invoke(*args)
    assert code == 0, err
    first = json.loads(out)
    (row,) = first["bounds"]
    assert row["column"] == "age"
    assert row["lower"] < row["upper"]
    assert row["cached"] is False
    assert first["remaining"]["exact"]["epsilon"] == "2"
    code, out, err = invoke(*args)
    again = json.loads(out)
    assert again["bounds"][0]["cached"] is True
    assert again["remaining"]["exact"]["epsilon"] == "2"
    assert (again["bounds"][0]["lower"], again["bounds"][0]["upper"]) == (
        row["lower"],
        row["upper"],
    )


def test_veil_bounds_stays_within_a_given_range(people: Path) -> None:
    code, out, err = invoke(
        "bounds", "people", "income", "--table", f"people={people}", "--epsilon", "1",
        "--within", "income=100:50000", "--format", "json",
    )  # fmt: skip
    assert code == 0, err
    (row,) = json.loads(out)["bounds"]
    assert 100 <= row["lower"] < row["upper"] <= 50_000
    assert row["within"] == [100, 50_000]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("name",), "histogram bins need a numeric column"),
        (("nope",), "nope"),
        (("age", "--within", "income=0:10"), "not among the columns"),
        (("age", "--within", "age=auto"), "--within takes COLUMN=LOWER:UPPER"),
    ],
)
def test_veil_bounds_refuses_bad_input_in_the_clis_words(
    people: Path, args: tuple[str, ...], message: str
) -> None:
    code, _out, err = invoke("bounds", "people", *args, "--table", f"people={people}", "-e", "1")
    assert code == 2
    assert message in err


def test_veil_query_with_auto_bounds_notes_what_it_chose(people: Path) -> None:
    code, out, err = invoke(
        "query", "SELECT AVG(income) AS m FROM people", "--table", f"people={people}",
        "--epsilon", "1", "--bounds", "income=auto", "--bounds-share", "0.2", "--format", "json",
    )  # fmt: skip
    assert code == 0, err
    payload = json.loads(out)
    assert payload["cost"]["exact"]["epsilon"] == "1"
    assert payload["notes"][0].startswith("auto bounds for 'income': [")


def test_veil_explain_with_bare_auto_shows_the_whole_cost(people: Path) -> None:
    code, out, err = invoke(
        "explain", "SELECT AVG(income) AS m, AVG(age) AS a FROM people",
        "--table", f"people={people}", "--epsilon", "1", "--bounds", "auto",
    )  # fmt: skip
    assert code == 0, err
    assert "cost ε=1" in out
    assert "auto bounds for 'age'" in out
    assert "auto bounds for 'income'" in out


def test_a_share_without_auto_is_refused_in_the_clis_words(people: Path) -> None:
    code, _out, err = invoke(
        "query", "SELECT AVG(income) AS m FROM people", "--table", f"people={people}",
        "--epsilon", "1", "--bounds", "income=0:1000", "--bounds-share", "0.2",
    )  # fmt: skip
    assert code == 2
    assert "--bounds-share 0.2 needs --bounds COLUMN=auto" in err


def test_bare_auto_with_given_pairs_is_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="name the auto ones"):
        split_auto(["auto", "income=0:10"])
    assert split_auto(["age=auto", "income=0:10"]) == (["income=0:10"], ["age"])
    assert split_auto(["income=0:10"]) == (["income=0:10"], None)
