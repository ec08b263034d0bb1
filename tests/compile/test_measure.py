"""Measurement choice, sharing, mechanism choice and the budget split."""

from __future__ import annotations

from fractions import Fraction

import pytest

from support import PEOPLE
from veil.accounting import Budget
from veil.accounting.conversions import zcdp_to_approx
from veil.compile.measure import FIXED_POINT_LIMIT, build, max_rho
from veil.errors import InvalidArgumentError
from veil.plan import (
    Aggregate,
    AggregateCall,
    ColumnBounds,
    Contribution,
    GroupKey,
)

INCOME = (ColumnBounds("income", 0, 1_000_000),)
COUNT_SUM_AVG = (
    AggregateCall("n", "count"),
    AggregateCall("total", "sum", "income"),
    AggregateCall("mean", "avg", "income"),
)


def agg(aggregates: tuple[AggregateCall, ...] = COUNT_SUM_AVG, **kw: object) -> Aggregate:
    args: dict[str, object] = {
        "keys": (GroupKey("state"),),
        "aggregates": aggregates,
        "privacy_unit": "user_id",
        "bounds": INCOME,
    }
    args.update(kw)
    return Aggregate(PEOPLE, **args)  # type: ignore[arg-type]


def test_count_sum_and_avg_share_one_count_and_one_centred_sum() -> None:
    d = build(agg(), Budget(epsilon=1, delta=Fraction(1, 10**6)))
    assert sorted(m.name for m in d.measurements) == ["count", "sum(income)"]
    total = next(m for m in d.measurements if m.statistic == "sum")
    assert total.centre == 500_000  # the midpoint of the bounds
    # the grid: the smallest power-of-two step with width/step ≤ 2^30, the limit the width
    # in steps (rounded up) — so 1/step is an exact double and no resolution is wasted
    assert total.step == Fraction(1, 2**11)
    assert (total.limit - 1) * total.step < 500_000 <= total.limit * total.step
    assert FIXED_POINT_LIMIT // 2 < total.limit <= FIXED_POINT_LIMIT


def test_the_split_is_the_cube_root_optimum_not_an_even_split() -> None:
    # COUNT + SUM + AVG on [0, U], one row per unit: A·D is 4 for the count and 3 for the
    # centred sum (in units of U²/4), so ε_count/ε_sum = (4/3)^(1/3)
    d = build(agg(), Budget(epsilon=1, delta=Fraction(1, 10**6)))
    eps = {m.name: float(m.budget.eps) for m in d.measurements}
    assert eps["count"] / eps["sum(income)"] == pytest.approx((4 / 3) ** (1 / 3), rel=1e-6)
    assert sum(eps.values()) == pytest.approx(1.0, abs=1e-12)


def test_the_chosen_split_has_lower_expected_error_than_an_even_split() -> None:
    d = build(agg(keys=()), Budget(epsilon=1))
    eps = {m.name: float(m.budget.eps) for m in d.measurements}

    def objective(e_count: float, e_sum: float) -> float:
        # Σ over COUNT, SUM, AVG of the relative variances (Laplace variance 2Δ²/ε²)
        r = 500_000.0
        m2 = r * r + r * r / 3
        v_n, v_s = 2 / e_count**2, 2 * r * r / e_sum**2
        return v_n + (v_s + r * r * v_n) / m2 + (v_s + r * r / 3 * v_n) / m2

    assert objective(eps["count"], eps["sum(income)"]) < objective(0.5, 0.5)


def test_the_charged_loss_is_exactly_the_requested_epsilon() -> None:
    d = build(agg(keys=(GroupKey("state", domain=("CA", "NY")),)), Budget(epsilon="0.3"))
    assert d.charged == Budget(epsilon="0.3")
    assert sum((m.budget.eps for m in d.measurements), Fraction(0)) == Fraction(3, 10)


def test_laplace_scales_are_sensitivity_over_epsilon() -> None:
    d = build(agg(contribution=Contribution(2, 3)), Budget(epsilon=1, delta=Fraction(1, 10**9)))
    for m in d.measurements:
        if m.mechanism == "discrete_laplace":
            per_group = 3 if m.statistic == "count" else 3 * m.limit
            assert m.sensitivity == 2 * per_group
            assert m.scale == m.sensitivity / m.budget.eps


def test_a_sum_alone_on_nonnegative_bounds_is_not_centred_and_needs_no_count() -> None:
    d = build(
        agg((AggregateCall("s", "sum", "income"),), keys=(GroupKey("state", domain=("A",)),)),
        Budget(epsilon=1),
    )
    assert [m.name for m in d.measurements] == ["sum(income)"]
    assert d.measurements[0].centre == 0


def test_unknown_keys_without_delta_are_refused_before_anything_runs() -> None:
    with pytest.raises(InvalidArgumentError, match="needs delta > 0; pass delta=1e-6"):
        build(agg(), Budget(epsilon=1))


def test_unknown_keys_get_a_selection_threshold_on_the_noisy_count() -> None:
    d = build(agg(), Budget(epsilon=1, delta=Fraction(1, 10**6)))
    assert d.selection is not None
    count = next(m for m in d.measurements if m.statistic == "count")
    assert d.selection.scale == count.scale
    assert d.selection.budget.delta == Fraction(1, 10**6)
    assert d.charged == Budget(epsilon=1, delta=Fraction(1, 10**6))


def test_public_keys_charge_no_delta_with_laplace_noise() -> None:
    d = build(agg(keys=(GroupKey("state", domain=("CA",)),)), Budget(epsilon=1, delta="1e-6"))
    assert d.charged == Budget(epsilon=1)


