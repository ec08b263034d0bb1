"""The exact statistics' per-group bounds, sensitivities and SQL (``veil.compile.statistics``)."""

from __future__ import annotations

import dataclasses
from fractions import Fraction
from functools import partial

import pytest
from sqlglot import exp

import support
from support import PEOPLE
from veil.accounting import Budget
from veil.compile import dialect, lower, to_sql
from veil.compile.statistics import (
    bucket_sql,
    effective_groups,
    per_group_bound,
    rows_per_group,
    sensitivity,
    statistic_sql,
    thresholded,
)
from veil.errors import InternalError
from veil.plan import (
    Aggregate,
    AggregateCall,
    ColumnBounds,
    Contribution,
    GroupKey,
)
from veil.plan.nodes import Measurement

ONE = Contribution()


def plan(
    keys: tuple[GroupKey, ...] = (GroupKey("state"),),
    unit: str | None = "user_id",
    contribution: Contribution = ONE,
    aggregates: tuple[AggregateCall, ...] = (AggregateCall("n", "count"),),
) -> Aggregate:
    return Aggregate(
        PEOPLE,
        keys=keys,
        aggregates=aggregates,
        bounds=(ColumnBounds("income", 0, 100),),
        privacy_unit=unit,
        contribution=contribution,
    )


compiled = partial(support.compiled, plan_unit="user_id")


class Terms:
    """A minimal :class:`veil.compile.statistics.PerRow` writing plain SQL terms."""

    wide: str | None = None
    integer_type = "BIGINT"
    one_row_per_unit = True

    def scaled(self, m: Measurement) -> exp.Expr:
        return exp.column("x")

    def integer(self, e: exp.Expr, lo: int, hi: int) -> exp.Expr:
        return e

    below = True  # whether scaled values can be negative (above_centre)

    def clamp(self, e: exp.Expr, lo: exp.Expr | None, hi: exp.Expr) -> exp.Expr:
        return exp.func("LEAST", e if lo is None else exp.func("GREATEST", e, lo), hi)

    def above_centre(self, m: Measurement) -> bool:
        return not self.below

    unclamped = False  # whether the column's clamps keep the cell in range (``cell``)

    def cell(self, m: Measurement) -> exp.Expr | None:
        return exp.func("FLOOR", exp.column("y")) if self.unclamped else None

    def cast(self, e: exp.Expr, to: str) -> exp.Expr:
        return exp.Cast(this=e, to=exp.DataType.build(to, dialect="duckdb"))


def measurement(statistic: str, quantile: Fraction | None = None) -> Measurement:
    return Measurement(
        name=f"{statistic}(income)",
        statistic=statistic,  # type: ignore[arg-type]
        mechanism="exponential" if statistic == "quantile" else "discrete_laplace",
        budget=Budget(epsilon=1),
        sensitivity=Fraction(1),
        scale=Fraction(2),
        column="income",
        limit=8,
        quantile=quantile,
    )


# ── R and G ────────────────────────────────────────────────────────────────────────────────


def test_rows_per_group_is_one_with_row_level_privacy() -> None:
    assert rows_per_group(plan(unit=None, contribution=Contribution(1, 1))) == 1
    assert rows_per_group(plan(contribution=Contribution(2, 7))) == 7


def test_a_unit_touches_one_group_without_group_by_or_without_a_unit() -> None:
    assert effective_groups(plan(keys=(), contribution=Contribution(9, 1))) == 1
    assert effective_groups(plan(unit=None)) == 1


def test_unknown_keys_let_a_unit_touch_max_groups() -> None:
    assert effective_groups(plan(contribution=Contribution(9, 1))) == 9


def test_public_keys_cap_the_groups_a_unit_can_touch() -> None:
    two = (GroupKey("state", domain=("CA", "NY")),)
    assert effective_groups(plan(keys=two, contribution=Contribution(9, 1))) == 2
    # three keys of three values: 9 possible groups, max_groups 5 is reached on the way
    many = (
        GroupKey("state", domain=("CA", "NY", "TX")),
        GroupKey("age", domain=(1, 2, 3)),
    )
    assert effective_groups(plan(keys=many, contribution=Contribution(5, 1))) == 5
    assert effective_groups(plan(keys=many, contribution=Contribution(50, 1))) == 9


# ── the per-group bound of each statistic ────────────────────────────────────────────────


def test_per_group_bounds_follow_the_proof_note() -> None:
    agg = plan(contribution=Contribution(1, 4))
    assert per_group_bound(agg, "count", 1) == 4
    assert per_group_bound(agg, "count_units", 1) == 1
    assert per_group_bound(agg, "sum", 10) == 40
    assert per_group_bound(agg, "sum_squares", 10) == 40
    assert per_group_bound(agg, "quantile", 10, Fraction(1, 4)) == 3  # R·max(q, 1 − q)
    assert per_group_bound(agg, "quantile", 10, Fraction(9, 10)) == Fraction(18, 5)


def test_a_quantile_bound_without_q_is_an_internal_error() -> None:
    with pytest.raises(InternalError, match="a quantile measurement without q"):
        per_group_bound(plan(), "quantile", 10)


