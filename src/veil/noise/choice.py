"""Exact weighted choice: the candidates' weights of the exponential mechanism and of
permute-and-flip, read in bulk, and the trials that pick one.

A candidate ``i`` has weight ``exp(-γ_i)``, ``γ_i = ε(max − score_i)/(2Δ) ≥ 0``. A trial
accepts ``i`` iff ``W < exp(-γ_i)`` for a uniform ``W`` (the proof note of
:mod:`veil.noise._exact`): decided by a double when the 32-bit word is more than ``2^-24`` from
the estimate (whose error is below ``2^-30`` where ``γ ≤ 2^20``), else on integer brackets that
draw more bits only when the word straddles the threshold itself — so the decision, and the
bytes drawn, are those of the exact comparison.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
from numpy.typing import NDArray

from veil.accounting.budget import exact
from veil.errors import InternalError, InvalidArgumentError
from veil.noise._exact import LazyUniform, draw_u64, exp_bounds
from veil.random import RandomSource

__all__ = ["Weights", "first_accepted", "read_scores", "uniform_permutation"]

_INT_SCORE_LIMIT = 1 << 53  # integer scores below this in magnitude: excess and float exact
_GAMMA_USABLE = 2.0**20  # a float γ up to this is within 2^-31 of the exact one
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


def _integer_scores(raw: Any) -> NDArray[np.int64] | None:
    """The scores as int64 when every one is an integer below 2^53 in magnitude (ints,
    integer or integral float arrays), else None (read one by one by :func:`read_scores`)."""
    if isinstance(raw, np.ndarray):
        arr = raw.reshape(-1)
        if arr.dtype.kind == "f":
            if not (np.isfinite(arr).all() and (arr == np.rint(arr)).all()):
                return None
        elif arr.dtype.kind not in "iu":
            return None
    elif all(type(s) is int for s in raw):
        try:
            arr = np.array(raw, dtype=np.int64)
        except OverflowError:
            return None
    else:
        return None
    if arr.size == 0:
        return None
    top = max(abs(float(arr.max())), abs(float(arr.min())))
    if top >= _INT_SCORE_LIMIT:
        return None
    return arr.astype(np.int64)


def read_scores(
    scores: Any, eps: Fraction, sens: Fraction
) -> tuple[list[Any] | None, int, Weights]:
    """The candidates' keys (None: the indices ``0..n-1``), their number and their weights.

    Integer scores (:func:`_integer_scores`) are read in bulk, exactly (an integral double is
    the integer its decimal names); any other score one by one with
    :func:`veil.accounting.budget.exact`, as a Fraction.
    """
    keys: list[Any] | None
    raw: list[Any] | NDArray[Any]
    if isinstance(scores, Mapping):
        keys, raw = list(scores.keys()), list(scores.values())
    elif isinstance(scores, Sequence):
        keys, raw = None, list(scores)
    else:
        keys, raw = None, np.asarray(scores)
    n = raw.size if isinstance(raw, np.ndarray) else len(raw)
    if n == 0:
        raise InvalidArgumentError(
            "the candidate list is empty; the exponential mechanism needs at least one candidate"
        )
    g0 = eps / (2 * sens)
    ints = _integer_scores(raw)
    if ints is not None:
        excess = int(ints.max()) - ints  # ≥ 0, below 2^54: exact in int64
        approx = float(g0) * excess.astype(np.float64)
        return keys, n, Weights(approx, g0, excess, None)
    items = raw.reshape(-1).tolist() if isinstance(raw, np.ndarray) else raw
    exact_scores = []
    for i, s in enumerate(items):
        key = keys[i] if keys is not None else i
        if isinstance(s, np.generic) and not isinstance(s, np.bool_):
            s = s.item()  # numpy scalars → Python numbers, read exactly
        if isinstance(s, float) and not math.isfinite(s):
            raise InvalidArgumentError(f"score of candidate {key!r} must be finite, got {s!r}")
        exact_scores.append(exact(s, f"score of candidate {key!r}"))
    top = max(exact_scores)
    gammas = [g0 * (top - s) for s in exact_scores]
    cap = Fraction(2 * _GAMMA_USABLE)  # beyond the usable range only its size matters
    approx = np.array([float(min(g, cap)) for g in gammas], dtype=np.float64)
    return keys, n, Weights(approx, g0, None, gammas)


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
        usable = gamma <= _GAMMA_USABLE
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
