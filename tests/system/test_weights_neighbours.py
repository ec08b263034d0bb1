"""Survey weights and neighbouring datasets: removing one privacy unit moves every pre-noise
statistic of a weighted query (Σ clamp(w), Σ clamp(w)·clamp(x), the row count) by at most the
sensitivity the compiled plan claims — with adversarial values *and* adversarial weights
(negative, infinite, NaN, NULL, subnormal, 1e308, either side of the bounds) — and every engine
computes the same exact statistics and releases on both neighbours (the same outcome).
"""

from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest

from harness import HARNESSES, Harness
from system.prenoise import Exact, exact, session_aggregate
from system.test_neighbours import dataset as adversarial
from veil import Budget, Session
from veil.compile import Context, compile_plan
from veil.engines.duckdb import DuckDBEngine
from veil.plan.nodes import Aggregate, ColumnBounds, Contribution
from veil.plan.tree import aggregate_of
from veil.sql import parse

SQL = "SELECT g, COUNT(*) AS n, SUM(x) AS s, AVG(x) AS m FROM t GROUP BY g"
WEIGHTS = (
    -1.0, 0.0, 0.5, 1.0, 2.0, 10.0, 1e308, math.inf, -math.inf, math.nan, None, 5e-324, 1e16,
    0.1, 0.3, math.nextafter(10.0, math.inf), math.nextafter(0.5, 0.0), 1.5, 7.0,
)  # fmt: skip
X_BOUNDS = [
    pytest.param((0.0, 1.0), id="x-unit-interval"),
    pytest.param((-0.3, 0.7), id="x-inexact-decimals"),
    pytest.param((-1.0, 1e16), id="x-ones-beside-1e16"),
]
W_BOUNDS = [
    pytest.param((0.0, 10.0), id="w-from-0"),
    pytest.param((0.5, 2.0), id="w-above-0"),
]
BUDGETS = [
    pytest.param(Budget(epsilon=1.0, delta=1e-6), id="laplace"),
    pytest.param(Budget(rho=0.5), id="gaussian"),
]


def weighted(bounds: tuple[float, float], units: int = 9) -> pd.DataFrame:
    df = adversarial(bounds, units)
    w = [WEIGHTS[(3 * i) % len(WEIGHTS)] for i in range(len(df))]
    return df.assign(w=pd.Series(w, dtype="float64"))


def compiled(
    engine: DuckDBEngine,
    budget: Budget,
    bounds: dict[str, tuple[float, float]],
    contribution: Contribution,
    domains: dict[str, list[Any]] | None,
) -> Aggregate:
    """The compiled weighted aggregation (the Session's front end, rewrite and rules)."""
    from veil.compile.weights import weigh

    schemas = {name: engine.schema(name) for name in engine.tables}
    plan = parse(
        SQL, schemas, privacy_unit="uid", bounds=bounds, contribution=contribution, domains=domains
    )
    ctx = Context(
        budget=budget,
        privacy_unit="uid",
        bounds={c: ColumnBounds(c, lo, hi) for c, (lo, hi) in bounds.items()},
        contribution=contribution,
    )
    return aggregate_of(compile_plan(weigh(plan, "w"), ctx))


def change(agg: Aggregate, full: Exact, less: Exact) -> dict[str, Fraction]:
    out: dict[str, Fraction] = {}
    for m in agg.measurements:
        groups = set(full.stats) | set(less.stats)
        diffs = [
            full.stats.get(g, {}).get(m.name, 0) - less.stats.get(g, {}).get(m.name, 0)
            for g in groups
        ]
        norm = (
            sum(d * d for d in diffs)
            if m.mechanism == "discrete_gaussian"
            else sum(map(abs, diffs))
        )
        out[m.name] = Fraction(norm)
    return out


