"""A quantile's cell without a clamp of its own (``veil.compile.lower.cell_top``): the column
is clamped at a top inside the grid's last cell, so ``FLOOR((clamp(x) − c)·k)`` lies in
``[0, limit − 1]`` with no ``LEAST``; every row's cell, computed by DuckDB, is the one of the
full formula ``min(max(⌊(min(max(x, lo), hi) − c)·k⌋, 0), limit − 1)`` on values built to
break it — the neighbouring doubles of the top, of the bounds and of the last cells' edges,
±inf, ±0, huge and tiny magnitudes — on grids from 2 cells to 2^40, per-group bounds
included; where no top qualifies the clamped formula is written, as before."""

from __future__ import annotations

import math
import random
from fractions import Fraction
from typing import Any

import duckdb
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import veil
from veil.compile import dialect, lower, to_sql
from veil.compile.lower import cell_top
from veil.plan.nodes import Measurement
from veil.plan.tree import aggregate_of

REGIONS = ("north", "south", "east")


def _around(x: float, k: int = 3) -> list[float]:
    """``x`` and its ``k`` neighbouring doubles on each side."""
    out, down, up = [x], x, x
    for _ in range(k):
        down, up = math.nextafter(down, -math.inf), math.nextafter(up, math.inf)
        out += [down, up]
    return out


def _values(lo: float, hi: float, m: Measurement) -> list[float]:
    step = float(m.step)
    top = cell_top(m, hi)
    points = [lo, hi, -0.0, 0.0, 1e308, -1e308, math.inf, -math.inf, 5e-324, -5e-324]
    points += [lo + (m.limit - j) * step for j in (0, 1, 2)]  # the last cells' edges
    points += [lo + (m.limit - 0.5) * step, lo + step, lo + step / 2]
    if top is not None:
        points.append(float(top))
    rng = random.Random(f"{lo}:{hi}:{m.limit}")
    points += [rng.uniform(lo, hi) for _ in range(40)]
    return [v for p in points if math.isfinite(p) for v in _around(p)] + [math.inf, -math.inf]


def _cells(
    bounds: Any, buckets: int | None, values: list[float], column: str = "income"
) -> tuple[dict[str, list[int]], Measurement, str]:
    """The statement's cells per region (DuckDB), the measurement and the SQL."""
    n = len(values)
    data = pa.table(
        {
            "region": pa.array([REGIONS[i % 3] for i in range(n)]),
            column: pa.array(values, pa.float64()),
        }
    )
    session = veil.Session.local(
        tables={"t": data}, budget=veil.Budget(epsilon=10), bounds={column: bounds}
    )
    extra = {} if buckets is None else {"quantile_buckets": buckets}
    sql = f"SELECT region, MEDIAN({column}) AS m FROM t WHERE region IN {REGIONS} GROUP BY region"
    agg = aggregate_of(session.explain(sql, epsilon=1, **extra).plan)
    (m,) = [m for m in agg.measurements if m.statistic == "quantile"]
    low = lower(agg, dialect("duckdb"), salt=7)
    con = duckdb.connect()
    con.register("t", data)
    got: dict[str, list[int]] = {}
    if low.listed:
        assert low.together is not None
        text = to_sql(low.together, "duckdb")
        for row in con.sql(text).fetchall():
            got[row[0]] = sorted(row[-1])
    else:
        text = to_sql(low.quantiles[0][1], "duckdb")
        for region, cell, count in con.sql(text).fetchall():
            got.setdefault(region, []).extend([cell] * count)
            got[region].sort()
    return got, m, text


def _formula(
    values: list[float], m: Measurement, bounds_of: dict[str, tuple[float, float]]
) -> dict[str, list[int]]:
    c, k = float(m.centre), float(1 / m.step)
    want: dict[str, list[int]] = {}
    for i, x in enumerate(values):
        region = REGIONS[i % 3]
        lo, hi = bounds_of[region]
        cell = min(max(math.floor((min(max(x, lo), hi) - c) * k), 0), m.limit - 1)
        want.setdefault(region, []).append(cell)
    return {r: sorted(v) for r, v in want.items()}


CASES = [
    ((0, 1e6), None),  # bench_peers' income: 2^32 cells, listed
    ((0, 100), None),
    ((-0.25, 33.3), 64),  # coarse: counted per cell in SQL
    ((-1e90, 1e90), 1 << 40),
    ((0.1, 0.3), 3),  # a step that is no double
    ((1e-90, 3e-90), 1 << 20),
    ((5, 7), 2),
    ((-7.5, 1e15), 1 << 32),
]


