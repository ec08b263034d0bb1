"""Edge cases and refusals of the accounting functions, each with its message."""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from fractions import Fraction
from typing import Any

import pytest

from veil import Budget, InvalidArgumentError
from veil.accounting import (
    Accountant,
    advanced_composition,
    compose,
    exact,
    fraction_of_total,
    optimal_composition,
    parallel,
    sequential,
)
from veil.accounting.conversions import pure_to_zcdp
from veil.accounting.spending import Spent, remaining, used_fraction

REFUSALS: list[tuple[str, Callable[[], Any], str]] = [
    ("decimal NaN", lambda: exact(Decimal("NaN"), "epsilon"), r"epsilon must be finite"),
    ("a list", lambda: exact([1], "epsilon"), r"epsilon must be a number, got \[1\]"),  # type: ignore[arg-type]
    ("epsilon of a zCDP budget", lambda: Budget(rho=1).eps, r"has no epsilon; convert it"),
    ("dict without rho", lambda: Budget.from_dict({"kind": "zcdp"}), r"a zcdp budget needs 'rho'"),
    ("dict of no kind", lambda: Budget.from_dict({"epsilon": "1"}), r"budget kind must be"),
    ("a list of floats", lambda: sequential([0.1]), r"expected veil.Budget losses, got 0.1"),  # type: ignore[list-item]
    (
        "slack of zero",
        lambda: advanced_composition(Budget(epsilon=1), 2, delta_slack=0),
        r"delta_slack must lie in \(0, 1\)",
    ),
    (
        "advanced zCDP",
        lambda: advanced_composition([Budget(rho=1)], delta_slack=1e-6),
        r"advanced composition takes \(ε, δ\) losses",
    ),
    (
        "composed delta of one",
        lambda: advanced_composition(Budget(epsilon=1, delta=0.5), 2, delta_slack=0.1),
        r"the composed delta 1.1 is not below 1",
    ),
    (
        "k of zero",
        lambda: advanced_composition(Budget(epsilon=1), 0, delta_slack=1e-6),
        r"k must be a positive integer, got 0",
    ),
    (
        "k with a list",
        lambda: advanced_composition([Budget(epsilon=1)], 2, delta_slack=1e-6),
        r"pass k only with a single loss",
    ),
    (
        "an empty list",
        lambda: advanced_composition([], delta_slack=1e-6),
        r"needs at least one loss",
    ),
    (
        "optimal k of zero",
        lambda: optimal_composition(Budget(epsilon=1), 0, delta_slack=1e-6),
        r"k must be a positive integer, got 0",
    ),
    (
        "optimal zCDP",
        lambda: optimal_composition(Budget(rho=1), 2, delta_slack=1e-6),
        r"optimal composition takes an \(ε, δ\) loss",
    ),
    ("compose delta of one", lambda: compose([Budget(epsilon=1)], delta=1), r"delta must lie in"),
    (
        "compose with no delta left for zCDP",
        lambda: compose([Budget(rho=0.1), Budget(epsilon=1, delta=1e-6)], delta=1e-6),
        r"zCDP losses need some delta to convert",
    ),
    ("accountant of a float", lambda: Accountant(1.0), r"total must be a veil.Budget"),  # type: ignore[arg-type]
    (
        "accountant charge of a float",
        lambda: Accountant(Budget(epsilon=1)).charge(0.1),  # type: ignore[arg-type]
        r"loss must be a veil.Budget",
    ),
    (
        "fraction of a total of another kind",
        lambda: fraction_of_total(Budget(epsilon=1), Budget(rho=1), 0.2),
        r"must be budgets of the same kind",
    ),
]


@pytest.mark.parametrize(("what", "call", "message"), REFUSALS, ids=[r[0] for r in REFUSALS])
def test_bad_accounting_input_is_refused_with_a_message(
    what: str, call: Callable[[], Any], message: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        call()


def test_budgets_do_not_mix_with_other_types() -> None:
    b = Budget(epsilon=1)
    assert b.__add__(1) is NotImplemented
    assert b.__radd__("x") is NotImplemented
    assert b.__mul__(b) is NotImplemented
    assert b.__truediv__(b) is NotImplemented
    for op in (b.__le__, b.__ge__, b.__lt__, b.__gt__):
        assert op(1) is NotImplemented
    with pytest.raises(TypeError):
        b + 1  # type: ignore[operator]


def test_a_zero_zcdp_loss_is_implied_by_anything() -> None:
    assert Budget(rho=0) <= Budget(epsilon=0)
    assert Budget(epsilon=0, delta=0) <= Budget(rho=0)
    assert Budget.zero("zcdp").is_zero()


def test_empty_and_degenerate_compositions() -> None:
    assert parallel([]) == Budget(epsilon=0)
    assert optimal_composition(Budget(epsilon=0, delta=1e-9), 3, delta_slack=1e-6) == Budget(
        epsilon=0, delta=1 - (1 - Fraction(1, 10**9)) ** 3 * (1 - Fraction(1, 10**6))
    )
    # a slack so large that zero ε already meets it
    assert optimal_composition(Budget(epsilon=0.1), 2, delta_slack=0.9).eps == 0
    assert pure_to_zcdp(2) == Budget(rho=2)


def test_compose_with_a_delta_exactly_spent_uses_basic_composition() -> None:
    both = [Budget(epsilon=1, delta=1e-6), Budget(epsilon=1, delta=1e-6)]
    result = compose(both, delta=2e-6)
    assert result.loss == Budget(epsilon=2, delta=2e-6)
    assert result.method == "sequential"


def test_an_approximate_grant_whose_delta_is_spent_leaves_nothing_for_zcdp() -> None:
    total = Budget(epsilon=1, delta=1e-6)
    spent = Spent(Fraction(1, 2), Fraction(1, 10**6), Fraction(1, 100))
    assert remaining(total, spent) == Budget(epsilon=0)
    assert used_fraction(total, spent) == 1


def test_a_zero_grant_is_fully_used_by_any_charge() -> None:
    assert used_fraction(Budget(epsilon=0), Spent()) == 0
    assert used_fraction(Budget(epsilon=0), Spent(epsilon=Fraction(1, 10))) == 1


def test_the_accountant_reports_its_sums() -> None:
    acct = Accountant(Budget(rho=1))
    acct.charge(Budget(epsilon=1))
    assert acct.spent == Spent(rho=Fraction(1, 2))
