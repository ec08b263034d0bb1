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
from typing import Protocol

import numpy as np
from numpy.typing import ArrayLike, NDArray

from veil.errors import InvalidArgumentError

__all__ = [
    "Noise",
    "Term",
    "checked_level",
    "combination_halfwidth",
    "combination_halfwidths",
    "gaussian_halfwidth",
    "laplace_halfwidth",
    "single_halfwidth",
]


def checked_level(level: float) -> float:
    """``level`` as a float in (0, 1); anything else is refused naming the value."""
    if not isinstance(level, int | float) or not 0 < level < 1 or math.isnan(level):
        raise InvalidArgumentError(f"level must lie in (0, 1), e.g. 0.95; got {level!r}")
    return float(level)


def laplace_halfwidth(scale: Fraction | int, level: float = 0.95) -> float:
    """Smallest integer ``t`` with ``P(|X| ≤ t) ≥ level`` for discrete Laplace(scale).

    ``P(|X| ≤ t) = 1 - 2p^(t+1)/(1+p)`` with ``p = e^(-1/scale)``.
    """
    lv = checked_level(level)
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
    lv = checked_level(level)
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


def single_halfwidth(mechanism: str, scale: Fraction, level: float) -> float:
    """The half-width of one discrete noise (``mechanism`` at ``scale``) at ``level``."""
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
    union = sum(abs(c) * single_halfwidth(m, s, 1 - (1 - level) / n) for c, m, s in terms)
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


def _grid_halfwidth(terms: Sequence[Term], level: float) -> float:
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
    kept = _kept(terms)
    if not kept:
        return 0.0
    if len(kept) == 1:
        c, m, s = kept[0]
        return c * single_halfwidth(m, s, level)
    return _combination(kept, level)


def _kept(terms: Sequence[Term]) -> tuple[Term, ...]:
    """The non-zero terms as (|c|, mechanism, scale), sorted (a cache key); checks mechanisms."""
    kept = tuple(sorted((abs(float(c)), m, Fraction(s)) for c, m, s in terms if c != 0))
    for _c, m, _s in kept:
        if m not in ("discrete_laplace", "discrete_gaussian"):
            raise InvalidArgumentError(f"no error bar for mechanism {m!r}")
    return kept


def combination_halfwidth(terms: Sequence[Term], level: float = 0.95) -> float:
    """A half-width ``t`` with ``P(|Σ cᵢ·Xᵢ| ≤ t) ≥ level`` for independent integer noises Xᵢ.

    Contract: for ``terms`` (cᵢ, mechanism, scale) of independent discrete Laplace / discrete
    Gaussian noises, ``P(|Σ cᵢXᵢ| ≤ t) ≥ level``, and ``t`` exceeds the true quantile of
    ``|Σ cᵢXᵢ|`` by at most ``n/1000`` standard deviations of the sum (n = number of terms).
    One term: its exact discrete quantile. Several: :func:`combination_halfwidths` (its
    contract) when the terms have its shape; two noises, one of support ≤ 4096 per side: the
    exact mixture (``_mixture``, within a relative 1e-7 above the quantile at level + 1e-9);
    else the exact grid convolution of ``_grid_halfwidth`` (each law on cells of width sd/500,
    truncated at a 1e-12 tail counted as not covered, convolved by FFT, the window widened by
    n·h/2).
    """
    lv = checked_level(level)
    kept = _kept(terms)
    if not kept:
        return 0.0
    if len(kept) == 1:
        c, m, s = kept[0]
        return c * single_halfwidth(m, s, lv)
    return _cached_halfwidth(kept, lv)


@functools.lru_cache(maxsize=8192)
def _cached_halfwidth(kept: tuple[Term, ...], level: float) -> float:
    coefficients = [np.array([c]) for c, _m, _s in kept]
    noises = [(m, s) for _c, m, s in kept]
    fast = _fast(coefficients, noises, level)
    if fast is None:
        fast = _mixture(coefficients, noises, level)
    return float(fast[0]) if fast is not None else _combination(kept, level)


