"""Neighbouring datasets: removing one privacy unit moves every pre-noise aggregate by at most
the sensitivity the compiled plan claims — with adversarial floats that break naive float sums,
with and without a privacy unit, with contribution bounding active.

For each data set D and each unit u, the same compiled query is lowered with the same salt and
run on D and on D − u; per measurement, the change over all groups must satisfy
``Σ|Δ| ≤ sensitivity`` (discrete Laplace, L1), ``ΣΔ² ≤ sensitivity`` (discrete Gaussian, which
stores the squared L2 sensitivity) or, per group and candidate, ``|Δscore| ≤ sensitivity``
(exponential mechanism for quantiles).
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import duckdb
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from system.prenoise import Exact, compile_query, exact
from veil import Budget
from veil.engines.duckdb import DuckDBEngine
from veil.plan.nodes import Aggregate, Contribution
from veil.release.quantiles import score_change

QUERY = (
    "SELECT g, COUNT(*) AS n, SUM(x) AS s, AVG(x) AS m, VARIANCE(x) AS v, MEDIAN(x) AS med "
    "FROM t GROUP BY g"
)
QUERY_UNITS = "SELECT g, COUNT(DISTINCT uid) AS users, SUM(x) AS s FROM t GROUP BY g"

TINY = 5e-324  # the smallest subnormal
# Values that break naive float arithmetic: huge magnitudes next to ones (absorbed in a float
# sum, reappearing when the big value leaves), 0.1-style inexact decimals, ±0, subnormals,
# 2^53 neighbours, infinities, NaN and NULL (left out by the NULL rule).
ADVERSARIAL = (
    1e16, -1.0, -1.0, 1.0, 0.1, 0.2, 0.3, -0.0, TINY, 2.0**53, 2.0**53 + 2, 1e308, -1e308,
    0.49999999999999994, math.inf, -math.inf, math.nan, None, -1e16, 1e16 - 2,
)  # fmt: skip

BOUNDS = [
    pytest.param((-1.0, 1e16), id="ones-beside-1e16"),
    pytest.param((0.0, 1.0), id="unit-interval"),
    pytest.param((-1e16, 1e16), id="symmetric-1e16"),
    pytest.param((1e16, 1e16 + 2), id="centre-not-a-double"),
    pytest.param((-0.3, 0.7), id="inexact-decimals"),
]


def _near(b: float) -> list[float]:
    """b and its float neighbours: values on and just outside a bound."""
    return [math.nextafter(b, -math.inf), b, math.nextafter(b, math.inf)]


def dataset(bounds: tuple[float, float], units: int = 9) -> pd.DataFrame:
    """Units with 1–7 rows over groups a/b/c (some in all three, some with many rows in one),
    values drawn in turn from the adversarial list and the neighbours of both bounds."""
    values = [*ADVERSARIAL, *_near(bounds[0]), *_near(bounds[1])]
    rows: list[dict[str, Any]] = []
    i = 0
    for uid in range(units):
        for r in range(1 + (uid * 5) % 7):
            rows.append({"uid": uid, "g": "abc"[(uid + r * (uid % 3)) % 3], "x": values[i]})
            i = (i + 1) % len(values)
    return pd.DataFrame(rows).astype({"uid": "int64", "g": "string", "x": "float64"})


def _change(agg: Aggregate, full: Exact, less: Exact) -> dict[str, Fraction]:
    """Per measurement: the observed change in the norm its sensitivity bounds."""
    out: dict[str, Fraction] = {}
    for m in agg.measurements:
        if m.statistic == "quantile":
            groups = set(full.buckets[m.name]) | set(less.buckets[m.name])
            worst = Fraction(0)
            for g in groups:
                # over the whole 2^32-cell grid (score_change equals the candidate-by-candidate
                # comparison on small grids: tests/release/test_quantiles.py)
                a, b = full.buckets[m.name].get(g, {}), less.buckets[m.name].get(g, {})
                worst = max(worst, score_change(m, a, b))
            out[m.name] = worst
            continue
        groups = set(full.stats) | set(less.stats)
        diffs = [
            full.stats.get(g, {}).get(m.name, 0) - less.stats.get(g, {}).get(m.name, 0)
            for g in groups
        ]
        if m.mechanism == "discrete_gaussian":
            out[m.name] = Fraction(sum(d * d for d in diffs))
        else:
            out[m.name] = Fraction(sum(abs(d) for d in diffs))
    return out


def check_every_neighbour(
    df: pd.DataFrame,
    sql: str,
    *,
    budget: Budget,
    bounds: dict[str, tuple[float, float]],
    privacy_unit: str | None,
    contribution: Contribution | None = None,
    domains: dict[str, list[Any]] | None = None,
    salt: int = 0x5EED,
) -> tuple[Aggregate, dict[str, Fraction]]:
    """Remove each unit (each row without a privacy unit) in turn; assert every change is
    within the claimed sensitivity; return the compiled aggregation and, per measurement, the
    largest change/sensitivity ratio seen."""
    engine = DuckDBEngine({"t": df})
    agg = compile_query(
        engine,
        sql,
        budget=budget,
        privacy_unit=privacy_unit,
        bounds=bounds,
        contribution=contribution,
        domains=domains,
    )
    full = exact(engine, agg, salt=salt)
    units = df[privacy_unit].unique() if privacy_unit else range(len(df))
    worst: dict[str, Fraction] = {}
    for u in units:
        if privacy_unit is None:
            rest = df.drop(index=df.index[u])
        elif pd.isna(u):  # all rows with a NULL unit are one unit (the session's NULL rule)
            rest = df[df[privacy_unit].notna()]
        else:
            rest = df[df[privacy_unit].ne(u).fillna(True)]
        less = exact(DuckDBEngine({"t": rest.reset_index(drop=True)}), agg, salt=salt)
        for name, change in _change(agg, full, less).items():
            m = next(x for x in agg.measurements if x.name == name)
            assert change <= m.sensitivity, (
                f"removing unit {u} moved {name} ({m.mechanism}) by {change}, more than its "
                f"sensitivity {m.sensitivity}"
            )
            worst[name] = max(worst.get(name, Fraction(0)), change / m.sensitivity)
    return agg, worst


@pytest.mark.parametrize("bounds", BOUNDS)
def test_removing_a_user_moves_each_bounded_statistic_by_at_most_its_sensitivity(
    bounds: tuple[float, float],
) -> None:
    _, worst = check_every_neighbour(
        dataset(bounds),
        QUERY,
        budget=Budget(epsilon=1.0, delta=1e-6),
        bounds={"x": bounds},
        privacy_unit="uid",
        contribution=Contribution(max_groups=2, max_rows_per_group=3),
    )
    assert set(worst) >= {"count"}, worst


@pytest.mark.parametrize("bounds", BOUNDS)
def test_removing_a_user_respects_sensitivity_with_public_keys_and_pure_epsilon(
    bounds: tuple[float, float],
) -> None:
    check_every_neighbour(
        dataset(bounds),
        QUERY,
        budget=Budget(epsilon=1.0),
        bounds={"x": bounds},
        privacy_unit="uid",
        contribution=Contribution(max_groups=1, max_rows_per_group=2),
        domains={"g": ["a", "b", "c", "d"]},
    )


@pytest.mark.parametrize("bounds", BOUNDS)
def test_removing_a_user_respects_the_squared_l2_sensitivity_of_gaussian_noise(
    bounds: tuple[float, float],
) -> None:
    agg, worst = check_every_neighbour(
        dataset(bounds),
        QUERY,
        budget=Budget(rho=0.5),  # zCDP: discrete Gaussian, sensitivity stored as L2²
        bounds={"x": bounds},
        privacy_unit="uid",
        contribution=Contribution(max_groups=3, max_rows_per_group=2),
        domains={"g": ["a", "b", "c"]},
    )
    gaussian = {m.name for m in agg.measurements if m.mechanism == "discrete_gaussian"}
    assert {"count", "sum(x)"} <= gaussian
    assert worst["count"] > Fraction(1, 2)  # several groups moved at once: L2² is exercised


@pytest.mark.parametrize("bounds", BOUNDS)
def test_removing_a_row_respects_sensitivity_without_a_privacy_unit(
    bounds: tuple[float, float],
) -> None:
    check_every_neighbour(
        dataset(bounds, units=6),
        QUERY,
        budget=Budget(epsilon=1.0, delta=1e-6),
        bounds={"x": bounds},
        privacy_unit=None,
    )


def test_rows_without_a_user_id_count_as_one_user_for_the_sensitivity() -> None:
    df = dataset((0.0, 1.0)).astype({"uid": "Int64"})
    df.loc[df.index % 4 == 0, "uid"] = pd.NA  # a quarter of the rows, across groups
    _, worst = check_every_neighbour(
        df,
        QUERY,
        budget=Budget(epsilon=1.0, delta=1e-6),
        bounds={"x": (0.0, 1.0)},
        privacy_unit="uid",
        contribution=Contribution(max_groups=2, max_rows_per_group=2),
    )
    assert worst["count"] > 0


def test_removing_a_user_respects_sensitivity_of_distinct_user_counts() -> None:
    check_every_neighbour(
        dataset((-1.0, 1e16)),
        QUERY_UNITS,
        budget=Budget(epsilon=1.0),
        bounds={"x": (-1.0, 1e16)},
        privacy_unit="uid",
        contribution=Contribution(max_groups=3, max_rows_per_group=4),
        domains={"g": ["a", "b", "c"]},
    )


def test_the_bound_is_reached_so_the_check_can_fail() -> None:
    # One user per group with the largest possible contribution: removing a user must move the
    # fixed-point sum by (nearly) the whole sensitivity — a check that never comes close to its
    # bound would not notice a sensitivity claimed too small by a factor of two.
    df = pd.DataFrame({"uid": [0, 0, 1], "g": ["a", "a", "b"], "x": [1e16, 1e16, -1.0]})
    _, worst = check_every_neighbour(
        df,
        "SELECT g, SUM(x) AS s, COUNT(*) AS n FROM t GROUP BY g",
        budget=Budget(epsilon=1.0),
        bounds={"x": (-1.0, 1e16)},
        privacy_unit="uid",
        contribution=Contribution(max_groups=1, max_rows_per_group=2),
        domains={"g": ["a", "b"]},
    )
    assert worst["count"] == 1
    assert max(v for k, v in worst.items() if k != "count") > Fraction(99, 100)


def test_naive_float_sums_on_the_same_data_exceed_the_sensitivity() -> None:
    # The adversarial data really is adversarial: DuckDB's plain float SUM of the clamped values
    # moves by more than the largest |value| when the 1e16 user leaves (the −1s it absorbed
    # reappear) — the failure veil's fixed-point integer sums are tested against above.
    df = pd.DataFrame({"uid": range(10), "x": [1e16] + [-1.0] * 9})
    con = duckdb.connect()
    con.register("t", df)
    clamp = "LEAST(GREATEST(x, -1.0), 1e16)"
    (full,) = con.sql(f"SELECT SUM({clamp}) FROM t").fetchall()[0]
    (rest,) = con.sql(f"SELECT SUM({clamp}) FROM t WHERE uid <> 0").fetchall()[0]
    assert Fraction(full) - Fraction(rest) > Fraction(1e16)
    _, worst = check_every_neighbour(
        df,
        "SELECT SUM(x) AS s FROM t",
        budget=Budget(epsilon=1.0),
        bounds={"x": (-1.0, 1e16)},
        privacy_unit="uid",
    )
    assert all(v <= 1 for v in worst.values())


_floats = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([v for v in ADVERSARIAL if v is not None]),
    st.none(),
)


@pytest.mark.slow
@settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    rows=st.lists(
        st.tuples(st.integers(0, 5) | st.none(), st.sampled_from(["a", "b", "c"]), _floats),
        min_size=1,
        max_size=25,
    ),
    bounds=st.sampled_from([(-1.0, 1e16), (0.0, 1.0), (-1e16, 1e16), (1e16, 1e16 + 2)]),
    limits=st.tuples(st.integers(1, 3), st.integers(1, 3)),
)
def test_any_data_set_keeps_every_neighbour_within_sensitivity(
    rows: list[tuple[int | None, str, float | None]],
    bounds: tuple[float, float],
    limits: tuple[int, int],
) -> None:
    df = pd.DataFrame(rows, columns=["uid", "g", "x"]).astype(
        {"uid": "Int64", "g": "string", "x": "float64"}
    )
    check_every_neighbour(
        df,
        QUERY,
        budget=Budget(epsilon=1.0, delta=1e-6),
        bounds={"x": bounds},
        privacy_unit="uid",
        contribution=Contribution(max_groups=limits[0], max_rows_per_group=limits[1]),
    )