def test_many_groups_per_unit_with_delta_choose_gaussian_noise() -> None:
    d = build(
        agg(contribution=Contribution(max_groups=50)),
        Budget(epsilon=1, delta=Fraction(1, 10**6)),
    )
    assert {m.mechanism for m in d.measurements} == {"discrete_gaussian"}
    count = next(m for m in d.measurements if m.statistic == "count")
    assert count.sensitivity == 50  # squared L2: G·R²
    assert d.charged.delta == Fraction(1, 10**6)
    assert d.charged.eps <= 1


def test_one_group_per_unit_prefers_laplace_even_with_delta() -> None:
    d = build(agg(), Budget(epsilon=1, delta=Fraction(1, 10**6)))
    assert {m.mechanism for m in d.measurements} == {"discrete_laplace"}


def test_max_rho_converts_back_within_epsilon_and_is_near_tight() -> None:
    eps, delta = Fraction(1), Fraction(1, 10**6)
    rho = max_rho(eps, delta)
    assert zcdp_to_approx(rho, delta).eps <= eps
    assert zcdp_to_approx(rho * Fraction(1001, 1000), delta).eps > eps


def test_quantiles_take_their_weight_share_off_the_top() -> None:
    aggs = (
        AggregateCall("n", "count"),
        AggregateCall("med", "quantile", "age", quantile=Fraction(1, 2)),
        AggregateCall("hi", "max", "age", weight=2),
    )
    d = build(
        agg(aggs, keys=(), bounds=(ColumnBounds("age", 0, 100),)),
        Budget(epsilon=1),
        buckets=100,
    )
    eps = {m.name: m.budget.eps for m in d.measurements}
    assert eps["quantile(age, 1/2)"] == Fraction(1, 4)
    assert eps["quantile(age, 1)"] == Fraction(1, 2)
    assert eps["count"] == Fraction(1, 4)
    q = next(m for m in d.measurements if m.name == "quantile(age, 1/2)")
    # an integer column with integer bounds: the 101 integers 0…100 are the candidates
    assert (q.limit, q.step, q.sensitivity, q.discrete) == (101, 1, Fraction(1, 2), True)


def test_a_quantile_asked_twice_is_measured_once_with_both_shares() -> None:
    """``MAX(age) AS a, MAX(age) AS b`` (and ``QUANTILE(age, 1)``) is one measurement: the
    budget both would have spent goes to the one draw every name reads."""
    aggs = (
        AggregateCall("a", "max", "age"),
        AggregateCall("b", "max", "age"),
        AggregateCall("c", "quantile", "age", quantile=Fraction(1)),
        AggregateCall("n", "count"),
    )
    d = build(agg(aggs, keys=(), bounds=(ColumnBounds("age", 0, 100),)), Budget(epsilon=1))
    eps = {m.name: m.budget.eps for m in d.measurements}
    assert sorted(eps) == ["count", "quantile(age, 1)"]
    assert eps["quantile(age, 1)"] == Fraction(3, 4)
    assert d.charged == Budget(epsilon=1)
    once = build(agg(aggs[:1], keys=(), bounds=(ColumnBounds("age", 0, 100),)), Budget(epsilon=1))
    (m,) = once.measurements
    assert m.budget.eps == 1  # alone, the same measurement at the whole budget


def test_real_columns_are_cut_into_the_requested_number_of_buckets() -> None:
    d = build(
        agg((AggregateCall("med", "quantile", "income", quantile=Fraction(1, 2)),), keys=()),
        Budget(epsilon=1),
        buckets=100,
    )
    (q,) = d.measurements
    assert (q.limit, q.step, q.discrete) == (100, 10_000, False)


def test_weights_shift_budget_toward_the_weighted_aggregate() -> None:
    plain = build(agg(), Budget(epsilon=1, delta="1e-6"))
    weighted = build(
        agg(
            (
                AggregateCall("n", "count", weight=10),
                AggregateCall("total", "sum", "income"),
                AggregateCall("mean", "avg", "income"),
            )
        ),
        Budget(epsilon=1, delta="1e-6"),
    )
    count = {
        d: next(m.budget.eps for m in d.measurements if m.name == "count")
        for d in (plain, weighted)
    }
    assert count[weighted] > count[plain]


def test_a_tiny_epsilon_coarsens_the_fixed_point_grid_to_keep_noise_sampleable() -> None:
    d = build(
        agg(keys=(GroupKey("state", domain=("CA",)),), contribution=Contribution(1, 100)),
        Budget(epsilon="1e-6"),
    )
    total = next(m for m in d.measurements if m.statistic == "sum")
    assert total.limit < FIXED_POINT_LIMIT // 2
    assert total.step * total.limit == 500_000  # same width, coarser grid
    assert total.step.numerator & (total.step.numerator - 1) == 0  # still a power of two
    assert total.step.denominator & (total.step.denominator - 1) == 0
    assert total.scale <= 2**46
    assert d.charged == Budget(epsilon="1e-6")


def test_count_distinct_with_unknown_keys_thresholds_the_unit_count_without_a_hidden_count() -> (
    None
):
    d = build(
        agg((AggregateCall("u", "count_distinct", "user_id"),), contribution=Contribution(1, 5)),
        Budget(epsilon=1, delta=Fraction(1, 10**6)),
    )
    assert [m.name for m in d.measurements] == ["count_units"]
    assert d.selection is not None
    assert d.selection.scale == d.measurements[0].scale  # thresholds the unit count


def test_with_one_row_per_group_count_distinct_shares_the_row_count() -> None:
    d = build(
        agg(
            (AggregateCall("n", "count"), AggregateCall("u", "count_distinct", "user_id")),
            keys=(GroupKey("state", domain=("CA",)),),
        ),
        Budget(epsilon=1),
    )
    assert [m.name for m in d.measurements] == ["count"]
    assert d.measurements[0].budget == Budget(epsilon=1)
