"""A public integer domain is lowered as ranges of consecutive keys (issue 15): the same rows
as the ``IN`` list of every key, checked in DuckDB value by value, NULL included."""

from __future__ import annotations

import duckdb
import numpy as np
import pytest
from sqlglot import exp

from veil.compile.lower import _RANGES, _col, _members, _runs, to_sql

DOMAINS = {
    "a range": list(range(0, 30)),
    "runs, singletons and negatives": [1, 2, 3, 4, 7, 9, 10, 11, -5, -4, 20, 22],
    "pairs only (no run of 3)": [0, 1, 5, 6, 10],
    "unsorted with duplicates": [5, 3, 4, 3, 8, 7, 6, -1],
    "too many runs: one IN list": [4 * i + j for i in range(_RANGES + 1) for j in range(3)],
    "huge integers": [2**63 - 2, 2**63 - 1, 2**63, -(2**70), -(2**70) + 1, -(2**70) + 2],
    "the int64 extremes (differences that wrap)": [
        -(2**63),
        -(2**63) + 1,
        -(2**63) + 2,
        2**63 - 3,
        2**63 - 2,
        2**63 - 1,
        0,
    ],
    "a singleton at each int64 extreme": [-(2**63), 2**63 - 1],
}


@pytest.mark.parametrize("name", list(DOMAINS))
def test_an_integer_domain_selects_exactly_its_keys(name: str) -> None:
    domain = DOMAINS[name]
    (condition,) = _members(_col("x"), list(domain), integer=True)
    probe = sorted({v + d for v in domain for d in (-1, 0, 1)} | set(range(-8, 40)))
    values = ", ".join(f"({v}::HUGEINT)" for v in probe) + ", (NULL)"
    where = to_sql(condition, "duckdb")
    got = duckdb.sql(f'SELECT "x" FROM (VALUES {values}) t("x") WHERE {where}').fetchall()
    assert sorted(r[0] for r in got) == sorted(set(domain))


def test_a_range_domain_is_one_comparison() -> None:
    (condition,) = _members(_col("x"), list(range(1_000_000)), integer=True)
    assert isinstance(condition, exp.Between)
    (strings,) = _members(_col("s"), ["a", "b"], integer=False)
    assert isinstance(strings, exp.In)
    assert _members(_col("x"), [], integer=True) == []


def test_runs_found_by_numpy_equal_those_found_one_by_one() -> None:
    """The int64 path against the Python path (taken for values beyond 64 bits), on random
    domains with runs, gaps, duplicates and the extremes."""
    rng = np.random.default_rng(11)
    for _ in range(50):
        base = rng.integers(-50, 50, rng.integers(1, 60)).tolist()
        ints = [*base, *rng.choice([-(2**63), 2**63 - 1, 0], 2).tolist()]
        fast = _runs(ints)
        slow = _runs([*ints, 2**64])  # one value beyond 64 bits: the Python path
        ordered, runs = slow
        assert fast == (ordered[:-1], runs[:-1])
