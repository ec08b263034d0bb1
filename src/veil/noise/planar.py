"""The planar Laplace on the integer lattice, sampled exactly: geo-indistinguishable noise.

Contract of :func:`planar_laplace`: ``size`` independent draws of ``Z ∈ ℤ²`` with

    P(Z = z) ∝ exp(-c·‖z‖₂)

for a rational ``c > 0`` (the privacy parameter per lattice step). Adding ``Z`` to a point ``p``
of the lattice gives, for any two lattice points ``p, p'`` and every output ``o``,
``P(o | p) / P(o | p') = exp(-c(‖o-p‖ - ‖o-p'‖)) ≤ exp(c·‖p-p'‖)`` (triangle inequality): the
output is ``c``-geo-indistinguishable per step in the Euclidean metric (Andrés et al. 2013, the
discrete version of their planar Laplace), and every lattice point is a possible output of
every input, so no output reveals the input by being reachable from it alone (no float
porosity: Mironov 2012).

Proof note (exactness). Propose ``Z = (X, Y)`` with ``X, Y`` independent discrete Laplace of
parameter ``λ`` (``P ∝ exp(-λ|x|)``, :func:`veil.noise.samplers.discrete_laplace`), where
``λ ≤ c/√2`` is rational. Since ``‖z‖₂ ≥ ‖z‖₁/√2``, the acceptance probability
``a(z) = exp(-(c‖z‖₂ - λ‖z‖₁))`` is at most 1, and an accepted proposal has probability
``∝ exp(-λ‖z‖₁)·a(z) = exp(-c‖z‖₂)``. The acceptance is a Bernoulli of ``exp(-γ)`` with ``γ``
irrational (a square root): it is decided on a lazily refined uniform ``W`` against integer
brackets of ``2^p·exp(-γ)`` (:mod:`veil.noise._exact`: ``√n`` bracketed with ``math.isqrt``,
``exp`` with :func:`~veil.noise._exact.exp_neg_bounds`), so the decision is exactly
``[W < a(z)]``. A float estimate of ``a(z)`` only sorts out the clear cases first: a proposal is
accepted (rejected) by it only when its 32-bit word lies at least ``2^-24`` below (above) the
estimate. That margin exceeds the estimate's error by more than ``2^20``: the float path is
used only where ``c‖z‖₂ ≤ 2^20`` and ``‖z‖₂² < 2^52`` (so ``a²+b²`` is exact in a double), IEEE
754 rounds ``sqrt``, ``*`` and ``-`` correctly (absolute error of ``γ`` below ``2^-29``), and
``exp`` is within a few ulps; the rest goes to the exact path. In the continuum limit a
proposal is accepted with probability ``(2π/c²)/(2/λ)² ≈ π/4``.

Supported: ``2^-40 ≤ c ≤ 2^10`` (the proposal's scale ``1/λ`` stays within the samplers' range).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction

import numpy as np
from numpy.typing import NDArray

from veil.errors import InvalidArgumentError
from veil.noise._exact import LazyUniform, check_size, draw_u32, exp_neg_bounds, resolve_source
from veil.noise.samplers import discrete_laplace
from veil.random import RandomSource

__all__ = ["MAX_STEP_EPSILON", "MIN_STEP_EPSILON", "planar_laplace", "proposal_rate"]

MIN_STEP_EPSILON = Fraction(1, 2**40)
MAX_STEP_EPSILON = Fraction(2**10)
_RATE_BITS = 48  # λ = ⌊2^48·c/√2⌋/2^48
_MARGIN = 2.0**-24
_FLOAT_LIMIT = 2.0**20

Bounds = Callable[[int], tuple[int, int]]


def proposal_rate(c: Fraction) -> Fraction:
    """The proposal's rate ``λ``: the largest multiple of ``2^-48`` at most ``c/√2``."""
    scaled = c * c * (1 << (2 * _RATE_BITS)) / 2  # (2^48·c/√2)²
    return Fraction(math.isqrt(scaled.numerator // scaled.denominator), 1 << _RATE_BITS)


def _accept_bounds(c: Fraction, lam: Fraction, n: int, l1: int) -> Bounds:
    """Bounds function ``p ↦ (lo, hi)``, ``lo ≤ 2^p·exp(-(c√n - λ·l1)) ≤ hi``."""

    def bounds(prec: int) -> tuple[int, int]:
        k = prec + max(0, c.numerator.bit_length() - c.denominator.bit_length()) + 4
        root = math.isqrt(n << (2 * k))  # root/2^k ≤ √n < (root + 1)/2^k
        g_lo = max(Fraction(0), c * Fraction(root, 1 << k) - lam * l1)
        g_hi = max(g_lo, c * Fraction(root + 1, 1 << k) - lam * l1)
        lo = exp_neg_bounds(g_hi, prec)[0]
        hi = exp_neg_bounds(g_lo, prec)[1]
        return lo, hi

    return bounds


def planar_laplace(
    c: Fraction | int, size: int, *, source: RandomSource | None = None
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """``size`` exact draws ``(X, Y)`` with ``P(X = x, Y = y) ∝ exp(-c·√(x² + y²))`` on ``ℤ²``
    (see the module docstring for the contract and its proof)."""
    c = Fraction(c)
    if not MIN_STEP_EPSILON <= c <= MAX_STEP_EPSILON:
        raise InvalidArgumentError(
            f"the planar Laplace needs ε per grid step in [2^-40, 2^10], got {float(c):.3g}; "
            "choose a coarser step (larger) or a larger ε, or a finer step (smaller)"
        )
    n = check_size(size)
    src = resolve_source(source)
    lam = proposal_rate(c)
    scale = 1 / lam
    cf, lf = float(c), float(lam)
    xs: list[NDArray[np.int64]] = []
    ys: list[NDArray[np.int64]] = []
    have = 0
    while have < n:
        k = max(64, math.ceil((n - have) * 1.3))
        x = discrete_laplace(scale, k, source=src)
        y = discrete_laplace(scale, k, source=src)
        u = draw_u32(src, k).astype(np.float64)
        sq = x.astype(np.float64) ** 2 + y.astype(np.float64) ** 2
        l1 = np.abs(x) + np.abs(y)
        with np.errstate(over="ignore"):
            root = np.sqrt(sq)
            estimate = np.exp(-(cf * root - lf * l1.astype(np.float64)))
        usable = (cf * root <= _FLOAT_LIMIT) & (sq < 2.0**52)
        low, high = u * 2.0**-32, (u + 1) * 2.0**-32
        accept = usable & (high <= estimate - _MARGIN)
        reject = usable & (low >= estimate + _MARGIN)
        for i in np.flatnonzero(~(accept | reject)).tolist():
            xi, yi = int(x[i]), int(y[i])
            bounds = _accept_bounds(c, lam, xi * xi + yi * yi, abs(xi) + abs(yi))
            accept[i] = LazyUniform(int(u[i]), 32, src).below(bounds)
        xs.append(x[accept])
        ys.append(y[accept])
        have += int(accept.sum())
    return np.concatenate(xs)[:n], np.concatenate(ys)[:n]
