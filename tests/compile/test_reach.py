"""The total-rows bound's sensitivities (``veil.noise.reach``, ``veil.compile.statistics``):
the closed forms against a brute force over every allocation of a unit's rows, and the
sensitivities, privacy maps and thresholds the compiler builds from them."""

from __future__ import annotations

import itertools
from fractions import Fraction

import pytest

from support import people
from veil.accounting import Budget
from veil.compile import Context, apply_rules
from veil.compile.statistics import (
    effective_groups,
    per_group_bound,
    reach,
    rows_per_group,
    sensitivity,
)
from veil.compile.verify import recompute_loss
from veil.errors import InternalError, InvalidArgumentError
from veil.noise.families import family
from veil.noise.reach import Reach
from veil.plan import (
    Aggregate,
    AggregateCall,
    ColumnBounds,
    Contribution,
    GroupKey,
    aggregate_of,
)

PEOPLE = people("user_id", "state", "income")


def brute_force(groups: int, rows: int, total: int | None) -> tuple[int, int, int, int]:
    """(most groups touched, most rows in one group, max Σc, max Σc²) over every allocation
    c ∈ {0..R}^G with Σc ≤ T — G groups suffice: a unit touches at most G."""
    best = (0, 0, 0, 0)
    for c in itertools.product(range(rows + 1), repeat=groups):
        if total is not None and sum(c) > total:
            continue
        touched = sum(1 for x in c if x > 0)
        best = (
            max(best[0], touched),
            max(best[1], max(c)),
            max(best[2], sum(c)),
            max(best[3], sum(x * x for x in c)),
        )
    return best


@pytest.mark.parametrize("groups", range(1, 5))
@pytest.mark.parametrize("rows", range(1, 6))
@pytest.mark.parametrize("total", [None, *range(1, 13)])
def test_the_closed_forms_are_the_worst_allocation(
    groups: int, rows: int, total: int | None
) -> None:
    r = Reach.of(groups, rows, total)
    assert (r.groups, r.rows, r.total, r.squares) == brute_force(groups, rows, total)


def test_the_issue_example_and_the_bounds_without_a_total() -> None:
    # G = 3, R = 5, T = 8: L1 = min(8, 15) = 8, L2² = 5² + 3² = 34 (not 3·25 nor 8²)
    assert Reach.of(3, 5, 8) == Reach(groups=3, rows=5, total=8, squares=34)
    assert Reach.of(3, 5) == Reach(groups=3, rows=5, total=15, squares=75)
    assert Reach.of(3, 5, 100) == Reach.of(3, 5)
    assert Reach.of(8, 8, 8) == Reach(groups=8, rows=8, total=8, squares=64)
    assert Reach.of(3, 5, 8).spread == Fraction(8, 5)
    assert Reach.of(3, 5, 8).spread_squared == Fraction(34, 25)


def agg(
    contribution: Contribution,
    *,
    unit: str | None = "user_id",
    keys: tuple[GroupKey, ...] | None = None,
    calls: tuple[AggregateCall, ...] = (AggregateCall("n", "count"),),
) -> Aggregate:
    return Aggregate(
        PEOPLE,
        keys=(GroupKey("state"),) if keys is None else keys,
        aggregates=calls,
        bounds=(ColumnBounds("income", 0, 100),),
        privacy_unit=unit,
        contribution=contribution,
    )


def test_every_statistic_scales_with_the_reach_of_max_rows() -> None:
    a = agg(Contribution(3, 5, 8))
    # L1 = b·min(T, G·R), L2² = b²·(greedy Σc²), the score per group b·min(R, T)
    assert sensitivity(a, "count", "discrete_laplace", 1) == 8
    assert sensitivity(a, "count", "discrete_gaussian", 1) == 34
    assert sensitivity(a, "sum", "discrete_laplace", 10) == 80
    assert sensitivity(a, "sum_squares", "discrete_gaussian", 10) == 3400
    assert sensitivity(a, "count_units", "discrete_laplace", 1) == 3
    assert sensitivity(a, "count_units", "discrete_gaussian", 1) == 3
    assert sensitivity(a, "quantile", "exponential", 4, Fraction(1, 2)) == Fraction(5, 2)
    assert per_group_bound(a, "count", 1) == 5
    assert effective_groups(a) == 3
    tight = agg(Contribution(3, 5, 2))  # T below both: 2 groups of 1, or 2 rows in one
    assert (effective_groups(tight), rows_per_group(tight)) == (2, 2)
    assert sensitivity(tight, "count", "discrete_gaussian", 1) == 4
    assert sensitivity(tight, "count_units", "discrete_laplace", 1) == 2