# ── two discrete noises, one of small support: the exact mixture ──────────────────────────
#
# For c_a·X + c_b·Y with X, Y independent discrete Laplace / discrete Gaussian, Y's support
# cut at K_Y (tail < 1e-12) and K_Y ≤ _MIX_POINTS:
#
#     F(t) = Σ_{|k| ≤ K_Y} P(Y = k) · P(|c_a·X + c_b·k| ≤ t)
#          = Σ_{|k| ≤ K_Y} P(Y = k) · P(⌈(−t − c_b·k)/c_a⌉ ≤ X ≤ ⌊(t − c_b·k)/c_a⌋)
#
# — exact but for the left-out tails of X and Y (counted as not covered, so F is a lower
# bound) and float round-off, which the window absorbs: its ends are pulled in by a relative
# 1e-12 (only fewer lattice points of X are counted), and the level is raised by _MARGIN.
# X's interval masses are the closed forms of _masses (the discrete Laplace's geometric sums,
# the discrete Gaussian's summed pmf or, for σ > 2·10⁴, the midpoint normal CDF within 1e-10).
# F is nondecreasing in t; a bisection between 0 and the union bound U (which covers by
# itself) returns the upper end of a bracket [lo, hi] with F(hi) ≥ level + _MARGIN evaluated
# and hi − lo ≤ 1e-7·hi (or U when F(U) does not reach it: the union bound holds anyway).
# The cost is ~60 evaluations of (groups × (K_Y + 1)) masses, whatever the scales' ratio —
# the grid convolution needs cells ∝ |c_b|·K_Y/sd, millions when a count's coefficient is the
# reach of an AVG at large ε.

_MIX_POINTS = 4096  # the mixing noise's support (per side) up to which the mixture is used


@functools.lru_cache(maxsize=256)
def _point_masses(
    mechanism: str, scale: Fraction
) -> tuple[NDArray[np.float64], NDArray[np.float64]] | None:
    """k = 0…K and P(|Y| = k) (None when K > _MIX_POINTS); the tail beyond K is left out."""
    k_max = _support(mechanism, scale)
    if k_max > _MIX_POINTS:
        return None
    k = np.arange(k_max + 1, dtype=np.float64)
    if mechanism == "discrete_laplace":
        s = float(scale)
        p = math.exp(-1 / s)
        # P(Y = k) = (1 − p)/(1 + p)·p^|k|; −expm1 keeps 1 − p exact for wide scales
        w = -math.expm1(-1 / s) / (1 + p) * np.exp(-k / s)
    else:
        s2 = float(scale)
        sigma = math.sqrt(s2)
        far = np.arange(1, int(40 * sigma) + 3, dtype=np.float64)
        norm = 1 + 2 * float(np.exp(-(far * far) / (2 * s2)).sum())
        w = np.exp(-(k * k) / (2 * s2)) / norm
    w[1:] *= 2
    return k, w


def _mixture(
    coefficients: Sequence[NDArray[np.float64]],
    noises: Sequence[tuple[str, Fraction]],
    level: float,
) -> NDArray[np.float64] | None:
    """Half-widths per group for two discrete noises, one of support ≤ _MIX_POINTS per side,
    by the exact mixture above (else None)."""
    if len(noises) != 2:
        return None
    shape = np.broadcast(*coefficients).shape
    ca, cb = (np.abs(np.broadcast_to(c, shape).astype(np.float64)).ravel() for c in coefficients)
    (ma, sa), (mb, sb) = noises
    if _support(mb, sb) > _support(ma, sa):  # mix over the noise of the smaller support
        ca, cb, (ma, sa), (mb, sb) = cb, ca, (mb, sb), (ma, sa)
    points = _point_masses(mb, sb)
    if points is None or not np.all(np.isfinite(ca)) or not np.all(np.isfinite(cb)):
        return None
    # a group whose closed-form term is absent holds the mixing noise alone: its exact quantile
    solo = ca == 0
    ca = np.where(solo, 1.0, ca)  # (a placeholder for the search; overwritten below)
    ks, w = points
    target = level + _MARGIN
    k_a = _support(ma, sa)
    half = 1 - (1 - level) / 2
    union = ca * single_halfwidth(ma, sa, half) + cb * single_halfwidth(mb, sb, half)
    y = cb[:, None] * ks[None, :]  # rows: groups, columns: k = 0…K (±k by symmetry of X)

    def covered(t: NDArray[np.float64], rows: NDArray[np.intp]) -> NDArray[np.bool_]:
        """F(t) ≥ target for each of ``rows`` (window ends pulled in by a relative 1e-12)."""
        tc, yr, cr = t[:, None], y[rows], ca[rows][:, None]
        pull = 1e-12 * (tc + yr) / cr
        lo = np.maximum(np.ceil((-tc - yr) / cr + pull), -k_a)
        hi = np.minimum(np.floor((tc - yr) / cr - pull), k_a)
        return np.asarray((_masses(ma, sa, lo, hi, k_a) @ w) >= target)

    every = np.arange(len(union))
    with np.errstate(all="ignore"):
        out = union.copy()
        at_zero = covered(np.zeros_like(union), every)
        out[at_zero] = 0.0
        live = ~at_zero & covered(union, every)
        lo_t, hi_t = np.zeros_like(union), union.copy()
        for _ in range(200):
            rows = np.flatnonzero(live & (hi_t - lo_t > _RTOL * hi_t))
            if not len(rows):
                break
            mid = (lo_t[rows] + hi_t[rows]) / 2
            ok = covered(mid, rows)
            hi_t[rows] = np.where(ok, mid, hi_t[rows])
            lo_t[rows] = np.where(ok, lo_t[rows], mid)
        else:
            raise InvalidArgumentError("the error-bar bisection did not converge; this is a bug")
        out[live] = hi_t[live]
    out[solo] = cb[solo] * single_halfwidth(mb, sb, level)
    return out.reshape(shape)


