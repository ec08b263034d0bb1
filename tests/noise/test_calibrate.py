from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from veil.errors import InvalidArgumentError
from veil.noise.calibrate import cdp_delta, discrete_gaussian_delta, sigma2_for_approx_dp


def _continuous_delta(sigma: float, eps: float) -> float:
    # Balle & Wang 2018 for sensitivity 1
    def phi(x: float) -> float:
        return 0.5 * math.erfc(-x / math.sqrt(2))

    return phi(1 / (2 * sigma) - eps * sigma) - math.exp(eps) * phi(-1 / (2 * sigma) - eps * sigma)


@pytest.mark.parametrize(("eps", "delta"), [(0.5, 1e-6), (1.0, 1e-5), (0.1, 1e-9), (3.0, 1e-3)])
def test_scalar_calibration_meets_delta_and_is_tight(eps: float, delta: float) -> None:
    s2 = sigma2_for_approx_dp(Fraction(1), Fraction(eps), Fraction(delta), 1)
    assert discrete_gaussian_delta(float(s2), eps, 1) <= delta
    # tight: 0.1 % less noise would break δ
    assert discrete_gaussian_delta(float(s2) * 0.998, eps, 1) > delta


@pytest.mark.parametrize(("eps", "delta"), [(0.5, 1e-6), (0.1, 1e-9)])
def test_discrete_curve_is_close_to_the_analytic_gaussian(eps: float, delta: float) -> None:
    s2 = sigma2_for_approx_dp(Fraction(1), Fraction(eps), Fraction(delta), 1)
    sigma = math.sqrt(float(s2))
    # at σ ≥ 1 the lattice barely matters: the continuous mechanism's δ at the same σ agrees
    assert _continuous_delta(sigma, eps) == pytest.approx(delta, rel=0.05)


def test_calibration_covers_every_integer_shift_up_to_the_sensitivity() -> None:
    s2 = float(sigma2_for_approx_dp(Fraction(7, 2), Fraction(1), Fraction(1, 10**6), 1))
    assert all(discrete_gaussian_delta(s2, 1.0, m) <= 1e-6 for m in (1, 2, 3))


def test_vector_calibration_uses_the_zcdp_route() -> None:
    s2 = sigma2_for_approx_dp(Fraction(2), Fraction(1), Fraction(1, 10**6), 5)
    rho = 4 / (2 * float(s2))
    assert cdp_delta(rho, 1.0) <= 1e-6
    assert cdp_delta(rho * 1.01, 1.0) > 1e-6


def test_cdp_delta_matches_a_known_value() -> None:
    # ρ = 0.5: CKS Cor. 13 gives ε ≈ 5.2215 at δ = 1e-6 (see the accounting README)
    assert cdp_delta(0.5, 5.2215) == pytest.approx(1e-6, rel=1e-3)
    assert cdp_delta(0.0, 1.0) == 0.0


def test_classic_bound_is_looser() -> None:
    s2 = sigma2_for_approx_dp(Fraction(1), Fraction(1, 2), Fraction(1, 10**6), 1)
    classic = math.sqrt(2 * math.log(1.25 / 1e-6)) / 0.5
    assert math.sqrt(float(s2)) < 0.85 * classic


@pytest.mark.parametrize(
    ("eps", "delta"), [(Fraction(1000), Fraction(1, 10**6)), (1, Fraction(1, 10**200))]
)
def test_extreme_parameters_are_refused_with_a_fix(eps: Fraction, delta: Fraction) -> None:
    with pytest.raises(InvalidArgumentError, match="pass rho=… instead"):
        sigma2_for_approx_dp(Fraction(1), Fraction(eps), delta, 1)


def test_large_sigma_uses_integral_bounds_that_stay_valid_and_near_tight() -> None:
    import veil.noise.calibrate as cal

    s2 = float(sigma2_for_approx_dp(Fraction(400), Fraction(1, 2), Fraction(1, 10**6), 1))
    assert math.sqrt(s2) > cal._TABLE_SIGMA  # the integral-bound path was used
    # the exact (summed) curve at that σ meets δ, and 1 % less noise would not
    k = np.arange(-int(40 * math.sqrt(s2)), int(40 * math.sqrt(s2)) + 1, dtype=np.float64)

    def delta(var: float) -> float:
        ww = np.exp(-(k * k) / (2 * var))
        a = 0.5 * var / 400 - 200
        return float(ww[k > a].sum() - math.exp(0.5) * ww[k > a + 400].sum()) / float(ww.sum())

    assert delta(s2) <= 1e-6
    assert delta(s2 * 0.98) > 1e-6


def test_huge_sensitivities_calibrate_quickly() -> None:
    s2 = sigma2_for_approx_dp(Fraction(10**9), Fraction(1), Fraction(1, 10**6), 1)
    assert 10**9 < math.sqrt(float(s2)) < 10**10
