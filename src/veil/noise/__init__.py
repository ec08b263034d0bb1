"""Exact, vectorised noise: samplers over numpy arrays, the 2^k grid, error-bar half-widths.

Every sampler takes ``source: RandomSource | None`` (None → the OS CSPRNG) and returns int64
arrays; parameters are ints or :class:`fractions.Fraction` (exact). See
:mod:`veil.noise._exact` for the proof note shared by all samplers.
"""

from __future__ import annotations

from veil.noise._exact import bernoulli, bernoulli_exp, exp_neg_bounds, uniform_int
from veil.noise.errorbars import gaussian_halfwidth, laplace_halfwidth
from veil.noise.grid import from_grid, grid_exponent, to_grid
from veil.noise.samplers import MAX_SCALE, discrete_gaussian, discrete_laplace, geometric

__all__ = [
    "MAX_SCALE",
    "bernoulli",
    "bernoulli_exp",
    "discrete_gaussian",
    "discrete_laplace",
    "exp_neg_bounds",
    "from_grid",
    "gaussian_halfwidth",
    "geometric",
    "grid_exponent",
    "laplace_halfwidth",
    "to_grid",
    "uniform_int",
]
