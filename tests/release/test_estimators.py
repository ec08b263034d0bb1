"""Estimators and error bars: exact formulas on fixed statistics (their coverage by simulation:
``tests/statistical/test_estimator_coverage.py``)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from estimator_fixtures import NOISE, STEP, K, model, stats_for
from veil.noise.errorbars import combination_halfwidth, laplace_halfwidth
from veil.release.estimators import ColumnModel, estimate, halfwidth


def test_noise_free_statistics_give_back_the_exact_aggregates() -> None:
    values = [100.0, 250.0, 900.0, 30.0]
    st = stats_for(values)
    assert estimate(ColumnModel("n", "count", count="count"), st, NOISE) == 4
    assert estimate(model("sum"), st, NOISE) == pytest.approx(sum(values), abs=1e-4)
    assert estimate(model("avg"), st, NOISE) == pytest.approx(np.mean(values), abs=1e-6)
    assert estimate(model("variance"), st, NOISE) == pytest.approx(np.var(values, ddof=1), rel=1e-6)
    assert estimate(model("stddev"), st, NOISE) == pytest.approx(np.std(values, ddof=1), rel=1e-6)


def test_released_values_are_post_processed_into_their_ranges() -> None:
    st = {"count": -3, "sum(x)": 10 * K, "sum_squares(x)": -5 * K}
    assert estimate(ColumnModel("n", "count", count="count"), st, NOISE) == 0
    assert estimate(model("avg"), st, NOISE) == 1000.0  # clamped to the bounds
    assert estimate(model("sum"), st, NOISE) == 0.0  # n⁺ = 0 and lower bound 0
    assert estimate(model("variance"), st, NOISE) == 0.0


def test_a_counts_error_bar_is_the_exact_discrete_laplace_halfwidth() -> None:
    st = {"count": 10}
    c = ColumnModel("n", "count", count="count")
    assert halfwidth(c, st, 10, NOISE, 0.9) == laplace_halfwidth(Fraction(2), 0.9)


def test_a_sums_error_bar_is_the_quantile_of_its_two_noises_combined() -> None:
    st = stats_for([500.0] * 10)
    terms = [(float(STEP), "discrete_laplace", Fraction(K) * 2), (500.0, "discrete_laplace", 2)]
    want = combination_halfwidth(terms, 0.95)
    assert halfwidth(model("sum"), st, 5000.0, NOISE, 0.95) == want
    union = float(STEP) * laplace_halfwidth(Fraction(K) * 2, 0.975)
    union += 500 * laplace_halfwidth(Fraction(2), 0.975)
    assert want < 0.75 * union  # what the bar was before: both noises at 97.5 %, added


def test_an_averages_bar_is_the_whole_range_when_the_noisy_count_is_too_small() -> None:
    st = {"count": 3, "sum(x)": 0, "sum_squares(x)": 0}
    assert halfwidth(model("avg"), st, 500.0, NOISE, 0.95) == 1000.0


def test_column_models_are_remembered_per_aggregation_never_shared_between_two() -> None:
    import dataclasses

    import pyarrow as pa

    from veil import Budget, Session
    from veil.plan.tree import aggregate_of
    from veil.release.estimators import column_models

    table = pa.table({"x": [1.0, 2.0, 3.0]})
    with Session.local({"t": table}, budget=Budget(epsilon=10), bounds={"x": (0, 5)}) as s:
        counted = aggregate_of(s.explain("SELECT COUNT(*) AS n FROM t", epsilon=1).plan)
        summed = aggregate_of(s.explain("SELECT SUM(x) AS total FROM t", epsilon=1).plan)
    first = column_models(counted)
    assert column_models(counted) is first  # the same aggregation: remembered
    assert [c.alias for c in column_models(summed)] == ["total"]
    assert [c.alias for c in column_models(counted)] == ["n"]
    # an equal aggregation built again is modelled alike (from scratch: another object)
    copy = dataclasses.replace(counted)
    assert copy == counted
    assert copy is not counted
    assert column_models(copy) == first
    # without its measurements, a count reads none: the models say so, not the held ones
    bare = dataclasses.replace(counted, measurements=())
    assert column_models(bare)[0].count is None
    assert first[0].count is not None