# ── the fast path: many groups at once, closed-form laws ──────────────────────────────────
#
# Shape: one or more *wide* noises (scale ≥ 10^6 grid steps: the sums and sums of squares,
# whose grid is 2^20–2^30 steps per bound) and at most one *narrow* one (the count). A wide
# noise is replaced by the continuous law of the same scale (Laplace(b) or N(0, σ²)); their
# weighted sum V has a closed-form tail (Gaussian: normal; up to two Laplaces: a signed mixture,
# written stably below). The narrow noise is summed over its support. With y = |a|·k:
#
#     F(t) = Σₖ P(Z = k) · P(|V + a·k| ≤ t)        (V and Z independent, V symmetric)
#
# Proof sketch of P(|Σ cᵢXᵢ| ≤ t) ≥ level when the computed F(t) ≥ level + slack:
# (1) replacing one wide Xᵢ by its continuous L changes the probability of any interval (given
#     the other noises) by at most 2·d_K(Xᵢ, L), d_K the Kolmogorov distance: for the discrete
#     Laplace(s), d_K ≤ (1 − e^(−1/s))/2 (its CDF at x ≥ 0 is 1 − p^(⌊x⌋+1)/(1 + p), within
#     (1 − p)/2 of 1 − e^(−x/s)/2); for the discrete Gaussian(σ), d_K ≤ 0.2/σ + 0.125/σ²
#     (the step of the CDF between integers, φ(0)/2σ, plus the midpoint-rule error
#     ∫|f''|/8 = 4φ(1)/8σ², Peano kernel; the normaliser equals σ√(2π) up to 2e^(−2π²σ²) = 0
#     in floats, Poisson summation);
# (2) the narrow noise's support is cut where its tail is below 1e-12 and, for a wide support,
#     grouped into blocks evaluated at their largest |k|: P(|V + y| ≤ t) is nonincreasing in
#     |y| (V symmetric unimodal), so both only lower F;
# (3) the normal tail uses erfc with fractional error < 1.2e-7 (Press et al., Numerical
#     Recipes, 2nd ed., §6.2, `erfcc`), so F is off by < 1.2e-7; Laplace tails are exp/expm1;
# (4) slack = 1e-9 (round-off) + 2Σ d_K + 2.4e-7 (Gaussian), and the returned t is the upper
#     end of a bracket at which F(t) ≥ level + slack was evaluated, its lower end (F below the
#     target, also evaluated) within a relative 1e-7. The search (Newton from a start by the
#     kurtosis, safeguarded by bisection; see _bracket) only chooses where F is evaluated: the
#     guarantee rests on the evaluation at t alone, the tightness on the one at the lower end.
# Monotonicity (used by the AVG bar and free for rounding coefficients up): with V symmetric
# unimodal, y ↦ P(|V + y| ≤ t) is symmetric and nonincreasing in |y|, so F(t) is
# nonincreasing in |a| (any symmetric narrow Z); sums of symmetric log-concave laws are
# log-concave, so V is symmetric unimodal in every coefficient (Wintner 1938, Anderson 1955).

