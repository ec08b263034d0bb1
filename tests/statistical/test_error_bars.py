"""Error-bar coverage: the fraction of releases within ``error_bar(level)`` of the truth is at
least ``level`` and not far above it (the half-width is the smallest integer one for the
discrete noise). Binomial tests with fixed seeds, cut-off p-value > 1e-4 (one-sided lower)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

import veil.mechanisms as mech
from support import SeededSource


@pytest.mark.parametrize("level", [0.5, 0.9, 0.95])
def test_discrete_laplace_error_bar_covers_at_its_level(level: float) -> None:
    n = 50_000
    r = mech.discrete_laplace(
        np.zeros(n, dtype=np.int64), sensitivity=1, epsilon=0.2, source=SeededSource(f"eb{level}")
    )
    hits = int((np.abs(r.value) <= r.error_bar(level)).sum())
    assert stats.binomtest(hits, n, level, alternative="less").pvalue > 1e-4
    # the smallest integer half-width: one step less would undercover
    t = r.error_bar(level) - 1
    p = 1 - 2 * np.exp(-0.2 * (t + 1)) / (1 + np.exp(-0.2))
    assert p < level


@pytest.mark.parametrize("level", [0.68, 0.95])
def test_discrete_gaussian_error_bar_covers_at_its_level(level: float) -> None:
    n = 50_000
    r = mech.discrete_gaussian(
        np.zeros(n, dtype=np.int64),
        sensitivity=1,
        rho=Fraction(1, 50),
        source=SeededSource(f"gb{level}"),
    )
    hits = int((np.abs(r.value) <= r.error_bar(level)).sum())
    assert stats.binomtest(hits, n, level, alternative="less").pvalue > 1e-4
    # the smallest integer half-width: one step less would undercover (σ² = 25 in units)
    k = np.arange(-200, 201)
    w = np.exp(-(k**2) / 50.0)
    t = r.error_bar(level) - 1
    assert w[np.abs(k) <= t].sum() / w.sum() < level


def test_grid_laplace_error_bar_covers_a_value_off_the_grid() -> None:
    truth = 0.123456789
    hits = 0
    n = 2000
    src = SeededSource("grid-eb")
    for _ in range(n):
        r = mech.laplace(truth, sensitivity=1, epsilon=1, source=src)
        hits += abs(r.value - truth) <= r.error_bar(0.9)
    assert stats.binomtest(hits, n, 0.9, alternative="less").pvalue > 1e-4
    assert hits / n < 0.93
