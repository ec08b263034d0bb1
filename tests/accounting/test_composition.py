"""Composition: closed forms, known values, the accountant's choice, monotonicity."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import comb

from veil import Budget, InvalidArgumentError
from veil.accounting import (
    advanced_composition,
    compose,
    optimal_composition,
    parallel,
    sequential,
    zcdp_to_approx,
)
from veil.accounting.composition import MAX_OPTIMAL_K


def test_sequential_composition_adds_exactly() -> None:
    assert sequential([Budget(epsilon=0.1)] * 10) == Budget(epsilon=1)
    assert sequential([Budget(epsilon="1/3", delta=1e-6)] * 3) == Budget(epsilon=1, delta=3e-6)
    assert sequential([Budget(rho=0.1), Budget(epsilon=1)]) == Budget(rho=0.6)
    assert sequential([]) == Budget(epsilon=0)
    assert sequential([Budget(rho=0.25)] * 4) == Budget(rho=1)
    with pytest.raises(InvalidArgumentError, match=r"use veil\.accounting\.compose"):
        sequential([Budget(rho=0.1), Budget(epsilon=1, delta=1e-6)])


def test_parallel_composition_over_disjoint_partitions_is_the_maximum() -> None:
    assert parallel([Budget(epsilon=0.1), Budget(epsilon=0.3), Budget(epsilon=0.2)]) == Budget(
        epsilon=0.3
    )
    assert parallel([Budget(epsilon=1, delta=1e-9), Budget(epsilon=0.5, delta=1e-6)]) == Budget(
        epsilon=1, delta=1e-6
    )
    assert parallel([Budget(rho=0.1), Budget(epsilon=1)]) == Budget(rho=0.5)
    with pytest.raises(InvalidArgumentError, match="no exact common form"):
        parallel([Budget(rho=0.1), Budget(epsilon=1, delta=1e-6)])


def test_advanced_composition_matches_the_drv_closed_form() -> None:
    eps, k, slack = 0.1, 100, 1e-5
    got = advanced_composition(Budget(epsilon=eps, delta=1e-8), k, delta_slack=slack)
    closed = math.sqrt(2 * k * math.log(1 / slack)) * eps + k * eps * (math.exp(eps) - 1)
    assert float(got.eps) == pytest.approx(closed, rel=1e-12)
    assert got.eps >= Fraction(closed) - Fraction(1, 10**9)
    assert got.delta == Fraction(1, 10**6) + Fraction(1, 10**5)


def test_advanced_composition_of_different_losses_sums_squares() -> None:
    losses = [Budget(epsilon=0.1), Budget(epsilon=0.2, delta=1e-7)]
    got = advanced_composition(losses, delta_slack=1e-6)
    closed = (
        math.sqrt(2 * math.log(1e6) * (0.01 + 0.04)) + 0.1 * math.expm1(0.1) + 0.2 * math.expm1(0.2)
    )
    assert float(got.eps) == pytest.approx(closed, rel=1e-12)
    assert got.delta == Fraction(1, 10**7) + Fraction(1, 10**6)


def test_optimal_composition_of_one_mechanism_has_its_closed_form() -> None:
    # k = 1: δ(ε̃) = (e^ε − e^ε̃)/(1 + e^ε)  ⇒  ε̃ = ln(e^ε − δ'(1 + e^ε))
    eps, slack = 1.0, 0.01
    got = optimal_composition(Budget(epsilon=eps), 1, delta_slack=slack)
    expected = math.log(math.exp(eps) - slack * (1 + math.exp(eps)))
    assert float(got.eps) == pytest.approx(expected, abs=1e-10)
    assert float(got.eps) >= expected - 1e-13
    assert got.delta == Fraction(1, 100)


@pytest.mark.parametrize(("k", "i"), [(10, 2), (20, 5), (50, 20)])
def test_optimal_composition_reproduces_kairouz_oh_viswanath_theorem_3_3(k: int, i: int) -> None:
    """At δ' = δ_i of KOV Thm. 3.3 the optimal ε̃ is (k − 2i)·ε."""
    eps = 0.2
    delta_i = (
        sum(
            comb(k, j, exact=True) * (math.exp((k - j) * eps) - math.exp((k - 2 * i + j) * eps))
            for j in range(i)
        )
        / (1 + math.exp(eps)) ** k
    )
    got = optimal_composition(Budget(epsilon=eps), k, delta_slack=delta_i * (1 + 1e-9))
    assert float(got.eps) == pytest.approx((k - 2 * i) * eps, abs=1e-6)
    assert float(got.eps) <= (k - 2 * i) * eps + 1e-9


