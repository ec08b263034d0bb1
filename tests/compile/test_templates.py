"""Lowered templates: the statements of a question, remembered across privacy parameters."""

from __future__ import annotations

from fractions import Fraction

import pytest
import sqlglot

from support import PEOPLE, compiled
from veil.accounting import Budget
from veil.compile import Context, apply_rules, dialect, lower, to_sql
from veil.compile.templates import template
from veil.plan import (
    Aggregate,
    AggregateCall,
    ColumnBounds,
    Contribution,
    Filter,
    GroupKey,
    aggregate_of,
)

STATES = (GroupKey("state", domain=("CA", "NY")),)
SHAPES: dict[str, tuple[tuple[GroupKey, ...], tuple[AggregateCall, ...], Contribution | None]] = {
    "count, sum and mean per public key": (
        STATES,
        (
            AggregateCall("n", "count"),
            AggregateCall("s", "sum", "income"),
            AggregateCall("m", "avg", "income"),
        ),
        None,
    ),
    "a maximum and a variance, keys not public": (
        (GroupKey("state"),),
        (AggregateCall("v", "variance", "income"), AggregateCall("x", "max", "income")),
        Contribution(max_groups=2, max_rows_per_group=3),
    ),
    "a median and a count": (
        (),
        (
            AggregateCall("n", "count"),
            AggregateCall("q", "quantile", "income", quantile=Fraction(1, 2)),
        ),
        None,
    ),
    "units counted": (STATES, (AggregateCall("u", "count_distinct", "user_id"),), None),
}


def of_shape(
    shape: str, budget: Budget, upper: int = 100, unit: str | None = "user_id"
) -> Aggregate:
    keys, aggregates, contribution = SHAPES[shape]
    return compiled(
        keys,
        aggregates,
        predicate="age >= 18",
        bounds=(ColumnBounds("income", 0, upper),),
        budget=budget,
        unit=unit,
        plan_unit=unit,
        contribution=contribution,
    )


def texts(lowered: object, name: str) -> list[str]:
    trees = [lowered.main, lowered.together, *(t for _, t in lowered.quantiles)]  # type: ignore[attr-defined]
    return [to_sql(t, name) for t in trees if t is not None]


BUDGETS = (
    Budget(epsilon=1, delta=Fraction(1, 10**6)),
    Budget(epsilon=Fraction(1, 37), delta=Fraction(1, 10**9)),
    Budget(epsilon=5, delta=Fraction(1, 10**5)),
)


@pytest.mark.parametrize("name", ["duckdb", "spark", "postgres"])
@pytest.mark.parametrize(
    ("shape", "unit"),
    [(s, u) for s in sorted(SHAPES) for u in ("user_id", None) if u or s != "units counted"],
)
def test_a_template_is_the_lowering_of_its_aggregation_with_a_salt_placeholder(
    name: str, shape: str, unit: str | None
) -> None:
    for budget in BUDGETS:
        agg = of_shape(shape, budget, unit=unit)
        expected = texts(lower(agg, dialect(name), salt=None), name)
        assert texts(template(agg, dialect(name)), name) == expected
        wide = texts(lower(agg, dialect(name), salt=None, exact_sums=True), name)
        assert texts(template(agg, dialect(name), exact_sums=True), name) == wide


def test_a_new_budget_reuses_the_template_and_new_bounds_do_not() -> None:
    first = template(of_shape("count, sum and mean per public key", BUDGETS[0]), dialect("duckdb"))
    again = template(of_shape("count, sum and mean per public key", BUDGETS[1]), dialect("duckdb"))
    assert again is first  # the privacy parameters change the noise only, never the SQL
    wider = template(
        of_shape("count, sum and mean per public key", BUDGETS[1], upper=1000), dialect("duckdb")
    )
    assert wider is not first
    assert texts(wider, "duckdb") != texts(first, "duckdb")


def test_a_template_keeps_the_salt_a_placeholder_in_every_bounding_hash() -> None:
    shape = "a maximum and a variance, keys not public"
    for sql in texts(template(of_shape(shape, BUDGETS[0]), dialect("duckdb")), "duckdb"):
        assert "$salt" in sql
        assert sql.count("HASH($salt") == sql.count("HASH(")  # no literal salt anywhere


def by_level(labels: tuple[object, object]) -> Aggregate:
    """A sum of age per public level ``labels`` (an income column's values), bounded per
    level: the labels are written in the SQL, in the key's domain and the per-group bounds."""
    bounds = ColumnBounds("age", 0, 100, ((labels[0], 0, 50), (labels[1], 0, 100)))
    plan = Aggregate(
        Filter(PEOPLE, sqlglot.parse_one("age >= 18")),
        keys=(GroupKey("income", domain=labels),),
        aggregates=(AggregateCall("s", "sum", "age"),),
        privacy_unit="user_id",
        bounds=(bounds,),
    )
    return aggregate_of(apply_rules(plan, Context(budget=BUDGETS[0], privacy_unit="user_id")))


@pytest.mark.parametrize("name", ["duckdb", "postgres"])
def test_labels_that_compare_equal_are_lowered_apart(name: str) -> None:
    """1 == 1.0 and 0.0 == -0.0, and aggregations holding them compare equal, but each is
    lowered to its own constants: a template remembered for one is not the other's."""
    for group in (((1, 2), (1.0, 2.0)), ((0.0, 2.0), (-0.0, 2.0))):
        for order in (group, group[::-1]):
            aggs = [by_level(labels) for labels in order]
            assert aggs[0] == aggs[1]  # what a memo keyed by == alone would conflate
            got = [texts(template(a, dialect(name)), name) for a in aggs]
            assert got == [texts(lower(a, dialect(name), salt=None), name) for a in aggs]
            assert got[0] != got[1]
