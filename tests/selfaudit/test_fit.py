"""``veil.audit.fit``: the χ² tail against scipy's, and the fit checks accept veil's exact
samplers and reject a wrong scale and a truncated tail (thresholds: each check's level is
1 − 0.95; seeded sources make the outcomes repeatable)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy.stats import chi2

from support import SeededSource
from veil.audit.fit import chi_square, gamma_upper, noise_fit, tail_mass
from veil.noise import samplers

pytestmark = pytest.mark.statistical

T = 3.0
R = math.exp(-1 / T)


def pmf(k: np.ndarray) -> np.ndarray:
    return (1 - R) / (1 + R) * R ** np.abs(k)


def tail(t: int) -> float:
    return 2 * R**t / (1 + R)  # P(|N| ≥ t), t ≥ 1, for the discrete Laplace of scale T


@pytest.mark.parametrize(("df", "x"), [(1, 0.5), (4, 3.0), (10, 6.0), (44, 80.0), (200, 150.0)])
def test_the_chi_square_tail_matches_scipy(df: int, x: float) -> None:
    assert gamma_upper(df / 2, x / 2) == pytest.approx(chi2.sf(x, df), rel=1e-9, abs=1e-300)


def test_veils_discrete_laplace_fits_its_exact_pmf() -> None:
    noise = samplers.discrete_laplace(Fraction(3), 400_000, source=SeededSource("fit"))
    stat, df, p = chi_square(noise, pmf, 200)
    assert stat > 0
    assert df > 20
    assert p > 0.025
    assert noise_fit(noise, pmf, T, 0.95) is None


def test_a_ten_percent_wrong_scale_fails_the_chi_square() -> None:
    noise = samplers.discrete_laplace(Fraction(33, 10), 400_000, source=SeededSource("wide"))
    problem = noise_fit(noise, pmf, T, 0.95)
    assert problem is not None
    assert "does not follow the exact pmf" in problem


def test_a_tail_cut_at_six_scales_fails_the_tail_mass_check() -> None:
    noise = samplers.discrete_laplace(Fraction(3), 400_000, source=SeededSource("cut"))
    cut = np.where(np.abs(noise) >= 18, 0, noise)  # a "safe" truncation: the far tail is gone
    assert tail_mass(noise, tail, T, (2, 4, 6, 8), 0.95) is None
    problem = tail_mass(cut, tail, T, (2, 4, 6, 8), 0.95)
    assert problem is not None
    assert problem.endswith("a tail is wrong")