def test_the_optimal_bound_beats_drv_and_basic_composition() -> None:
    loss = Budget(epsilon=0.1, delta=1e-8)
    opt = optimal_composition(loss, 100, delta_slack=1e-5)
    drv = advanced_composition(loss, 100, delta_slack=1e-5)
    assert opt.eps < drv.eps
    assert opt.eps < 100 * loss.eps
    # total δ = 1 − (1 − δ)^k (1 − δ') ≤ kδ + δ'
    assert opt.delta == 1 - (1 - loss.delta) ** 100 * (1 - Fraction(1, 10**5))
    assert opt.delta <= drv.delta


def test_optimal_composition_is_refused_past_its_size_limit() -> None:
    with pytest.raises(InvalidArgumentError, match="use advanced_composition"):
        optimal_composition(Budget(epsilon=0.1), MAX_OPTIMAL_K + 1, delta_slack=1e-6)


def test_compose_without_delta_is_exact_sequential_composition() -> None:
    result = compose([Budget(epsilon=0.1)] * 10)
    assert result.loss == Budget(epsilon=1)
    assert result.method == "sequential"


def test_compose_picks_the_tightest_valid_bound() -> None:
    few = compose([Budget(epsilon=0.5)] * 2, delta=1e-6)
    assert few.loss.eps <= 1
    many = compose([Budget(epsilon=0.01)] * 1000, delta=1e-6)
    assert many.method in ("kairouz-optimal", "zcdp")
    assert many.loss.eps < advanced_composition(Budget(epsilon=0.01), 1000, delta_slack=1e-6).eps
    assert many.loss.eps < 10
    assert many.loss.delta <= Fraction(1, 10**6)
    gaussians = compose([Budget(rho=0.01)] * 50, delta=1e-6)
    assert gaussians.method == "sequential+zcdp"
    assert gaussians.loss == zcdp_to_approx(Fraction(1, 2), 1e-6)


def test_compose_refuses_a_delta_already_spent() -> None:
    with pytest.raises(InvalidArgumentError, match="already spend delta"):
        compose([Budget(epsilon=1, delta=1e-5)] * 2, delta=1e-5)


losses = st.lists(
    st.builds(
        lambda e, d: Budget(epsilon=e, delta=d),
        st.fractions(min_value=Fraction(1, 1000), max_value=2, max_denominator=1000),
        st.sampled_from([0, Fraction(1, 10**9)]),
    ),
    min_size=1,
    max_size=20,
)


@settings(max_examples=40, deadline=None)
@given(losses, st.integers(min_value=0, max_value=19))
def test_composing_one_more_loss_never_lowers_the_total(items: list[Budget], at: int) -> None:
    extra = items[at % len(items)]
    assert sequential(items) <= sequential([*items, extra])
    target = Fraction(1, 10**5)
    fewer = compose(items, delta=target).loss
    more = compose([*items, extra], delta=target).loss
    assert fewer.eps <= more.eps


@settings(max_examples=40, deadline=None)
@given(
    st.fractions(min_value=Fraction(1, 100), max_value=1, max_denominator=100),
    st.fractions(min_value=Fraction(1, 100), max_value=1, max_denominator=100),
    st.integers(min_value=1, max_value=60),
)
def test_optimal_composition_is_monotone_in_epsilon(a: Fraction, b: Fraction, k: int) -> None:
    lo, hi = sorted((a, b))
    assert (
        optimal_composition(Budget(epsilon=lo), k, delta_slack=1e-6).eps
        <= optimal_composition(Budget(epsilon=hi), k, delta_slack=1e-6).eps
    )


def test_past_the_optimal_limit_compose_falls_back_to_drv() -> None:
    losses = [Budget(epsilon=0.01, delta=1e-9)] * (MAX_OPTIMAL_K + 1)
    result = compose(losses, delta=1e-5)
    assert result.method == "drv"
    slack = Fraction(1, 10**5) - (MAX_OPTIMAL_K + 1) * Fraction(1, 10**9)
    assert result.loss == advanced_composition(losses, delta_slack=slack)
    assert result.loss.eps < (MAX_OPTIMAL_K + 1) * Fraction(1, 100)
