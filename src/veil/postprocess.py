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
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from statistics import NormalDist
from typing import Any

import numpy as np

from veil.errors import InvalidArgumentError

__all__ = [
    "Estimate",
    "clamp",
    "laplace_mean",
    "non_negative",
    "round_to",
    "rr_frequencies",
]


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


# ------------------------------------------------------------------ local-DP estimators


@dataclass(frozen=True)
class Estimate:
    """A value estimated from released data and its error bar: a half-width at ``level``."""

    value: float
    error_bar: float
    level: float

    def __str__(self) -> str:
        return f"{self.value:.6g} ± {self.error_bar:.3g}"


def _z(level: float) -> float:
    if isinstance(level, bool) or not isinstance(level, int | float) or not 0 < level < 1:
        raise InvalidArgumentError(f"level must lie in (0, 1), e.g. 0.95; got {level!r}")
    return NormalDist().inv_cdf((1 + level) / 2)


def rr_frequencies(
    reports: Iterable[Hashable] | Mapping[Hashable, int],
    *,
    categories: Sequence[Hashable],
    epsilon: float | Fraction,
    level: float = 0.95,
) -> dict[Hashable, Estimate]:
    """Debiased counts of each category from k-ary randomized-response reports.

    ``reports`` are the released values (or a mapping category → number of reports). With
    keep-probability ``p = e^ε/(e^ε + k − 1)`` and ``q = 1/(e^ε + k − 1)`` for each other
    category, ``E[c_j] = n_j·p + (n − n_j)·q``, so ``(c_j − n·q)/(p − q)`` is unbiased for the
    true count ``n_j`` (Wang et al. 2017). The error bar is the normal quantile at ``level``
    times the *largest* standard deviation over all true counts,
    ``sqrt(n·max(p(1−p), q(1−q)))/(p − q)``: it does not depend on the data, and covers at
    ``level`` as n grows (central limit theorem; a sum of n independent reports).
    Post-processing of released reports: free.
    """
    cats = list(categories)
    if len(cats) < 2 or len(set(cats)) != len(cats):
        raise InvalidArgumentError(f"categories must be at least two distinct values, got {cats!r}")
    eps = float(epsilon)
    if not eps > 0:
        raise InvalidArgumentError(f"epsilon must be > 0, got {epsilon!r}")
    counts: dict[Hashable, int] = dict.fromkeys(cats, 0)
    if isinstance(reports, Mapping):
        for cat, c in reports.items():
            if cat in counts:
                counts[cat] += int(c)
    else:
        for r in reports:
            if r in counts:
                counts[r] += 1
    n = sum(counts.values())
    k = len(cats)
    # p, q without overflow: e^ε/(e^ε + k − 1) = 1/(1 + (k − 1)e^−ε)
    q = math.exp(-eps) / (1 + (k - 1) * math.exp(-eps))
    p = 1 / (1 + (k - 1) * math.exp(-eps))
    spread = max(p * (1 - p), q * (1 - q))
    bar = _z(level) * math.sqrt(n * spread) / (p - q)
    return {c: Estimate((counts[c] - n * q) / (p - q), bar, level) for c in cats}


def laplace_mean(
    values: Sequence[float] | Any,
    *,
    noise_scale: Fraction,
    grid: int,
    level: float = 0.95,
    count: int | None = None,
    mean: float | None = None,
) -> Estimate:
    """The mean of values released with i.i.d. discrete Laplace noise on the ``2^grid`` grid
    (``veil.perturb``'s numeric columns) and its error bar.

    The released mean is unbiased for the mean of the grid-rounded inputs; the bar is the
    normal quantile at ``level`` of the noise's mean, ``z·2^grid·sqrt(Var/n)`` with the exact
    discrete-Laplace variance ``Var = 2a/(1 − a)²``, ``a = e^(−1/scale)``, plus the rounding
    to the grid, at most ``2^(grid − 1)``. Pass ``count`` and ``mean`` instead of ``values``
    when they were computed elsewhere (e.g. by Spark). Post-processing: free.
    """
    if count is None or mean is None:
        arr = np.asarray(values, dtype=np.float64).reshape(-1)
        count, mean = int(arr.size), float(arr.mean()) if arr.size else math.nan
    if count <= 0:
        raise InvalidArgumentError("the mean of no values has no estimate")
    a = math.exp(-1 / float(noise_scale))
    variance = 2 * a / (-math.expm1(-1 / float(noise_scale))) ** 2
    step = math.ldexp(1.0, grid)
    bar = _z(level) * step * math.sqrt(variance / count) + step / 2
    return Estimate(mean, bar, level)
