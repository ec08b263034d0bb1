"""Confidence half-widths of the discrete noise (for error bars; not privacy-critical)."""

from __future__ import annotations

import math
from fractions import Fraction
from statistics import NormalDist

import numpy as np

from veil.errors import InvalidArgumentError

__all__ = ["gaussian_halfwidth", "laplace_halfwidth"]


def _level(level: float) -> float:
    if not isinstance(level, int | float) or not 0 < level < 1 or math.isnan(level):
        raise InvalidArgumentError(f"level must lie in (0, 1), e.g. 0.95; got {level!r}")
    return float(level)


def laplace_halfwidth(scale: Fraction | int, level: float = 0.95) -> float:
    """Smallest integer ``t`` with ``P(|X| ≤ t) ≥ level`` for discrete Laplace(scale).

    ``P(|X| ≤ t) = 1 - 2p^(t+1)/(1+p)`` with ``p = e^(-1/scale)``.
    """
    lv = _level(level)
    x = 1 / float(Fraction(scale))
    p = math.exp(-x)

    def coverage(t: int) -> float:
        return 1 - 2 * math.exp(-x * (t + 1)) / (1 + p)

    t = max(0, math.ceil(math.log((1 - lv) * (1 + p) / 2) / -x) - 1)
    while t > 0 and coverage(t - 1) >= lv:
        t -= 1
    while coverage(t) < lv:
        t += 1
    return float(t)


def gaussian_halfwidth(sigma2: Fraction | int, level: float = 0.95) -> float:
    """Smallest integer ``t`` with ``P(|X| ≤ t) ≥ level`` for the discrete Gaussian(σ²).

    Summed exactly over the pmf (in floats) for σ ≤ 10^5; above, the discrete Gaussian is
    within 1e-9 of the continuous one and the normal quantile (rounded up) is used.
    """
    lv = _level(level)
    s2 = float(Fraction(sigma2))
    sigma = math.sqrt(s2)
    if sigma > 1e5:
        return float(math.ceil(sigma * NormalDist().inv_cdf((1 + lv) / 2)))
    k_max = int(40 * sigma) + 2
    k = np.arange(k_max + 1, dtype=np.float64)
    w = np.exp(-(k * k) / (2 * s2))
    w[1:] *= 2  # ±k
    cdf = np.cumsum(w) / w.sum()
    return float(np.searchsorted(cdf, lv, side="left"))