_WIDE = 1e6  # a noise with a scale (Laplace) or σ (Gaussian) of at least this many steps
_POINTS = 400  # narrow support points per side before they are grouped into blocks
_MAX_SUPPORT = 200_000  # a narrow discrete Gaussian beyond this goes the grid way
_ERFC_ERROR = 2.4e-7  # twice the fractional error bound of _erfc (two tails per interval)
_RTOL = 1e-7  # relative width of the final bracket
_SQRT2 = math.sqrt(2.0)
_SQRT2PI = math.sqrt(2 * math.pi)


class Noise(Protocol):
    """One noise as error bars see it (``NoiseModel`` is one): its mechanism and its scale in
    grid units (the discrete Laplace scale, or σ² of the discrete Gaussian)."""

    @property
    def mechanism(self) -> str: ...

    @property
    def scale(self) -> Fraction: ...


def _erfc(x: NDArray[np.float64]) -> NDArray[np.float64]:
    """erfc(x) for x ≥ 0, fractional error < 1.2e-7 (Numerical Recipes' Chebyshev fit)."""
    t = 1.0 / (1.0 + 0.5 * x)
    poly = -1.26551223 + t * (
        1.00002368
        + t
        * (
            0.37409196
            + t
            * (
                0.09678418
                + t
                * (
                    -0.18628806
                    + t
                    * (
                        0.27886807
                        + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277)))
                    )
                )
            )
        )
    )
    return np.asarray(t * np.exp(-x * x + poly), dtype=np.float64)


def _slack(mechanism: str, scale: Fraction) -> float | None:
    """The Kolmogorov distance bound of a wide noise to its continuous law (None: narrow)."""
    s = float(scale)
    if mechanism == "discrete_laplace":
        return -math.expm1(-1 / s) / 2 if s >= _WIDE else None
    sigma = math.sqrt(s)
    return 0.2 / sigma + 0.125 / s if sigma >= _WIDE else None


@functools.lru_cache(maxsize=256)
def _narrow(
    mechanism: str, scale: Fraction
) -> tuple[NDArray[np.float64], NDArray[np.float64]] | None:
    """Evaluation points k ≥ 0 and the mass of |Z| in each one's block (its largest |k| is k);
    the mass beyond the 1e-12 tail is left out. None: too wide a discrete Gaussian."""
    k_max = _support(mechanism, scale)
    width = max(1, math.ceil(k_max / _POINTS))
    tops = np.concatenate(([0], np.arange(width, k_max + width, width)))
    tops = np.minimum(tops, k_max).astype(np.float64)
    if mechanism == "discrete_laplace":
        s = float(scale)
        p = math.exp(-1 / s)
        # P(|Z| ≤ k) = 1 − 2p^(k+1)/(1 + p); a block (a, b] holds 2(p^(a+1) − p^(b+1))/(1 + p)
        below = 1 - 2 * np.exp(-(tops + 1) / s) / (1 + p)
        mass = np.diff(np.concatenate(([0.0], below)))
        return tops, np.maximum(mass, 0.0)
    if k_max > _MAX_SUPPORT:
        return None
    s2 = float(scale)
    k = np.arange(k_max + 1, dtype=np.float64)
    w = np.exp(-(k * k) / (2 * s2))
    w[1:] *= 2
    sigma = math.sqrt(s2)
    if sigma < 1e3:  # the normaliser summed over ±(40σ + 2) (the rest is below 1e-300)
        far = np.arange(1, int(40 * sigma) + 3, dtype=np.float64)
        norm = 1 + 2 * float(np.exp(-(far * far) / (2 * s2)).sum())
    else:  # Poisson summation: Σ e^(−k²/2σ²) = σ√(2π)(1 + 2Σ e^(−2π²σ²m²)), the rest is 0
        norm = sigma * _SQRT2PI
    cum = np.cumsum(w) / norm
    below = cum[tops.astype(np.int64)]
    return tops, np.maximum(np.diff(np.concatenate(([0.0], below))), 0.0)


