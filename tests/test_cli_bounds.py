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
    assert split_auto(["age=auto", "income=0:10"]) == (["income=0:10"], ["age"], {})
    assert split_auto(["income=0:10"]) == (["income=0:10"], None, {})
    assert split_auto(["income=auto:state"]) == ([], ["income"], {"income": "state"})
    with pytest.raises(InvalidArgumentError, match="names no key"):
        split_auto(["income=auto:"])


BANDS = "BIN(age, 18, 40, 60, 78) AS band"
BANDED = "SELECT BIN(age, 18, 40, 60, 78) AS band, AVG(income) AS m FROM people GROUP BY band"


def test_veil_query_finds_bounds_per_group_with_auto_and_a_key(people: Path) -> None:
    code, out, err = invoke(
        "query", BANDED, "--table", f"people={people}", "--epsilon", "1",
        "--bounds", "income=auto:band", "--format", "json",
    )  # fmt: skip
    assert code == 0, err
    payload = json.loads(out)
    assert payload["cost"]["exact"]["epsilon"] == "1"
    (chosen,) = payload["auto_bounds"]
    assert chosen["key"] == "band"
    assert [g["group"] for g in chosen["groups"]] == ["[18, 40)", "[40, 60)", "[60, 78]"]
    assert payload["notes"][0].startswith("auto bounds for 'income': per group of 'band'")


def test_veil_explain_per_group_shows_one_histogram_for_every_group(people: Path) -> None:
    code, out, err = invoke(
        "explain", BANDED, "--table", f"people={people}", "--epsilon", "1",
        "--bounds", "income=auto:band",
    )  # fmt: skip
    assert code == 0, err
    assert "for each of the 3 groups of 'band'" in out


def test_veil_bounds_by_a_key_prints_a_line_per_group_and_is_reused(
    people: Path, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    ledger = veil.Ledger(url, create=True)
    ledger.grant("cli", "people", veil.Budget(epsilon=3))
    ledger.close()
    common = ("--table", f"people={people}", "--ledger", url)
    code, out, err = invoke(
        "bounds", "people", "income", "--by", BANDS, "--epsilon", "0.1", *common,
        "--format", "csv",
    )  # fmt: skip
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "column,group,lower,upper,clamped_below,clamped_above,clamped_bar,cached"
    assert [line.split(",")[1] for line in lines[1:]] == ['"[18', '"[40', '"[60']
    code, out, err = invoke(
        "query", BANDED, "--epsilon", "1", "--bounds", "income=auto:band", *common,
        "--format", "json",
    )  # fmt: skip
    assert code == 0, err
    payload = json.loads(out)
    assert payload["auto_bounds"][0]["cached"]
    assert payload["cost"]["exact"]["epsilon"] == "9/10"
    code, out, err = invoke(
        "bounds", "people", "income", "--by", BANDS, "--epsilon", "0.1", *common
    )
    assert code == 0, err
    assert "group" in out
    assert "[40, 60)" in out
    assert "--bounds income=auto:band" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("query", BANDED, "--bounds", "income=auto:nope"), "no GROUP BY key 'nope'"),
        (
            ("query", "SELECT name, AVG(income) AS m FROM people GROUP BY name",
             "--bounds", "income=auto:name"),
            "the groups of 'name' are not public",
        ),
        (("bounds", "people", "income", "--by", "name"), "the groups of 'name' are not public"),
        (("bounds", "people", "income", "--by", "age + 1"), "--by 'age + 1' must be a column"),
    ],
)  # fmt: skip
def test_per_group_refusals_speak_the_clis_words(
    people: Path, args: tuple[str, ...], message: str
) -> None:
    code, out, err = invoke(*args, "--table", f"people={people}", "--epsilon", "1")
    assert code == 2, out
    assert message in err
