"""The columnar release (issue 15): the measurement and the Result keep columns, and rows,
dicts, Arrow and the printout are built from them only when asked.

Each check compares the columnar form with the per-group form of the same noisy integers: a
Measured built group by group (the form a cached answer of an earlier release had), or the
same query answered from the ledger's cache (its columns are lists read from JSON, not the
bulk release's arrays).
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

import veil
from release.test_bulk_release import columns_of, compiled, engine_table
from support import SeededSource
from veil.accounting import Budget
from veil.plan import GroupKey
from veil.plan.canonical import measurement_fingerprint
from veil.release.draw import Measured, finish, measure
from veil.release.exact import exact_stats
from veil.release.result import Columns, Result

N = 600
TABLE = pa.table(
    {
        "uid": list(range(N)),
        "g": [i % 7 for i in range(N)],
        "h": ["ab"[i % 2] for i in range(N)],
        "x": [float(i % 10) for i in range(N)],
    }
)


def _session(seed: str) -> veil.Session:
    return veil.Session.local(
        {"t": TABLE},
        privacy_unit="uid",
        bounds={"x": (0, 10)},
        budget=veil.Budget(epsilon=10),
        domains={"g": list(range(9)), "h": ["a", "b", "c"]},  # empty groups are released
        source=SeededSource(seed),
    )


def _same(a: Result, b: Result) -> None:
    assert a.columns == b.columns
    assert a.types == b.types
    assert a.values == b.values
    assert tuple(b.values) == tuple(a.values)
    assert a.rows == b.rows
    assert [list(r) for r in a.values] == b.rows
    assert a.to_arrow().equals(b.to_arrow())
    assert a.error_bars() == b.error_bars()
    assert a.error_bars(0.5) == b.error_bars(0.5)

    def table(r: Result) -> list[str]:  # the printout but its cost line
        return [line for line in str(r).splitlines() if not line.startswith("cost:")]

    assert table(a) == table(b)
    assert len(a) == len(b)


@pytest.mark.parametrize(
    "tail",
    ["", " ORDER BY n DESC", " LIMIT 5", " HAVING COUNT(*) > 20 ORDER BY m", " LIMIT 4 OFFSET 3"],
)
def test_a_fresh_release_and_its_cached_answer_give_the_same_result(tail: str) -> None:
    s = _session("columnar" + tail)
    sql = f"SELECT h, g, AVG(x) AS m, COUNT(*) AS n FROM t GROUP BY g, h{tail}"
    fresh = s.sql(sql, epsilon=1)
    assert isinstance(fresh.values, Columns)
    cached = s.sql(sql, epsilon=1)
    assert cached.cached
    assert not fresh.cached
    _same(fresh, cached)
    if not tail:  # every declared key, in product order of the GROUP BY, empty ones too
        assert [(r[1], r[0]) for r in fresh.rows] == [(g, h) for g in range(9) for h in "abc"]


def test_the_bulk_measurement_finishes_as_the_group_by_group_one() -> None:
    agg = compiled(
        (GroupKey("a", domain=(1, 2, 3)), GroupKey("s", domain=("x", "y"))),
        budget=Budget(epsilon=1),
    )
    rng = np.random.default_rng(3)
    keys = {"__k0": pa.array([3, 1, 2, 1]), "__k1": pa.array(["y", "x", "x", "y"])}
    table = engine_table(agg, keys, [5, 0, 9, 2], rng)
    bulk = measure(
        agg, exact_stats(agg, table, columns_of(agg), ["__k0", "__k1"]), {}, SeededSource("b")
    )
    by_group = Measured(bulk.groups, private=bulk.private)  # the per-group form
    assert bulk == by_group
    assert bulk.to_json() == by_group.to_json()
    assert isinstance(bulk.keys[0], np.ndarray)  # indices, not Python tuples
    fp = measurement_fingerprint(agg)
    _same(finish(agg, agg, bulk, fp), finish(agg, agg, by_group, fp))
    assert finish(agg, agg, bulk, fp) == finish(agg, agg, by_group, fp)


def test_a_measurement_cached_by_an_earlier_release_still_loads() -> None:
    """FORMAT 2 JSON as the by-group Measured of the previous release wrote it (lists, a
    stratum's index in some groups only, a sum beyond 64 bits); FORMAT 1 is still not served."""
    cached = {
        "veil_measured": 2,
        "rows": 3,
        "keys": [[0, 1, 2], ["a", None, "é"]],
        "stats": {"count": [3, -1, 0], "sum": [5, 1 << 70, -2], "__stratum": [None, 1, None]},
        "private": True,
    }
    m = Measured.from_json(json.loads(json.dumps(cached)))
    assert m is not None
    assert m.size == 3
    assert m.groups == (
        ((0, "a"), {"count": 3, "sum": 5}),
        ((1, None), {"count": -1, "sum": 1 << 70, "__stratum": 1}),
        ((2, "é"), {"count": 0, "sum": -2}),
    )
    assert m.to_json() == cached
    assert Measured.from_json({"veil_measured": 1, "groups": [[[0], {"count": 3}]]}) is None


def test_released_rows_by_column_equal_their_tuples() -> None:
    rows = Columns([[1, 2], ["a", None]], 2)
    assert rows == ((1, "a"), (2, None))
    assert ((1, "a"), (2, None)) == rows  # noqa: SIM300 (the reflected comparison)
    assert rows[1] == (2, None)
    assert list(rows) == [(1, "a"), (2, None)]
    assert len(rows) == 2
    assert repr(rows) == repr(((1, "a"), (2, None)))
    assert Columns([], 2) == ((), ())
    with pytest.raises(ValueError, match="one value per row"):
        Columns([[1, 2], ["a"]], 2)
    held = Result(
        ("k", "n"), ("string", "integer"), Columns([["a", "b"], [1, 2]], 2), Budget(epsilon=1)
    )
    plain = Result(("k", "n"), ("string", "integer"), (("a", 1), ("b", 2)), Budget(epsilon=1))
    assert held == plain
    assert held.rows == plain.rows == [["a", 1], ["b", 2]]
    assert held.to_arrow().equals(plain.to_arrow())
    assert held.to_pandas().equals(plain.to_pandas())
