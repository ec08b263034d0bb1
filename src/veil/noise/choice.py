"""Exact weighted choice: the candidates' weights of the exponential mechanism and of
permute-and-flip, and the trials that pick one (the scores are read into weights by
:func:`veil.mechanisms.scores.read_scores`).

A candidate ``i`` has weight ``exp(-γ_i)``, ``γ_i = ε(max − score_i)/(2Δ) ≥ 0``. A trial
accepts ``i`` iff ``W < exp(-γ_i)`` for a uniform ``W`` (the proof note of
:mod:`veil.noise._exact`): decided by a double when the 32-bit word is more than ``2^-24`` from
the estimate (whose error is below ``2^-30`` where ``γ ≤ 2^20``), else on integer brackets that
draw more bits only when the word straddles the threshold itself — so the decision, and the
bytes drawn, are those of the exact comparison.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from numpy.typing import NDArray

from veil.errors import InternalError
from veil.noise._exact import LazyUniform, draw_u64, exp_bounds
from veil.random import RandomSource

__all__ = ["GAMMA_USABLE", "Weights", "first_accepted", "uniform_permutation"]

GAMMA_USABLE = 2.0**20  # a float γ up to this is within 2^-31 of the exact one
_MARGIN = 2.0**-24  # a float acceptance is trusted only this far from the word (noise.planar)
_TRIAL_CHUNK = 1024  # trials examined at once: most selections stop in the first chunk


@dataclass(frozen=True, eq=False)
class Weights:
    """The candidates' exponents ``γ_i = ε(max − score_i)/(2Δ) ≥ 0`` (weight ``exp(-γ_i)``).

    ``approx[i]`` is γ_i as a double, within ``2^-31`` of it where ``γ_i ≤ 2^20`` (one or two
    roundings of relative error 2^-53 each); ``exact(i)`` is γ_i as a Fraction. For integer
    scores ``γ_i = g0·excess_i`` with the integer ``excess_i = max − score_i`` (no Fraction per
    candidate); otherwise the Fractions are held.
    """

    approx: NDArray[np.float64]
    g0: Fraction
    excess: NDArray[np.int64] | None
    gammas: list[Fraction] | None

    def exact(self, i: int) -> Fraction:
        if self.excess is not None:
            return self.g0 * int(self.excess[i])
        if self.gammas is None:
            raise InternalError("exponential weights hold neither excesses nor exponents")
        return self.gammas[i]


def first_accepted(
    idx: NDArray[np.int64], u: NDArray[np.uint32], weights: Weights, source: RandomSource
) -> int | None:
    """The first trial (in order) whose exact Bernoulli(exp(-γ_idx)) succeeds, else None.

    Trial ``j`` accepts iff ``W_j < exp(-γ)`` for the uniform ``W_j ∈ [u_j, u_j + 1)/2^32``
    (refined lazily): decided by the double ``exp(-approx)`` when the word is more than
    ``2^-24`` from it (its error is below ``2^-30``, so the decision is the exact one), else on
    integer brackets (:class:`LazyUniform`), which draw more bits only when the 32-bit word
    straddles ``exp(-γ)`` itself.
    """
    for start in range(0, idx.size, _TRIAL_CHUNK):  # in order, so the first accept stops it
        chunk = idx[start : start + _TRIAL_CHUNK]
        words = u[start : start + _TRIAL_CHUNK]
        gamma = weights.approx[chunk]
        estimate = np.exp(-gamma)
        uf = words.astype(np.float64)
        usable = gamma <= GAMMA_USABLE
        accept = usable & ((uf + 1) * 2.0**-32 <= estimate - _MARGIN)
        reject = usable & (uf * 2.0**-32 >= estimate + _MARGIN)
        sure = np.flatnonzero(accept)
        first = int(sure[0]) if sure.size else chunk.size
        for pos in np.flatnonzero(~(accept | reject)[:first]).tolist():
            cand = int(chunk[pos])
            if LazyUniform(int(words[pos]), 32, source).below(exp_bounds(weights.exact(cand))):
                return cand
        if sure.size:
            return int(chunk[first])
    return None


def uniform_permutation(n: int, source: RandomSource) -> NDArray[np.int64]:
    """A uniformly random permutation: argsort of i.i.d. 64-bit keys, redrawn on any tie
    (given distinct keys every order is equally likely, by symmetry)."""
    while True:
        keys = draw_u64(source, n)
        if np.unique(keys).size == n:
            return np.argsort(keys, kind="stable").astype(np.int64)
