"""Exact, vectorised noise: samplers over numpy arrays, the 2^k grid, error-bar half-widths."""

from __future__ import annotations

from veil.noise._exact import bernoulli, bernoulli_exp, exp_neg_bounds, uniform_int
from veil.noise.samplers import MAX_SCALE, discrete_gaussian, discrete_laplace, geometric

__all__ = [
    "MAX_SCALE",
    "bernoulli",
    "bernoulli_exp",
    "discrete_gaussian",
    "discrete_laplace",
    "exp_neg_bounds",
    "geometric",
    "uniform_int",
]
