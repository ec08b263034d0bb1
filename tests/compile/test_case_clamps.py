"""DuckDB's clamps of a column written as comparisons (``Dialect.case_clamps``): the
statements give the very integers that ``LEAST(GREATEST(x, lo), hi)`` gives, on values chosen
to break a clamp — ±inf, NaN, ±0, the bounds and their neighbouring doubles, 1e308,
subnormals — for every statistic that clamps (sums, squares, weighted products, per-group
bounds, quantile cells on a fine and a coarse grid); and a quantile's cells, whose lower clamp
is left out (the grid starts at the lower bound), are the cells of the full formula."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import duckdb
import pyarrow as pa
import pytest

import veil
from veil.compile import dialect, lower, to_sql
from veil.compile.lower import Lowered
from veil.plan.tree import aggregate_of

DUCKDB = dialect("duckdb")
LEAST_GREATEST = dataclasses.replace(DUCKDB, case_clamps=False)

NASTY = [
    0.0, -0.0, 1.0, -1.0, 50.0, 100.0, 1e16, -1e16, 1e308, -1e308, math.inf, -math.inf,
    math.nan, None, 5e-324, -5e-324, math.nextafter(100.0, math.inf),
    math.nextafter(100.0, 0.0), math.nextafter(0.0, -1.0), 33.3, 99.99999999999999, 0.1,
]  # fmt: skip


def table() -> pa.Table:
    income, weight, region, uid = [], [], [], []
    for i, x in enumerate(NASTY * 3):
        income.append(x)
        weight.append(NASTY[(7 * i + 3) % len(NASTY)])
        region.append(("north", "south", "east")[i % 3])
        uid.append(i // 2)
    return pa.table(
        {
            "uid": pa.array(uid, pa.int64()),
            "region": pa.array(region),
            "income": pa.array(income, pa.float64()),
            "w": pa.array(weight, pa.float64()),
        }
    )


QUERIES: list[tuple[str, dict[str, Any]]] = [
    (
        "SELECT region, COUNT(*) AS n, SUM(income) AS s, AVG(income) AS a, "
        "VARIANCE(income) AS v, STDDEV(income) AS sd FROM t GROUP BY region",
        {"bounds": {"income": (0, 100)}},
    ),
    (
        "SELECT region, SUM(income) AS s, AVG(income) AS a FROM t "
        "WHERE region IN ('north', 'south', 'east') GROUP BY region",
        {"bounds": {"income": {"north": (0, 20), "south": (-5, 50), "east": (0.5, 400)}}},
    ),
    (
        "SELECT region, AVG(income) AS a FROM t GROUP BY region",
        {"bounds": {"income": (-1, 100), "w": (0, 50)}, "weights": "w"},
    ),
    (
        "SELECT region, MEDIAN(income) AS m, QUANTILE_CONT(income, 0.9) AS p FROM t "
        "GROUP BY region",
        {"bounds": {"income": (0, 100)}},
    ),
    (
        "SELECT region, MEDIAN(income) AS m FROM t GROUP BY region",
        {"bounds": {"income": (-0.25, 33.3)}, "quantile_buckets": 64},
    ),
]


def _statements(low: Lowered) -> list[Any]:
    together = [] if low.together is None else [low.together]
    return [low.main, *together, *(t for _, t in low.quantiles)]


def _rows(con: duckdb.DuckDBPyConnection, tree: Any) -> list[tuple[Any, ...]]:
    return sorted(
        (tuple(sorted(v) if isinstance(v, list) else v for v in row))
        for row in con.sql(to_sql(tree, "duckdb")).fetchall()
    )


@pytest.mark.parametrize(("sql", "options"), QUERIES)
def test_comparisons_give_the_integers_least_and_greatest_give(
    sql: str, options: dict[str, Any]
) -> None:
    data = table()
    weights = {k: v for k, v in options.items() if k == "weights"}
    session = veil.Session.local(
        tables={"t": data}, privacy_unit="uid", budget=veil.Budget(epsilon=10),
        bounds=options["bounds"], **weights,
    )  # fmt: skip
    explain = {k: v for k, v in options.items() if k == "quantile_buckets"}
    agg = aggregate_of(session.explain(sql, epsilon=1, **explain).plan)
    cases, plain = lower(agg, DUCKDB, salt=7), lower(agg, LEAST_GREATEST, salt=7)
    case_sql = " ".join(to_sql(t, "duckdb") for t in _statements(cases))
    plain_sql = " ".join(to_sql(t, "duckdb") for t in _statements(plain))
    # every column's clamp is a comparison; a computed value's keeps the functions
    assert 'GREATEST("__x' not in case_sql
    assert 'CASE WHEN "__x0" < ' in case_sql
    assert 'GREATEST("__x' in plain_sql
    con = duckdb.connect()
    con.register("t", data)
    for a, b in zip(_statements(cases), _statements(plain), strict=True):
        got, want = _rows(con, a), _rows(con, b)
        assert got == want
        assert got  # the statements do return groups


@pytest.mark.parametrize(("lo", "hi"), [(0, 100), (-0.25, 33.3), (-1e300, 1e300), (5, 5)])
def test_a_clamp_of_every_special_double_is_the_same_number(lo: float, hi: float) -> None:
    """The clamp alone, value by value (a zero's sign aside: both are zero, and every use
    rounds, floors or multiplies it into the same integer, as the test above shows)."""
    con = duckdb.connect()
    values = [x for x in NASTY if x is not None]
    con.register("v", pa.table({"x": pa.array(values, pa.float64())}))
    rows = con.sql(
        f"SELECT x, CASE WHEN x < {lo!r} THEN {lo!r} WHEN x > {hi!r} THEN {hi!r} ELSE x END, "
        f"LEAST(GREATEST(x, {lo!r}), {hi!r}) FROM v"
    ).fetchall()
    assert len(rows) == len(values)
    for x, by_case, by_least in rows:
        assert by_case == by_least, x
        assert lo <= by_case <= hi, x


@pytest.mark.parametrize(
    ("bounds", "buckets"), [((0, 100), None), ((-0.25, 33.3), 64), ((-1e90, 1e90), 1 << 40)]
)
def test_quantile_cells_are_those_of_the_formula_clamped_at_both_ends(
    bounds: tuple[float, float], buckets: int | None
) -> None:
    """Every row's cell is min(max(⌊(min(max(x, lo), hi) − lo)·k⌋, 0), limit − 1), in the
    statement's doubles (Python's floats round as DuckDB's do), though the statement writes no
    ``max(…, 0)``."""
    data = table()
    session = veil.Session.local(
        tables={"t": data}, budget=veil.Budget(epsilon=10), bounds={"income": bounds}
    )
    extra = {} if buckets is None else {"quantile_buckets": buckets}
    agg = aggregate_of(
        session.explain("SELECT region, MEDIAN(income) AS m FROM t GROUP BY region", epsilon=1,
                        **extra).plan
    )  # fmt: skip
    (m,) = [m for m in agg.measurements if m.statistic == "quantile"]
    low = lower(agg, DUCKDB, salt=7)
    con = duckdb.connect()
    con.register("t", data)
    got: dict[str, list[int]] = {}
    if low.listed:
        assert low.together is not None
        for row in con.sql(to_sql(low.together, "duckdb")).fetchall():
            got[row[0]] = sorted(row[-1])
    else:
        for region, cell, count in con.sql(to_sql(low.quantiles[0][1], "duckdb")).fetchall():
            got.setdefault(region, []).extend([cell] * count)
            got[region].sort()
    lo, hi, k = float(bounds[0]), float(bounds[1]), float(1 / m.step)
    want: dict[str, list[int]] = {}
    for region, x in zip(data["region"].to_pylist(), data["income"].to_pylist(), strict=True):
        if x is None or math.isnan(x):
            continue  # the NULL rule
        cell = min(max(math.floor((min(max(x, lo), hi) - lo) * k), 0), m.limit - 1)
        want.setdefault(region, []).append(cell)
    assert got == {r: sorted(v) for r, v in want.items()}
    assert any(0 in v for v in got.values())
    assert any(m.limit - 1 in v for v in got.values())
