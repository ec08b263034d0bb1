"""Audit: perturb is total on the values — no value makes it fail or appear in a message."""

from __future__ import annotations

import pyarrow as pa

import veil
from support import SeededSource
from veil import perturb

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
