from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from veil.errors import InvalidArgumentError
from veil.noise import gaussian_halfwidth, laplace_halfwidth
from veil.noise.errorbars import combination_halfwidth


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


# ── linear combinations of independent noises ──────────────────────────────────────────────


def _pmf(mechanism: str, scale: float, k: int) -> tuple[np.ndarray, np.ndarray]:
    x = np.arange(-k, k + 1)
    if mechanism == "discrete_laplace":
        w = np.exp(-np.abs(x) / scale)
    else:
        w = np.exp(-(x.astype(np.float64) ** 2) / (2 * scale))
    return x, w / w.sum()


def _exact_quantile(terms: list[tuple[int, str, Fraction]], level: float) -> float:
    """The level-quantile of |Σ cᵢXᵢ| for integer coefficients, by brute-force enumeration."""
    law: dict[int, float] = {0: 1.0}
    for c, m, s in terms:
        x, p = _pmf(m, float(s), 200)
        new: dict[int, float] = {}
        for v, pv in law.items():
            for xi, pi in zip(x.tolist(), p.tolist(), strict=True):
                new[v + c * xi] = new.get(v + c * xi, 0.0) + pv * pi
        law = new
    values = sorted({abs(v) for v in law})
    total = 0.0
    for t in values:
        total = sum(p for v, p in law.items() if abs(v) <= t)
        if total >= level:
            return float(t)
    raise AssertionError("level not reached")


COMBINATIONS = [
    [(1, "discrete_laplace", Fraction(3)), (3, "discrete_laplace", Fraction(2))],
    [(2, "discrete_laplace", Fraction(5)), (-1, "discrete_laplace", Fraction(1, 2))],
    [(1, "discrete_gaussian", Fraction(9)), (4, "discrete_gaussian", Fraction(2))],
    [
        (1, "discrete_laplace", Fraction(2)),
        (2, "discrete_laplace", Fraction(3, 2)),
        (-3, "discrete_laplace", Fraction(1)),
    ],
]


@pytest.mark.parametrize("terms", COMBINATIONS)
@pytest.mark.parametrize("level", [0.9, 0.95, 0.99])
def test_a_combinations_halfwidth_covers_and_is_within_a_few_thousandths_of_the_exact_quantile(
    terms: list[tuple[int, str, Fraction]], level: float
) -> None:
    # integer coefficients: |Σ cᵢXᵢ| is an integer and its exact quantile q is enumerable.
    # Contract: t ≥ q (coverage) and t ≤ q + 1 + n/2000 sd (the lattice gap and the grid slack).
    t = combination_halfwidth([(float(c), m, s) for c, m, s in terms], level)
    q = _exact_quantile(terms, level)
    assert q <= t <= q + 1 + 0.01 * q


@pytest.mark.parametrize("level", [0.9, 0.95, 0.99])
def test_a_combination_is_much_tighter_than_the_union_bound(level: float) -> None:
    k = 1 << 30
    terms = [(60 / k, "discrete_laplace", Fraction(k)), (30.0, "discrete_laplace", Fraction(2))]
    union = sum(abs(c) * laplace_halfwidth(s, 1 - (1 - level) / 2) for c, _, s in terms)
    t = combination_halfwidth(terms, level)
    assert t < 0.8 * union
    assert t >= max(abs(c) * laplace_halfwidth(s, level) for c, _, s in terms)


def test_a_single_term_is_its_exact_discrete_quantile_times_the_coefficient() -> None:
    assert combination_halfwidth([(-2.5, "discrete_gaussian", Fraction(50))], 0.95) == (
        2.5 * gaussian_halfwidth(Fraction(50), 0.95)
    )
    assert combination_halfwidth([(0.0, "discrete_laplace", Fraction(3))], 0.95) == 0.0


def test_a_combination_with_huge_gaussian_scales_uses_the_normal_law() -> None:
    # σ = 10^6 and 10^5 (above the explicit summation): the sum is N(0, 1.01·10^12)
    terms = [
        (1.0, "discrete_gaussian", Fraction(10**12)),
        (1.0, "discrete_gaussian", Fraction(10**10)),
    ]
    t = combination_halfwidth(terms, 0.95)
    assert t == pytest.approx(1.959964 * math.sqrt(1.01e12), rel=2e-3)
    assert t >= 1.959964 * math.sqrt(1.01e12)


def test_an_unknown_mechanism_is_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="no error bar for mechanism 'laplace'"):
        combination_halfwidth([(1.0, "laplace", Fraction(1)), (1.0, "laplace", Fraction(1))])


def test_a_degenerate_term_falls_back_to_the_union_bound() -> None:
    # a noise of scale 1/1000 has sd ≈ 0 but a support of ±1: with a coefficient of 10^9 it
    # would need 10^15 grid cells; with three noises (no mixture) the union bound (still
    # valid) is returned instead
    terms = [
        (1e9, "discrete_laplace", Fraction(1, 1000)),
        (1.0, "discrete_laplace", Fraction(1)),
        (2.0, "discrete_laplace", Fraction(1)),
    ]
    t = 1 - 0.05 / 3
    union = 1e9 * laplace_halfwidth(Fraction(1, 1000), t) + 3 * laplace_halfwidth(1, t)
    assert combination_halfwidth(terms, 0.95) == union


def test_a_degenerate_term_beside_one_other_noise_gets_the_exact_mixture() -> None:
    # two noises: the mixture sums the degenerate one's support exactly (it is 0 but with
    # probability 2e^(−1000)/(1 + …) = 0 in floats), so the bar is the other's own quantile,
    # 3 (P(|X| ≤ 2) = 0.927, P(|X| ≤ 3) = 0.973), to the bisection's relative 1e-7
    terms = [(1e9, "discrete_laplace", Fraction(1, 1000)), (1.0, "discrete_laplace", Fraction(1))]
    assert combination_halfwidth(terms, 0.95) == pytest.approx(3.0, rel=1e-7)
    assert combination_halfwidth(terms, 0.95) >= 3.0
