from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from veil.errors import InvalidArgumentError
from veil.noise import gaussian_halfwidth, laplace_halfwidth


def _laplace_coverage(scale: float, t: float) -> float:
    x = 1 / scale
    return 1 - 2 * math.exp(-x * (t + 1)) / (1 + math.exp(-x))


@pytest.mark.parametrize("scale", [Fraction(1, 1000), Fraction(1, 2), Fraction(3), Fraction(1000)])
@pytest.mark.parametrize("level", [0.5, 0.9, 0.95, 0.999])
def test_laplace_halfwidth_is_the_smallest_integer_reaching_the_level(
    scale: Fraction, level: float
) -> None:
    t = laplace_halfwidth(scale, level)
    assert t == int(t) >= 0
    assert _laplace_coverage(float(scale), t) >= level
    if t > 0:
        assert _laplace_coverage(float(scale), t - 1) < level


@pytest.mark.parametrize("sigma2", [Fraction(1, 100), Fraction(1), Fraction(50), Fraction(10**4)])
@pytest.mark.parametrize("level", [0.68, 0.95])
def test_gaussian_halfwidth_is_the_smallest_integer_reaching_the_level(
    sigma2: Fraction, level: float
) -> None:
    t = gaussian_halfwidth(sigma2, level)
    k = np.arange(-3000, 3001)
    w = np.exp(-(k.astype(np.float64) ** 2) / (2 * float(sigma2)))
    w /= w.sum()
    assert w[np.abs(k) <= t].sum() >= level - 1e-12
    if t > 0:
        assert w[np.abs(k) <= t - 1].sum() < level


def test_gaussian_halfwidth_for_huge_sigma_uses_the_normal_quantile() -> None:
    assert gaussian_halfwidth(Fraction(10**20), 0.95) == pytest.approx(1.96e10, rel=1e-3)


@pytest.mark.parametrize("level", [0, 1, 1.5, float("nan")])
def test_a_level_outside_0_1_is_refused(level: float) -> None:
    with pytest.raises(InvalidArgumentError, match=r"level must lie in \(0, 1\)"):
        laplace_halfwidth(Fraction(1), level)