def test_sensitivities_scale_with_the_groups_a_unit_touches() -> None:
    agg = plan(contribution=Contribution(3, 2))
    assert sensitivity(agg, "count", "discrete_laplace", 1) == 6  # L1 = G·R
    assert sensitivity(agg, "count", "discrete_gaussian", 1) == 12  # L2² = G·R²
    # the exponential mechanism's score bound is per group (composition is in the budget)
    assert sensitivity(agg, "quantile", "exponential", 8, Fraction(1, 2)) == 1


def test_selection_thresholds_the_row_count_before_the_unit_count() -> None:
    units = measurement("count_units")
    rows = dataclasses.replace(units, name="count", statistic="count")
    assert thresholded([units, rows]) is rows
    assert thresholded([units]) is units
    assert thresholded([measurement("sum")]) is None


# ── the SQL ──────────────────────────────────────────────────────────────────────────────────


def test_statistic_sql_refuses_a_quantile_measurement() -> None:
    m = measurement("quantile", Fraction(1, 2))
    with pytest.raises(InternalError, match=r"'quantile\(income\)' is computed per bucket"):
        statistic_sql(m, Terms())


def test_bucket_sql_refuses_a_measurement_that_is_not_a_quantile() -> None:
    with pytest.raises(InternalError, match=r"'sum\(income\)' is not a quantile measurement"):
        bucket_sql(measurement("sum"), Terms())


def test_a_bucket_is_clamped_to_the_buckets_before_the_cast() -> None:
    sql = bucket_sql(measurement("quantile", Fraction(1, 2)), Terms()).sql()
    assert sql == "CAST(LEAST(GREATEST(FLOOR(x), 0), 7) AS BIGINT)"
    above = Terms()
    above.below = False  # every clamp's lower bound at least the centre: no lower clamp
    sql = bucket_sql(measurement("quantile", Fraction(1, 2)), above).sql()
    assert sql == "CAST(LEAST(FLOOR(x), 7) AS BIGINT)"
    # where the column's clamp keeps the cell in range, no clamp of its own; cast as asked
    above.unclamped = True
    sql = bucket_sql(measurement("quantile", Fraction(1, 2)), above, "UINTEGER").sql()
    assert sql == "CAST(FLOOR(y) AS UINT)"  # (sqlglot's own spelling of UINTEGER)


def test_a_sum_accumulates_in_the_wide_type_when_there_is_one() -> None:
    terms = Terms()
    terms.wide = "DECIMAL(38, 0)"
    assert statistic_sql(measurement("sum"), terms).sql() == "SUM(CAST(x AS DECIMAL(38, 0)))"
    assert statistic_sql(measurement("sum"), Terms()).sql() == "SUM(x)"


def test_units_are_counted_by_their_first_row_when_a_unit_keeps_several() -> None:
    agg = compiled(
        aggregates=(AggregateCall("u", "count_distinct", "user_id"),),
        contribution=Contribution(1, 3),
    )
    assert [m.statistic for m in agg.measurements] == ["count_units"]
    sql = to_sql(lower(agg, dialect("duckdb"), salt=1).main, "duckdb")
    assert 'SUM(CASE WHEN "__rn" = 1 THEN 1 ELSE 0 END) AS "__u"' in sql
    # and partition selection thresholds that unit count, whose per-group bound is 1
    assert agg.selection is not None
    assert agg.selection.scale == agg.measurements[0].scale


def test_units_are_rows_when_each_unit_keeps_one_row() -> None:
    agg = compiled(
        aggregates=(AggregateCall("n", "count"), AggregateCall("u", "count_distinct", "user_id")),
        contribution=Contribution(1, 1),
    )
    # one row per unit: the unit count is the row count, one measurement
    assert [m.statistic for m in agg.measurements] == ["count"]
    sql = to_sql(lower(agg, dialect("duckdb"), salt=1).main, "duckdb")
    assert '"__rn" = 1 THEN' not in sql


def test_counts_are_counts_of_rows_when_asked_directly() -> None:
    assert statistic_sql(measurement("count"), Terms()).sql() == "COUNT(*)"
    assert statistic_sql(measurement("count_units"), Terms()).sql() == "COUNT(*)"


def test_a_sum_of_squares_sums_twice_the_rounded_square_minus_the_limit() -> None:
    sql = statistic_sql(measurement("sum_squares"), Terms()).sql()
    assert sql == "SUM(2 * POWER(x, 2) / 8 - 8)"


def test_a_statistic_outside_the_closed_set_fails_loudly() -> None:
    unknown = "median"
    with pytest.raises(AssertionError, match="Expected code to be unreachable"):
        per_group_bound(plan(), unknown, 1)  # type: ignore[arg-type]
    m = dataclasses.replace(measurement("sum"), statistic=unknown)
    with pytest.raises(AssertionError, match="Expected code to be unreachable"):
        statistic_sql(m, Terms())


def test_each_compiled_sensitivity_is_recomputed_from_the_plan() -> None:
    agg = compiled(
        aggregates=(AggregateCall("n", "count"), AggregateCall("v", "variance", "income")),
        contribution=Contribution(3, 2),
    )
    for m in agg.measurements:
        assert sensitivity(agg, m.statistic, m.mechanism, m.limit, m.quantile) == m.sensitivity
    loosened = dataclasses.replace(agg, contribution=Contribution(3, 4))
    count = next(m for m in agg.measurements if m.statistic == "count")
    recomputed = sensitivity(loosened, count.statistic, count.mechanism, count.limit)
    assert recomputed == 2 * count.sensitivity