class _Wide:
    """The continuous law V of the wide noises, one per row: N(0, b1²) (Gaussian) or
    Laplace(b1) + Laplace(b2) with b1 ≥ b2 ≥ 0, its per-row constants computed once."""

    def __init__(self, gaussian: bool, b1: NDArray[np.float64], b2: NDArray[np.float64]) -> None:
        self.gaussian = gaussian
        self.b1, self.b2 = b1, b2
        self.inv = 1 / b1
        if gaussian:
            self.density = self.inv / _SQRT2PI
            return
        r = b2 / b1
        # d per row, kept within [1e-300, 1e300]: g = −expm1(−yd)/d is then y at r = 1 and 0
        # (times r = 0) for a single Laplace, with no branch per element
        self.d = np.clip(1 / np.maximum(r, 1e-300) - 1, 1e-300, 1e300)
        self.mix = r / (1 + r)
        self.density = self.inv / (2 * (1 + r))

    def take(self, rows: NDArray[np.intp]) -> _Wide:
        return _Wide(self.gaussian, self.b1[rows], self.b2[rows])

    def tail(self, x: NDArray[np.float64]) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """P(V > x) and V's density at x ≥ 0 (rows of x: this law's rows). The two Laplaces
        (r = b2/b1, y = x/b1, d = 1/r − 1, g = (1 − e^(−yd))/d → y at r = 1): P(V > x) =
        e^(−y)/2 · (1 + r·g/(1 + r)), density e^(−y)(1 + g)/(2·b1·(1 + r)) — the partial
        fractions of 1/((1 + b1²u²)(1 + b2²u²)), rearranged so that nothing cancels as r → 1."""
        y = x * self.inv[:, None]
        if self.gaussian:
            return _erfc(y / _SQRT2) / 2, np.exp(-y * y / 2) * self.density[:, None]
        e = np.exp(-y)
        d = self.d[:, None]
        g = -np.expm1(-y * d) / d
        return e / 2 * (1 + self.mix[:, None] * g), e * (1 + g) * self.density[:, None]


