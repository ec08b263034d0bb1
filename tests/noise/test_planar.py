"""The exact planar Laplace on ℤ² (veil.noise.planar): its law against the enumerated pmf, on
both decision paths (float pre-check and exact), and its geo-indistinguishability on
neighbouring points at several distances.

Thresholds: χ² tests at p > 1e-4 (a correct sampler fails one with probability 1e-4 per seed;
the seeds are fixed); frequencies within 5 binomial standard deviations."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from support import SeededSource
from veil.audit.query_stats import epsilon_lower_bound
from veil.errors import InvalidArgumentError
from veil.noise import planar
from veil.noise.planar import planar_laplace, proposal_rate

pytestmark = pytest.mark.statistical


def _exact_law(c: float, reach: int) -> tuple[np.ndarray, np.ndarray]:
    """Radii of the nodes within ``reach`` and their exact probabilities (tail beyond it
    below e^-c·reach)."""
    a = np.arange(-reach, reach + 1, dtype=float)
    r = np.sqrt(a[:, None] ** 2 + a[None, :] ** 2).reshape(-1)
    w = np.exp(-c * r)
    return r, w / w.sum()


def _chi2_radius(x: np.ndarray, y: np.ndarray, c: float, edges: list[float]) -> float:
    r_exact, p = _exact_law(c, math.ceil(60 / c))
    rs = np.sqrt(x.astype(float) ** 2 + y.astype(float) ** 2)
    bins = [-0.5, *edges, np.inf]
    observed = np.histogram(rs, bins)[0]
    expected = np.histogram(r_exact, bins, weights=p)[0] * len(rs)
    return float(stats.chisquare(observed, expected).pvalue)


def test_the_proposal_rate_is_the_largest_dyadic_below_c_over_root_2() -> None:
    for c in (Fraction(1, 2), Fraction(1, 1000), Fraction(3), Fraction(1, 2**40)):
        lam = proposal_rate(c)
        assert lam * lam * 2 <= c * c  # λ ≤ c/√2: the acceptance is a probability
        bigger = lam + Fraction(1, 2**48)
        assert bigger * bigger * 2 > c * c


def test_the_law_is_exp_minus_c_times_the_euclidean_norm() -> None:
    c = Fraction(1, 2)
    x, y = planar_laplace(c, 200_000, source=SeededSource("planar-law"))
    assert _chi2_radius(x, y, 0.5, [0.5, 1.2, 1.5, 2.1, 2.9, 3.7, 5, 7, 10, 14]) > 1e-4
    # single nodes: (0, 0), (1, 0) and its rotations, (1, 1) and its rotations
    r, p = _exact_law(0.5, 120)
    for node, weight in (
        ((0, 0), 1.0),
        ((1, 0), math.exp(-0.5)),
        ((1, 1), math.exp(-0.5 * 2**0.5)),
    ):
        share = float(np.mean((x == node[0]) & (y == node[1])))
        expected = weight * float(p[np.argmin(r)])
        sd = math.sqrt(expected * (1 - expected) / len(x))
        assert abs(share - expected) < 5 * sd, node
    # isotropy: the four axis directions are equally likely
    axis = [int(np.sum((x == a) & (y == b))) for a, b in ((3, 0), (-3, 0), (0, 3), (0, -3))]
    assert stats.chisquare(axis).pvalue > 1e-4


def test_the_exact_path_alone_gives_the_same_law(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the float pre-check disabled (margin 1: nothing is sure), every acceptance is
    decided by the integer brackets of exp(−(c√n − λ‖z‖₁))."""
    monkeypatch.setattr(planar, "_MARGIN", 1.0)
    x, y = planar_laplace(Fraction(3, 4), 20_000, source=SeededSource("planar-exact"))
    assert _chi2_radius(x, y, 0.75, [0.5, 1.2, 1.5, 2.1, 2.9, 4, 6]) > 1e-4


def test_a_fine_grid_has_the_continuous_mean_radius() -> None:
    """c = 1/1000 per step: the mean radius is 2/c steps (Gamma(2, 1/c)) to within 1 %."""
    x, y = planar_laplace(Fraction(1, 1000), 200_000, source=SeededSource("planar-fine"))
    mean = float(np.mean(np.hypot(x, y)))
    assert abs(mean / 2000 - 1) < 0.01


@pytest.mark.parametrize("distance", [1, 2, 4])
def test_neighbouring_points_are_e_to_the_c_d_indistinguishable(distance: int) -> None:
    """Outputs from p = (0, 0) and p′ = (d, 0): the audit's ε lower bound (split-sample,
    Clopper–Pearson at 0.99) stays below c·d, and comes within half of it (the test has power)."""
    c = Fraction(1, 2)
    n = 100_000
    x0, _ = planar_laplace(c, n, source=SeededSource(f"gi-{distance}-a"))
    x1, _ = planar_laplace(c, n, source=SeededSource(f"gi-{distance}-b"))
    # the statistic: the output's first coordinate (p′'s outputs shifted by d)
    bound = epsilon_lower_bound(
        x0.astype(float), (x1 + distance).astype(float), epsilon=float(c) * distance,
        delta=0.0, confidence=0.99,
    )  # fmt: skip
    assert bound.epsilon <= float(c) * distance
    assert bound.epsilon >= 0.5 * float(c) * distance


def test_parameters_outside_the_samplers_range_are_refused_with_the_fix() -> None:
    with pytest.raises(InvalidArgumentError, match="ε per grid step in"):
        planar_laplace(Fraction(1, 2**41), 1)
    with pytest.raises(InvalidArgumentError, match="ε per grid step in"):
        planar_laplace(2**11, 1)
