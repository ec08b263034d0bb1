"""Empirical coverage of the fast (batch) error bars of ``veil.noise.errorbars``.

For a few coefficient sets of the shapes the aggregates use (sum noise + count noise; sums of
squares + sum + count), N = 20 000 seeded draws of the noises: the fraction of |Σ cᵢZᵢ| within
the bar must be at least level − 3·sqrt(level(1 − level)/N) (a bar covering with probability
≥ level fails this with probability ≈ 0.0013, normal approximation to the binomial; the draws
are seeded, so the outcome is fixed). A bar too narrow by 1 % of its width at 0.95 moves the
coverage by about 0.1 %: caught by the deterministic tests in ``tests/noise``, not here; this
guards against gross errors of the law (a wrong scale, a dropped term).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from support import SeededSource
from veil.noise import discrete_gaussian, discrete_laplace
from veil.noise.errorbars import combination_halfwidths

K = 1 << 30
N = 20_000
CASES = {
    "laplace": [("discrete_laplace", Fraction(K) * 3), ("discrete_laplace", Fraction(K) * 2)],
    "gaussian": [
        ("discrete_gaussian", Fraction(K) ** 2 * 9),
        ("discrete_gaussian", Fraction(K) ** 2 * 4),
    ],
}
COUNT = {
    "laplace": ("discrete_laplace", Fraction(11, 3)),
    "gaussian": ("discrete_gaussian", Fraction(4)),
}
COEFFICIENTS = [  # (squares, sum, count) per case; a 0 drops the term
    (0.0, 500 / K, 0.0),
    (0.0, 500 / K, 400.0),
    (300 / K, -20 / K, 50.0),
    (1e3 / K, 1e3 / K, 5.0),
]


def _draw(mechanism: str, scale: Fraction, source: SeededSource) -> np.ndarray:
    sampler = discrete_laplace if mechanism == "discrete_laplace" else discrete_gaussian
    return sampler(scale, N, source=source).astype(np.float64)


@pytest.mark.parametrize("family", list(CASES))
@pytest.mark.parametrize("level", [0.9, 0.95, 0.99])
def test_batch_bars_cover_at_least_their_level(family: str, level: float) -> None:
    source = SeededSource(f"batch-{family}-{level}")
    noises = [*CASES[family], COUNT[family]]
    z = [_draw(m, s, source) for m, s in noises]
    coefs = np.array(COEFFICIENTS).T  # rows: terms, columns: coefficient sets
    bars = combination_halfwidths(
        [(c, m, s) for c, (m, s) in zip(coefs, noises, strict=True)], level
    )
    floor = level - 3 * math.sqrt(level * (1 - level) / N)
    for j in range(coefs.shape[1]):
        total = sum(coefs[i, j] * z[i] for i in range(len(noises)))
        coverage = float(np.mean(np.abs(total) <= bars[j]))
        assert coverage >= floor, (COEFFICIENTS[j], coverage, floor)
