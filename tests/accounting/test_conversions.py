"""ρ-zCDP → (ε, δ): valid, rounded up, tighter than Bun–Steinke, monotone."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import optimize, stats

from veil import Budget, InvalidArgumentError
from veil.accounting import zcdp_to_approx
from veil.accounting.conversions import bun_steinke_epsilon

CASES = [
    (Fraction(1, 2), Fraction(1, 10**6)),
    (Fraction(1, 1000), Fraction(1, 10**5)),
    (Fraction(5), Fraction(1, 10**9)),
    (Fraction(1, 10**8), Fraction(1, 10**6)),
    (Fraction(1, 8), Fraction(1, 100)),
]


def _cks(alpha: float, rho: float, delta: float) -> float:
    return alpha * rho + (
        math.log(1 / delta) + (alpha - 1) * math.log1p(-1 / alpha) - math.log(alpha)
    ) / (alpha - 1)


def _cks_optimum(rho: float, delta: float) -> float:
    """The infimum over α, found independently by scipy on log(α − 1)."""
    res = optimize.minimize_scalar(
        lambda t: _cks(1 + math.exp(t), rho, delta),
        bounds=(-15, 40),
        method="bounded",
        options={"xatol": 1e-12},
    )
    return float(res.fun)


@pytest.mark.parametrize(("rho", "delta"), CASES)
def test_the_conversion_matches_the_cks_optimum_rounded_up(rho: Fraction, delta: Fraction) -> None:
    eps = zcdp_to_approx(rho, delta).eps
    best = _cks_optimum(float(rho), float(delta))
    assert float(eps) >= best - 1e-12  # never below the bound (up to float noise in scipy)
    assert float(eps) <= best + 1e-9  # and tight: a 10⁻¹² grid plus the α search
    assert eps.denominator <= 10**12


@pytest.mark.parametrize(("rho", "delta"), CASES)
def test_the_conversion_is_tighter_than_bun_steinke(rho: Fraction, delta: Fraction) -> None:
    assert float(zcdp_to_approx(rho, delta).eps) < bun_steinke_epsilon(rho, delta)


@pytest.mark.parametrize(("rho", "delta"), CASES)
def test_the_gaussian_mechanism_meets_the_converted_guarantee(
    rho: Fraction, delta: Fraction
) -> None:
    """The Gaussian mechanism is exactly ρ-zCDP with ρ = Δ²/2σ²; its exact privacy profile
    (Balle & Wang 2018, Thm. 8) must lie below δ at the converted ε."""
    mu = math.sqrt(2 * float(rho))  # Δ/σ
    eps = float(zcdp_to_approx(rho, delta).eps)
    exact_delta = stats.norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * stats.norm.cdf(
        -eps / mu - mu / 2
    )
    assert exact_delta <= float(delta)
    # and not absurdly loose: at half the ε the Gaussian's δ already exceeds the target
    half = eps / 2
    loose = stats.norm.cdf(-half / mu + mu / 2) - math.exp(half) * stats.norm.cdf(
        -half / mu - mu / 2
    )
    assert loose > float(delta)


def test_a_known_value() -> None:
    # ρ = 1/2, δ = 10⁻⁶: CKS gives ε ≈ 5.2215 (Bun–Steinke: 5.7565)
    assert zcdp_to_approx(0.5, 1e-6).eps == pytest.approx(5.2215344445, abs=1e-9)


def test_zero_rho_is_zero_epsilon() -> None:
    assert zcdp_to_approx(0, 1e-6) == Budget(epsilon=0, delta=1e-6)


@pytest.mark.parametrize(
    ("rho", "delta", "message"),
    [
        (-1, 1e-6, r"rho must be ≥ 0"),
        (1, 0, r"delta must lie in \(0, 1\)"),
        (1, 1, r"delta must lie in \(0, 1\)"),
        (math.nan, 1e-6, r"rho must be finite"),
    ],
)
def test_bad_conversion_input_is_refused(rho: float, delta: float, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        zcdp_to_approx(rho, delta)


rhos = st.fractions(min_value=Fraction(1, 10**6), max_value=20, max_denominator=10**6)
delta_pairs = st.tuples(
    st.floats(min_value=1e-12, max_value=0.5), st.floats(min_value=1e-12, max_value=0.5)
).filter(lambda p: p[0] != p[1])


@settings(max_examples=60, deadline=None)
@given(rhos, delta_pairs)
def test_the_conversion_is_monotone_in_delta(rho: Fraction, deltas: tuple[float, float]) -> None:
    small, large = sorted(deltas)
    assert zcdp_to_approx(rho, small).eps >= zcdp_to_approx(rho, large).eps


@settings(max_examples=60, deadline=None)
@given(rhos, rhos, st.floats(min_value=1e-12, max_value=0.5))
def test_the_conversion_is_monotone_in_rho(a: Fraction, b: Fraction, delta: float) -> None:
    lo, hi = sorted((a, b))
    assert zcdp_to_approx(lo, delta).eps <= zcdp_to_approx(hi, delta).eps


def test_a_tiny_rho_with_a_large_delta_is_zero_epsilon_and_still_valid() -> None:
    rho, delta = Fraction(1, 10**5), Fraction(3, 10)
    assert zcdp_to_approx(rho, delta) == Budget(epsilon=0, delta=delta)
    # the Gaussian at ε = 0: δ = total variation = 2Φ(μ/2) − 1
    mu = math.sqrt(2 * float(rho))
    assert 2 * stats.norm.cdf(mu / 2) - 1 <= float(delta)
