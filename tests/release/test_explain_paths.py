"""The dry run's text: plan outline, what each part of the budget pays for, the budget line."""

from __future__ import annotations

from fractions import Fraction
from functools import partial

import support
from support import people
from veil.accounting import Budget
from veil.plan import (
    AggregateCall,
    Contribution,
    GroupKey,
)
from veil.plan.nodes import Limit, Project
from veil.release.explain import Explanation, describe_usage, plan_tree

ONE = Contribution()


compiled = partial(
    support.compiled,
    aggregates=(
        AggregateCall("v", "variance", "income"),
        AggregateCall("q", "quantile", "income", Fraction(1, 4), weight=Fraction(2)),
    ),
    keys=(GroupKey("state", domain=tuple(f"S{i}" for i in range(50))),),
    table=people("user_id", "state", "income"),
    predicate="income > 0",
    contribution=ONE,
)


def test_the_outline_shows_filters_weights_quantiles_limits_and_projections() -> None:
    agg = compiled(budget=Budget(epsilon=1))
    tree = plan_tree(Project(Limit(agg, count=5, offset=2), ("q",))).splitlines()
    assert tree[0] == "Project q"
    assert tree[1] == "  Limit 5 offset 2"
    assert tree[2].startswith("    Aggregate by state (public): v = VARIANCE(income); ")
    assert "q = QUANTILE(income, 1/4) weight 2" in tree[2]
    assert tree[2].endswith("| clamp income ∈ [0, 100]")
    assert tree[3] == "      Filter income > 0"
    assert tree[4] == "        Scan people (user_id, state, income)"


def test_gaussian_usage_gives_the_l2_sensitivity_in_value_and_squared_units() -> None:
    agg = compiled(
        budget=Budget(epsilon=1, delta=Fraction(1, 10**6)), contribution=Contribution(50, 1)
    )
    usage = {u.measurement: u for u in describe_usage(agg)}
    assert {u.mechanism for u in usage.values()} == {"discrete_gaussian", "exponential"}
    assert usage["count"].sensitivity == "L2 = 7.07107 rows"  # sqrt(G·R²), G = 50
    assert usage["sum(income)"].sensitivity.endswith("(value units)")
    assert usage["sum_squares(income)"].sensitivity.endswith("(squared units)")
    assert usage["count"].noise.startswith("discrete Gaussian, σ = ")
    q = usage["quantile(income, 1/4)"]
    assert q.sensitivity == "score sensitivity Δ = 0.75 per group"
    assert "× 50 group(s) per unit" in q.noise
    assert q.used_by == ("q",)


def test_the_budget_line_says_whether_the_grant_covers_the_cost() -> None:
    agg = compiled(budget=Budget(epsilon=1))
    base = Explanation(agg, "SELECT 1", (), Budget(epsilon=1), (), {}, "1 group, 1 row")
    assert base.budget_line == "no budget is granted to this analyst on this dataset"
    rich = Explanation(
        agg,
        "SELECT 1",
        (),
        Budget(epsilon=1),
        (),
        {},
        "",
        remaining=Budget(epsilon=2),
        covered=True,
    )
    assert rich.budget_line.endswith(": covers it")
    poor = Explanation(
        agg,
        "SELECT 1",
        (),
        Budget(epsilon=1),
        (),
        {},
        "",
        remaining=Budget(epsilon="0.5"),
        covered=False,
    )
    assert poor.budget_line.endswith(": does NOT cover it")
    assert poor.canonical == rich.canonical
