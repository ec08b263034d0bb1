"""The noise a mechanism actually adds follows the distribution its Release declares.

Chi-square on equal-probability bins (20 bins, fixed seeds, cut-off p-value > 1e-4)."""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction

import numpy as np
from numpy.typing import NDArray
from scipy import stats

import veil.mechanisms as mech
from support import SeededSource


def _equal_bins_pvalue(noise: NDArray[np.int64], cdf: Callable[[int], float]) -> float:
    """Bin integer noise at integer cut points near the 5 %, 10 %, … quantiles of ``cdf``."""
    lo, hi = int(noise.min()) - 1, int(noise.max()) + 1
    cuts: list[int] = []
    for q in np.linspace(0.05, 0.95, 19):
        a, b = lo, hi  # smallest integer c with cdf(c) ≥ q
        while a < b:
            mid = (a + b) // 2
            a, b = (mid + 1, b) if cdf(mid) < q else (a, mid)
        if not cuts or a > cuts[-1]:
            cuts.append(a)
    probs = np.diff([0.0, *[cdf(c) for c in cuts], 1.0])
    counts = np.bincount(
        np.searchsorted(np.array(cuts), noise, side="left"), minlength=len(cuts) + 1
    )
    return float(stats.chisquare(counts, probs * noise.size).pvalue)


def _laplace_cdf(scale: Fraction) -> Callable[[int], float]:
    x = 1 / float(scale)
    p = math.exp(-x)
    return lambda v: 1 - math.exp(-x * (v + 1)) / (1 + p) if v >= 0 else math.exp(x * v) / (1 + p)


def test_laplace_mechanism_noise_is_the_declared_discrete_laplace_in_grid_steps() -> None:
    r = mech.laplace(np.zeros(50_000), sensitivity=1, epsilon=1, source=SeededSource("lm"))
    assert r.grid is not None
    assert r.noise_scale is not None
    steps = np.ldexp(r.value, -r.grid)
    assert np.array_equal(steps, np.rint(steps))
    assert _equal_bins_pvalue(steps.astype(np.int64), _laplace_cdf(r.noise_scale)) > 1e-4


def test_discrete_laplace_mechanism_noise_has_scale_delta_over_epsilon() -> None:
    base = np.arange(40_000, dtype=np.int64)
    r = mech.discrete_laplace(base, sensitivity=3, epsilon=0.5, source=SeededSource("dlm"))
    assert _equal_bins_pvalue(r.value - base, _laplace_cdf(Fraction(6))) > 1e-4
    # test of the test: the same noise is rejected against a 10 % larger scale
    assert _equal_bins_pvalue(r.value - base, _laplace_cdf(Fraction(66, 10))) < 1e-4


def test_gaussian_mechanism_noise_is_the_declared_discrete_gaussian() -> None:
    r = mech.discrete_gaussian(
        np.zeros(50_000, dtype=np.int64),
        sensitivity=1,
        rho=Fraction(1, 50),
        source=SeededSource("g"),
    )
    k = np.arange(-400, 401)
    w = np.exp(-(k.astype(np.float64) ** 2) / 50.0)
    c = np.cumsum(w) / w.sum()

    def cdf(v: int) -> float:
        return 0.0 if v < -400 else 1.0 if v >= 400 else float(c[v + 400])

    assert _equal_bins_pvalue(r.value, cdf) > 1e-4


def test_grid_gaussian_noise_matches_its_sigma() -> None:
    r = mech.gaussian(np.zeros(50_000), sensitivity=1, rho=1, source=SeededSource("gg"))
    assert r.grid is not None
    assert r.noise_scale is not None
    steps = np.ldexp(r.value, -r.grid).astype(np.int64)
    sigma = math.sqrt(float(r.noise_scale))
    # σ is thousands of steps here: the lattice is negligible, compare with the normal cdf
    assert _equal_bins_pvalue(steps, lambda v: float(stats.norm.cdf((v + 0.5) / sigma))) > 1e-4
