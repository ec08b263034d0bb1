"""Each rewrite rule on input/expected plan fixtures."""

from __future__ import annotations

from fractions import Fraction

import pytest

from support import PEOPLE
from veil.accounting import Budget
from veil.compile.rules import (
    RULES,
    Context,
    apply_rules,
    build_measurements,
    check_domains,
    check_numbers,
    resolve_bounds,
    set_contribution,
    set_privacy_unit,
)
from veil.errors import BoundsError, InvalidArgumentError, UnsupportedQueryError
from veil.plan import (
    Aggregate,
    AggregateCall,
    ColumnBounds,
    Contribution,
    GroupKey,
    Limit,
    aggregate_of,
)

CTX = Context(budget=Budget(epsilon=1))


def agg(**kw: object) -> Aggregate:
    args: dict[str, object] = {
        "keys": (GroupKey("state", domain=("CA", "NY")),),
        "aggregates": (AggregateCall("n", "count"),),
    }
    args.update(kw)
    return Aggregate(PEOPLE, **args)  # type: ignore[arg-type]


def test_rules_run_in_the_documented_order() -> None:
    assert (
        check_domains,
        set_privacy_unit,
        set_contribution,
        resolve_bounds,
        check_numbers,
        build_measurements,
    ) == RULES


def test_set_privacy_unit_adds_the_sessions_unit() -> None:
    out = set_privacy_unit(agg(), Context(budget=Budget(epsilon=1), privacy_unit="user_id"))
    assert out == agg(privacy_unit="user_id")


def test_set_privacy_unit_keeps_a_plan_without_session_unit_unchanged() -> None:
    plan = agg()
    assert set_privacy_unit(plan, CTX) is plan


def test_set_privacy_unit_refuses_a_conflicting_unit() -> None:
    with pytest.raises(UnsupportedQueryError, match="differs from the session's 'user_id'"):
        set_privacy_unit(
            agg(privacy_unit="age"), Context(budget=Budget(epsilon=1), privacy_unit="user_id")
        )


def test_set_contribution_applies_the_override_under_the_post_processing_nodes() -> None:
    plan = Limit(agg(privacy_unit="user_id"), 1)
    ctx = Context(budget=Budget(epsilon=1), contribution=Contribution(3, 2))
    out = set_contribution(plan, ctx)
    assert out == Limit(agg(privacy_unit="user_id", contribution=Contribution(3, 2)), 1)


def test_set_contribution_is_one_and_one_for_row_level_privacy() -> None:
    ctx = Context(budget=Budget(epsilon=1), contribution=Contribution(3, 2))
    assert set_contribution(agg(), ctx) == agg(contribution=Contribution(1, 1))


def test_resolve_bounds_takes_the_querys_bounds_over_the_plans() -> None:
    plan = agg(
        aggregates=(AggregateCall("s", "sum", "income"),),
        bounds=(ColumnBounds("income", 0, 10),),
    )
    ctx = Context(budget=Budget(epsilon=1), bounds={"income": ColumnBounds("income", 0, 99)})
    out = aggregate_of(resolve_bounds(plan, ctx))
    assert out.bounds == (ColumnBounds("income", 0, 99),)


def test_resolve_bounds_drops_bounds_no_aggregate_needs() -> None:
    plan = agg(bounds=(ColumnBounds("income", 0, 10),))
    assert aggregate_of(resolve_bounds(plan, CTX)).bounds == ()


def test_a_summed_column_without_bounds_fails_with_the_fix() -> None:
    plan = agg(aggregates=(AggregateCall("s", "sum", "income"),))
    with pytest.raises(BoundsError, match=r"bounds=\{'income': \(lower, upper\)\}"):
        resolve_bounds(plan, CTX)


def test_build_measurements_fills_budget_measurements_and_no_selection_for_public_keys() -> None:
    out = aggregate_of(build_measurements(agg(), CTX))
    assert out.budget == Budget(epsilon=1)
    assert [m.name for m in out.measurements] == ["count"]
    assert out.measurements[0].scale == 1  # Δ = 1 row, ε = 1
    assert out.selection is None


def test_build_measurements_refuses_zero_epsilon() -> None:
    with pytest.raises(InvalidArgumentError, match="epsilon > 0"):
        build_measurements(agg(), Context(budget=Budget(epsilon=0)))


def test_apply_rules_gives_a_fully_compiled_plan() -> None:
    plan = agg(
        aggregates=(AggregateCall("n", "count"), AggregateCall("m", "avg", "income")),
        bounds=(ColumnBounds("income", 0, 100),),
    )
    ctx = Context(
        budget=Budget(epsilon=Fraction(1, 2)),
        privacy_unit="user_id",
        contribution=Contribution(1, 2),
    )
    out = aggregate_of(apply_rules(plan, ctx))
    assert out.privacy_unit == "user_id"
    assert out.contribution == Contribution(1, 2)
    assert {m.name for m in out.measurements} == {"count", "sum(income)"}
    assert sum((m.budget.eps for m in out.measurements), Fraction(0)) == Fraction(1, 2)
