"""Post-processing of released values.

Every function here reads only an already-released (noisy) value and public parameters, so by
the post-processing property of differential privacy it costs no budget and keeps the
guarantee (Dwork & Roth 2014, Prop. 2.1). None of them is a mechanism: in particular
:func:`clamp` is what the seed calls "truncated Laplace" — clipping the *noisy output* to a
known range — which is fine as post-processing but is not the truncated-Laplace mechanism.
Clamping or rounding biases the estimate; the error bar of the raw release still bounds the
error (clamping toward a range that contains the true value can only shrink it).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from veil.errors import InvalidArgumentError

__all__ = ["clamp", "non_negative", "round_to"]


def _finite(x: float, name: str) -> float:
    if isinstance(x, bool) or not isinstance(x, int | float) or not math.isfinite(x):
        raise InvalidArgumentError(f"{name} must be a finite number, got {x!r}")
    return float(x)


def clamp(values: Any, lower: float, upper: float) -> Any:
    """Clip noisy values to the public range ``[lower, upper]`` (post-processing)."""
    lo, hi = _finite(lower, "lower"), _finite(upper, "upper")
    if lo > hi:
        raise InvalidArgumentError(f"lower must be ≤ upper, got lower={lower!r}, upper={upper!r}")
    out = np.clip(values, lo, hi)
    return out.item() if np.ndim(out) == 0 else out


def non_negative(values: Any) -> Any:
    """Replace negative noisy values by 0 (e.g. counts); post-processing."""
    out = np.maximum(values, 0)
    return out.item() if np.ndim(out) == 0 else out


def round_to(values: Any, decimals: int = 0) -> Any:
    """Round noisy values to ``decimals`` places (half to even); post-processing."""
    if isinstance(decimals, bool) or not isinstance(decimals, int):
        raise InvalidArgumentError(f"decimals must be an integer, got {decimals!r}")
    out = np.round(np.asarray(values, dtype=np.float64), decimals)
    return out.item() if np.ndim(out) == 0 else out
