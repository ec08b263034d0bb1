"""The exponential mechanism's scores, read exactly into the weights of
:class:`veil.noise.choice.Weights`: integer scores in bulk, any other one by one as a Fraction."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any

import numpy as np
from numpy.typing import NDArray

from veil.accounting.budget import exact
from veil.errors import InvalidArgumentError
from veil.noise.choice import GAMMA_USABLE, Weights

__all__ = ["read_scores"]

_INT_SCORE_LIMIT = 1 << 53  # integer scores below this in magnitude: excess and float exact


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
    cap = Fraction(2 * GAMMA_USABLE)  # beyond the usable range only its size matters
    approx = np.array([float(min(g, cap)) for g in gammas], dtype=np.float64)
    return keys, n, Weights(approx, g0, None, gammas)
