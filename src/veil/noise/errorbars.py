"""Confidence half-widths of the discrete noise (for error bars; not privacy-critical).

Error bars are post-processing of public parameters (mechanism, scale, coefficients built from
released values); nothing here reads private data. Contract of every function: the returned
half-width ``t`` satisfies ``P(|noise| ≤ t) ≥ level`` for the noise it describes.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from fractions import Fraction
from statistics import NormalDist

import numpy as np
from numpy.typing import NDArray

from veil.errors import InvalidArgumentError

__all__ = ["Term", "combination_halfwidth", "gaussian_halfwidth", "laplace_halfwidth"]


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


Term = tuple[float, str, Fraction]
"""One independent noise of a linear combination: (coefficient, mechanism, scale in grid units
— the discrete Laplace scale, or σ² of the discrete Gaussian)."""

_CELLS = 500  # grid cells per standard deviation of the combination
_TAIL = 1e-12  # mass left out of each noise's truncated support (counted as not covered)
_MARGIN = 1e-9  # the computed coverage must exceed the level by this (float round-off)
_MAX_CELLS = 4e6  # above this many grid cells the union bound is returned instead
_EXPLICIT_SIGMA = 2e4  # discrete Gaussians up to this σ are summed term by term


def _single(mechanism: str, scale: Fraction, level: float) -> float:
    if mechanism == "discrete_laplace":
        return laplace_halfwidth(scale, level)
    if mechanism == "discrete_gaussian":
        return gaussian_halfwidth(scale, level)
    raise InvalidArgumentError(f"no error bar for mechanism {mechanism!r}")


def _std(mechanism: str, scale: Fraction) -> float:
    if mechanism == "discrete_laplace":
        p = math.exp(-1 / float(scale))
        return math.sqrt(2 * p) / (1 - p) if p > 0 else 0.0
    return math.sqrt(float(scale))  # ≥ the discrete Gaussian's (CKS 2020, Prop. 19)


def _support(mechanism: str, scale: Fraction) -> int:
    """``K`` with ``P(|X| > K) ≤ _TAIL``."""
    if mechanism == "discrete_laplace":
        # P(|X| > K) = 2p^(K+1)/(1+p) ≤ 2·exp(−(K+1)/scale)
        return max(1, math.ceil(float(scale) * math.log(2 / _TAIL)))
    # the discrete Gaussian's tail is within a factor (1 + O(e^−2π²σ²)) of the continuous
    # one's sampled at the integers (CKS 2020, §2.3): 7.6σ + 1 leaves < 1e-13
    return max(1, math.ceil(7.6 * math.sqrt(float(scale))) + 1)


_ERFC = np.frompyfunc(math.erfc, 1, 1)


def _ndtr(x: NDArray[np.float64]) -> NDArray[np.float64]:
    """The standard normal CDF, elementwise (``erfc`` keeps the lower tail accurate)."""
    return np.asarray(_ERFC(-x / math.sqrt(2)), dtype=np.float64) / 2


def _convolve(a: NDArray[np.float64], b: NDArray[np.float64]) -> NDArray[np.float64]:
    """The full linear convolution of two mass vectors, by real FFT."""
    n = len(a) + len(b) - 1
    size = 1 << (n - 1).bit_length()
    return np.fft.irfft(np.fft.rfft(a, size) * np.fft.rfft(b, size), size)[:n]


def _masses(
    mechanism: str, scale: Fraction, lo: NDArray[np.float64], hi: NDArray[np.float64], k: int
) -> NDArray[np.float64]:
    """``P(lo ≤ X ≤ hi)`` per cell (empty cells 0); ``lo, hi`` are integers within [−K, K]."""
    out = np.zeros(lo.shape, dtype=np.float64)
    full = hi >= lo
    a, b = lo[full], hi[full]
    if mechanism == "discrete_laplace":
        s = float(scale)
        p = math.exp(-1 / s)
        pos, neg = a > 0, b < 0
        mid = ~(pos | neg)
        m = np.empty(a.shape, dtype=np.float64)
        # P(a ≤ X ≤ b) = (p^a − p^(b+1))/(1+p) for a > 0, mirrored for b < 0
        m[pos] = np.exp(-a[pos] / s) * -np.expm1(-(b[pos] + 1 - a[pos]) / s) / (1 + p)
        m[neg] = np.exp(b[neg] / s) * -np.expm1(-(b[neg] + 1 - a[neg]) / s) / (1 + p)
        m[mid] = 1 - (np.exp((a[mid] - 1) / s) + np.exp(-(b[mid] + 1) / s)) / (1 + p)
        out[full] = m
        return out
    s2 = float(scale)
    sigma = math.sqrt(s2)
    if sigma <= _EXPLICIT_SIGMA:
        x = np.arange(-k, k + 1, dtype=np.float64)
        w = np.exp(-(x * x) / (2 * s2))
        cdf = np.concatenate(([0.0], np.cumsum(w))) / w.sum()
        ia, ib = (a + k).astype(np.int64), (b + k).astype(np.int64)
        out[full] = cdf[ib + 1] - cdf[ia]
        return out
    # σ > 2·10^4: the discrete Gaussian's CDF at x is Φ((x + ½)/σ) within 0.01/σ² < 1e-10
    # (midpoint rule, Euler–Maclaurin); the margin absorbs it
    out[full] = _ndtr((b + 0.5) / sigma) - _ndtr((a - 0.5) / sigma)
    return out


def _cells(term: Term, h: float) -> NDArray[np.float64]:
    """The law of ``coefficient·X`` on cells ``[(j − ½)h, (j + ½)h)``, ``j = −J…J``."""
    coef, mechanism, scale = term
    c = abs(coef)
    k = _support(mechanism, scale)
    j_max = math.ceil(c * k / h + 0.5)
    j = np.arange(-j_max - 1, j_max + 1, dtype=np.float64)
    edges = np.ceil((j + 0.5) * h / c)  # the first integer of cell j + 1
    lo = np.maximum(edges[:-1], -k)
    hi = np.minimum(edges[1:] - 1, k)
    return _masses(mechanism, scale, lo, hi, k)


@functools.lru_cache(maxsize=4096)
def _combination(terms: tuple[Term, ...], level: float) -> float:
    n = len(terms)
    union = sum(abs(c) * _single(m, s, 1 - (1 - level) / n) for c, m, s in terms)
    sd = math.sqrt(sum((abs(c) * _std(m, s)) ** 2 for c, m, s in terms))
    if not sd > 0 or not math.isfinite(sd):
        return union
    h = sd / _CELLS
    cells = sum(abs(c) * _support(m, sc) / h for c, m, sc in terms)
    if cells > _MAX_CELLS:  # a term far wider than its sd says (a degenerate scale)
        return union
    law = _cells(terms[0], h)
    for t in terms[1:]:
        law = _convolve(law, _cells(t, h))
    np.clip(law, 0.0, None, out=law)
    centre = (len(law) - 1) // 2
    right, left = law[centre + 1 :], law[centre - 1 :: -1] if centre > 0 else law[:0]
    coverage = law[centre] + np.concatenate(([0.0], np.cumsum(right + left)))
    m = int(np.searchsorted(coverage, level + _MARGIN, side="left"))
    if m >= len(coverage):
        return union
    # |Σ cᵢxᵢ − Σ jᵢh| ≤ n·h/2: the discretised sum within m·h means the true one within this
    return min(union, (m + n / 2) * h * (1 + 1e-12))


def combination_halfwidth(terms: Sequence[Term], level: float = 0.95) -> float:
    """A half-width ``t`` with ``P(|Σ cᵢ·Xᵢ| ≤ t) ≥ level`` for independent integer noises Xᵢ.

    Contract: for ``terms`` (cᵢ, mechanism, scale) of independent discrete Laplace / discrete
    Gaussian noises, ``P(|Σ cᵢXᵢ| ≤ t) ≥ level``, and ``t`` exceeds the true quantile of
    ``|Σ cᵢXᵢ|`` by at most ``n/1000`` standard deviations of the sum (n = number of terms).
    One term: its exact discrete quantile. Several: the law of each ``cᵢXᵢ`` is put on a
    common grid of cells of width h = sd/500 (each value moves by ≤ h/2), truncated where its
    tail is below 1e-12 (the left-out mass counts as not covered, so the truncated law is a
    lower bound), convolved (FFT), and the smallest symmetric window reaching ``level`` (plus
    1e-9 for round-off) is widened by n·h/2. Never wider than the union bound
    Σ |cᵢ|·t_i(1 − (1 − level)/n), which is returned when the grid cannot reach the level.
    """
    lv = _level(level)
    kept = tuple(sorted((abs(float(c)), m, Fraction(s)) for c, m, s in terms if c != 0))
    for _c, m, _s in kept:
        if m not in ("discrete_laplace", "discrete_gaussian"):
            raise InvalidArgumentError(f"no error bar for mechanism {m!r}")
    if not kept:
        return 0.0
    if len(kept) == 1:
        c, m, s = kept[0]
        return c * _single(m, s, lv)
    return _combination(kept, lv)