def _tail(
    gaussian: bool, b1: NDArray[np.float64], b2: NDArray[np.float64], x: NDArray[np.float64]
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """:meth:`_Wide.tail` for rows of parameters ``b1, b2`` (shape (rows, 1) or (rows,))."""
    law = _Wide(gaussian, np.ravel(b1), np.ravel(b2))
    return law.tail(np.reshape(x, (len(law.b1), -1)))


def _coverage(
    law: _Wide, y: NDArray[np.float64], w: NDArray[np.float64], t: NDArray[np.float64]
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """F(t) = Σⱼ wⱼ P(|V + yⱼ| ≤ t) per row and its derivative in t; rows: (group, point)."""
    tc = t[:, None]
    u = tc - y  # rows: evaluations, columns: narrow points
    su, fu = law.tail(np.abs(u))
    sv, fv = law.tail(tc + y)
    inside = np.where(u >= 0, 1 - su, su) - sv
    return inside @ w, (fu + fv) @ w


def _start(
    gaussian: bool,
    b1: NDArray[np.float64],
    b2: NDArray[np.float64],
    y: NDArray[np.float64],
    w: NDArray[np.float64],
    target: float,
) -> NDArray[np.float64]:
    """A first guess of the quantile: the normal and the Laplace quantiles of the same variance,
    interpolated by the excess kurtosis (0 normal, 3 Laplace) of the combination (cumulants
    add). Only a start: the bracket decides."""
    m2, m4 = (y * y) @ w, (y**4) @ w  # the narrow term's moments (|Z| at its block tops)
    var = m2 + (b1 * b1 + b2 * b2 if gaussian else 2 * (b1 * b1 + b2 * b2))
    k4 = m4 - 3 * m2 * m2 + (0 if gaussian else 12 * (b1**4 + b2**4))
    sd = np.sqrt(var)
    normal = NormalDist().inv_cdf((1 + min(target, 1 - 1e-15)) / 2) * sd
    laplace = -math.log(1 - target) * sd / _SQRT2
    weight = np.clip(k4 / (3 * var * var), 0.0, 1.0)
    return np.asarray(normal + weight * (laplace - normal), dtype=np.float64)


def _solve(
    gaussian: bool,
    b1: NDArray[np.float64],
    b2: NDArray[np.float64],
    y: NDArray[np.float64],
    w: NDArray[np.float64],
    target: float,
) -> NDArray[np.float64]:
    """Per group, a t with F(t) ≥ target (evaluated) within a relative 1e-7 of the smallest."""
    with np.errstate(all="ignore"):  # far tails under/overflow to 0/inf on purpose
        t = _start(gaussian, b1, b2, y, w, target)
        return _bracket(_Wide(gaussian, b1, b2), y, w, target, t)


def _bracket(
    law: _Wide,
    y: NDArray[np.float64],
    w: NDArray[np.float64],
    target: float,
    t: NDArray[np.float64],
) -> NDArray[np.float64]:
    """Newton's method on F, safeguarded by the bracket [lo, hi] of evaluated points
    (F(lo) < target ≤ F(hi)); the result is hi once hi − lo ≤ 1e-7·hi. Once a Newton step is
    below 1e-4 (relative), the next iterate is within ~1e-8 of the root (quadratic
    convergence), so both of its neighbours at ±_RTOL/3 are evaluated at once and close the
    bracket together (if they do not, the search goes on from the nearer one)."""
    groups = len(t)
    lo = np.zeros(groups)
    hi = np.full(groups, np.inf)
    both = np.zeros(groups, dtype=bool)  # evaluate t(1 ± _RTOL/3) next
    width = np.full(groups, np.inf)  # the bracket's width two evaluations ago
    active = np.arange(groups)
    for i in range(300):
        pair = active[both[active]]
        rows = np.concatenate((active, pair))  # rows: evaluations (a group, a point)
        points = np.concatenate(
            (
                np.where(both[active], t[active] * (1 - _RTOL / 3), t[active]),
                t[pair] * (1 + _RTOL / 3),
            )
        )
        f, df = _coverage(law.take(rows), y[rows], w, points)
        ok = f >= target
        n = len(active)
        for part in (slice(0, n), slice(n, None)):  # each part holds a group at most once
            r, p, o = rows[part], points[part], ok[part]
            hi[r] = np.where(o, np.minimum(hi[r], p), hi[r])
            lo[r] = np.where(o, lo[r], np.maximum(lo[r], p))
        # the Newton step of each group from its evaluation nearest the root: a pair's lower
        # point if it reached the target (both did), else its upper one
        base = np.arange(n)
        upper = np.flatnonzero(both[active])
        base[upper[~ok[upper]]] = n + np.flatnonzero(~ok[upper])
        f, df, ta = f[base], df[base], points[base]
        done = np.isfinite(hi[active]) & (hi[active] - lo[active] <= _RTOL * hi[active])
        active, f, df, ta = active[~done], f[~done], df[~done], ta[~done]
        if not len(active):
            return hi
        la, ha = lo[active], hi[active]
        step = (target - f) / df
        new = ta + step
        # a bisection instead when the last two steps did not halve the bracket (F nearly a
        # staircase: a narrow noise with a wide lattice), or after 8 steps without reaching
        # the target, or when Newton leaves the bracket
        bounded = np.isfinite(ha)
        slow = (i % 2 == 1) & ((bounded & (ha - la > width[active] / 2)) | (~bounded & (i >= 8)))
        fine = np.isfinite(new) & (new > la) & (new < np.minimum(ha, 4 * ta)) & ~slow
        middle = np.where((la > 0) & (ha > 4 * la), np.sqrt(la * ha), (la + ha) / 2)
        new = np.where(fine, new, np.where(bounded, middle, 2 * np.maximum(ta, la)))
        both[active] = fine & (np.abs(step) <= 1e-4 * ta)
        if i % 2 == 1:
            width[active] = ha - la
        t[active] = new
    raise InvalidArgumentError("the error-bar search did not converge; this is a bug")


def _fast(
    coefficients: Sequence[NDArray[np.float64]],
    noises: Sequence[tuple[str, Fraction]],
    level: float,
) -> NDArray[np.float64] | None:
    """Half-widths per group for terms of the fast path's shape (else None); see above."""
    wide: list[tuple[NDArray[np.float64], float]] = []  # (|c|·scale in value units, slack)
    narrow: list[tuple[NDArray[np.float64], str, Fraction]] = []
    mechanisms = set()
    for c, (m, s) in zip(coefficients, noises, strict=True):
        slack = _slack(m, s)
        if slack is None:
            narrow.append((np.abs(c), m, s))
            continue
        mechanisms.add(m)
        unit = math.sqrt(float(s)) if m == "discrete_gaussian" else float(s)
        wide.append((np.abs(c) * unit, slack))
    if not wide or len(narrow) > 1 or len(mechanisms) > 1:
        return None
    gaussian = mechanisms == {"discrete_gaussian"}
    if not gaussian and len(wide) > 2:
        return None
    shape = np.broadcast(*[c for c, _ in wide], *[c for c, _m, _s in narrow]).shape
    widths = [np.broadcast_to(c, shape).astype(np.float64) for c, _ in wide]
    if gaussian:
        b1 = np.sqrt(sum((wd * wd for wd in widths), np.zeros(shape)))
        b2 = np.zeros(shape)
    else:
        b1 = np.maximum(widths[0], widths[-1])
        b2 = np.minimum(widths[0], widths[-1]) if len(widths) == 2 else np.zeros(shape)
    a = np.zeros(shape)
    points: tuple[NDArray[np.float64], NDArray[np.float64]] | None = (np.zeros(1), np.ones(1))
    exact = np.zeros(shape)  # groups with no wide part: the narrow term's exact quantile
    if narrow:
        c, m, s = narrow[0]
        a = np.broadcast_to(c, shape).astype(np.float64)
        points = _narrow(m, s)
        exact = a * single_halfwidth(m, s, level)
    if points is None:
        return None
    target = level + _MARGIN + 2 * sum(sl for _, sl in wide) + (_ERFC_ERROR if gaussian else 0)
    if target >= 1:
        return None
    out = exact.copy()
    live = b1 > 0
    if live.any():
        ks, w = points
        y = a[live][:, None] * ks[None, :]
        out[live] = _solve(gaussian, b1[live], b2[live], y, w, target)
    return out


_BATCHES: dict[tuple[object, ...], NDArray[np.float64]] = {}


def combination_halfwidths(
    terms: Sequence[tuple[ArrayLike, str, Fraction]], level: float = 0.95
) -> NDArray[np.float64]:
    """:func:`combination_halfwidth` for many groups at once: coefficient arrays (broadcast
    together, one entry per group) of the same noises.

    Contract: entry g satisfies ``P(|Σ cᵢ[g]·Xᵢ| ≤ t[g]) ≥ level``. Terms with at least one
    wide noise (scale or σ ≥ 10^6 grid steps), at most one narrow one and a single mechanism
    (at most two wide Laplaces) take the closed-form fast path (proof sketch above: t is within
    a relative 1e-7 of the quantile at level + slack, slack ≤ 1e-9 + 2Σd_K + 2.4e-7); two
    discrete noises of which one has a support ≤ 4096 per side take the exact mixture, all
    groups at once (``_mixture``: a bisection to a relative 1e-7 above the quantile at level +
    1e-9); others are computed group by group by the exact grid convolution.
    """
    lv = checked_level(level)
    for _c, m, _s in terms:
        if m not in ("discrete_laplace", "discrete_gaussian"):
            raise InvalidArgumentError(f"no error bar for mechanism {m!r}")
    coefficients = [np.asarray(c, dtype=np.float64) for c, _m, _s in terms]
    noises = [(m, Fraction(s)) for _c, m, s in terms]
    # the same coefficients again (a STDDEV beside its VARIANCE, a second printout): reuse
    key = (
        lv,
        *((c.shape, c.tobytes(), m, s) for c, (m, s) in zip(coefficients, noises, strict=True)),
    )
    if key in _BATCHES:
        return _BATCHES[key].copy()
    fast = _fast(coefficients, noises, lv) if terms else None
    if fast is not None:
        if len(_BATCHES) > 64:
            _BATCHES.clear()
        _BATCHES[key] = fast
        return fast.copy()
    mixed = _mixture(coefficients, noises, lv) if terms else None
    if mixed is not None:
        if len(_BATCHES) > 64:
            _BATCHES.clear()
        _BATCHES[key] = mixed
        return mixed.copy()
    shape = np.broadcast(*coefficients).shape if coefficients else ()
    flat = [np.broadcast_to(c, shape).ravel() for c in coefficients]
    size = int(np.prod(shape)) if shape else 1
    out = [
        _grid_halfwidth([(float(f[g]), m, s) for f, (m, s) in zip(flat, noises, strict=True)], lv)
        for g in range(size)
    ]
    return np.asarray(out, dtype=np.float64).reshape(shape)
