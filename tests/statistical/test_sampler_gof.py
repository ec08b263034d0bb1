"""Chi-square goodness of fit of every integer sampler against its exact pmf.

Thresholds: each test draws from a fixed-seed :class:`SeededSource` and requires the
chi-square p-value to exceed 1e-4 (a correct sampler fails one given test with probability
1e-4; with fixed seeds the outcome is deterministic). Bins with expected count < 5 are merged
into the tails. Scales cover the tiny (1e-3), ordinary and huge (1e12, σ² = 1e20) regimes and
every code path: direct tables (small, standard, large), the split low/high parts of large
scales, tail recursion, exact and binned Gaussian acceptance.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction

import numpy as np
import pytest
from numpy.typing import NDArray
from scipy import stats

from support import SeededSource
from veil.noise import discrete_gaussian, discrete_laplace, geometric

P_MIN = 1e-4


def _gof(sample: NDArray[np.int64], cdf: Callable[[float], float], edges: list[float]) -> float:
    """Chi-square p-value of ``sample`` binned at ``edges`` (plus two tails) under ``cdf``.

    ``cdf(x) = P(X ≤ x)``; bin i is (edges[i-1], edges[i]].
    """
    cuts = [-math.inf, *edges, math.inf]
    probs = np.diff([0.0 if c == -math.inf else 1.0 if c == math.inf else cdf(c) for c in cuts])
    # integer data: bin index = number of edges strictly below the value
    counts = np.bincount(
        np.searchsorted(np.array(edges) + 0.5, sample, side="left"), minlength=len(edges) + 1
    )
    expected = probs * sample.size
    # merge small bins into neighbours
    obs_m, exp_m, acc_o, acc_e = [], [], 0.0, 0.0
    for o, e in zip(counts, expected, strict=True):
        acc_o += o
        acc_e += e
        if acc_e >= 5:
            obs_m.append(acc_o)
            exp_m.append(acc_e)
            acc_o = acc_e = 0.0
    if acc_e > 0 or acc_o > 0:
        obs_m[-1] += acc_o
        exp_m[-1] += acc_e
    if len(obs_m) < 2:
        return 1.0
    exp_arr = np.array(exp_m)
    exp_arr *= sum(obs_m) / exp_arr.sum()
    return float(stats.chisquare(obs_m, exp_arr).pvalue)


def _laplace_cdf(scale: float) -> Callable[[float], float]:
    x = 1 / scale

    def cdf(v: float) -> float:  # P(X ≤ v) for integer v; p = e^{-x}
        k = math.floor(v)
        if k >= 0:
            return 1 - math.exp(-x * (k + 1)) / (1 + math.exp(-x))
        return math.exp(-x * -k) / (1 + math.exp(-x))

    return cdf


def _edges(spread: float, count: int = 60) -> list[float]:
    if spread < 30:
        r = math.ceil(spread) + 1
        return [float(v) for v in range(-r, r)]
    return list(np.unique(np.floor(np.linspace(-spread, spread, count))))


@pytest.mark.parametrize(
    ("scale", "n"),
    [
        (Fraction(1, 1000), 100_000),
        (Fraction(1, 3), 100_000),
        (Fraction(1), 100_000),
        (Fraction(10), 100_000),
        (Fraction(255, 2), 100_000),
        (Fraction(1000), 100_000),  # split low/high parts (batch too small for a big table)
        (Fraction(1000), 300_000),  # a 16384-entry direct table, then (past a chunk) a split
        (Fraction(7), 700_000),  # three chunks (``samplers._CHUNK``)
        (Fraction(10**6), 100_000),
        (Fraction(10**12), 100_000),
    ],
)
def test_discrete_laplace_matches_its_pmf(scale: Fraction, n: int) -> None:
    x = discrete_laplace(scale, n, source=SeededSource(f"dl{scale}-{n}"))
    s = float(scale)
    assert _gof(x, _laplace_cdf(s), _edges(6 * s)) > P_MIN


def test_discrete_laplace_at_a_tiny_scale_is_almost_surely_zero() -> None:
    # P(X ≠ 0) = 2e^{-1000}/(1 + e^{-1000}): no nonzero value can appear in 10^6 draws
    assert not discrete_laplace(Fraction(1, 1000), 1_000_000, source=SeededSource(0)).any()


@pytest.mark.parametrize("scale", [Fraction(1), Fraction(20), Fraction(3000), Fraction(10**9)])
def test_geometric_matches_its_pmf(scale: Fraction) -> None:
    g = geometric(scale, 100_000, source=SeededSource(f"g{scale}"))
    x = 1 / float(scale)
    assert g.min() >= 0

    def cdf(v: float) -> float:
        return 0.0 if v < 0 else -math.expm1(-x * (math.floor(v) + 1))

    s = float(scale)
    edges = [float(v) for v in range(0, 40)] if s < 5 else list(np.floor(np.linspace(0, 8 * s, 60)))
    assert _gof(g, cdf, edges) > P_MIN


def _gauss_cdf(sigma2: Fraction) -> Callable[[float], float]:
    s2 = float(sigma2)
    sigma = math.sqrt(s2)
    if sigma > 1000:  # the lattice is negligible: the continuous cdf at half-integers
        return lambda v: float(stats.norm.cdf((math.floor(v) + 0.5) / sigma))
    k = np.arange(-int(40 * sigma) - 2, int(40 * sigma) + 3)
    w = np.exp(-(k.astype(np.float64) ** 2) / (2 * s2))
    c = np.cumsum(w) / w.sum()
    return lambda v: float(c[np.searchsorted(k, math.floor(v), side="right") - 1])


@pytest.mark.parametrize(
    ("sigma2", "n"),
    [
        (Fraction(1, 100), 100_000),
        (Fraction(1), 100_000),
        (Fraction(7, 3), 300),  # small batch: every acceptance decided one by one
        (Fraction(100), 100_000),
        (Fraction(100), 600_000),  # three chunks (``samplers._CHUNK``)
        (Fraction(10**6), 100_000),  # binned acceptance table (bins wider than 1)
        (Fraction(10**20), 20_000),
    ],
)
def test_discrete_gaussian_matches_its_pmf(sigma2: Fraction, n: int) -> None:
    x = discrete_gaussian(sigma2, n, source=SeededSource(f"dg{sigma2}"))
    sigma = math.sqrt(float(sigma2))
    assert _gof(x, _gauss_cdf(sigma2), _edges(4 * sigma, 40)) > P_MIN


def test_discrete_laplace_tail_mass_matches() -> None:
    # P(|X| ≥ 5·scale) = 2e^{-5}/(1 + e^{-1/scale}) at scale 100: ≈ 0.0134
    scale = 100
    x = discrete_laplace(scale, 200_000, source=SeededSource("tail"))
    p = 2 * math.exp(-5) / (1 + math.exp(-1 / scale))
    assert stats.binomtest(int((np.abs(x) >= 5 * scale).sum()), x.size, p).pvalue > P_MIN


def test_discrete_gaussian_tail_mass_matches() -> None:
    sigma2 = 400
    x = discrete_gaussian(sigma2, 200_000, source=SeededSource("gtail"))
    k = np.arange(-2000, 2001)
    w = np.exp(-(k**2) / (2 * sigma2))
    p = w[np.abs(k) >= 60].sum() / w.sum()  # |X| ≥ 3σ
    assert stats.binomtest(int((np.abs(x) >= 60).sum()), x.size, p).pvalue > P_MIN


def test_a_wrong_sampler_fails_the_same_check() -> None:
    # test of the test: a discrete Laplace with 5% too much scale must be rejected
    x = discrete_laplace(Fraction(105, 10), 100_000, source=SeededSource("wrong"))
    assert _gof(x, _laplace_cdf(10.0), _edges(60)) < P_MIN


@pytest.mark.parametrize(
    ("scale", "n"), [(1000, 1_000_000), (10**4, 1_000_000), (10**7, 1_000_000)]
)
def test_geometric_low_bits_follow_the_tilted_law(scale: int, n: int) -> None:
    # G mod B is a geometric truncated to [0, B): P(r) ∝ e^{-r/scale}. This checks the fine
    # structure (the low part of large-scale sampling) that coarse bins cannot see.
    g = geometric(scale, n, source=SeededSource(f"low{scale}"))
    block = 1 << max(5, math.floor(math.log2(scale / 16)))
    r = g % block
    edges = np.linspace(0, block, 9)
    counts = np.histogram(r, bins=edges)[0]
    w = np.exp(-np.arange(block) / scale)
    probs = np.add.reduceat(w, edges[:-1].astype(int)) / w.sum()
    assert stats.chisquare(counts, probs * n).pvalue > P_MIN


@pytest.mark.parametrize("scale", [Fraction(3), Fraction(100), Fraction(10**12)])
def test_small_batches_use_small_tables_and_match_the_pmf(scale: Fraction) -> None:
    # batches under 1024 draws take the small-table paths (256 entries, 8-bit low-part bins)
    src = SeededSource(f"small{scale}")
    x = np.concatenate([discrete_laplace(scale, 500, source=src) for _ in range(200)])
    s = float(scale)
    assert _gof(x, _laplace_cdf(s), _edges(6 * s)) > P_MIN


def test_small_batches_of_geometric_keep_the_tilted_low_bits() -> None:
    src = SeededSource("small-low")
    g = np.concatenate([geometric(1000, 1000 - 1, source=src) for _ in range(1000)])
    r = g % 32
    counts = np.bincount(r // 4, minlength=8)
    w = np.exp(-np.arange(32) / 1000)
    probs = w.reshape(8, 4).sum(axis=1) / w.sum()
    assert stats.chisquare(counts, probs * g.size).pvalue > P_MIN


@pytest.mark.parametrize(
    ("x", "m", "n", "calls"),
    [
        (Fraction(1, 8), 5, 200_000, 1),  # 32-bit proposals, one bin per value
        (Fraction(1, 2**34), 36, 200_000, 1),  # 64-bit proposals, 4096 bins
        (Fraction(1, 2**10), 12, 500, 400),  # small batches: 256 bins
    ],
)
def test_low_part_rejection_matches_the_truncated_geometric(
    x: Fraction, m: int, n: int, calls: int
) -> None:
    # the low part of large-scale sampling, driven with a strong tilt (x·2^m = 4) so that a
    # wrong acceptance rule would show: P(R = r) ∝ e^{-x·r} on [0, 2^m), binned in 32 cells
    from veil.noise.samplers import _low_part

    src = SeededSource(f"lowpart{m}")
    r = np.concatenate([_low_part(x, m, n, src) for _ in range(calls)])
    assert r.min() >= 0
    assert r.max() < 2**m
    cells = r >> (m - 5)
    counts = np.bincount(cells, minlength=32)
    edges = np.arange(33, dtype=np.float64) * 2 ** (m - 5) * float(x)  # in units of x·r
    mass = -np.diff(np.exp(-edges))  # ∫ e^{-t} over each cell (the lattice is fine here)
    if m == 5:
        mass = np.exp(-np.arange(32) * float(x))
    assert stats.chisquare(counts, mass / mass.sum() * r.size).pvalue > P_MIN
