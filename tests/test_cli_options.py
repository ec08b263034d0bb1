"""The CLI's option parsing: NAME=PATH tables, COLUMN=LOWER:UPPER bounds, exact numbers."""

from __future__ import annotations

from fractions import Fraction

import pytest

from veil.accounting import Budget
from veil.cli import parse_bounds, parse_number, parse_tables
from veil.cli_output import budget_json
from veil.errors import InvalidArgumentError


def test_tables_are_name_equals_path() -> None:
    assert parse_tables(["people=data/people.parquet", " t = x.csv "]) == {
        "people": "data/people.parquet",
        "t": "x.csv",
    }


@pytest.mark.parametrize("spec", ["people", "=x.csv", "people=", "  =  "])
def test_a_table_without_name_or_path_is_refused_with_an_example(spec: str) -> None:
    with pytest.raises(InvalidArgumentError, match=r"--table expects NAME=PATH, got .*people="):
        parse_tables([spec])


def test_a_table_named_twice_is_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="--table 'p' is given twice"):
        parse_tables(["p=a.csv", "p=b.csv"])


def test_bounds_are_exact_intervals() -> None:
    assert parse_bounds(["income=0:1000000", "x=-1.5:1/3", "y=1e-3:2e3"]) == {
        "income": (Fraction(0), Fraction(1_000_000)),
        "x": (Fraction(-3, 2), Fraction(1, 3)),
        "y": (Fraction(1, 1000), Fraction(2000)),
    }


@pytest.mark.parametrize("spec", ["income", "income=0", "income=:5", "=0:1", "income=0:"])
def test_malformed_bounds_are_refused_with_an_example(spec: str) -> None:
    with pytest.raises(InvalidArgumentError, match="--bounds expects COLUMN=LOWER:UPPER"):
        parse_bounds([spec])


def test_a_non_numeric_bound_names_the_column() -> None:
    with pytest.raises(InvalidArgumentError, match="the upper bound of 'income'"):
        parse_bounds(["income=0:lots"])


@pytest.mark.parametrize(
    ("text", "value"),
    [("0.5", Fraction(1, 2)), ("1e-6", Fraction(1, 10**6)), ("1/3", Fraction(1, 3)), ("2", 2)],
)
def test_numbers_are_read_exactly(text: str, value: Fraction) -> None:
    assert parse_number(text, "--epsilon") == value


def test_a_missing_number_stays_missing() -> None:
    assert parse_number(None, "--delta") is None


@pytest.mark.parametrize(("text", "message"), [("-1", "must not be negative"), ("x", "number")])
def test_bad_numbers_are_refused(text: str, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=f"--epsilon {message}|--epsilon must be a"):
        parse_number(text, "--epsilon")


def test_budgets_print_as_floats_with_exact_fractions_beside() -> None:
    assert budget_json(Budget(epsilon="1/3", delta=1e-6)) == {
        "kind": "approx",
        "epsilon": 1 / 3,
        "delta": 1e-6,
        "exact": {"epsilon": "1/3", "delta": "1/1000000"},
    }
    assert budget_json(Budget(rho=0.5)) == {"kind": "zcdp", "rho": 0.5, "exact": {"rho": "1/2"}}
    assert budget_json(None) is None
