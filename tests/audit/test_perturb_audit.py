"""Audit: perturb is total on the values — no value makes it fail or appear in a message."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import veil
from support import SeededSource
from veil import perturb
from veil.errors import QueryFailedError, SchemaError

SECRET = "Zyx-private-diagnosis"


def test_a_value_outside_the_declared_categories_is_perturbed_not_reported() -> None:
    table = pa.table({"c": ["a", "b", SECRET, None, "a"], "x": [0.1, None, 5.0, -3.0, 0.5]})
    ledger = veil.Ledger("sqlite://")
    ledger.grant("alice", "t", veil.Budget(epsilon=2))
    out = perturb(
        table,
        epsilon=1,
        bounds={"x": (0, 1)},
        categories={"c": ["a", "b"]},
        ledger=ledger,
        analyst="alice",
        dataset="t",
        source=SeededSource(5),
    )
    assert out.data.num_rows == 5
    assert set(out.data.column("c").to_pylist()) <= {"a", "b"}
    assert ledger.remaining("alice", "t") == veil.Budget(epsilon=1)  # charged once


def test_an_undeclared_value_is_released_like_the_first_category() -> None:
    """An undeclared value (NULL included) is perturbed as the first declared category, as a
    NULL number is perturbed as the lower bound: the output distribution of its row is the
    first category's, so the row stays ε-LDP and nothing depends on the undeclared value."""
    n = 4000
    table = pa.table({"c": [SECRET] * n})
    first = pa.table({"c": ["a"] * n})
    a = perturb(table, epsilon=1, categories={"c": ["a", "b"]}, source=SeededSource(11))
    b = perturb(first, epsilon=1, categories={"c": ["a", "b"]}, source=SeededSource(11))
    assert a.data.column("c").to_pylist() == b.data.column("c").to_pylist()


def test_integers_beyond_double_precision_are_perturbed_not_failed() -> None:
    """A safe cast of int64 → float64 fails on values beyond ±2^53 (nanosecond timestamps,
    64-bit ids) and its message quoted the value, after the charge: one record could decide
    whether the call failed. Such values round to the nearest double and are clamped."""
    big = 1_700_000_000_000_000_001
    for values in ([big, 5], [4, 5]):
        ledger = veil.Ledger("sqlite://")
        ledger.grant("alice", "t", veil.Budget(epsilon=2))
        table = pa.table(
            {
                "ts": pa.array(values, pa.int64()),
                "u": pa.array([2**64 - 1, 0], pa.uint64()),
                "d": pa.array([10**37, None], pa.decimal128(38, 0)),
            }
        )
        out = perturb(
            table,
            epsilon=1,
            bounds={"ts": (0, 10), "u": (0, 10), "d": (0, 10)},
            ledger=ledger,
            analyst="alice",
            dataset="t",
        )
        assert out.data.num_rows == 2
        assert ledger.remaining("alice", "t") == veil.Budget(epsilon=1)


def test_categories_of_another_type_are_refused_before_anything_is_charged() -> None:
    ledger = veil.Ledger("sqlite://")
    ledger.grant("alice", "t", veil.Budget(epsilon=2))
    table = pa.table({"c": ["a", SECRET]})
    with pytest.raises(SchemaError, match="categories of 'c' are not all values of its type"):
        perturb(table, epsilon=1, categories={"c": [1, 2]}, ledger=ledger, analyst="a", dataset="t")
    ledger.grant("a", "t", veil.Budget(epsilon=1))
    assert ledger.remaining("a", "t") == veil.Budget(epsilon=1)


class _FailingSource:
    """A random source that fails with a message quoting a record's value."""

    def random_bytes(self, n: int) -> bytes:
        raise ValueError(f"could not use {SECRET}")


def test_a_failure_after_the_charge_keeps_it_and_quotes_nothing() -> None:
    ledger = veil.Ledger("sqlite://")
    ledger.grant("alice", "t", veil.Budget(epsilon=2))
    table = pa.table({"x": [1.0, 2.0]})
    with pytest.raises(QueryFailedError, match="the charge stays") as info:
        perturb(
            table,
            epsilon=1,
            bounds={"x": (0, 5)},
            ledger=ledger,
            analyst="alice",
            dataset="t",
            source=_FailingSource(),
        )
    assert SECRET not in str(info.value)
    assert info.value.__cause__ is None
    assert info.value.__context__ is None
    assert ledger.remaining("alice", "t") == veil.Budget(epsilon=1)


def test_a_csv_is_perturbed_with_declared_types_never_sniffed(tmp_path: Path) -> None:
    """perturb read CSV paths with read_csv_auto: one record's 'N/A' made the column text and
    the call was refused — whether it was refused depended on that record."""
    outcomes = []
    for cell in ("N/A", "41"):
        path = tmp_path / f"t{cell.replace('/', '')}.csv"
        path.write_text(f"x\n1.5\n{cell}\n3\n")
        ledger = veil.Ledger("sqlite://")
        ledger.grant("alice", "t", veil.Budget(epsilon=2))
        out = perturb(
            path,
            epsilon=1,
            bounds={"x": (0, 5)},
            schema={"x": "DOUBLE"},
            ledger=ledger,
            analyst="alice",
            dataset="t",
        )
        outcomes.append(out.data.num_rows)
        with pytest.raises(SchemaError, match="not a number"):  # undeclared: text, refused
            perturb(path, epsilon=1, bounds={"x": (0, 5)}, ledger=ledger, analyst="a", dataset="t")
    assert outcomes == [3, 3]
