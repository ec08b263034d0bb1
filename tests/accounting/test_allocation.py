"""The seeds' allocation policies, explicit and exact."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from veil import Budget, BudgetExhaustedError, InvalidArgumentError
from veil.accounting import (
    Accountant,
    even_split,
    fraction_of_remaining,
    fraction_of_total,
    sequential,
    split_budget,
)

totals = st.one_of(
    st.fractions(min_value=0, max_value=10, max_denominator=1000).map(lambda e: Budget(epsilon=e)),
    st.fractions(min_value=0, max_value=10, max_denominator=1000).map(lambda r: Budget(rho=r)),
    st.fractions(min_value=0, max_value=10, max_denominator=1000).map(
        lambda e: Budget(epsilon=e, delta=Fraction(1, 10**6))
    ),
)
weights = st.lists(
    st.fractions(min_value=Fraction(1, 100), max_value=100, max_denominator=100),
    min_size=1,
    max_size=12,
)


@given(totals, weights)
def test_weighted_parts_compose_back_to_exactly_the_total(
    total: Budget, ws: list[Fraction]
) -> None:
    parts = split_budget(total, ws)
    assert len(parts) == len(ws)
    assert sequential(parts) == total
    assert all(p.kind == total.kind or total.is_zero() for p in parts)


def test_an_even_split_over_ten_queries_gives_each_a_tenth() -> None:
    # the seed's e-commerce example: ε = 0.1 for ten queries, ε = 0.01 each
    assert even_split(Budget(epsilon=0.1), 10) == [Budget(epsilon=0.01)] * 10
    assert even_split(Budget(epsilon=1, delta=1e-6), 4) == [Budget(epsilon=0.25, delta=2.5e-7)] * 4


def test_important_queries_get_more_by_weight() -> None:
    # the seed's fraud example: key features ε = 0.3, minor ones ε = 0.1
    parts = split_budget(Budget(epsilon=0.5), [3, 1, 1])
    assert parts == [Budget(epsilon=0.3), Budget(epsilon=0.1), Budget(epsilon=0.1)]


def test_a_fraction_of_what_remains_never_runs_out() -> None:
    remaining = Budget(epsilon=2)
    for _ in range(50):
        share = fraction_of_remaining(remaining, 0.2)
        assert share.eps > 0
        assert share == remaining * Fraction(1, 5)
        remaining = Budget(epsilon=remaining.eps - share.eps)
    assert remaining.eps == 2 * Fraction(4, 5) ** 50


def test_a_fixed_fraction_of_the_total_runs_out_after_five_queries() -> None:
    # the PHP seed's PrivacyBudgetManager: 20 % of the total each time
    total = remaining = Budget(epsilon=2)
    shares = []
    while not remaining.is_zero():
        share = fraction_of_total(total, remaining, 0.2)
        shares.append(share)
        remaining = Budget(epsilon=remaining.eps - share.eps)
    assert shares == [Budget(epsilon=0.4)] * 5


def test_a_fixed_fraction_gives_what_is_left_when_less() -> None:
    assert fraction_of_total(Budget(epsilon=2), Budget(epsilon=0.1), 0.2) == Budget(epsilon=0.1)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: split_budget(Budget(epsilon=1), []), "non-empty list"),
        (
            lambda: split_budget(Budget(epsilon=1), [1, 0]),
            r"weights must be > 0, got weights\[1\]=0",
        ),
        (lambda: split_budget(Budget(epsilon=1), [1, -2]), "weights must be > 0"),
        (lambda: split_budget(Budget(epsilon=1), "12"), "non-empty list"),
        (lambda: even_split(Budget(epsilon=1), 0), "k must be a positive number of queries"),
        (lambda: fraction_of_remaining(Budget(epsilon=1), 0), r"fraction must lie in \(0, 1\]"),
        (lambda: fraction_of_remaining(Budget(epsilon=1), 1.5), r"fraction must lie in \(0, 1\]"),
    ],
)
def test_bad_allocations_are_refused(call: object, message: str) -> None:
    assert callable(call)
    with pytest.raises(InvalidArgumentError, match=message):
        call()


def test_the_accountant_spends_exactly_and_refuses_past_the_total() -> None:
    acct = Accountant(Budget(epsilon=1))
    for _ in range(10):
        acct.charge(Budget(epsilon=0.1))
    assert acct.remaining == Budget(epsilon=0)
    with pytest.raises(BudgetExhaustedError, match="remaining ε=0"):
        acct.charge(Budget(epsilon="1/1000000000"))
    assert len(acct.charges) == 10
    assert acct.guarantee().loss == Budget(epsilon=1)
    # the same ten charges, fixed in advance, give a tighter (ε, δ) statement
    tight = acct.guarantee(delta=1e-6)
    assert tight.loss.eps < 1
    assert tight.loss.delta <= Fraction(1, 10**6)