def test_a_total_above_g_times_r_changes_nothing() -> None:
    for stat in ("count", "sum", "count_units"):
        for mech in ("discrete_laplace", "discrete_gaussian"):
            assert sensitivity(agg(Contribution(3, 5, 15)), stat, mech, 7) == sensitivity(
                agg(Contribution(3, 5)), stat, mech, 7
            )


def test_public_keys_cap_the_groups_before_the_total() -> None:
    two = (GroupKey("state", domain=("CA", "NY")),)
    r = reach(agg(Contribution(5, 4, 7), keys=two))
    assert r == Reach.of(2, 4, 7) == Reach(groups=2, rows=4, total=7, squares=25)
    assert reach(agg(Contribution(5, 4, 7), keys=())) == Reach.of(1, 4, 7)


def test_contributions_without_a_unit_are_k_rows_anywhere() -> None:
    a = agg(Contribution(max_rows=36), unit=None)
    assert reach(a) == Reach.of(36, 36, 36)
    assert sensitivity(a, "count", "discrete_laplace", 1) == 36
    assert sensitivity(a, "count", "discrete_gaussian", 1) == 36 * 36
    assert sensitivity(a, "sum", "discrete_laplace", 3) == 108
    # the exponential mechanism: one group's worth of ε however the 36 rows spread
    assert reach(a).spread == 1 == reach(a).spread_squared
    assert reach(agg(Contribution(), unit=None)) == Reach.of(1, 1)


def test_the_exponential_privacy_map_composes_by_spread() -> None:
    r = Reach.of(3, 5, 8)
    sens = Fraction(5, 2)
    scale = family("exponential").scale(sens, Fraction(1, 10))  # ε_g = 1/10
    eps, rho = family("exponential").loss(sens, scale, r)
    assert eps == Fraction(8, 5) * Fraction(1, 10)
    assert rho == Fraction(34, 25) * Fraction(1, 100) / 8
    # without T: G groups, as before
    assert family("exponential").loss(sens, scale, Reach.of(3, 5)) == (
        Fraction(3, 10),
        Fraction(3, 800),
    )


@pytest.mark.parametrize("budget", [Budget(epsilon=1, delta=1e-6), Budget(rho="1/2")])
@pytest.mark.parametrize(
    "contribution", [Contribution(3, 5, 8), Contribution(2, 2, 3), Contribution(4, 1, 2)]
)
def test_compiled_plans_under_max_rows_pass_the_recheck_and_spend_the_budget(
    budget: Budget, contribution: Contribution
) -> None:
    calls = (
        AggregateCall("n", "count"),
        AggregateCall("s", "sum", "income"),
        AggregateCall("v", "variance", "income"),
        AggregateCall("m", "quantile", "income", Fraction(1, 2)),
        AggregateCall("u", "count_distinct", "user_id"),
    )
    public = (GroupKey("state", domain=("CA", "NY", "TX", "WA", "OR")),)
    plan = agg(contribution, calls=calls, keys=public if budget.kind == "zcdp" else None)
    compiled = aggregate_of(apply_rules(plan, Context(budget=budget, privacy_unit="user_id")))
    assert compiled.budget is not None
    assert recompute_loss(compiled, compiled.budget) == compiled.budget
    if budget.kind == "zcdp":
        assert {m.mechanism for m in compiled.measurements} == {"discrete_gaussian", "exponential"}
        return
    r = reach(compiled)
    sel = compiled.selection
    assert sel is not None
    count = next(m for m in compiled.measurements if m.statistic == "count")
    want = family(count.mechanism).threshold(
        count.scale, groups=r.groups, rows=r.rows, delta=sel.budget.delta
    )
    assert sel.threshold == want  # G' = min(G, T) new groups of ≤ R' = min(R, T) rows


def test_contribution_limits_are_checked_on_construction() -> None:
    for bad in (0, -1, True, 1.5, "8"):
        with pytest.raises(InvalidArgumentError, match=r"max_rows must be a positive integer"):
            Contribution(max_rows=bad)  # type: ignore[arg-type]
    assert Contribution.of(max_rows=8) == Contribution(8, 8, 8)
    assert Contribution.of(3, None, 8) == Contribution(3, 8, 8)
    assert Contribution.of() == Contribution()
    with pytest.raises(InvalidArgumentError, match=r"max_rows must be a positive integer"):
        Contribution.of(max_rows=0)


def test_a_reach_of_no_rows_is_a_bug_not_a_bound() -> None:
    for limits in ((0, 1, None), (1, 0, None), (1, 1, 0)):
        with pytest.raises(InternalError, match="contribution limits must be ≥ 1"):
            Reach.of(*limits)
