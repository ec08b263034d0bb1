"""Budget: exact numbers, arithmetic (sequential composition), the implication order,
conversions and formatting."""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from veil import Budget, InvalidArgumentError
from veil.accounting import exact

small = st.fractions(min_value=0, max_value=10, max_denominator=10**6)
deltas = st.fractions(min_value=0, max_value=Fraction(1, 1000), max_denominator=10**9)


def budgets() -> st.SearchStrategy[Budget]:
    return st.one_of(
        small.map(lambda e: Budget(epsilon=e)),
        st.builds(lambda e, d: Budget(epsilon=e, delta=d), small, deltas),
        small.map(lambda r: Budget(rho=r)),
    )


def test_floats_are_read_as_the_decimal_they_print_as() -> None:
    assert Budget(epsilon=0.1).epsilon == Fraction(1, 10)
    assert Budget(epsilon=0.1, delta=1e-6).delta == Fraction(1, 10**6)
    assert exact(Decimal("0.3"), "x") == Fraction(3, 10)
    assert exact("1/3", "x") == Fraction(1, 3)


def test_ten_tenths_are_exactly_one() -> None:
    assert sum([Budget(epsilon=0.1)] * 10) == Budget(epsilon=1)
    assert 10 * Budget(epsilon=0.1) == Budget(epsilon=1)
    assert Budget(epsilon=1) / 10 == Budget(epsilon=0.1)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"epsilon": -0.5}, r"epsilon must be ≥ 0, got -0.5"),
        ({"epsilon": math.nan}, r"epsilon must be finite, got nan"),
        ({"epsilon": math.inf}, r"epsilon must be finite, got inf"),
        ({"epsilon": 1, "delta": 1}, r"delta must lie in \[0, 1\)"),
        ({"epsilon": 1, "delta": -1e-9}, r"delta must lie in \[0, 1\)"),
        ({"epsilon": True}, r"epsilon must be a number, not the boolean True"),
        ({"epsilon": "a lot"}, r"epsilon must be a number such as 0.5 or '1/3', got 'a lot'"),
        ({"rho": -1}, r"rho must be ≥ 0"),
        ({"rho": 1, "epsilon": 1}, r"either Budget\(rho=…\) or Budget\(epsilon=…, delta=…\)"),
        ({}, r"a Budget needs epsilon"),
    ],
)
def test_bad_budgets_are_refused_with_the_value_and_the_rule(
    kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        Budget(**kwargs)  # type: ignore[arg-type]


def test_addition_follows_the_kinds() -> None:
    assert Budget(epsilon=1) + Budget(epsilon=0.5) == Budget(epsilon=1.5)
    assert Budget(epsilon=1) + Budget(epsilon=0.5, delta=1e-6) == Budget(epsilon=1.5, delta=1e-6)
    assert Budget(rho=0.25) + Budget(rho=0.5) == Budget(rho=0.75)
    assert Budget(epsilon=1) + Budget(rho=0.25) == Budget(rho=0.75)
    with pytest.raises(InvalidArgumentError, match=r"cannot add the \(ε, δ\) loss and the zCDP"):
        Budget(epsilon=1, delta=1e-6) + Budget(rho=0.25)


def test_scaling_refuses_negative_factors_and_delta_past_one() -> None:
    assert 3 * Budget(epsilon="1/3", delta="1/9") == Budget(epsilon=1, delta="1/3")
    assert Budget(rho=1) * 0.5 == Budget(rho=0.5)
    with pytest.raises(InvalidArgumentError, match="factor ≥ 0"):
        Budget(epsilon=1) * -1
    with pytest.raises(InvalidArgumentError, match=r"delta must lie in \[0, 1\)"):
        Budget(epsilon=1, delta=0.5) * 2
    with pytest.raises(InvalidArgumentError, match="divided by a number > 0"):
        Budget(epsilon=1) / 0


def test_the_order_is_implication() -> None:
    assert Budget(epsilon=0.5) <= Budget(epsilon=1)
    assert Budget(epsilon=0.5) < Budget(epsilon=1)
    assert Budget(epsilon=1) <= Budget(epsilon=1, delta=1e-9)
    assert not Budget(epsilon=1, delta=1e-9) <= Budget(epsilon=1)
    assert Budget(epsilon=1) <= Budget(rho=0.5)  # ε-DP ⇒ ε²/2-zCDP
    assert not Budget(epsilon=1) <= Budget(rho=0.49)
    assert not Budget(epsilon=0.1, delta=1e-9) <= Budget(rho=100)  # δ > 0 gives no zCDP
    assert not Budget(rho=0.01) <= Budget(epsilon=100)  # zCDP gives no pure DP
    # ρ-zCDP ⇒ (ε_CKS(ρ, δ), δ)
    converted = Budget(rho=0.5).to_approx(1e-6)
    assert Budget(rho=0.5) <= converted
    assert not Budget(rho=0.5) <= Budget(epsilon=converted.eps - Fraction(1, 10**6), delta=1e-6)
    assert Budget(epsilon=2) > Budget(epsilon=1)
    assert Budget(epsilon=1) >= Budget(epsilon=1)


@given(budgets(), budgets())
def test_a_sum_is_never_less_than_either_part(a: Budget, b: Budget) -> None:
    if "approx" in (a.kind, b.kind) and "zcdp" in (a.kind, b.kind):
        return
    total = a + b
    assert a <= total
    assert b <= total


@given(budgets())
def test_the_dict_form_round_trips_exactly(b: Budget) -> None:
    assert Budget.from_dict(b.to_dict()) == b
    assert eval(repr(b), {"Budget": Budget}) == b


def test_repr_is_exact_and_str_is_short() -> None:
    assert repr(Budget(epsilon=0.1)) == "Budget(epsilon=0.1)"
    assert repr(Budget(epsilon="1/3", delta=1e-6)) == "Budget(epsilon='1/3', delta=0.000001)"
    assert repr(Budget(rho="1/8")) == "Budget(rho=0.125)"
    assert str(Budget(epsilon="1/3", delta=1e-6)) == "(ε=0.333333, δ=1e-06)"
    assert str(Budget(rho=0.5)) == "ρ=0.5"


def test_pure_converts_to_zcdp_as_half_epsilon_squared() -> None:
    assert Budget(epsilon=0.3).to_zcdp() == Budget(rho=Fraction(9, 200))
    with pytest.raises(InvalidArgumentError, match="cannot be expressed as zCDP"):
        Budget(epsilon=1, delta=1e-6).to_zcdp()


def test_an_approximate_budget_converts_only_to_a_larger_delta() -> None:
    assert Budget(epsilon=1).to_approx(1e-6) == Budget(epsilon=1, delta=1e-6)
    with pytest.raises(InvalidArgumentError, match="smaller than its δ"):
        Budget(epsilon=1, delta=1e-5).to_approx(1e-6)
    with pytest.raises(InvalidArgumentError, match=r"delta must lie in \(0, 1\)"):
        Budget(rho=1).to_approx(0)


def test_shortfall_is_reported_in_the_remainder_terms() -> None:
    assert Budget(epsilon=1).shortfall(Budget(epsilon=0.25)) == "ε=0.75"
    assert Budget(epsilon=1).shortfall(Budget(rho=0.25)) == "ρ=0.25"
    assert Budget(epsilon=0.5, delta=1e-5).shortfall(Budget(epsilon=1, delta=1e-6)) == "δ=9e-06"


def test_a_decimal_that_is_no_float_literal_is_quoted_in_the_repr() -> None:
    b = Budget(epsilon=Fraction(65537, 131072))
    assert repr(b) == "Budget(epsilon='0.50000762939453125')"
    assert eval(repr(b), {"Budget": Budget}) == b