@pytest.mark.parametrize(("bounds", "buckets"), CASES)
def test_every_cell_is_the_clamped_formulas(
    bounds: tuple[float, float], buckets: int | None
) -> None:
    lo, hi = float(bounds[0]), float(bounds[1])
    _, m, _ = _cells(bounds, buckets, [lo])
    values = _values(lo, hi, m)
    got, m, text = _cells(bounds, buckets, values)
    assert got == _formula(values, m, dict.fromkeys(REGIONS, (lo, hi)))
    # the top qualifies on every one of these grids: the cell has no clamp of its own
    top = cell_top(m, hi)
    assert top is not None
    assert "LEAST" not in text
    # the last cell and the first are reached
    cells = {c for v in got.values() for c in v}
    assert {0, m.limit - 1} <= cells


def test_per_group_bounds_each_get_their_top() -> None:
    bounds = {"north": (0, 20), "south": (-5, 50), "east": (0.5, 400)}
    given_bounds = {r: (float(a), float(b)) for r, (a, b) in bounds.items()}
    probe: list[float] = [0.0]
    _, m, _ = _cells(bounds, None, probe)
    values: list[float] = []
    for lo, hi in given_bounds.values():  # each region's values at every region's edges
        values += _values(lo, hi, m)
    got, m, text = _cells(bounds, None, values)
    assert got == _formula(values, m, given_bounds)
    assert "LEAST" not in text
    for region in ("north", "south"):  # their tops lie below the grid's last cell: kept
        assert cell_top(m, given_bounds[region][1]) == given_bounds[region][1]


@settings(max_examples=60, deadline=None)
@given(
    lo=st.floats(-1e12, 1e12, allow_nan=False),
    width=st.floats(1e-6, 1e12, allow_nan=False),
    buckets=st.integers(2, 1 << 40),
)
def test_the_top_lies_in_the_last_cell_by_its_proofs_margins(
    lo: float, width: float, buckets: int
) -> None:
    """cell_top's conditions, checked in exact rationals for arbitrary grids: the top is at
    most the bound, at least the centre, its exact scaled value within the last cell's inner
    half (or, kept as the bound, at most a quarter below the end), and its computed cell the
    last one (or, kept, at most the last). A grid whose cells are narrower than the doubles
    there (many cells hold no double) may have none — the clamped formula is then written —
    but every grid whose cells span 1,024 doubles at its bounds has one."""
    hi = lo + width
    if not math.isfinite(hi) or hi <= lo:
        return
    step = (Fraction(hi) - Fraction(lo)) / buckets
    m = Measurement(
        name="quantile(x)", statistic="quantile", mechanism="exponential",
        budget=veil.Budget(epsilon=1), sensitivity=Fraction(1), scale=Fraction(2),
        column="x", limit=buckets, quantile=Fraction(1, 2), centre=Fraction(lo), step=step,
    )  # fmt: skip
    top = cell_top(m, hi)
    if top is None:
        assert step < 1024 * math.ulp(max(abs(lo), abs(hi)))
        return
    c, k = float(m.centre), float(1 / step)
    scaled = (Fraction(top) - Fraction(c)) * Fraction(k)
    assert Fraction(c) <= Fraction(top) <= Fraction(hi)
    if top == hi:
        assert scaled <= buckets - Fraction(1, 4)
        assert math.floor((float(top) - c) * k) <= buckets - 1
    else:
        assert abs(scaled - (buckets - Fraction(1, 2))) <= Fraction(1, 4)
        assert math.floor((float(top) - c) * k) == buckets - 1


def test_no_top_where_the_proof_does_not_hold() -> None:
    base: dict[str, Any] = dict(
        name="quantile(x)", statistic="quantile", mechanism="exponential",
        budget=veil.Budget(epsilon=1), sensitivity=Fraction(1), scale=Fraction(2),
        column="x", quantile=Fraction(1, 2),
    )  # fmt: skip
    one = Measurement(**base, limit=1, centre=Fraction(0), step=Fraction(1))
    assert cell_top(one, 1) is None  # one cell: nothing to gain
    big = Measurement(**base, limit=1 << 49, centre=Fraction(0), step=Fraction(1, 1 << 49))
    assert cell_top(big, 1) is None  # past 2^48 cells the margins do not hold
    # an integer centre the engine would round itself (2^60 + 1 is no double)
    odd = Measurement(**base, limit=4, centre=Fraction(2**60 + 1), step=Fraction(2**60))
    assert cell_top(odd, Fraction(2**60 + 1 + 4 * 2**60)) is None