@pytest.mark.parametrize("budget", BUDGETS)
@pytest.mark.parametrize("w_bounds", W_BOUNDS)
@pytest.mark.parametrize("x_bounds", X_BOUNDS)
def test_removing_a_user_moves_each_weighted_statistic_by_at_most_its_sensitivity(
    x_bounds: tuple[float, float], w_bounds: tuple[float, float], budget: Budget
) -> None:
    df = weighted(x_bounds)
    engine = DuckDBEngine({"t": df})
    domains = {"g": ["a", "b", "c"]} if budget.kind == "zcdp" else None
    agg = compiled(engine, budget, {"x": x_bounds, "w": w_bounds}, Contribution(2, 3), domains)
    names = {m.name for m in agg.measurements}
    assert {"sum(w)", "sum(x * w)"} <= names
    full = exact(engine, agg, salt=0x5EED)
    worst: dict[str, Fraction] = {}
    for u in df["uid"].unique():
        rest = df[df["uid"] != u].reset_index(drop=True)
        less = exact(DuckDBEngine({"t": rest}), agg, salt=0x5EED)
        for name, moved in change(agg, full, less).items():
            m = next(x for x in agg.measurements if x.name == name)
            assert moved <= m.sensitivity, (
                f"removing unit {u} moved {name} by {moved}, more than {m.sensitivity}"
            )
            worst[name] = max(worst.get(name, Fraction(0)), moved / m.sensitivity)
    # the weights and the products move: the checks above could fail
    assert worst["sum(w)"] > 0
    assert worst["sum(x * w)"] > 0


def test_weighted_sensitivities_come_from_the_weights_and_product_bounds() -> None:
    engine = DuckDBEngine({"t": weighted((0.0, 1.0))})
    c = Contribution(2, 3)  # a unit: ≤ 2 groups, ≤ 3 rows each, so ≤ 6 rows
    agg = compiled(engine, Budget(epsilon=1.0), {"x": (-10, 60), "w": (0, 5)}, c, {"g": ["a"]})
    by_name = {m.name: m for m in agg.measurements}
    assert agg.bounds_of("x * w") == ColumnBounds("x * w", -50, 300)  # the corner products
    for name, width_of in (("sum(w)", lambda ce: max(5 - ce, ce)),
                           ("sum(x * w)", lambda ce: max(300 - ce, ce + 50))):  # fmt: skip
        m = by_name[name]
        width = Fraction(width_of(m.centre))
        # per row: the grid covers the largest |clamp(value) − centre| and no more than a step
        assert (m.limit - 1) * m.step < width <= m.limit * m.step
        # L1: one group here (public key "a"), so at most R = 3 rows of the unit count
        assert m.sensitivity == 3 * m.limit


@pytest.fixture(scope="module")
def duckdb_reference() -> dict[str, Any]:
    df = weighted((-0.3, 0.7))
    session = Session.local({"t": df}, privacy_unit="uid", budget=Budget(epsilon=10, delta=1e-3))
    agg = session_aggregate(session, SQL, **OPTIONS)
    return {"df": df, "stats": exact(session.engine, agg, salt=99).stats}


OPTIONS: dict[str, Any] = {
    "epsilon": 1,
    "delta": 1e-6,
    "bounds": {"x": (-0.3, 0.7), "w": (0.0, 10.0)},
    "weights": "w",
    # every unit keeps all its rows (≤ 7 rows, ≤ 3 groups): the engines' keyed hashes differ,
    # so a binding limit would keep different rows on each; here the sums must be equal
    "max_groups": 3,
    "max_rows_per_group": 7,
}


@pytest.mark.parametrize("harness", HARNESSES)
def test_every_engine_computes_the_same_weighted_statistics_and_releases_on_neighbours(
    harness: Harness, tmp_path: Path, duckdb_reference: dict[str, Any]
) -> None:
    df: pd.DataFrame = duckdb_reference["df"]
    table = pa.Table.from_pandas(df, preserve_index=False)
    session = harness.session(
        table, {}, tmp_path, privacy_unit="uid", budget=Budget(epsilon=10, delta=1e-3)
    )
    agg = session_aggregate(session, SQL, **OPTIONS)
    assert exact(session.engine, agg, salt=99).stats == duckdb_reference["stats"]
    session.close()
    # the outcome (released) is the same on a dataset and on each of three neighbours
    for u in (None, 0, 4, 8):
        rest = df if u is None else df[df["uid"] != u].reset_index(drop=True)
        s = harness.session(
            pa.Table.from_pandas(rest, preserve_index=False),
            {},
            tmp_path,
            privacy_unit="uid",
            budget=Budget(epsilon=10, delta=1e-3),
        )
        result = s.sql(SQL, **OPTIONS)
        assert result.columns == ("g", "n", "s", "m")
        s.close()
